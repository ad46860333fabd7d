"""TrackedArray: a value (ndarray, NumPy scalar, CuPy array or DualArray) recorded on a tape.

Every NumPy entry point (``__array_ufunc__``, ``__array_function__``, operators, indexing,
methods; see :mod:`mooncake_py.core.array_ops`) goes through :func:`mooncake_py.core.dispatch.dispatch`,
which hands the call to the innermost transformation present; for a tracked value that is its
tape's ``record``.

A TrackedArray is a *handle*, like an ndarray: ``x[i] = v``, ``x += v`` and ``out=`` arguments
write into its buffer in place and move the handle to a new node of the tape (see
:meth:`~mooncake_py.tape.tape.Tape.write`).
"""
import operator

import numpy as np

from ..core.array_ops import PICKLED, WRITTEN_INTO_PLAIN, ArrayOps, is_view_of
from ..core.dispatch import WRAPPER_TYPES, dispatch
from ..errors import TrackingLostError
from ..rules.mutation import LIKE_CONSTRUCTORS

_F64 = np.float64
_NO_KWARGS = {}
# Functions whose result, when NumPy returns a view, holds every element of its argument (a
# rearrangement): a write through such a view rewrites the argument as a whole.
VIEW_FUNCTIONS = frozenset([np.reshape, np.ravel, np.transpose, np.swapaxes, np.moveaxis,
                            np.squeeze, np.expand_dims])


class TrackedArray(ArrayOps):
    """A value recorded on a :class:`~mooncake_py.tape.tape.Tape`; use it like an ndarray.

    Create one with ``tape.track(x)``. Operations on it (``np.sin(x)``, ``x @ W``, ``x[i]``)
    return new TrackedArrays; comparisons and other non-differentiable results are plain
    arrays, so Python control flow on them works. Writes (``x[i] = v``, ``x += v``) change it in
    place, as they would an ndarray.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> with mp.Tape() as tape:
        ...     x = tape.track(np.array([1.0, 2.0]))
        ...     y = np.sum(np.sin(x) * x)
        ...     print(type(x).__name__, type(y).__name__, bool(x[0] < x[1]))
        TrackedArray TrackedArray True
    """
    # _view: (parent, fn, args, kwargs) when this handle is the NumPy view fn(parent, *args,
    # **kwargs) (operator.getitem with a basic key, or one of VIEW_FUNCTIONS), so that writes
    # through either one keep the other up to date. Unset for every other handle.
    __slots__ = ("_node", "_tape", "_value", "_view")

    def __init__(self, value, tape, node):
        # (fastpath.py makes TrackedArrays without this call, setting these three slots: keep
        # the two in step)
        self._value = value
        self._tape = tape
        self._node = node

    def _mc_level(self):
        return self._tape._level

    @staticmethod
    def _mc_apply(top, fn, args, kwargs):
        return top._tape.record(fn, args, kwargs)

    # A call whose only argument is this value (np.sin(x), np.sum(x)) goes straight to the
    # tape: dispatch's search for the innermost wrapper could only find this one.
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method == "__call__" and not kwargs and len(inputs) == 1 and inputs[0] is self:
            return self._tape.record(ufunc, inputs, kwargs)
        return dispatch(ufunc if method == "__call__" else (ufunc, method), inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        if func in LIKE_CONSTRUCTORS:  # np.zeros(shape, like=x): only `like` dispatches here
            return self._tape.like(self, func, args, kwargs)
        if func in VIEW_FUNCTIONS and args and args[0] is self:
            return self._view_op(func, tuple(args[1:]), kwargs)
        if not kwargs and len(args) == 1 and args[0] is self:
            return self._tape.record(func, args, kwargs)
        return dispatch(func, args, kwargs)

    def __getitem__(self, key):
        # An index is never a wrapped value (those are floats), so this tape is the innermost
        # transformation here: no need for dispatch's search.
        r = self._tape.record(operator.getitem, (self, key), _NO_KWARGS)
        if type(r) is TrackedArray:
            v = r._value
            if type(v) is not _F64 and is_view_of(v, self._value):
                r._view = (self, operator.getitem, (key,), {})
        return r

    def _view_op(self, fn, args, kwargs):
        r = dispatch(fn, (self,) + args, kwargs)
        if type(r) is TrackedArray and is_view_of(r._value, self._value):
            r._view = (self, fn, args, kwargs)
        return r

    def _mc_setitem(self, key, value):
        self._tape.write(self, key, value)

    def __repr__(self):
        return f"TrackedArray({self._value!r})"

    def _mc_live(self):
        return not self._tape._closed

    def _lost(self, what):
        err = TrackingLostError(_lost_message(self, what))
        err._mc_source = self._tape  # (whose close() surfaces it: errors.lost_error_behind)
        self._tape.lost = err
        return err


def _lost_message(x, what):
    if what is WRITTEN_INTO_PLAIN or what is PICKLED:
        return f"A tracked value ({_describe(x)}) was {what}."
    return (
        f"A tracked value ({_describe(x)}) was {what}, which would silently drop its derivative. "
        "Common causes and fixes: np.array([x[0], x[1]]) -> use np.stack([x[0], x[1]]); "
        "math.sin(x) / float(x) -> use np.sin(x) and keep it an array; writing it into a plain "
        "array (out[i] = x with out = np.zeros(n)) -> create the array from a tracked value, "
        "np.zeros_like(x, shape=(n,)), np.zeros(n, like=x), np.empty_like(x) or x.copy(), and "
        "writes into it are differentiated; a library function that calls np.asarray "
        "internally (for example scipy.special.logsumexp) -> use mooncake_py.special, or wrap "
        "the function with mp.primitive and give it an mp.rrule. If you really want a constant, "
        "use mp.stop_gradient(x).")


def _describe(x):
    v = x._value
    return f"{type(x).__name__} of {type(v).__name__}, dtype {v.dtype}, shape {tuple(v.shape)}"


WRAPPER_TYPES.add(TrackedArray)
