"""TrackedArray: a value (ndarray, NumPy scalar, CuPy array or DualArray) recorded on a tape.

Every NumPy entry point (``__array_ufunc__``, ``__array_function__``, operators, indexing,
methods) goes through :func:`mooncake_py.dispatch.dispatch`, which hands the call to the
innermost transformation present; for a tracked value that is its tape's ``record``.
"""
import operator

import numpy as np

from ..dispatch import dispatch, WRAPPER_TYPES
from ..errors import TrackingLostError, MutationError
from ..rules.shape import astype as _astype


class TrackedArray:
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

    # --- protocol plumbing ------------------------------------------------------------------
    def _mc_level(self):
        return self._tape._level

    @staticmethod
    def _mc_apply(top, fn, args, kwargs):
        return top._tape.record(fn, args, kwargs)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return dispatch(ufunc if method == "__call__" else (ufunc, method), inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return dispatch(func, args, kwargs)

    def __array__(self, dtype=None, copy=None):
        raise TrackingLostError(_lost_message(self, "converted to a plain NumPy array"))

    def __float__(self):
        raise TrackingLostError(_lost_message(self, "converted to a Python float"))

    def __complex__(self):
        raise TrackingLostError(_lost_message(self, "converted to a Python complex"))

    def __int__(self):
        # Truncation to an int has derivative zero wherever it has one: nothing is lost.
        return int(self._value)

    def __bool__(self):
        return bool(self._value)

    def __len__(self):
        return len(self._value)

    def __iter__(self):
        for i in range(len(self._value)):
            yield self[i]

    def __repr__(self):
        return f"TrackedArray({self._value!r})"

    __hash__ = None

    # --- attributes ---------------------------------------------------------------------------
    @property
    def shape(self):
        return self._value.shape

    @property
    def ndim(self):
        return self._value.ndim

    @property
    def size(self):
        return self._value.size

    @property
    def dtype(self):
        return self._value.dtype

    @property
    def T(self):
        return dispatch(np.transpose, (self,), {})

    @property
    def mT(self):
        return dispatch(np.swapaxes, (self, -1, -2), {})

    # --- indexing -------------------------------------------------------------------------------
    def __getitem__(self, key):
        return dispatch(operator.getitem, (self, key), {})

    def __setitem__(self, key, value):
        raise MutationError(
            f"writing into a TrackedArray (x[{key!r}] = ...) is not supported yet: the tape cannot "
            "represent in-place writes. Build the result functionally instead, e.g. with "
            "np.where(mask, new, x), np.concatenate / np.stack of the pieces, or a list of values "
            "passed to np.stack.")

    # --- methods ----------------------------------------------------------------------------
    def sum(self, axis=None, dtype=None, out=None, keepdims=False, **kw):
        return dispatch(np.sum, (self,), dict(axis=axis, dtype=dtype, out=out, keepdims=keepdims, **kw))

    def mean(self, axis=None, dtype=None, out=None, keepdims=False, **kw):
        return dispatch(np.mean, (self,), dict(axis=axis, dtype=dtype, out=out, keepdims=keepdims, **kw))

    def prod(self, axis=None, dtype=None, out=None, keepdims=False, **kw):
        return dispatch(np.prod, (self,), dict(axis=axis, dtype=dtype, out=out, keepdims=keepdims, **kw))

    def max(self, axis=None, out=None, keepdims=False, **kw):
        return dispatch(np.max, (self,), dict(axis=axis, out=out, keepdims=keepdims, **kw))

    def min(self, axis=None, out=None, keepdims=False, **kw):
        return dispatch(np.min, (self,), dict(axis=axis, out=out, keepdims=keepdims, **kw))

    def var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kw):
        return dispatch(np.var, (self,), dict(axis=axis, dtype=dtype, out=out, ddof=ddof,
                                              keepdims=keepdims, **kw))

    def std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kw):
        return dispatch(np.std, (self,), dict(axis=axis, dtype=dtype, out=out, ddof=ddof,
                                              keepdims=keepdims, **kw))

    def cumsum(self, axis=None, dtype=None, out=None):
        return dispatch(np.cumsum, (self,), dict(axis=axis, dtype=dtype, out=out))

    def cumprod(self, axis=None, dtype=None, out=None):
        return dispatch(np.cumprod, (self,), dict(axis=axis, dtype=dtype, out=out))

    def argmax(self, *a, **kw):
        return dispatch(np.argmax, (self,) + a, kw)

    def argmin(self, *a, **kw):
        return dispatch(np.argmin, (self,) + a, kw)

    def argsort(self, *a, **kw):
        return dispatch(np.argsort, (self,) + a, kw)

    def any(self, *a, **kw):
        return dispatch(np.any, (self,) + a, kw)

    def all(self, *a, **kw):
        return dispatch(np.all, (self,) + a, kw)

    def nonzero(self):
        return dispatch(np.nonzero, (self,), {})

    def reshape(self, *shape, order="C"):
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = shape[0]
        return dispatch(np.reshape, (self, shape), {"order": order} if order != "C" else {})

    def ravel(self, order="C"):
        return dispatch(np.ravel, (self,), {"order": order} if order != "C" else {})

    def flatten(self, order="C"):
        return self.ravel(order)

    def transpose(self, *axes):
        if len(axes) == 1 and (axes[0] is None or not isinstance(axes[0], int)):
            axes = axes[0]
        return dispatch(np.transpose, (self, axes or None), {})

    def swapaxes(self, a, b):
        return dispatch(np.swapaxes, (self, a, b), {})

    def squeeze(self, axis=None):
        return dispatch(np.squeeze, (self,), {"axis": axis})

    def clip(self, min=None, max=None, **kw):
        return dispatch(np.clip, (self, min, max), kw)

    def dot(self, other):
        return dispatch(np.dot, (self, other), {})

    def copy(self, order="K"):
        return dispatch(np.copy, (self,), {})

    def astype(self, dtype, copy=True, **kw):
        return dispatch(_astype, (self, dtype), {})

    def conj(self):
        return self

    conjugate = conj

    @property
    def real(self):
        return self

    def item(self, *args):
        raise TrackingLostError(_lost_message(self, "turned into a Python number by .item()"))

    def tolist(self):
        raise TrackingLostError(_lost_message(self, "turned into Python numbers by .tolist()"))

    def sort(self, *a, **kw):
        raise MutationError("x.sort() sorts a TrackedArray in place, which the tape cannot "
                            "represent; use x = np.sort(x) instead.")


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


def _binary(ufunc, reflected=False):
    if reflected:
        return lambda self, other: dispatch(ufunc, (other, self), {})
    return lambda self, other: dispatch(ufunc, (self, other), {})


for _name, _uf in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                   ("truediv", np.true_divide), ("floordiv", np.floor_divide),
                   ("mod", np.remainder), ("pow", np.power), ("matmul", np.matmul)]:
    setattr(TrackedArray, f"__{_name}__", _binary(_uf))
    setattr(TrackedArray, f"__r{_name}__", _binary(_uf, reflected=True))
for _name, _uf in [("lt", np.less), ("le", np.less_equal), ("gt", np.greater),
                   ("ge", np.greater_equal), ("eq", np.equal), ("ne", np.not_equal)]:
    setattr(TrackedArray, f"__{_name}__", _binary(_uf))
TrackedArray.__neg__ = lambda self: dispatch(np.negative, (self,), {})
TrackedArray.__pos__ = lambda self: dispatch(np.positive, (self,), {})
TrackedArray.__abs__ = lambda self: dispatch(np.absolute, (self,), {})
TrackedArray.__hash__ = None

WRAPPER_TYPES.add(TrackedArray)
