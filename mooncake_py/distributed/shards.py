"""Data that lives on the workers: :func:`shards` and :class:`ShardSet`.

A shard is a tuple of arrays sharing their first axis (rows), made on a worker and kept there;
the client holds only Dask futures and each shard's shapes. Because every shard is the result
of a task (``make(spec)``, or a chunk of a dask array), Dask recomputes one that is lost with
its worker. Shards are grouped by the worker holding them; when workers come or go the groups
are rebalanced so that a replacement worker does not sit idle.
"""
import time

import numpy as np

from . import worker
from .client import backend, dumps, new_token
from .errors import ShardError

# How often (seconds) a ShardSet asks the scheduler whether workers came or went, when no task
# ran on a worker other than the one asked for (one round trip to the scheduler).
CHECK_WORKERS_EVERY = 1.0


def shards(make, specs, *, client=None):
    """Run ``make(spec)`` on the workers for each spec, keeping each result there: a
    :class:`ShardSet`. ``make`` returns an array or a tuple of arrays with the same number of
    rows (a design matrix and its targets, say); the data never reaches the client, and a shard
    lost with its worker is made again from ``make``.

    Shards are placed in contiguous runs over the sorted workers; the client learns only their
    shapes and dtypes, which are checked (:class:`ShardError` for no shards, a shard with no
    rows, or shards whose arrays disagree).

    Example:
        >>> import numpy as np
        >>> from mooncake_py import distributed as md
        >>> def make(seed):
        ...     rng = np.random.default_rng(seed)
        ...     return rng.normal(size=(100, 3)), rng.normal(size=100)
        >>> S = md.shards(make, range(4), client="serial")
        >>> len(S), S.n_rows
        (4, 400)
    """
    b = backend(client)
    specs = list(specs)
    if not specs:
        raise ShardError("no shard specs were given: pass one spec per shard (a seed, a file "
                         "name, a row range...) for make(spec) to build it on a worker.")
    dumps(make, "shard generator make")  # fail here, not inside the scheduler
    token = new_token("shard")
    workers = b.workers()
    n, w = len(specs), len(workers)
    futures = [b.submit(worker.make_shard, make, spec, worker=workers[i * w // n],
                        key=f"{token}-{i}") for i, spec in enumerate(specs)]
    return ShardSet(b, futures, token)


class ShardSet:
    """Shards kept on the workers; build one with :func:`shards` or :meth:`from_dask`.

    ``len(S)`` is the number of shards, ``S.n_rows`` their total rows, ``S.shapes`` each
    shard's ``((shape, dtype), ...)``. An objective sums its loss over the shards in this order.

    Example: :func:`shards`.
    """

    def __init__(self, backend_, futures, token):
        self.backend = backend_
        self.futures = list(futures)
        self.token = token
        self.shapes = [tuple((tuple(s), d) for s, d in desc)
                       for desc in backend_.gather([backend_.submit(worker.describe, f)
                                                    for f in self.futures])]
        self._validate()
        self.layout = 0   # bumped on every regroup; workers drop state of moved shards
        self._groups = None
        self._workers = None
        self._checked = -np.inf
        self._suspect = True

    @classmethod
    def from_dask(cls, *arrays, client=None):
        """Shards from dask arrays' row chunks: shard i holds the i-th chunk of every array.

        The arrays must have the same number of rows; the others are rechunked to the first's
        row chunks, and all to one chunk along their other axes. Chunks are computed on the
        workers from the arrays' graphs (recomputed from them after a failure).

        Example (needs Dask):
            >>> import dask.array as da                       # doctest: +SKIP
            >>> X = da.random.normal(size=(10**6, 20), chunks=(250_000, 20))  # doctest: +SKIP
            >>> y = da.random.normal(size=10**6, chunks=250_000)              # doctest: +SKIP
            >>> S = ShardSet.from_dask(X, y)                   # doctest: +SKIP
        """
        import dask
        if not arrays:
            raise ShardError("ShardSet.from_dask needs at least one dask array.")
        rows = {a.shape[0] for a in arrays}
        if len(rows) != 1:
            raise ShardError(f"the dask arrays have different numbers of rows "
                             f"({[a.shape[0] for a in arrays]}); each shard takes the same "
                             f"rows of every array.")
        first = arrays[0].chunks[0]
        parts = []
        for a in arrays:
            a = a.rechunk((first,) + tuple(-1 for _ in a.shape[1:]))
            parts.append(a.to_delayed().ravel())
        b = backend(client)
        delayed = [dask.delayed(worker.join_parts, pure=True)(*(p[i] for p in parts))
                   for i in range(len(first))]
        if b.name == "serial":
            futures = [b.submit(worker.keep, d.compute(scheduler="sync")) for d in delayed]
        else:
            futures = b.client.compute(delayed)
        return cls(b, futures, new_token("shard"))

    def _validate(self):
        first = self.shapes[0]
        for i, desc in enumerate(self.shapes):
            if len(desc) != len(first):
                raise ShardError(f"shard {i} has {len(desc)} arrays and shard 0 has "
                                 f"{len(first)}: make(spec) must return the same tuple of "
                                 f"arrays for every spec.")
            lead = {s[0] if s else None for s, _ in desc}
            if None in lead or len(lead) != 1:
                raise ShardError(f"the arrays of shard {i} have row counts "
                                 f"{[s[0] if s else None for s, _ in desc]}: every array of a "
                                 f"shard must have the same number of rows (axis 0).")
            if lead == {0}:
                raise ShardError(f"shard {i} has no rows; drop its spec, or make the shards "
                                 f"so that none is empty.")
            for j, ((s, d), (s0, d0)) in enumerate(zip(desc, first)):
                if s[1:] != s0[1:] or d != d0:
                    raise ShardError(f"array {j} of shard {i} is {d} with rows of shape "
                                     f"{s[1:]}, but {d0} with rows of shape {s0[1:]} in shard "
                                     f"0: shards are the same arrays on other rows.")

    def __len__(self):
        return len(self.futures)

    @property
    def n_rows(self):
        return sum(desc[0][0][0] for desc in self.shapes)

    def __repr__(self):
        return (f"ShardSet({len(self)} shards, {self.n_rows} rows, "
                f"arrays {[(s[1:], d) for s, d in self.shapes[0]]}, on {self.backend.name})")

    def suspect(self):
        """Ask for a regroup check before the next call (a task ran on another worker)."""
        self._suspect = True

    def groups(self):
        """``[(worker, [shard indices])]``, regrouped first when workers came or went."""
        now = time.monotonic()
        if self._suspect or now - self._checked > CHECK_WORKERS_EVERY:
            workers = self.backend.workers()
            if self._suspect or workers != self._workers:
                self._regroup(workers)
            self._checked, self._suspect = now, False
        return self._groups

    def _regroup(self, workers):
        """Balance the shards over ``workers`` moving as few as possible; a shard moves by a
        task on its new worker that keeps it (Dask transfers it once)."""
        who = self.backend.who_has(self.futures)
        n, w = len(self.futures), len(workers)
        quota = {wk: n // w + (1 if r < n % w else 0) for r, wk in enumerate(workers)}
        place, homeless = [None] * n, []
        for i, f in enumerate(self.futures):
            held = [h for h in who.get(f.key, ()) if h in quota and quota[h] > 0]
            if held:
                place[i] = held[0]
                quota[held[0]] -= 1
            else:
                homeless.append(i)
        moved = False
        for i in homeless:
            target = max(workers, key=lambda wk: quota[wk])
            quota[target] -= 1
            place[i] = target
            if who.get(self.futures[i].key):  # held elsewhere: move it; lost: Dask recomputes
                old = self.futures[i]
                self.futures[i] = self.backend.submit(worker.keep, old, worker=target,
                                                      key=f"{self.token}-{i}-{self.layout + 1}")
                moved = True
        if moved or self._groups is not None:
            self.layout += 1
        self._workers = workers
        self._groups = [(wk, [i for i in range(n) if place[i] == wk]) for wk in workers]
        self._groups = [(wk, idx) for wk, idx in self._groups if idx]

    def close(self):
        """Release the shards (the workers free their memory)."""
        self.backend.release(self.futures)
        self.futures = []
