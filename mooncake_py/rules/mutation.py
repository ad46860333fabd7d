"""Rules for code that writes into arrays: buffer constructors and in-place NumPy functions.

The write itself (``out[i] = v``) is not a rule: the tape (``Tape.write``) and the dual layer
(``DualArray._mc_setitem``) do it, in place, as NumPy does. What lives here:

- the buffer constructors ``np.empty_like/zeros_like/ones_like/full_like`` of a tracked or dual
  value: their result is a fresh buffer of the same kind (tracked, or dual with a zero tangent of
  the right lane shape), so that tracked values can be written into it. Their value carries no
  derivative of the template; ``full_like``'s carries the derivative of its fill value;
- :data:`LIKE_CONSTRUCTORS`, the functions that reach ``__array_function__`` only through their
  ``like=`` argument (``np.zeros(shape, like=x)``);
- :data:`MUTATORS`: NumPy functions that write into an argument (``np.copyto``, ``np.put``,
  ``np.fill_diagonal``, ``np.add.at``), each written as an ordinary ``dst[key] = value``, so the
  tape and the dual layer both run them through their own write.

Example:
    >>> import numpy as np, mooncake_py as mp
    >>> def cumsum(x):
    ...     out = np.empty_like(x)
    ...     out[0] = x[0]
    ...     for i in range(1, len(x)):
    ...         out[i] = out[i - 1] + x[i]
    ...     return np.sum(out)
    >>> mp.grad(cumsum)(np.ones(3))
    array([3., 2., 1.])
"""
import numpy as np

from ..core import array_module as am
from .broadcasting import shape_of, unbroadcast
from .cotangents import scatter_add
from .lanes import align
from .registry import fn_name, frule, rrule


class NoDerivative:
    """The pullback of a value that depends on none of its arguments' values (a buffer
    constructor): ``n`` positional arguments, no cotangent for any. The sweep recognises it, so
    it need not pass cotangents down to such a node."""
    __slots__ = ("n",)

    def __init__(self, n):
        self.n = n

    def __call__(self, g):
        return (None,) * self.n


def _is_float(x):
    dt = getattr(x, "dtype", None)
    return dt is not None and dt.kind == "f"


def zero_tangent(out, lanes):
    """A writable zero tangent for a fresh buffer ``out`` (lane axis first when ``lanes``)."""
    shape = ((lanes,) if lanes else ()) + tuple(shape_of(out))
    return np.zeros_like(out, shape=shape)


# --- buffer constructors ------------------------------------------------------------------------
def _constructor(fn):
    @rrule(fn)
    def reverse(*args, **kwargs):
        return fn(*args, **kwargs), NoDerivative(len(args))

    def forward(primals, tangents, lanes, kwargs):
        out = fn(*primals, **kwargs)
        return out, (zero_tangent(out, lanes) if _is_float(out) else None)
    forward.__name__ = f"frule({fn_name(fn)})"
    reverse._mc_native = forward
    frule(fn)(reverse)


for _fn in (np.empty_like, np.zeros_like, np.ones_like):
    _constructor(_fn)


@rrule(np.full_like, needs=True)
def _full_like(needs, a, fill_value, *args, **kwargs):
    out = np.full_like(a, fill_value, *args, **kwargs)
    n = 2 + len(args)
    if not (len(needs) > 1 and needs[1]) or not _is_float(out):
        return out, NoDerivative(n)
    fshape, fdtype = shape_of(fill_value), getattr(fill_value, "dtype", None)

    def pullback(g):
        gf = unbroadcast(g, fshape)
        if fdtype is not None and fdtype.kind == "f" and gf.dtype != fdtype:
            gf = gf.astype(fdtype)
        return (None, gf) + (None,) * len(args)
    return out, pullback


def _full_like_native(primals, tangents, lanes, kwargs):
    out = np.full_like(*primals, **kwargs)
    if not _is_float(out):
        return out, None
    tf = tangents[1] if len(tangents) > 1 else None
    if tf is None:
        return out, zero_tangent(out, lanes)
    shape = tuple(shape_of(out))
    t = np.broadcast_to(align(tf, len(shape)), (lanes,) + shape) if lanes else \
        np.broadcast_to(tf, shape)
    return out, (t.astype(out.dtype) if t.dtype != out.dtype else np.copy(t))


def _full_like_f(primals, tangents, **kwargs):
    return _full_like_native(primals, tangents, 0, kwargs)


_full_like_f._mc_native = _full_like_native
frule(np.full_like)(_full_like_f)


# --- like= constructors -------------------------------------------------------------------------
LIKE_CONSTRUCTORS = frozenset([np.zeros, np.empty, np.ones, np.full, np.eye, np.identity,
                               np.array, np.asarray, np.asanyarray, np.ascontiguousarray,
                               np.arange])


def call_like(fn, args, kwargs, like):
    """``fn(*args, like=like, **kwargs)``; a plain NumPy ``like`` is simply dropped."""
    if like is None or type(like) is np.ndarray or isinstance(like, np.generic):
        return fn(*args, **kwargs)
    return fn(*args, like=like, **kwargs)


# --- NumPy functions that write into an argument ------------------------------------------------
def _cycled(values, n):
    """``values`` flattened and repeated to length ``n`` (how np.put / fill_diagonal use them)."""
    flat = np.ravel(values)
    m = int(shape_of(flat)[0]) if shape_of(flat) else 1
    if m == n:
        return flat
    return np.take(flat, np.arange(n) % max(m, 1))


def _copyto(dst, src, casting="same_kind", where=True):
    if where is not True:
        src = np.where(where, src, dst)
    dst[...] = src


def _put(a, ind, v, mode="raise"):
    size = int(np.prod(shape_of(a)))
    idx = np.ravel(am.asarray(ind)).astype(np.intp)
    if mode == "wrap":
        idx = idx % size
    elif mode == "clip":
        idx = np.clip(idx, 0, size - 1)
    elif idx.size and (idx.max() >= size or idx.min() < -size):
        raise IndexError(f"index {int(idx.max() if idx.max() >= size else idx.min())} is out of "
                         f"bounds for axis 0 with size {size}")
    else:
        idx = idx % size if size else idx
    if not idx.size:
        return
    a[np.unravel_index(idx, tuple(shape_of(a)))] = _cycled(v, idx.size)


def _fill_diagonal(a, val, wrap=False):
    shape = tuple(shape_of(a))
    if len(shape) < 2:
        raise ValueError("array must be at least 2-d")
    size = int(np.prod(shape))
    if len(shape) == 2:
        step = shape[1] + 1
        end = size if wrap else min(size, shape[1] * shape[1])
    else:
        if any(n != shape[0] for n in shape):
            raise ValueError("All dimensions of input must be of equal length")
        step = 1 + int(np.sum(np.cumprod(shape[:-1])))
        end = size
    flat = np.arange(0, end, step)
    if flat.size:
        a[np.unravel_index(flat, shape)] = _cycled(val, flat.size)


def _add_at(a, indices, b=None):
    a += scatter_add(tuple(shape_of(a)), indices, b)


def _subtract_at(a, indices, b=None):
    a -= scatter_add(tuple(shape_of(a)), indices, b)


MUTATORS = {np.copyto: _copyto, np.put: _put, np.fill_diagonal: _fill_diagonal,
            (np.add, "at"): _add_at, (np.subtract, "at"): _subtract_at}


@rrule(scatter_add)
def _scatter_add(shape, index, values):
    vshape = shape_of(values)
    # The adjoint of a scatter-add is a gather (repeated indices read the same cotangent).
    return scatter_add(shape, index, values), lambda g: (None, None, unbroadcast(g[index], vshape))
