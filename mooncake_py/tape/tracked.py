"""TrackedArray: a value (ndarray, NumPy scalar, CuPy array or DualArray) recorded on a tape.

Every NumPy entry point (``__array_ufunc__``, ``__array_function__``, operators, indexing,
methods; see :mod:`mooncake_py.array_ops`) goes through :func:`mooncake_py.dispatch.dispatch`,
which hands the call to the innermost transformation present; for a tracked value that is its
tape's ``record``.
"""
from ..array_ops import ArrayOps
from ..dispatch import dispatch, WRAPPER_TYPES
from ..errors import TrackingLostError


class TrackedArray(ArrayOps):
    """A value recorded on a :class:`~mooncake_py.tape.tape.Tape`; use it like an ndarray.

    Create one with ``tape.track(x)``. Operations on it (``np.sin(x)``, ``x @ W``, ``x[i]``)
    return new TrackedArrays; comparisons and other non-differentiable results are plain
    arrays, so Python control flow on them works.
    """
    __slots__ = ("_value", "_tape", "_node")

    def __init__(self, value, tape, node):
        self._value = value
        self._tape = tape
        self._node = node

    def _mc_level(self):
        return self._tape._level

    @staticmethod
    def _mc_apply(top, fn, args, kwargs):
        return top._tape.record(fn, args, kwargs)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return dispatch(ufunc if method == "__call__" else (ufunc, method), inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return dispatch(func, args, kwargs)

    def __repr__(self):
        return f"TrackedArray({self._value!r})"

    def _lost(self, what):
        return TrackingLostError(_lost_message(self, what))


def _lost_message(x, what):
    return (
        f"A tracked value ({_describe(x)}) was {what}, which would silently drop its derivative. "
        "Common causes and fixes: np.array([x[0], x[1]]) -> use np.stack([x[0], x[1]]); "
        "math.sin(x) / float(x) -> use np.sin(x) and keep it an array; writing it into a plain "
        "array (out[i] = x) -> build the result functionally (np.stack, np.where, "
        "np.concatenate); a library function that calls np.asarray internally (for example "
        "scipy.special.logsumexp) -> use mooncake_py.special, or wrap the function with "
        "mp.primitive and give it an mp.rrule. If you really want a constant, use "
        "mp.stop_gradient(x).")


def _describe(x):
    v = x._value
    return f"{type(x).__name__} of {type(v).__name__}, dtype {v.dtype}, shape {tuple(v.shape)}"


WRAPPER_TYPES.add(TrackedArray)
