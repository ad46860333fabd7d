"""What travels to the workers for a computation: the user's function and the arrays it
needs, checked to pickle on the client (so an unpicklable one fails where it is built), sent
once and loaded once per worker."""
from . import worker


class LossContext:
    """An objective's loss and where θ goes among a shard's arrays."""

    def __init__(self, loss, argnums):
        self.loss, self.argnums = loss, argnums

    def realign(self):
        pass


class FunctionContext:
    """A function (or the factory that builds it on the worker), its point ``x`` and extra
    arguments, for Hessian columns."""

    def __init__(self, f, factory, x, args):
        self.f, self.factory, self.x, self.args = f, factory, x, args

    def realign(self):
        self.x = worker.aligned(self.x)
        self.args = worker.aligned(tuple(self.args))

    def function(self):
        return self.factory() if self.factory is not None else self.f


class Broadcast:
    """One loading task per worker for a pickled context, made from bytes scattered to the
    workers once.

    Scattered data is not recomputable, and Dask's active memory manager soon drops the extra
    copies of a broadcast (``ReduceReplicas``), so losing the one worker left holding them
    loses them: a task that then needs a load on another worker is cancelled ("lost
    dependencies"). The client keeps the bytes, and :func:`gather` shares them again and
    resubmits once when that happens."""

    def __init__(self, backend, ctx, what, token):
        self.backend, self.token = backend, token
        self.data = backend.pack(ctx, what)
        self.blob = backend.share(self.data)
        self.futures = {}
        self._n = 0
        self.shared = 1   # times the bytes were scattered (task keys differ per sharing)

    def reshare(self):
        """Scatter the bytes again and forget every load (after a loss)."""
        self.backend.release(list(self.futures.values()) + [self.blob])
        self.futures = {}
        self.blob = self.backend.share(self.data)
        self.shared += 1

    def on(self, wk):
        """The context's future on worker ``wk`` (submitted on first use)."""
        f = self.futures.get(wk)
        if f is None:
            self._n += 1
            f = self.futures[wk] = self.backend.submit(worker.load, self.blob, worker=wk,
                                                       key=f"{self.token}-ctx-{self._n}")
        return f

    def keep_only(self, workers):
        """Release the loads on workers that are gone."""
        gone = [wk for wk in self.futures if wk not in workers]
        self.backend.release([self.futures.pop(wk) for wk in gone])

    def close(self):
        self.backend.release(list(self.futures.values()))
        self.futures = {}
        if self.blob is not None:
            self.backend.release([self.blob])
        self.blob = self.data = None


def gather(backend, ctx, submit):
    """The results of the tasks ``submit()`` makes (a list of futures using ``ctx``); when
    they were cancelled because data died with a worker, ``ctx`` is shared again and
    ``submit()`` called once more."""
    try:
        return backend.gather(submit())
    except Exception as e:
        if not backend.lost(e):
            raise
        ctx.reshare()
        return backend.gather(submit())
