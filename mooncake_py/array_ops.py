"""ArrayOps: the ndarray-like surface shared by TrackedArray and DualArray.

Every attribute, operator and method here forwards to :func:`mooncake_py.dispatch.dispatch`,
so the innermost transformation present handles it. Subclasses store the value that defines
shape and dtype in ``_value`` and provide ``_lost(what)``, the error for a conversion that would
drop the derivative.
"""
import operator

import numpy as np

from .dispatch import dispatch
from .errors import MutationError
from .rules.shape import astype as _astype


class ArrayOps:
    """Operators, indexing, attributes and methods of an ndarray, forwarded to NumPy's dispatch."""
    __slots__ = ()
    __hash__ = None

    def __array__(self, dtype=None, copy=None):
        raise self._lost("converted to a plain NumPy array")

    def __float__(self):
        raise self._lost("converted to a Python float")

    def __complex__(self):
        raise self._lost("converted to a Python complex")

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
            f"writing into a {type(self).__name__} (x[{key!r}] = ...) is not supported yet: the tape cannot "
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
        raise self._lost("turned into a Python number by .item()")

    def tolist(self):
        raise self._lost("turned into Python numbers by .tolist()")

    def sort(self, *a, **kw):
        raise MutationError("x.sort() sorts a TrackedArray in place, which the tape cannot "
                            "represent; use x = np.sort(x) instead.")



def _binary(ufunc, reflected=False):
    if reflected:
        return lambda self, other: dispatch(ufunc, (other, self), {})
    return lambda self, other: dispatch(ufunc, (self, other), {})


for _name, _uf in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                   ("truediv", np.true_divide), ("floordiv", np.floor_divide),
                   ("mod", np.remainder), ("pow", np.power), ("matmul", np.matmul)]:
    setattr(ArrayOps, f"__{_name}__", _binary(_uf))
    setattr(ArrayOps, f"__r{_name}__", _binary(_uf, reflected=True))
for _name, _uf in [("lt", np.less), ("le", np.less_equal), ("gt", np.greater),
                   ("ge", np.greater_equal), ("eq", np.equal), ("ne", np.not_equal)]:
    setattr(ArrayOps, f"__{_name}__", _binary(_uf))
ArrayOps.__neg__ = lambda self: dispatch(np.negative, (self,), {})
ArrayOps.__pos__ = lambda self: dispatch(np.positive, (self,), {})
ArrayOps.__abs__ = lambda self: dispatch(np.absolute, (self,), {})

