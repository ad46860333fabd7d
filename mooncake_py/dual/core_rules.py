"""Forward rules the reverse sweep needs when it runs on duals (second order by composition).

Pullbacks call indexing, ``scatter_add``, ``astype``, ``where``, ``clip``, reductions (``sum``,
``mean``), shape functions (``reshape``, ``broadcast_to``, ``expand_dims``, ``swapaxes``,
``transpose``...) and ``matmul``; each needs an frule for ``hvp`` to work. These are
*provisional*: registered only where the family rule files (``rules/*.py``) have none, so that a
family's own frule, once written, takes precedence and this one can be deleted.

All are lane-aware (``@frule(fn, lanes=True)``): tangents arrive with a leading lane axis.
"""
import inspect
import operator

import numpy as np

from ..rules.broadcasting import shape_of
from ..rules.cotangents import scatter_add
from ..rules.lanes import align, expand_ellipsis, lane_getitem, lane_matmul, nlanes, shift_axis
from ..rules.registry import FRULES, frule
from ..rules.shape import astype

PROVISIONAL = []  # the functions whose frule was registered here


def _provisional(fn, lanes=True):
    def register(rule):
        if fn not in FRULES:
            frule(fn, lanes=lanes)(rule)
            PROVISIONAL.append(fn)
        return rule
    return register


_SIGS = {}


def _bind(fn, primals, kwargs):
    """The call's arguments by parameter name, defaults filled in (NumPy's ``_NoValue`` -> None)."""
    sig = _SIGS.get(fn)
    if sig is None:
        sig = _SIGS[fn] = inspect.signature(fn)
    b = sig.bind(*primals, **kwargs)
    b.apply_defaults()
    return {k: (None if v is np._NoValue else v) for k, v in b.arguments.items()}


def _nd(x):
    return len(shape_of(x))


def _lanes_shape(t, shape):
    return (nlanes(t),) + tuple(shape)


def _as_shape(s):
    return (int(s),) if isinstance(s, (int, np.integer)) else tuple(s)


# --- indexing and scatter ---------------------------------------------------------------------
@_provisional(operator.getitem)
def _getitem(primals, tangents):
    x, key = primals
    return x[key], lane_getitem(tangents[0], key, _nd(x))


@_provisional(scatter_add)
def _scatter_add(primals, tangents):
    shape, index, values = primals
    out = scatter_add(shape, index, values)
    tv = tangents[2]
    if tv is None:
        return out, None
    key = expand_ellipsis(index if isinstance(index, tuple) else (index,), len(_as_shape(shape)))
    t = scatter_add(_as_shape(shape) + (nlanes(tv),), key, np.moveaxis(tv, 0, -1))
    return out, np.moveaxis(t, -1, 0)


@_provisional(astype)
def _astype(primals, tangents):
    x, dtype = primals
    out = astype(x, dtype)
    if np.dtype(dtype).kind != "f":
        return out, None
    return out, astype(tangents[0], dtype)


# --- selection --------------------------------------------------------------------------------
def _full(t, out):
    want = _lanes_shape(t, shape_of(out))
    return t if shape_of(t) == want else np.broadcast_to(t, want)


@_provisional(np.where)
def _where(primals, tangents):
    out = np.where(*primals)
    if len(primals) == 1:
        return out, None
    cond, _, _ = primals
    tx, ty = tangents[1], tangents[2]
    if tx is None and ty is None:
        return out, None
    nd = _nd(out)
    t = np.where(cond, 0 if tx is None else align(tx, nd), 0 if ty is None else align(ty, nd))
    return out, _full(t, out)


def _bound(primals, i, kw, names):
    """Positional argument ``i``, else the first of the keyword ``names`` given (all popped)."""
    v = primals[i] if len(primals) > i else None
    for n in names:
        w = kw.pop(n, None)
        if v is None or v is np._NoValue:
            v = w
    return None if v is np._NoValue else v


@_provisional(np.clip)
def _clip(primals, tangents, **kw):
    a = primals[0]
    lo = _bound(primals, 1, kw, ("a_min", "min"))
    hi = _bound(primals, 2, kw, ("a_max", "max"))
    out = np.clip(a, lo, hi, **kw)
    ta, tlo, thi = (list(tangents) + [None, None])[:3]
    nd = _nd(out)
    terms = []
    if ta is not None:
        inside = True
        if lo is not None:
            inside = inside & (a >= lo)
        if hi is not None:
            inside = inside & (a <= hi)
        terms.append(np.where(inside, align(ta, nd), 0))
    if tlo is not None:
        terms.append(np.where(a < lo, align(tlo, nd), 0))
    if thi is not None:
        terms.append(np.where(a > hi, align(thi, nd), 0))
    if not terms:
        return out, None
    t = terms[0]
    for u in terms[1:]:
        t = t + u
    return out, _full(t, out)


# --- reductions -------------------------------------------------------------------------------
@_provisional(np.sum)
def _sum(primals, tangents, **kw):
    a = _bind(np.sum, primals, kw)
    x = a["a"]
    out = np.sum(*primals, **kw)
    extra = {k: a[k] for k in ("dtype", "keepdims", "where") if a[k] is not None}
    return out, np.sum(tangents[0], axis=shift_axis(a["axis"], _nd(x)), **extra)


@_provisional(np.mean)
def _mean(primals, tangents, **kw):
    a = _bind(np.mean, primals, kw)
    x = a["a"]
    out = np.mean(*primals, **kw)
    extra = {k: a[k] for k in ("dtype", "keepdims", "where") if a[k] is not None}
    return out, np.mean(tangents[0], axis=shift_axis(a["axis"], _nd(x)), **extra)


@_provisional((np.add, "reduce"))
def _add_reduce(primals, tangents, **kw):
    names = ("array", "axis", "dtype", "out", "keepdims", "initial", "where")
    a = dict(zip(names, primals))
    a.update(kw)
    x = a["array"]
    out = np.add.reduce(*primals, **kw)
    extra = {k: a[k] for k in ("dtype", "keepdims", "where") if a.get(k) is not None}
    return out, np.add.reduce(tangents[0], axis=shift_axis(a.get("axis", 0), _nd(x)), **extra)


# --- shape ------------------------------------------------------------------------------------
def _order(order, x):
    if order == "A":
        return "F" if np.isfortran(x) else "C"
    return order


def _reshape_lanes(t, shape, order):
    if order == "F":  # lanes last and slowest in Fortran order: each lane reshaped on its own
        r = np.reshape(np.moveaxis(t, 0, -1), tuple(shape) + (nlanes(t),), order="F")
        return np.moveaxis(r, -1, 0)
    return np.reshape(t, (nlanes(t),) + tuple(shape))


@_provisional(np.reshape)
def _reshape(primals, tangents, **kw):
    a = _bind(np.reshape, primals, kw)
    out = np.reshape(*primals, **kw)
    shape = a["shape"] if a.get("shape") is not None else a.get("newshape")
    return out, _reshape_lanes(tangents[0], _as_shape(shape), _order(a["order"], a["a"]))


@_provisional(np.ravel)
def _ravel(primals, tangents, **kw):
    a = _bind(np.ravel, primals, kw)
    out = np.ravel(*primals, **kw)
    return out, _reshape_lanes(tangents[0], (-1,), _order(a["order"], a["a"]))


@_provisional(np.broadcast_to)
def _broadcast_to(primals, tangents, **kw):
    a = _bind(np.broadcast_to, primals, kw)
    out = np.broadcast_to(*primals, **kw)
    shape = _as_shape(a["shape"])
    t = tangents[0]
    return out, np.broadcast_to(align(t, len(shape)), (nlanes(t),) + shape)


@_provisional(np.expand_dims)
def _expand_dims(primals, tangents, **kw):
    a = _bind(np.expand_dims, primals, kw)
    out = np.expand_dims(*primals, **kw)
    axis = a["axis"]
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    nd = _nd(out)
    return out, np.expand_dims(tangents[0], tuple(int(x) % nd + 1 for x in axes))


@_provisional(np.squeeze)
def _squeeze(primals, tangents, **kw):
    a = _bind(np.squeeze, primals, kw)
    x = a["a"]
    out = np.squeeze(*primals, **kw)
    axis = a["axis"]
    if axis is None:
        axis = tuple(i for i, s in enumerate(shape_of(x)) if s == 1)
    return out, np.squeeze(tangents[0], axis=shift_axis(axis, _nd(x)))


@_provisional(np.swapaxes)
def _swapaxes(primals, tangents, **kw):
    a = _bind(np.swapaxes, primals, kw)
    nd = _nd(a["a"])
    out = np.swapaxes(*primals, **kw)
    return out, np.swapaxes(tangents[0], shift_axis(a["axis1"], nd), shift_axis(a["axis2"], nd))


@_provisional(np.moveaxis)
def _moveaxis(primals, tangents, **kw):
    a = _bind(np.moveaxis, primals, kw)
    nd = _nd(a["a"])
    out = np.moveaxis(*primals, **kw)
    src, dst = a["source"], a["destination"]
    return out, np.moveaxis(tangents[0], shift_axis(src, nd), shift_axis(dst, nd))


@_provisional(np.transpose)
def _transpose(primals, tangents, **kw):
    a = _bind(np.transpose, primals, kw)
    nd = _nd(a["a"])
    out = np.transpose(*primals, **kw)
    axes = a["axes"]
    perm = tuple(range(nd, 0, -1)) if axes is None else tuple(int(x) % nd + 1 for x in axes)
    return out, np.transpose(tangents[0], (0,) + perm)


@_provisional(np.copy)
def _copy(primals, tangents, **kw):
    return np.copy(*primals, **kw), np.copy(tangents[0])


# --- products ---------------------------------------------------------------------------------
@_provisional(np.matmul)
def _matmul(primals, tangents, **kw):
    a, b = primals
    ta, tb = tangents
    out = np.matmul(a, b, **kw)
    t = None
    if ta is not None:
        t = lane_matmul(ta, b, True)
    if tb is not None:
        u = lane_matmul(a, tb, False)
        t = u if t is None else t + u
    return out, t


@_provisional(np.dot, lanes=False)
def _dot(primals, tangents, **kw):
    a, b = primals[:2]
    ta, tb = tangents[:2]
    out = np.dot(a, b)
    t = None
    if ta is not None:
        t = np.dot(ta, b)
    if tb is not None:
        u = np.dot(a, tb)
        t = u if t is None else t + u
    return out, t
