"""Forward rules for the few functions the reverse sweep itself calls on duals.

The sweep densifies sparse cotangents with ``scatter_add``, casts with ``astype``, and the
elementwise rules' pullbacks use ``where`` and ``clip``: second order by composition needs their
frules. All are lane-aware (``@frule(fn, lanes=True)``): tangents arrive with a leading lane axis.
Every other family's frules live beside its rrules in ``rules/*.py``.
"""
import numpy as np

from ..core.array_ops import astype
from ..core.blas_threads import small
from ..rules.broadcasting import shape_of
from ..rules.cotangents import scatter_add
from ..rules.lanes import align, expand_ellipsis, nlanes
from ..rules.linear_algebra import matrix_product_tangent
from ..rules.registry import FRULES, frule
from .dual_array import _run_rule


def _nd(x):
    return len(shape_of(x))


def _lanes_shape(t, shape):
    return (nlanes(t),) + tuple(shape)


def _as_shape(s):
    return (int(s),) if isinstance(s, (int, np.integer)) else tuple(s)


# --- indexing and scatter ---------------------------------------------------------------------
@frule(scatter_add, lanes=True)
def _scatter_add(primals, tangents):
    shape, index, values = primals
    out = scatter_add(shape, index, values)
    tv = tangents[2]
    if tv is None:
        return out, None
    key = expand_ellipsis(index if isinstance(index, tuple) else (index,), len(_as_shape(shape)))
    t = scatter_add(_as_shape(shape) + (nlanes(tv),), key, np.moveaxis(tv, 0, -1))
    return out, np.moveaxis(t, -1, 0)


def _scatter_add_native(primals, tangents, lanes, kwargs):
    # Without lanes the tangent scatters like the values (the same additions at the same
    # positions, in the same order), with no lane axis to add, move and drop.
    if not lanes and not kwargs and len(primals) == 3:
        tv = tangents[2]
        if type(tv) is np.ndarray and type(primals[2]) is np.ndarray:
            shape, index, values = primals
            return scatter_add(shape, index, values), scatter_add(shape, index, tv)
    return _run_rule(scatter_add, _scatter_add_frule, primals, tangents, lanes, kwargs)


@frule(astype, lanes=True)
def _astype(primals, tangents):
    x, dtype = primals
    out = astype(x, dtype)
    kind, dx = np.dtype(dtype).kind, tangents[0]
    if kind not in "fc" or dx is None:
        return out, None
    if kind == "f" and dx.dtype.kind == "c":  # complex to real keeps the real part
        dx = np.real(dx)
    return out, astype(dx, dtype)


# --- selection --------------------------------------------------------------------------------
def _full(t, out):
    want = _lanes_shape(t, shape_of(out))
    return t if shape_of(t) == want else np.broadcast_to(t, want)


@frule(np.where, lanes=True)
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


@frule(np.clip, lanes=True)
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


# --- np.sum of a whole array --------------------------------------------------------------------
# The last op of nearly every loss, and the op every HVP of such a loss ends its recording
# with: the registered lane-aware frule costs ~10 µs of calls and reshapes around two
# reductions. A plain call (no keywords, NumPy arrays) reduces primal and tangent directly.

_sum_frule = FRULES[np.sum]
_add_reduce = np.add.reduce


def _default_sum_kwargs(kwargs):
    """Whether the keywords are the ones the sum rrule passes on (its defaults) or none."""
    for k, v in kwargs.items():
        if v is None and (k == "axis" or k == "dtype" or k == "out"):
            continue
        if k == "keepdims" and v is False:
            continue
        return False
    return True


def _sum_native(primals, tangents, lanes, kwargs):
    if len(primals) == 1 and (not kwargs or _default_sum_kwargs(kwargs)):
        x, t = primals[0], tangents[0]
        if type(x) is np.ndarray and type(t) is np.ndarray:
            y = _add_reduce(x, axis=None)
            if not lanes:
                return y, _add_reduce(t, axis=None)
            return y, _add_reduce(t, axis=tuple(range(1, t.ndim)))
    elif not lanes and len(primals) == 1 and _axis_sum_kwargs(kwargs):
        # a sum over some axes (unbroadcast in a sweep): what np.sum runs, on both
        x, t = primals[0], tangents[0]
        if type(x) is np.ndarray and type(t) is np.ndarray:
            axis, keepdims = kwargs.get("axis"), kwargs.get("keepdims", False)
            return (_add_reduce(x, axis=axis, keepdims=keepdims),
                    _add_reduce(t, axis=axis, keepdims=keepdims))
    return _run_rule(np.sum, _sum_frule, primals, tangents, lanes, kwargs)


def _axis_sum_kwargs(kwargs):
    """Whether the keywords are at most an int or tuple ``axis`` and a bool ``keepdims`` (and
    the rrule's defaults for the others)."""
    for k, v in kwargs.items():
        if k == "axis":
            if not (v is None or type(v) is int or
                    (type(v) is tuple and all(type(a) is int for a in v))):
                return False
        elif k == "keepdims":
            if type(v) is not bool:
                return False
        elif not (v is None and (k == "dtype" or k == "out")):
            return False
    return True


_sum_frule._mc_native = _sum_native
_scatter_add_frule = FRULES[scatter_add]
_scatter_add_frule._mc_native = _scatter_add_native


# --- np.stack of duals --------------------------------------------------------------------------
# map-style code stacks many dual scalars (np.stack([f(v) for v in x])), and the sweep stacks
# the dual cotangents of many x[i] reads before scattering them: without lanes, stacking the
# tangents directly gives the registered frule's numbers without a lane axis added to each one.
_stack_frule = FRULES[np.stack]
_DUAL_TANGENTS = (np.ndarray, np.float64)


def _stack_native(primals, tangents, lanes, kwargs):
    # (the stack rrule passes its axis on positionally)
    if not lanes and not kwargs and (len(primals) == 1 or (
            len(primals) == 2 and type(primals[1]) is int and tangents[1] is None)):
        ts = tangents[0]
        if type(ts) is tuple and ts and all(type(t) in _DUAL_TANGENTS for t in ts):
            return np.stack(*primals), np.stack(ts, *primals[1:])
    return _run_rule(np.stack, _stack_frule, primals, tangents, lanes, kwargs)


_stack_frule._mc_native = _stack_native


# --- views: the same view of the tangent --------------------------------------------------------
# Linear algebra rules move axes around on duals (swapaxes of every matrix a solve or product
# takes, moveaxis, expand_dims); without lanes the registered frules' result is that call on the
# tangent, here without a lane axis to add, shift past and drop.
def _same_view(fn, nargs):
    rule = FRULES[fn]

    def native(primals, tangents, lanes, kwargs):
        if not lanes and not kwargs and len(primals) <= nargs:
            t = tangents[0]
            if type(t) is np.ndarray and type(primals[0]) is np.ndarray:
                for u in tangents[1:]:
                    if u is not None:
                        break
                else:
                    return fn(*primals), fn(t, *primals[1:])
        return _run_rule(fn, rule, primals, tangents, lanes, kwargs)
    rule._mc_native = native
    return native


# (np.reshape: the shape only, so order "C" for both whatever their layouts; an order argument,
# "A" decided by the primal's layout, takes the registered frule)
_VIEW_NATIVES = {fn: _same_view(fn, n) for fn, n in ((np.swapaxes, 3), (np.moveaxis, 3),
                                                      (np.expand_dims, 2), (np.transpose, 2),
                                                      (np.reshape, 2))}



# --- np.matmul of dual matrices -----------------------------------------------------------------
# A plan of matrix products (a layer, a loss, their pullbacks on duals) makes three products per
# dual matmul; without lanes the registered rule adds a lane axis to each tangent, folds it into
# the rows for one product, unfolds it and drops it again, ~10 µs of Python per product around
# BLAS calls of ~30 µs. Two plain matrices take the same products directly (the same calls on
# the same layouts: the same bits), with the single-threading the registered rule applies.
_matmul_frule = FRULES[np.matmul]


def _matmul_native(primals, tangents, lanes, kwargs):
    if not lanes and not kwargs and len(primals) == 2:
        a, b = primals
        da, db = tangents
        if type(a) is np.ndarray and type(b) is np.ndarray and a.ndim == 2 and b.ndim == 2 \
                and (da is None or type(da) is np.ndarray) \
                and (db is None or type(db) is np.ndarray):
            with small(a, b):
                return matrix_product_tangent(a, b, da, db)
    return _run_rule(np.matmul, FRULES[np.matmul], primals, tangents, lanes, kwargs)


_matmul_frule._mc_native = _matmul_native
