"""Reverse rules for reductions: sum, mean, prod, max/min, var/std, cumsum/cumprod, norms."""
import numpy as np

from .registry import rrule, RRULES
from .broadcasting import shape_of


def normalize_axis(axis, ndim):
    """``axis`` (None, int or tuple, possibly negative) as a sorted tuple of non-negative ints."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)):
        axis = (axis,)
    return tuple(sorted(int(a) % ndim if ndim else 0 for a in axis))


def expand_reduced(g, shape, axis, keepdims):
    """Reshape a reduction's cotangent ``g`` so it broadcasts against the input's ``shape``."""
    if keepdims or not shape:
        return g
    axes = normalize_axis(axis, len(shape))
    kept = tuple(1 if i in axes else n for i, n in enumerate(shape))
    return np.reshape(g, kept)


@rrule(np.sum)
def _sum(x, axis=None, dtype=None, out=None, keepdims=False, **kw):
    y = np.sum(x, axis=axis, dtype=dtype, keepdims=keepdims, **kw)
    shape = shape_of(x)
    where = kw.get("where", True)

    def pullback(g):
        gx = np.broadcast_to(expand_reduced(g, shape, axis, keepdims), shape)
        return (gx if where is True else np.where(where, gx, 0),)
    return y, pullback


@rrule(np.mean)
def _mean(x, axis=None, dtype=None, out=None, keepdims=False, **kw):
    y = np.mean(x, axis=axis, dtype=dtype, keepdims=keepdims, **kw)
    shape = shape_of(x)
    n = np.prod([shape[a] for a in normalize_axis(axis, len(shape))], dtype=float) if shape else 1.0

    def pullback(g):
        return (np.broadcast_to(expand_reduced(g, shape, axis, keepdims) / n, shape),)
    return y, pullback


RRULES[(np.add, "reduce")] = RRULES[np.sum]
