"""Helpers for lane-aware forward rules (``@frule(fn, lanes=True)``).

Such a rule receives every tangent with a leading *lane* axis of k directions, shape
``(k,) + primal.shape``, and returns the output tangent the same way. Broadcasting aligns
trailing axes, so ``x * dx`` is right as it stands; what needs care is (1) axis arguments, which
move by one (:func:`shift_axis`), (2) operands of lower rank than the output, whose tangent must
get singleton axes after the lane axis before broadcasting (:func:`align`), (3) indexing
(:func:`lane_getitem`) and (4) matmul with a 1-D operand (:func:`lane_matmul`).
Everything here is written with ``np.`` calls, so it also runs on nested wrapped values.

Example (the tangent of ``np.sum(x, axis=0)`` for tangents ``dx`` with lanes):
    >>> import numpy as np
    >>> from mooncake_py.rules.lanes import shift_axis
    >>> dx = np.ones((3, 4, 5))           # k = 3 lanes of a (4, 5) primal
    >>> np.sum(dx, axis=shift_axis(0, 2)).shape
    (3, 5)
"""
import numpy as np

from .broadcasting import shape_of


def nlanes(t):
    """The number of lanes k of a lane-first tangent."""
    return shape_of(t)[0]


def shift_axis(axis, ndim):
    """The tangent axes that correspond to the primal's ``axis`` (int, tuple or None for all of
    the primal's ``ndim`` axes); negative axes are resolved against ``ndim``."""
    if axis is None:
        return tuple(range(1, ndim + 1))
    if isinstance(axis, (tuple, list)):
        return tuple(int(a) % ndim + 1 for a in axis)
    return int(axis) % ndim + 1


def align(t, ndim):
    """Lane-first tangent ``t`` with singleton axes inserted after the lane axis, so that its
    primal part has ``ndim`` axes and broadcasts against an ``ndim``-dimensional output."""
    s = shape_of(t)
    pad = ndim - (len(s) - 1)
    if pad <= 0:
        return t
    return np.reshape(t, s[:1] + (1,) * pad + tuple(s[1:]))


def _is_basic(key):
    return all(k is None or k is Ellipsis or isinstance(k, (int, np.integer, slice)) for k in key)


def _consumed(k):
    if k is None or k is Ellipsis:
        return 0
    if isinstance(k, (int, np.integer, slice)):
        return 1
    dt = getattr(k, "dtype", None)
    if dt is None:
        k = np.asarray(k)
        dt = k.dtype
    return np.ndim(k) if dt == bool else 1


def expand_ellipsis(key, ndim):
    """``key`` (a tuple) with its Ellipsis replaced by the slices it stands for in ``ndim`` axes."""
    if not any(k is Ellipsis for k in key):
        return key
    used = sum(_consumed(k) for k in key)
    out = []
    for k in key:
        if k is Ellipsis:
            out.extend([slice(None)] * (ndim - used))
        else:
            out.append(k)
    return tuple(out)


def lane_getitem(t, key, ndim):
    """``x[key]`` for every lane of the lane-first tangent ``t`` of an ``ndim``-dimensional x.

    Basic keys simply get a leading ``:``. For advanced keys, whose result axes NumPy may move
    to the front, the lane axis is moved last, indexed past, and moved back.
    """
    if not isinstance(key, tuple):
        key = (key,)
    if _is_basic(key):
        return t[(slice(None),) + key]
    key = expand_ellipsis(key, ndim)
    return np.moveaxis(np.moveaxis(t, 0, -1)[key], -1, 0)


def lane_matmul(x, y, lanes_first_operand):
    """``np.matmul`` of every lane of a lane-first tangent with a plain operand: ``x_l @ y`` when
    ``lanes_first_operand`` (x carries lanes), else ``x @ y_l``. Handles 1-D operands and batch
    dimensions of different ranks as ``np.matmul`` does."""
    t, o = (x, y) if lanes_first_operand else (y, x)
    nd_t, nd_o = len(shape_of(t)) - 1, len(shape_of(o))
    if nd_o == 2 and nd_t in (1, 2):
        return _lane_matmul_gemm(t, o, nd_t, lanes_first_operand)
    drop_row = drop_col = False
    if lanes_first_operand:
        if nd_t == 1:
            t, nd_t, drop_row = np.expand_dims(t, -2), 2, True
        if nd_o == 1:
            o, nd_o, drop_col = np.expand_dims(o, -1), 2, True
    else:
        if nd_t == 1:
            t, nd_t, drop_col = np.expand_dims(t, -1), 2, True
        if nd_o == 1:
            o, nd_o, drop_row = np.expand_dims(o, -2), 2, True
    t = align(t, max(nd_t, nd_o))
    r = np.matmul(t, o) if lanes_first_operand else np.matmul(o, t)
    if drop_row and drop_col:
        return r[..., 0, 0]
    if drop_col:
        return r[..., 0]
    if drop_row:
        return r[..., 0, :]
    return r


def _lane_matmul_gemm(t, o, nd_t, lanes_first_operand):
    """Every lane times a plain matrix as ONE matrix product (a batched matmul over the lane axis
    would run k small products): lanes folded into rows (or columns) and unfolded after."""
    k = shape_of(t)[0]
    if lanes_first_operand:  # x_l @ o: rows of all lanes stacked
        if nd_t == 1:
            return np.matmul(t, o)
        n, p = shape_of(t)[1:]
        return np.reshape(np.matmul(np.reshape(t, (k * n, p)), o), (k, n, shape_of(o)[1]))
    if nd_t == 1:  # o @ y_l for vectors y_l: (Y Oᵀ) row by row
        return np.matmul(t, np.swapaxes(o, -1, -2))
    n, p = shape_of(t)[1:]
    cols = np.reshape(np.moveaxis(t, 0, 1), (n, k * p))
    return np.moveaxis(np.reshape(np.matmul(o, cols), (shape_of(o)[0], k, p)), 1, 0)
