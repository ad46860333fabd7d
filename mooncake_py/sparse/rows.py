"""Dependency rows: which inputs each element of an array depends on, as a boolean CSR matrix.

An array of ``size`` elements traced over ``n`` inputs carries a ``(size, n)`` boolean
``scipy.sparse.csr_matrix`` ``G``: ``G[i, j]`` says that element ``i`` (in C order) may depend on
input ``j``. Every pattern rule is a few operations on such matrices: gathering rows (indexing,
broadcasting), unioning rows (sums) and summing a linear map's dependencies (``S @ G``).

scipy is imported on first use so that ``import mooncake_py`` stays free of it.
"""
import numpy as np


def sparse():
    """The ``scipy.sparse`` module, imported on first use.

    Example:
        >>> sparse().__name__
        'scipy.sparse'
    """
    import scipy.sparse as sp
    return sp


def identity_rows(n):
    """The rows of ``n`` independent inputs: element ``i`` depends on input ``i`` only.

    Example:
        >>> identity_rows(3).toarray().astype(int)
        array([[1, 0, 0],
               [0, 1, 0],
               [0, 0, 1]])
    """
    sp = sparse()
    return sp.csr_matrix((np.ones(n, dtype=bool), np.arange(n), np.arange(n + 1)), shape=(n, n))


def empty_rows(size, n):
    """``size`` rows that depend on none of ``n`` inputs (a constant).

    Example:
        >>> empty_rows(2, 3).nnz
        0
    """
    sp = sparse()
    return sp.csr_matrix((size, n), dtype=bool)


def gather(G, idx):
    """Rows ``idx`` (a flat integer array) of ``G``; the identity gather returns ``G`` itself.

    Example:
        >>> gather(identity_rows(3), [2, 2]).toarray().astype(int)
        array([[0, 0, 1],
               [0, 0, 1]])
    """
    idx = np.asarray(idx, dtype=np.intp).ravel()
    if idx.size == G.shape[0] and (idx.size == 0 or
                                   (idx[0] == 0 and np.array_equal(idx, np.arange(idx.size)))):
        return G
    # Row gathers are the commonest operation (every index, slice and broadcast): done with two
    # NumPy passes here, as scipy's fancy indexing costs several times more per call.
    n_rows = G.shape[0]
    if idx.size and (idx.min() < -n_rows or idx.max() >= n_rows):
        raise IndexError(f"row index out of range for {n_rows} rows")
    idx = idx % max(n_rows, 1)
    starts, ends = G.indptr[idx], G.indptr[idx + 1]
    lens = ends - starts
    indptr = np.zeros(idx.size + 1, dtype=G.indptr.dtype)
    np.cumsum(lens, out=indptr[1:])
    take = np.arange(int(indptr[-1]), dtype=np.intp) + np.repeat(starts - indptr[:-1], lens)
    sp = sparse()
    return sp.csr_matrix((np.ones(take.size, dtype=bool), G.indices[take], indptr),
                         shape=(idx.size, G.shape[1]))


def broadcast(G, shape, out_shape):
    """The rows of an array of ``shape`` broadcast to ``out_shape``.

    Example (a column of 2 broadcast to a 2×2 array):
        >>> broadcast(identity_rows(2), (2, 1), (2, 2)).toarray().astype(int)
        array([[1, 0],
               [1, 0],
               [0, 1],
               [0, 1]])
    """
    shape, out_shape = tuple(shape), tuple(out_shape)
    if shape == out_shape:
        return G
    size = int(np.prod(shape, dtype=np.int64))
    idx = np.broadcast_to(np.arange(size).reshape(shape), out_shape)
    return G[idx.ravel()]


def union(mats):
    """Elementwise OR of equally shaped row matrices (``None`` entries skipped).

    Example:
        >>> G = identity_rows(2)
        >>> union([G, None, gather(G, [1, 0])]).toarray().astype(int)
        array([[1, 1],
               [1, 1]])
    """
    mats = [m for m in mats if m is not None]
    out = mats[0]
    for m in mats[1:]:
        out = out + m
    return out


def group_map(groups, n_groups):
    """The ``(n_groups, len(groups))`` 0/1 matrix that sends element ``i`` to group ``groups[i]``:
    ``group_map(g, k) @ G`` unions the rows of each group.

    Example:
        >>> (group_map([0, 1, 0], 2) @ identity_rows(3)).toarray().astype(int)
        array([[1, 0, 1],
               [0, 1, 0]])
    """
    sp = sparse()
    m = len(groups)
    return sp.csr_matrix((np.ones(m, dtype=bool), (np.asarray(groups, dtype=np.intp),
                                                   np.arange(m))), shape=(n_groups, m))


def any_row(G):
    """One row: the union of all rows of ``G`` (every input any element depends on).

    Example:
        >>> any_row(gather(identity_rows(4), [3, 1])).toarray().astype(int)
        array([[0, 1, 0, 1]])
    """
    sp = sparse()
    cols = np.unique(G.indices)
    return sp.csr_matrix((np.ones(cols.size, dtype=bool), cols, [0, cols.size]),
                         shape=(1, G.shape[1]))
