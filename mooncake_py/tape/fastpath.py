"""Short paths for scalar-loop code (``s = s + x[i] * x[i]``), installed on TrackedArray.

Scalar loops record thousands of ops whose NumPy work is a few nanoseconds, so the tape's own
bookkeeping is the whole cost. For the commonest shapes of such ops (an int read ``x[i]`` of a
float64 ndarray, and ``+ - * /`` between float64 scalars) the methods here record the node
directly, skipping dispatch's search for the innermost wrapper, the rule lookup and the
generic output checks; the sweep (:meth:`Tape._sweep`) adds an :class:`ItemRead`'s cotangent
straight into its array's buffer.

Every shortcut applies only where its result is the one the general path would give: a plain
:class:`Tape` (no writes recorded, no complex values, not closed, not in debug mode), plain
float64 values (never duals: forward-over-reverse takes the general path), and no other
transformation's values among the operands. Anything else goes the general way.
"""
import operator

import numpy as np

from ..array_ops import ArrayOps
from ..rules.derivative_table import _div as div
from .pullbacks import ItemRead
from .tape import Tape, _SWEEPING
from .tracked import TrackedArray

_F64 = np.float64
_NDARRAY = np.ndarray
_getitem = operator.getitem
_NO_KWARGS = {}
_INT_KEYS = (int, np.intp, np.int64, np.int32)


_general_getitem = TrackedArray.__getitem__


def _fast_getitem(self, key):
    if type(key) in _INT_KEYS:
        tape = self._tape
        v = self._value
        if type(tape) is Tape and type(v) is _NDARRAY and not tape._debug:
            y = v[key]
            if type(y) is _F64 and _SWEEPING.get() <= tape._level:
                node = len(tape._parents)
                tape._pullbacks.append(ItemRead(v.shape, key))
                tape._parents.append((self._node, None))
                tape._fns.append(_getitem)
                return TrackedArray(y, tape, node)
    return _general_getitem(self, key)


# The pullbacks below are the derivative table's formulas (rules/derivative_table.py) written
# out, in the same floating-point operations, for scalar operands (where unbroadcast is the
# identity): the results are bitwise those of the general rules.
# ``which``: 0 both operands tracked, 1 only the first, 2 only the second.
def _pb_add(a, b, y, which):
    return (lambda g: (g, g)) if which == 0 else (lambda g: (g, None)) if which == 1 else \
        (lambda g: (None, g))


def _pb_sub(a, b, y, which):
    return (lambda g: (g, -g)) if which == 0 else (lambda g: (g, None)) if which == 1 else \
        (lambda g: (None, -g))


def _pb_mul(a, b, y, which):
    return (lambda g: (g * b, g * a)) if which == 0 else (lambda g: (g * b, None)) \
        if which == 1 else (lambda g: (None, g * a))


def _pb_div(a, b, y, which):  # (div: NumPy's division also for a Python-number b = 0)
    return (lambda g: (g * div(1, b), g * div(-y, b))) if which == 0 else \
        (lambda g: (g * div(1, b), None)) if which == 1 else (lambda g: (None, g * div(-y, b)))


def _binary(ufunc, op, pullback, reflected):
    general = ArrayOps.__dict__[f"__{'r' if reflected else ''}{op.__name__.strip('_')}__"]

    def method(self, other):
        tape = self._tape
        v = self._value
        if type(tape) is Tape and type(v) is _F64 and not tape._debug:
            t = type(other)
            if t is TrackedArray:
                w = other._value
                tracked = other._tape is tape
                ok = tracked and type(w) is _F64
            else:
                w = other
                tracked = False
                ok = t is _F64 or t is float or t is int
            if ok and _SWEEPING.get() <= tape._level:
                a, b = (w, v) if reflected else (v, w)
                y = op(a, b)
                if type(y) is _F64:
                    if tracked:
                        pb = pullback(a, b, y, 0)
                        parents = (other._node, self._node) if reflected else \
                            (self._node, other._node)
                    elif reflected:
                        pb = pullback(a, b, y, 2)
                        parents = (None, self._node)
                    else:
                        pb = pullback(a, b, y, 1)
                        parents = (self._node, None)
                    node = len(tape._parents)
                    tape._pullbacks.append(pb)
                    tape._parents.append(parents)
                    tape._fns.append(ufunc)
                    return TrackedArray(y, tape, node)
        return general(self, other)
    method.__name__ = f"__{'r' if reflected else ''}{op.__name__.strip('_')}__"
    return method


def install():
    """Put the short paths on TrackedArray (idempotent; done when mooncake_py.tape loads)."""
    TrackedArray.__getitem__ = _fast_getitem
    for ufunc, op, pb in [(np.add, operator.add, _pb_add), (np.subtract, operator.sub, _pb_sub),
                          (np.multiply, operator.mul, _pb_mul),
                          (np.true_divide, operator.truediv, _pb_div)]:
        for reflected in (False, True):
            m = _binary(ufunc, op, pb, reflected)
            setattr(TrackedArray, m.__name__, m)
