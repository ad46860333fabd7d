"""What runs on a worker: the per-worker store of realigned data and prepared caches, and the
task functions the client submits (shard generation, one group of shards per call, blocks of
Hessian lanes).

A worker keeps, per objective (or Hessian) token, its unpickled context and one
:class:`ShardEvaluator` per shard it holds. The data on a worker never changes, so the caches
there can close over it. ``client="serial"`` runs these same functions in the client process,
on the same store.
"""
import sys

import numpy as np

import mooncake_py as mp

from .errors import NonScalarLossError

# token -> {"layout": int, "shards": {index: ShardEvaluator}, "f": ...}; emptied by drop()
_STORE = {}


def where():
    """The address of the worker running the current task ("serial" outside Dask)."""
    if "distributed" not in sys.modules:  # serial, without Dask: do not import it
        return "serial"
    from distributed import get_worker
    try:
        return get_worker().address
    except ValueError:
        return "serial"


def aligned(value):
    """``value`` with every ndarray in it (top level, tuples, lists) aligned: arrays
    deserialised from Dask's frames can arrive with ``flags.aligned == False``, and NumPy then
    copies them on every matmul (a 2000² @ 2000×128 product measured 55 ms against 29.5 ms)."""
    if isinstance(value, np.ndarray):
        return value if value.flags.aligned else value.copy()
    if isinstance(value, (tuple, list)):
        return type(value)(aligned(v) for v in value)
    return value


def as_shard(out):
    """A shard as the tuple of arrays ``make(spec)`` returned (one array alone is a 1-tuple)."""
    if isinstance(out, (tuple, list)):
        return tuple(aligned(np.asarray(a)) for a in out)
    return (aligned(np.asarray(out)),)


def make_shard(make, spec):
    """Task: the shard ``make(spec)``, kept in the worker's memory."""
    return as_shard(make(spec))


def join_parts(*parts):
    """Task: a shard from the chunks of several dask arrays (``ShardSet.from_dask``)."""
    return as_shard(parts)


def describe(shard):
    """Task: ``((shape, dtype string), ...)`` of a shard: all the client learns about its data."""
    return tuple((a.shape, a.dtype.str) for a in shard)


def keep(shard):
    """Task: the shard, on the worker it moves to when the shards are regrouped, copied into
    memory of this worker's own allocation: arrays deserialised from a transfer sit wherever
    the message put them, and BLAS results can differ in the last bits with the alignment of
    their data (the sum over shards would then depend on where shards had been)."""
    return tuple(np.array(a, copy=True) for a in shard)


def load(blob):
    """Task: the context (loss or function, and its arrays), from its cloudpickle bytes or as
    Dask delivered it, with arrays realigned, once per worker."""
    ctx = _loads(blob)
    ctx.realign()
    return ctx


def _loads(blob):
    if isinstance(blob, bytes):
        import cloudpickle
        return cloudpickle.loads(blob)
    return blob  # sent by Dask (or serial without cloudpickle): the object itself


def drop(token):
    """Forget everything kept for ``token`` on this worker (``Objective.close``)."""
    _STORE.pop(token, None)
    return len(_STORE)


def stored_tokens():
    """The tokens this worker keeps state for (used by tests and ``close``'s check)."""
    return sorted(_STORE)


def shard_function(loss, shard, argnums):
    """``loss`` as a function of θ alone, the shard's arrays bound around it at ``argnums``
    (for plain evaluations; the prepared caches take the shard as arguments instead)."""
    head, tail = shard[:argnums], shard[argnums:]
    return lambda theta: loss(*head, theta, *tail)


def _cache_key(kind, shard):
    """Shards of one layout share a worker's prepared caches: the data are arguments of the
    plan (``argnums``), read on every call, so one recording serves them all."""
    return (kind,) + tuple((np.shape(a), getattr(a, "dtype", type(a)).__str__()) for a in shard)


class ShardEvaluator:
    """The loss on one shard and its prepared caches, built on the first call of each kind.

    Results are copied: a cache's results may alias its buffers, which the next call
    overwrites.
    """

    def __init__(self, loss, shard, argnums, index, caches):
        self.shard = shard
        self.index = index
        self.loss, self.argnums = loss, argnums
        self.f = shard_function(loss, shard, argnums)
        self._caches = caches  # the worker's prepared caches, shared by shards of one layout
        self._checked = False

    def _args(self, theta):
        return (*self.shard[:self.argnums], theta, *self.shard[self.argnums:])

    def _cache(self, kind, prepare, theta):
        key = _cache_key(kind, self.shard)
        c = self._caches.get(key)
        if c is None:
            c = self._caches[key] = prepare(self.loss, *self._args(theta), argnums=self.argnums)
        return c

    def _check(self, theta):
        # once per shard and worker: a clear error rather than the tape's OutputTypeError
        y = self.f(theta)
        if np.ndim(y) != 0 or not np.isrealobj(y):
            raise NonScalarLossError(
                f"the loss returned {type(y).__name__} of shape {np.shape(y)} on shard "
                f"{self.index}; it must return a real scalar, the loss of that shard (e.g. "
                f"np.sum(...) over its rows), which the objective sums over shards.")
        self._checked = True
        return float(y)

    def value(self, theta):
        if not self._checked:
            return self._check(theta)
        return float(self.f(theta))

    def value_and_grad(self, theta):
        if not self._checked:
            self._check(theta)
        c = self._cache("gradient", mp.prepare_gradient_cache, theta)
        y, g = mp.value_and_gradient(c, self.loss, *self._args(theta))
        return float(y), np.array(g, copy=True)

    def hvp(self, theta, v):
        if not self._checked:
            self._check(theta)
        c = self._cache("hvp", mp.prepare_hvp_cache, theta)
        _, _, hv = mp.value_and_hvp(c, self.loss, v, *self._args(theta))
        return np.array(hv, copy=True)

    def hvp_lanes(self, theta, V):
        if not self._checked:
            self._check(theta)
        return np.array(mp.hvp(self.f, lanes=True)(theta, V), copy=True)

    def hessian(self, theta):
        if not self._checked:
            self._check(theta)
        c = self._cache("hessian", mp.prepare_hessian_cache, theta)
        _, _, H = mp.value_gradient_and_hessian(c, self.loss, *self._args(theta))
        return np.array(H, copy=True)


def run_group(token, ctx, layout, mode, theta, extra, indices, *shards):
    """Task: ``mode`` ("value", "value_and_grad", "hvp", "hvp_lanes", "hessian") of the loss
    on each shard of one worker's group, a list in the order of ``indices``, with the address
    of the worker that ran it (the client regroups when it is not the one it asked for)."""
    state = _STORE.setdefault(token, {"layout": layout, "shards": {}, "caches": {}})
    evaluators = state["shards"]
    if state["layout"] != layout:
        # the shards were regrouped: forget evaluators of shards this worker no longer holds
        keep_ = set(indices)
        for i in [i for i in evaluators if i not in keep_]:
            del evaluators[i]
        state["layout"] = layout
    out = []
    for i, shard in zip(indices, shards):
        ev = evaluators.get(i)
        if ev is None or ev.shard is not shard:  # new here, or recomputed after a failure
            ev = evaluators[i] = ShardEvaluator(ctx.loss, shard, ctx.argnums, i, state["caches"])
        method = getattr(ev, mode)
        out.append(method(theta) if extra is None else method(theta, extra))
    return out, where()


def columns(token, ctx, starts, block, k, V):
    """Task: Hessian-vector products of ``ctx``'s function at its ``x`` for the lane blocks
    beginning at ``starts`` (``block`` lanes each, the last ending at ``k`` at most): basis
    directions when ``V`` is None (Hessian columns), else the rows of ``V``, the directions of
    those lanes. Returns the products as the rows of one ``(lanes, x.size)`` array."""
    state = _STORE.setdefault(token, {})
    f = state.get("f")
    if f is None or state.get("ctx") is not ctx:
        # built once per worker (by the factory when there is one, so a worker that replaced a
        # lost one builds its own)
        f = state["f"] = ctx.function()
        state["ctx"] = ctx
    x = ctx.x
    first, stop = starts[0], min(starts[-1] + block, k)
    out = np.empty((stop - first, x.size), x.dtype)
    hvp = mp.hvp(f, lanes=True)
    for start in starts:
        end = min(start + block, k)
        if V is None:
            D = np.zeros((end - start, x.size), dtype=x.dtype)
            D[np.arange(end - start), np.arange(start, end)] = 1
            D = D.reshape((end - start,) + x.shape)
        else:
            D = V[start - first:end - first]
        out[start - first:end - first] = hvp(x, *ctx.args, D).reshape(end - start, -1)
    return out
