"""Ufunc methods defined by composition: ``np.logaddexp.reduce`` / ``np.logaddexp2.reduce``
(a log-sum-exp) and ``ufunc.outer`` for the binary ufuncs that have rules.

The rules of ``np.add.reduce`` & co. (reductions with their own derivatives) live in
:mod:`.reductions`; the methods here are :func:`~.registry.composite` entries keyed by
``(ufunc, method)``: ``ufunc.outer(a, b)`` is the ufunc applied to ``a`` reshaped to
``a.shape + (1,) * b.ndim`` and ``b``, and a logaddexp reduction is
:func:`mooncake_py.special.logsumexp` (with a factor ln 2 for base 2), whose rules are stable
and give second order.

Example:
    >>> import numpy as np, mooncake_py as mp
    >>> mp.grad(lambda x: np.logaddexp.reduce(x))(np.log(np.array([1.0, 3.0])))
    array([0.25, 0.75])
    >>> mp.grad(lambda a: np.sum(np.multiply.outer(a, np.array([1.0, 2.0]))))(np.ones(2))
    array([3., 3.])
"""
import math

import numpy as np

from ..core.array_ops import astype
from .broadcasting import shape_of
from .registry import composite
from .shape import _no_out
from .special import logsumexp

_LN2 = math.log(2.0)


def _logaddexp_reduce(ufunc, scale):
    key = (ufunc, "reduce")

    def reduce(array, axis=0, dtype=None, out=None, keepdims=False, initial=np._NoValue,
               where=True):
        _no_out(key, out[0] if isinstance(out, tuple) and len(out) == 1 else out)
        if dtype is not None:
            array = astype(array, dtype)
        if where is not True:
            array = np.where(where, array, -np.inf)
        if len(shape_of(array)) == 0:
            axis = None  # a 0-d array reduces over nothing: NumPy returns it
        y = logsumexp(array if scale == 1 else array * scale, axis=axis, keepdims=keepdims)
        if scale != 1:
            y = y / scale
        if initial is not np._NoValue and initial is not None:
            y = ufunc(y, initial)
        return y
    reduce.__name__ = f"{ufunc.__name__}_reduce"
    composite(key)(reduce)


_logaddexp_reduce(np.logaddexp, 1)
_logaddexp_reduce(np.logaddexp2, _LN2)


def _outer(ufunc):
    def outer(A, B, /, **kwargs):
        sa, nb = tuple(shape_of(A)), len(shape_of(B))
        return ufunc(np.reshape(A, sa + (1,) * nb), B, **kwargs)
    outer.__name__ = f"{ufunc.__name__}_outer"
    composite((ufunc, "outer"))(outer)


for _u in (np.add, np.subtract, np.multiply, np.divide, np.power, np.float_power, np.maximum,
           np.minimum, np.fmax, np.fmin, np.arctan2, np.hypot, np.logaddexp, np.logaddexp2):
    _outer(_u)
