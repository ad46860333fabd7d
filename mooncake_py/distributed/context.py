"""What travels to the workers for a computation: the user's function and the arrays it
needs, pickled once on the client (so an unpicklable one fails where it is built) and loaded
once per worker."""
from . import worker
from .client import dumps


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
    """One loading task per worker for a pickled context. The bytes are scattered to every
    worker once (``broadcast``: a copy on each, so losing a worker loses none of them; a
    context scattered to one worker only was lost with it, ``FutureCancelledError``), and each
    load task is recomputable from them."""

    def __init__(self, backend, ctx, what, token):
        self.backend, self.token = backend, token
        self.blob = backend.share(dumps(ctx, what))
        self.futures = {}
        self._n = 0

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
        if self.blob is not None and not isinstance(self.blob, bytes):
            self.backend.release([self.blob])
        self.blob = None
