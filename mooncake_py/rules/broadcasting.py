"""Undoing NumPy broadcasting in cotangents, written with ``np.`` calls so that it runs on duals."""
import numpy as np


def shape_of(x):
    """``x.shape`` for arrays and wrapped values, ``np.shape(x)`` for scalars and lists."""
    s = getattr(x, "shape", None)
    return s if s is not None else np.shape(x)


def unbroadcast(g, shape):
    """Sum ``g`` over the axes along which an operand of ``shape`` was broadcast to ``g.shape``."""
    gs = shape_of(g)
    if gs == shape:
        return g
    lead = len(gs) - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape)
                                      if n == 1 and gs[lead + i] != 1)
    if axes:
        g = np.sum(g, axis=axes)
    return np.reshape(g, shape)
