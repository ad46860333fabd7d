"""Hessians and Hessian-vector products of one function, blocks of lanes spread over workers:
:func:`hessian`, :func:`hvp_columns` and :func:`sparse_hessian`."""
import numpy as np

import mooncake_py as mp

from . import worker
from .client import backend, new_token
from .context import Broadcast, FunctionContext, gather
from .errors import ArgumentError, ThetaShapeError


def _lane_blocks(f, x, args, block, factory, client, V):
    """The products for lanes ``0..k`` (V's rows, or basis directions) as the rows of a
    ``(k, x.size)`` array. Lanes go in blocks of ``block`` (one sweep each, the boundaries at
    multiples of ``block`` as in ``mp.hessian(f, chunk_size=block)``), and each worker gets
    one task for a contiguous run of blocks: a task per block cost a scheduler round trip per
    block and a message per block back."""
    if (f is None) == (factory is None):
        raise ArgumentError("pass the function f, or f=None and factory= (a function that "
                            "returns f, called once on each worker), not both.")
    if type(block) is not int or block < 1:
        raise ArgumentError(f"block must be a positive int (lanes per task), not {block!r}.")
    b = backend(client)
    b.check_open()
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    k = x.size if V is None else V.shape[0]
    token = new_token("hessian")
    ctx = Broadcast(b, FunctionContext(f, factory, x, tuple(args)), "function", token)
    starts = list(range(0, k, block))
    runs = []

    def submit():
        workers = b.workers()
        w = min(len(workers), len(starts))
        runs[:] = [starts[i * len(starts) // w:(i + 1) * len(starts) // w] for i in range(w)]
        return [b.submit(worker.columns, token, ctx.on(wk), run, block, k,
                         None if V is None else V[run[0]:min(run[-1] + block, k)],
                         worker=wk, key=f"{token}-{run[0]}-{ctx.shared}")
                for wk, run in zip(workers, runs)]

    try:
        parts = gather(b, ctx, submit)
    finally:
        ctx.close()
        if b.name == "serial" or b.client.status == "running":
            b.run_everywhere(worker.drop, token)
    if not parts:
        return np.zeros((0, x.size), x.dtype)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def hessian(f, x, *args, block=128, factory=None, client=None):
    """The Hessian of ``f(x, *args)`` in ``x`` (shape ``x.shape * 2``), the same numbers as
    ``mp.hessian(f, chunk_size=block)(x, *args)``: its rows are computed in blocks of
    ``block`` lanes (one forward-over-reverse sweep each), each worker taking one task for a
    contiguous run of blocks.

    ``f``, ``x`` and ``args`` are pickled once and loaded once per worker. With ``f=None``
    and ``factory=`` a function returning ``f``, each worker builds ``f`` itself (for
    functions that hold what does not pickle, or that are cheaper to build than to send;
    a worker that replaces a lost one builds it again).

    Example:
        >>> import numpy as np
        >>> from mooncake_py import distributed as md
        >>> A = np.array([[2.0, 1.0], [1.0, 3.0]])
        >>> md.hessian(lambda x, A: 0.5 * x @ A @ x, np.zeros(2), A, block=1, client="serial")
        array([[2., 1.],
               [1., 3.]])
    """
    # lane j, H·e_j, is row j, as in mp.hessian (the same numbers: H is symmetric up to the
    # last bits, and the rows are those of mp.hessian(f, chunk_size=block))
    return _lane_blocks(f, x, args, block, factory, client, None).reshape(np.shape(x) * 2)


def hvp_columns(f, x, V, *args, block=128, factory=None, client=None):
    """``H @ V`` for the Hessian H of ``f(x, *args)`` in a 1-D ``x`` and the columns of
    ``V`` (shape ``(n, k)``), in tasks of ``block`` columns; see :func:`hessian`.

    Example:
        >>> import numpy as np
        >>> from mooncake_py import distributed as md
        >>> f = lambda x: np.sum(x ** 3)
        >>> md.hvp_columns(f, np.array([1.0, 2.0]), np.eye(2), client="serial")
        array([[ 6.,  0.],
               [ 0., 12.]])
    """
    x = np.asarray(x)
    V = np.asarray(V)
    if x.ndim != 1 or V.ndim != 2 or V.shape[0] != x.shape[0]:
        raise ThetaShapeError(f"hvp_columns takes a 1-D x and V of shape (x.size, k); got x "
                              f"of shape {x.shape} and V of shape {V.shape}.")
    lanes = np.ascontiguousarray(V.T, dtype=np.result_type(x.dtype, V.dtype, np.float64)
                                 if not np.issubdtype(x.dtype, np.floating) else x.dtype)
    return np.ascontiguousarray(_lane_blocks(f, x, args, block, factory, client, lanes).T)


def sparse_hessian(f, x, *args, pattern=None, block=128, order="largest_first",
                   coloring="stars", factory=None, client=None):
    """The Hessian of ``f(x, *args)`` as a ``scipy.sparse.csr_array``, its colors' HVPs
    computed on the workers in blocks of ``block`` lanes; the numbers of
    ``mp.prepare_sparse_hessian_cache(f, x, *args, chunk_size=block)``'s Hessian.

    The pattern is detected here (fast: a run on index sets) unless ``pattern`` is given, and
    star-colored with ``order`` and ``coloring`` (see :func:`mooncake_py.sparse_hessian`);
    only the sweeps go to the workers. Worth it when there are many colors (a Hessian with
    long rows); a few colors are one sweep, best done in one process. With ``f=None`` and
    ``factory=`` (see :func:`hessian`), ``pattern`` is required.

    Example:
        >>> import numpy as np
        >>> from mooncake_py import distributed as md
        >>> f = lambda x: np.sum(x[1:] * x[:-1] ** 2)
        >>> H = md.sparse_hessian(f, np.arange(1.0, 5.0), block=2, client="serial")
        >>> H.nnz, H.toarray()[1]
        (9, array([2., 6., 4., 0.]))
    """
    x = np.asarray(x)
    if f is None and pattern is None:
        raise ArgumentError("with f=None (a factory), pass the Hessian's pattern=: it is "
                            "detected on the client, from f.")
    cache = mp.prepare_sparse_hessian_cache(f, x, *args, pattern=pattern, order=order,
                                            coloring=coloring)
    dtype = x.dtype if np.issubdtype(x.dtype, np.floating) else np.float64
    V = cache.seeds(dtype).reshape((cache.n_colors,) + x.shape)
    return cache.decompress(_lane_blocks(f, x, args, block, factory, client, V))
