"""ArrayOps: the ndarray-like surface shared by TrackedArray and DualArray.

Every attribute, operator and method here forwards to :func:`mooncake_py.core.dispatch.dispatch`,
so the innermost transformation present handles it. Subclasses store the value that defines
shape and dtype in ``_value`` and provide ``_lost(what)``, the error for a conversion that would
drop the derivative, ``_mc_live()``, whether the transformation that made the value is still
running, and ``_mc_setitem(key, value)``, an in-place write (``x[key] = value``;
the in-place operators ``+=`` ... and ``fill``/``sort`` are written with it).
"""
import dis
import operator
import os
import sys

import numpy as np

from ..errors import MissingMethodError
from .dispatch import WRAPPER_TYPES, dispatch

_STORE_SUBSCR = dis.opmap.get("STORE_SUBSCR")
_SCALAR_TYPES = (np.generic, float, int, complex)


def innermost(v):
    """The plain array (or number) inside any number of wrapper layers (tracked, dual)."""
    while type(v) in WRAPPER_TYPES:
        v = v._value
    return v


def buffer_root(v):
    """The array that owns the memory of ``v`` (the innermost value of a wrapper): views of one
    buffer share their root, so a write through one can be detected when another is read."""
    v = innermost(v)
    while True:
        b = getattr(v, "base", None)
        if b is None or isinstance(b, (bytes, memoryview)):
            return v
        v = b


def has_buffer(v):
    """Whether ``v`` (possibly wrapped) is an array that can be written in place, as opposed to
    a NumPy or Python scalar (which in-place operators rebind instead)."""
    return not isinstance(innermost(v), _SCALAR_TYPES)


def is_view_of(a, b):
    """Whether ``a`` is a view (not a copy) into the memory of ``b``; both possibly wrapped."""
    ia = innermost(a)
    if isinstance(ia, _SCALAR_TYPES) or getattr(ia, "base", None) is None:
        return False
    return buffer_root(ia) is buffer_root(b)


def writing_into_plain_array():
    """Whether the Python code two frames up is executing ``array[key] = value``: then a
    conversion NumPy asks for (``__float__``/``__array__``) is a write into a plain array."""
    try:
        f = sys._getframe(2)
        return f.f_code.co_code[f.f_lasti] == _STORE_SUBSCR
    except (AttributeError, IndexError, ValueError):  # other interpreters: no frame details
        return False


class ArrayOps:
    """Operators, indexing, attributes and methods of an ndarray, forwarded to NumPy's dispatch."""
    __slots__ = ()
    __hash__ = None

    def __array__(self, dtype=None, copy=None):
        if writing_into_plain_array():
            raise with_constructor_hint(self._lost(WRITTEN_INTO_PLAIN))
        raise with_constructor_hint(self._lost("converted to a plain NumPy array"))

    def __float__(self):
        if writing_into_plain_array():
            raise self._lost(WRITTEN_INTO_PLAIN)
        raise self._lost("converted to a Python float")

    def __complex__(self):
        raise self._lost("converted to a Python complex")

    def __reduce_ex__(self, protocol):
        # pickle (and copy.deepcopy, which pickles) of a live value inside f: its tape or tag
        # cannot travel, and the copy would be a constant. A value whose transformation has
        # returned (one a prepared cache holds) pickles as before.
        if self._mc_live():
            raise self._lost(PICKLED)
        return object.__reduce_ex__(self, protocol)

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
        return self._view_op(np.transpose, (), {})

    @property
    def mT(self):
        return self._view_op(np.swapaxes, (-1, -2), {})

    def _view_op(self, fn, args, kwargs):
        """``fn(self, *args, **kwargs)`` for a function that returns a view (reshape,
        transpose, ...); TrackedArray records which handle the view belongs to."""
        return dispatch(fn, (self,) + args, kwargs)

    # --- indexing -------------------------------------------------------------------------------
    def __getitem__(self, key):
        return dispatch(operator.getitem, (self, key), {})

    def __setitem__(self, key, value):
        self._mc_setitem(key, value)

    def fill(self, value):
        self._mc_setitem(Ellipsis, value)

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
        return dispatch(np.cumsum, (self,), {"axis": axis, "dtype": dtype, "out": out})

    def cumprod(self, axis=None, dtype=None, out=None):
        return dispatch(np.cumprod, (self,), {"axis": axis, "dtype": dtype, "out": out})

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
        return self._view_op(np.reshape, (shape,), {"order": order} if order != "C" else {})

    def ravel(self, order="C"):
        return self._view_op(np.ravel, (), {"order": order} if order != "C" else {})

    def flatten(self, order="C"):  # always a copy, unlike ravel: writes into it stay in it
        return dispatch(np.copy, (self.ravel(order),), {})

    def transpose(self, *axes):
        if len(axes) == 1 and (axes[0] is None or not isinstance(axes[0], int)):
            axes = axes[0]
        return self._view_op(np.transpose, (axes or None,), {})

    def swapaxes(self, a, b):
        return self._view_op(np.swapaxes, (a, b), {})

    def squeeze(self, axis=None):
        return self._view_op(np.squeeze, (), {"axis": axis})

    def clip(self, min=None, max=None, **kw):
        return dispatch(np.clip, (self, min, max), kw)

    def dot(self, other):
        return dispatch(np.dot, (self, other), {})

    def copy(self, order="C"):  # ndarray.copy lays the copy out in C order, np.copy keeps it
        return dispatch(np.copy, (self,), {"order": order})

    def astype(self, dtype, copy=True, **kw):
        if not copy and kw.get("order", "K") in ("K", "A") and np.dtype(dtype) == self.dtype:
            # NumPy hands back the array itself here: later writes into it show through,
            # which a recorded copy would hide (a wrong value and gradient)
            return self
        return dispatch(astype, (self, dtype), {})

    def conj(self):
        return dispatch(np.conjugate, (self,), {}) if self.dtype.kind == "c" else self

    conjugate = conj

    @property
    def real(self):
        return dispatch(np.real, (self,), {}) if self.dtype.kind == "c" else self

    @property
    def imag(self):
        return dispatch(np.imag, (self,), {})

    def item(self, *args):
        raise self._lost("turned into a Python number by .item()")

    def tolist(self):
        raise self._lost("turned into Python numbers by .tolist()")

    def sort(self, axis=-1, kind=None, order=None):
        self._mc_setitem(Ellipsis, dispatch(np.sort, (self, axis, kind, order), {}))

    def put(self, indices, values, mode="raise"):
        dispatch(np.put, (self, indices, values, mode), {})

    def partition(self, kth, axis=-1, kind="introselect", order=None):
        self._mc_setitem(Ellipsis, dispatch(np.partition, (self, kth, axis, kind, order), {}))

    def diagonal(self, offset=0, axis1=0, axis2=1):
        return dispatch(np.diagonal, (self, offset, axis1, axis2), {})


class _Missing:
    """A class attribute standing for the ndarray method ``name``: reading it on a value
    raises MissingMethodError with ``advice`` (what to use instead)."""

    def __init__(self, name, advice):
        self.name, self.advice = name, advice

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        raise MissingMethodError(
            f"{type(obj).__name__} has no {self.name!r} (ndarray.{self.name}): a value being "
            f"differentiated ({type(obj).__name__} of dtype {obj.dtype}, shape "
            f"{tuple(obj.shape)}) reached it, and its derivative cannot follow. "
            f"{self.advice}")


_BYTES = ("reinterprets the array's bytes, which has no derivative; if a constant is meant, "
          "call it on mp.stop_gradient(x)")
for _name, _advice in [
        ("view", ("Use the array itself (x), x.reshape(...), x[...] or x.T for a view of the "
                 f"same dtype; a view with another dtype {_BYTES}.")),
        ("flat", ("Read with x.ravel()[i] or x.reshape(-1); write one element with "
                 "x[np.unravel_index(i, x.shape)] = v.")),
        ("resize", ("Make a new array instead: x.reshape(shape) for the same size, np.pad or "
                   "np.concatenate to grow it, x.ravel()[:n] to shrink it.")),
        ("setflags", ("Flags of a differentiated value cannot be set; make a copy (x.copy()) "
                     "to write into freely, or use mp.stop_gradient(x) for a plain array.")),
        ("byteswap", f"Byte swapping {_BYTES}.")]:
    setattr(ArrayOps, _name, _Missing(_name, _advice))


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


def _inplace(ufunc):
    """``x op= y``: compute ``x op y`` and write it into x's buffer, so that every view of the
    buffer sees it, as in NumPy. A scalar x has no buffer: NotImplemented makes Python rebind
    ``x = x op y`` instead."""
    def op(self, other):
        if not has_buffer(self._value):
            return NotImplemented
        r = dispatch(ufunc, (self, other), {})
        rs, ss = getattr(r, "shape", ()), self._value.shape
        if tuple(rs) != tuple(ss):
            raise ValueError(f"non-broadcastable output operand with shape {tuple(ss)} doesn't "
                             f"match the broadcast shape {tuple(rs)}")
        self._mc_setitem(Ellipsis, r)
        return self
    return op


for _name, _uf in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                   ("truediv", np.true_divide), ("floordiv", np.floor_divide),
                   ("mod", np.remainder), ("pow", np.power), ("matmul", np.matmul)]:
    setattr(ArrayOps, f"__i{_name}__", _inplace(_uf))
ArrayOps.__neg__ = lambda self: dispatch(np.negative, (self,), {})
ArrayOps.__pos__ = lambda self: dispatch(np.positive, (self,), {})
ArrayOps.__abs__ = lambda self: dispatch(np.absolute, (self,), {})

PICKLED = (
    "pickled inside the function being differentiated (pickle.dumps, copy.deepcopy, or sent to "
    "another process by multiprocessing or concurrent.futures): a pickle cannot carry its "
    "derivative, and what arrives would be a constant. Pickle plain values instead: "
    "mp.stop_gradient(x) where a constant is meant; for work in another process, send it the "
    "plain inputs and call mp.grad (or mp.hvp, ...) there; to copy a value within f, use "
    "x.copy(), which is differentiated")

WRITTEN_INTO_PLAIN = (
    "written into a plain NumPy array (plain[i] = value, or out=plain), which cannot hold its "
    "derivative. Create the array from the value being differentiated (here called x) so that "
    "it carries derivatives too: np.empty_like(x), np.zeros_like(x, shape=(n, m)), "
    "np.zeros((n, m), like=x) or x.copy() instead of np.zeros((n, m)); writes into it "
    "(out[i] = value, out += value, out=) are then differentiated")


def write_out(o, r, where, lost):
    """``fn(..., out=o)`` after the fact: write the result ``r`` into ``o`` (a buffer or a tuple
    of them) as NumPy would, honouring ``where``. ``lost(ri)`` gives the error for a
    differentiable result headed for a plain array (which cannot hold its derivative)."""
    outs = o if type(o) is tuple else (o,)
    rs = r if len(outs) > 1 else (r,)
    for oi, ri in zip(outs, rs):
        if oi is None:
            continue
        if where is not True:
            ri = np.where(where, ri, oi)
        if type(ri) in WRAPPER_TYPES and type(oi) not in WRAPPER_TYPES:
            raise lost(ri)
        oi[...] = ri
    if type(o) is tuple:
        return outs[0] if len(outs) == 1 else outs
    return o


# --- constructors that convert their parts before any dispatch: name the spelling that works ----
_CONSTRUCTOR_HINTS = {
    ("_index_tricks_impl.py", "AxisConcatenator.__getitem__"):
        "np.r_[...] and np.c_[...] convert each part with np.array, which no tracked or dual "
        "value survives: join the parts with np.concatenate([...]) (for np.r_), "
        "np.column_stack([...]) (for np.c_) or np.stack([...]) instead; those are differentiated.",
    ("numeric.py", "full"):
        "np.full(shape, x) converts x with np.asarray: write np.full_like(x, x, shape=shape) "
        "or np.broadcast_to(x, shape) (add .copy() for a writable array) instead; those are "
        "differentiated.",
}


def with_constructor_hint(err):
    """``err`` (a TrackingLostError) with a first sentence naming the differentiable spelling
    when it was raised inside np.r_/np.c_ or np.full, which reach no rule.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> try:
        ...     mp.grad(lambda x: np.sum(np.r_[x, x]))(np.ones(2))
        ... except mp.TrackingLostError as e:
        ...     print(str(e)[:60])
        np.r_[...] and np.c_[...] convert each part with np.array, w
    """
    f = sys._getframe(1)
    for _ in range(8):  # the NumPy frame is a few calls up from the conversion
        if f is None:
            break
        code = f.f_code
        # Python 3.10 has no qualified name: there any __getitem__ of the file gets the hint
        name = getattr(code, "co_qualname", "AxisConcatenator." + code.co_name
                       if code.co_name == "__getitem__" else code.co_name)
        hint = _CONSTRUCTOR_HINTS.get((os.path.basename(code.co_filename), name))
        if hint is not None:
            new = type(err)(f"{hint} ({err})")
            new.__dict__.update(err.__dict__)  # (its source: errors.lost_error_behind)
            return new
        f = f.f_back
    return err


def astype(x, dtype):
    """``x.astype(dtype)`` as a differentiable function (the cast's pullback casts back; its
    rules are in rules/shape.py). On tracked or dual values it dispatches to them.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> mp.grad(lambda x: np.sum(astype(x, np.float32) ** 2))(np.ones(2)).dtype
        dtype('float64')
    """
    if type(x) in WRAPPER_TYPES:
        return dispatch(astype, (x, dtype), {})
    return x.astype(dtype)


astype.__mooncake_primitive__ = True  # registry.primitive takes it as it is
