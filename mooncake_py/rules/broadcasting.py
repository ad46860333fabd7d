"""Undoing NumPy broadcasting in cotangents, written with ``np.`` calls so that it runs on duals."""
import numpy as np


def shape_of(x):
    """``x.shape`` for arrays and wrapped values, ``np.shape(x)`` for scalars and lists."""
    s = getattr(x, "shape", None)
    return s if s is not None else np.shape(x)


# A wrapper type's short form of the sum and reshape below, ``(g, axes, shape) -> result or
# None`` (None: the np. calls run), set by the layer that owns the type (the dual layer: its
# dispatch costs more than the two reductions at the sizes of a Hessian-vector product).
UNBROADCAST_SHORT = {}


def unbroadcast(g, shape):
    """Sum ``g`` over the axes along which an operand of ``shape`` was broadcast to ``g.shape``.

    Example:
        >>> import numpy as np
        >>> unbroadcast(np.ones((2, 3)), (1, 3))
        array([[2., 2., 2.]])
    """
    gs = shape_of(g)
    if gs == shape:
        return g
    lead = len(gs) - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape)
                                      if n == 1 and gs[lead + i] != 1)
    if axes:
        short = UNBROADCAST_SHORT.get(type(g))
        if short is not None:
            r = short(g, axes, shape)
            if r is not None:
                return r
        g = np.sum(g, axis=axes)
    return np.reshape(g, shape)
