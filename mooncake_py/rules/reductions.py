"""Reverse and forward rules for reductions: sum, mean, prod, max/min, var/std, cumsum/cumprod,
the nan* variants, np.linalg.norm, and the ufunc methods ``np.add.reduce`` & co.

Conventions of this module: each rule is written as ``(x, *params) -> (y, pullback)`` where the
pullback returns the cotangent of ``x`` alone; :func:`reduction_rule` registers it and pads the
cotangent tuple with ``None`` for the other positional arguments (``np.sum(x, 0)``). Masks (ties,
zeros, NaNs, ``where=``) are plain boolean arrays computed from comparisons, so every pullback is
made of differentiable ``np.`` calls on ``x``, ``y`` and ``g`` and runs unchanged on dual numbers.

Each frule sits next to its rrule, written as ``(x, dx, *params) -> (y, dy)`` and registered by
:func:`reduction_frule`. They are lane-aware: ``dx`` carries k directions on a leading axis, the
partial derivatives are computed once from the primal (shaped like ``x``, so they broadcast
against ``dx``) and the reduction runs over the axes shifted past the lane axis
(:func:`lane_axes`). Every tangent is thus ``Σ_axis dx · ∂y/∂x`` with the same zero-safe, tie-
splitting partials as the pullback, so frule and rrule agree exactly at kinks.
"""
import inspect

import numpy as np

from ..core import array_module as am
from ..core.array_ops import astype
from ..core.dispatch import WRAPPER_TYPES
from ..errors import MissingRuleError
from .broadcasting import shape_of
from .registry import FRULES, RRULES, composite, fn_name, frule, primitive


def normalize_axis(axis, ndim):
    """``axis`` (None, int or tuple, possibly negative) as a sorted tuple of non-negative ints."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)):
        axis = (axis,)
    return tuple(sorted(int(a) % ndim if ndim else 0 for a in axis))


def expand_reduced(g, shape, axis, keepdims):
    """Reshape a reduction's cotangent ``g`` so it broadcasts against the input's ``shape``."""
    if keepdims or axis is None or not shape:  # (axis=None: g is 0-d and broadcasts as is)
        return g
    axes = normalize_axis(axis, len(shape))
    kept = tuple(1 if i in axes else n for i, n in enumerate(shape))
    return np.reshape(g, kept)


def reduction_rule(*fns):
    """Register ``rule(x, *args, **kw) -> (y, pullback)``, whose pullback returns the cotangent of
    ``x`` alone, as the rrule of each of ``fns``; tracked values in the other positional slots
    (``np.max(x, initial=v)`` with ``v`` tracked) are refused with a MissingRuleError.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> @mp.primitive
        ... def total(x, axis=None):
        ...     return np.sum(x, axis=axis)
        >>> @reduction_rule(total)
        ... def _(x, axis=None):
        ...     return total(x, axis), lambda g: np.broadcast_to(g, np.shape(x))
        >>> mp.grad(lambda x: total(x, 0))(np.ones(2))
        array([1., 1.])
    """
    def register(rule):
        def internal(args, kwargs, needs):
            if len(needs) == 1:
                y, pb = rule(*args, **kwargs)
                return y, lambda g: (pb(g),)
            if any(needs[1:]):
                raise MissingRuleError(_tracked_param_message(fns[0], needs))
            y, pb = rule(*args, **kwargs)
            pad = (None,) * (len(needs) - 1)
            return y, lambda g: (pb(g),) + pad
        internal.__name__ = f"rrule({fn_name(fns[0])})"
        for fn in fns:
            RRULES[fn] = internal
        return rule
    return register


def _tracked_param_message(fn, needs, what="derivative", names=None):
    if names is None:
        try:
            names = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            names = []
    which = [names[i] if i < len(names) else f"#{i}" for i, n in enumerate(needs) if n and i]
    short = fn_name(fn).replace("numpy.", "np.")
    return (f"{short}: differentiating with respect to its argument(s) {', '.join(which)} is not "
            f"supported; only the array argument carries a {what}. Pass a constant there "
            f"(mp.stop_gradient(v)), or apply it outside the reduction, e.g. "
            f"np.maximum(np.max(x), v) instead of np.max(x, initial=v), or np.sum(x) + v "
            f"instead of np.sum(x, initial=v).")


def reduction_frule(*fns):
    """Register ``rule(x, dx, *args, **kw) -> (y, dy)`` as the lane-aware frule of each of
    ``fns``: ``dx`` has a leading lane axis and so must ``dy``. Tangents on the other positional
    arguments are refused as :func:`reduction_rule` refuses cotangents there; with no tangent on
    ``x`` the output carries none.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> @mp.primitive
        ... def total(x, axis=None):
        ...     return np.sum(x, axis=axis)
        >>> @reduction_frule(total)
        ... def _(x, dx, axis=None):
        ...     return total(x, axis), np.sum(dx, axis=lane_axes(axis, np.ndim(x)))
        >>> mp.jvp(lambda x: total(x, 0), (np.ones((2, 3)),), (np.ones((2, 3)),))[1]
        array([2., 2., 2.])
    """
    def register(rule):
        def internal(primals, tangents, **kwargs):
            if any(t is not None for t in tangents[1:]):
                raise MissingRuleError(_tracked_param_message(
                    fns[0], [t is not None for t in tangents], "tangent"))
            if tangents[0] is None:
                return fns[0](*primals, **kwargs), None
            return rule(primals[0], tangents[0], *primals[1:], **kwargs)
        internal.__name__ = f"frule({fn_name(fns[0])})"
        for fn in fns:
            frule(fn, lanes=True)(internal)
        return rule
    return register


def lane_axes(axis, ndim):
    """The axes of a lane-first tangent that correspond to a reduction of its ``ndim``-dimensional
    primal over ``axis`` (None, int or tuple): each shifted by one; none for a 0-d primal."""
    return tuple(a + 1 for a in normalize_axis(axis, ndim)) if ndim else ()


def _ufunc_method(key, fn, axis=0):
    """``np.add.reduce`` & co. take ``axis=0`` by default where the function takes ``None``."""
    def rule(args, kwargs, needs):
        return RRULES[fn](args, {"axis": axis, **kwargs}, needs)
    rule.__name__ = f"rrule({key[0].__name__}.{key[1]})"
    RRULES[key] = rule


# --- small helpers --------------------------------------------------------------------------
def dtype_of(x):
    """``x.dtype``, or NumPy's dtype for a Python number."""
    dt = getattr(x, "dtype", None)
    return dt if dt is not None else np.result_type(x)


def _const(v, like):
    """A plain constant (weights from masks and counts) with the floating dtype of ``like``;
    a scalar stays a scalar (device arrays accept it; a 0-d host array they would refuse)."""
    dt = dtype_of(like)
    if getattr(v, "ndim", 0) == 0 and am.device_module(v) is None:
        return dt.type(v)
    return am.asarray(v, dtype=dt)


def _like(gx, x):
    """Cast a cotangent back to ``x``'s dtype when ``dtype=`` changed the computation's."""
    return gx if dtype_of(gx) == dtype_of(x) else astype(gx, dtype_of(x))


_PLAIN_SCALARS = (np.float64, np.float32, np.float16)


def broadcast_cotangent(g, shape):
    """``np.broadcast_to(g, shape)``, read-only; a plain scalar ``g`` (the cotangent of a full
    reduction, the common case) takes a fast path that builds the zero-stride view directly."""
    if type(g) in _PLAIN_SCALARS or (type(g) is np.ndarray and g.ndim == 0):
        out = np.ndarray(shape, g.dtype, np.asarray(g), 0, (0,) * len(shape))
        out.setflags(write=False)  # (half the cost of setting flags.writeable)
        return out
    return np.broadcast_to(g, shape)


def _masked(gx, where):
    return gx if where is True else np.where(where, gx, 0)


def _size(shape, axes):
    n = 1
    for a in axes:
        n *= shape[a]
    return n


def _count(where, shape, axes):
    """Per reduced slice, how many entries ``where`` selects (plain int array, keepdims shape)."""
    return np.sum(np.broadcast_to(where, shape), axis=axes, keepdims=True)


def slice_rank(mask, axes):
    """For each True entry of a plain boolean ``mask``, its 1-based rank among the True entries
    of its reduced slice (C order over ``axes``); 0 where ``mask`` is False."""
    nd = mask.ndim
    if not axes:
        return mask.astype(np.intp)
    tail = tuple(range(nd - len(axes), nd))
    moved = np.moveaxis(mask, axes, tail)
    flat = np.reshape(moved, moved.shape[:nd - len(axes)] + (-1,))
    rank = np.reshape(np.cumsum(flat, axis=-1), moved.shape) * moved
    return np.moveaxis(rank, tail, axes)


def _revcumsum(v, axis):
    return np.flip(np.cumsum(np.flip(v, axis), axis), axis)


def _where_kw(kw, nan_of=None):
    """The effective ``where`` mask: the ``where=`` argument, and not-NaN for nan* functions."""
    where = kw.get("where", True)
    if nan_of is not None:
        notnan = ~np.isnan(nan_of)
        where = notnan if where is True else notnan & where
    return where


# --- sum, mean ------------------------------------------------------------------------------
def _sum_rule(np_fn, nan):
    def rule(x, axis=None, dtype=None, out=None, keepdims=False, **kw):
        y = np_fn(x, axis=axis, dtype=dtype, keepdims=keepdims, **kw)
        shape = shape_of(x)

        def pullback(g):
            gk = expand_reduced(g, shape, axis, keepdims)
            gx = _masked(broadcast_cotangent(gk, shape), _where_kw(kw, x if nan else None))
            return _like(gx, x)
        return y, pullback
    return rule


def _mean_rule(np_fn, nan):
    def rule(x, axis=None, dtype=None, out=None, keepdims=False, **kw):
        y = np_fn(x, axis=axis, dtype=dtype, keepdims=keepdims, **kw)
        shape = shape_of(x)

        def pullback(g):
            gk = expand_reduced(g, shape, axis, keepdims)
            where = _where_kw(kw, x if nan else None)
            axes = normalize_axis(axis, len(shape))
            if where is True:
                gx = broadcast_cotangent(gk / max(_size(shape, axes), 1), shape)
            else:
                # An empty slice has no entries to receive a cotangent; 1 avoids 0/0.
                inv = _const(1.0 / np.maximum(_count(where, shape, axes), 1), gk)
                gx = np.where(where, gk * inv, 0)
            return _like(gx, x)
        return y, pullback
    return rule


reduction_rule(np.sum)(_sum_rule(np.sum, nan=False))
reduction_rule(np.nansum)(_sum_rule(np.nansum, nan=True))
reduction_rule(np.mean)(_mean_rule(np.mean, nan=False))
reduction_rule(np.nanmean)(_mean_rule(np.nanmean, nan=True))


def _sum_frule(np_fn, nan):
    def rule(x, dx, axis=None, dtype=None, out=None, keepdims=False, **kw):
        y = np_fn(x, axis=axis, dtype=dtype, keepdims=keepdims, **kw)
        dx = _masked(dx, _where_kw(kw, x if nan else None))  # (initial= is a constant)
        return y, np.sum(dx, axis=lane_axes(axis, len(shape_of(x))), dtype=dtype,
                         keepdims=keepdims)
    return rule


def _mean_frule(np_fn, nan):
    def rule(x, dx, axis=None, dtype=None, out=None, keepdims=False, **kw):
        y = np_fn(x, axis=axis, dtype=dtype, keepdims=keepdims, **kw)
        shape = shape_of(x)
        where = _where_kw(kw, x if nan else None)
        ax = lane_axes(axis, len(shape))
        if where is True:
            return y, np.mean(dx, axis=ax, dtype=dtype, keepdims=keepdims)
        # Per slice Σ dx / count; an empty slice (y is NaN) gets 0, as its pullback sends 0.
        count = np.sum(np.broadcast_to(where, shape), axis=normalize_axis(axis, len(shape)),
                       keepdims=keepdims)
        total = np.sum(np.where(where, dx, 0), axis=ax, dtype=dtype, keepdims=keepdims)
        return y, total * _const(1.0 / np.maximum(count, 1), total)
    return rule


reduction_frule(np.sum)(_sum_frule(np.sum, nan=False))
reduction_frule(np.nansum)(_sum_frule(np.nansum, nan=True))
reduction_frule(np.mean)(_mean_frule(np.mean, nan=False))
reduction_frule(np.nanmean)(_mean_frule(np.nanmean, nan=True))


# --- prod -----------------------------------------------------------------------------------
def _prod_partials(x, yk, axes, kw):
    """∂ prod(x over axes) / ∂x, exact with zeros and with no division by a zero.

    No zeros: y / x. Otherwise, per slice, with z1 and z2 its first and second zeros and p1, p12
    the products leaving out z1, resp. z1 and z2: ∂/∂x_z1 = p1, ∂/∂x_z2 = x_z1 · p12, and for any
    nonzero x_k, ∂/∂x_k = x_z1 · p1 / x_k (zero in value). Written so, the partials also have the
    right derivatives themselves (second order through duals), as the closed forms do.
    """
    where = kw.get("where", True)
    if where is not True:
        x = np.where(where, x, 1)  # entries left out act as ones
    zero = am.asarray(x == 0)
    if not np.any(zero):
        d = yk / x
    else:
        pkw = {"initial": kw["initial"]} if "initial" in kw else {}
        rank = slice_rank(zero, axes)
        first, second = rank == 1, rank == 2
        nzero = np.sum(zero, axis=axes, keepdims=True)
        xs = np.where(zero, 1, x)
        p1 = np.prod(np.where(first, 1, x), axis=axes, keepdims=True, **pkw)
        p12 = np.prod(np.where(first | second, 1, x), axis=axes, keepdims=True, **pkw)
        z1 = np.sum(np.where(first, x, 0), axis=axes, keepdims=True)
        d = np.where(nzero == 0, yk / xs,
                     np.where(first, p1,
                              np.where(second, z1 * p12,
                                       np.where(zero, 0, z1 * p1 / xs))))
    return _masked(d, where)


def _prod_rule(np_fn, nan):
    def rule(x, axis=None, dtype=None, out=None, keepdims=False, **kw):
        y = np_fn(x, axis=axis, dtype=dtype, keepdims=keepdims, **kw)
        shape = shape_of(x)

        def pullback(g):
            axes = normalize_axis(axis, len(shape))
            k = dict(kw)
            if nan:
                k["where"] = _where_kw(kw, x)
            d = _prod_partials(x, expand_reduced(y, shape, axis, keepdims), axes, k)
            return _like(expand_reduced(g, shape, axis, keepdims) * d, x)
        return y, pullback
    return rule


reduction_rule(np.prod)(_prod_rule(np.prod, nan=False))
reduction_rule(np.nanprod)(_prod_rule(np.nanprod, nan=True))


def _prod_frule(np_fn, nan):
    """Σ_i dx_i Π_{j≠i} x_j with the pullback's zero-safe partials."""
    def rule(x, dx, axis=None, dtype=None, out=None, keepdims=False, **kw):
        y = np_fn(x, axis=axis, dtype=dtype, keepdims=keepdims, **kw)
        shape = shape_of(x)
        k = dict(kw)
        if nan:
            k["where"] = _where_kw(kw, x)
        d = _prod_partials(x, expand_reduced(y, shape, axis, keepdims),
                           normalize_axis(axis, len(shape)), k)
        return y, np.sum(dx * d, axis=lane_axes(axis, len(shape)), keepdims=keepdims)
    return rule


reduction_frule(np.prod)(_prod_frule(np.prod, nan=False))
reduction_frule(np.nanprod)(_prod_frule(np.nanprod, nan=True))


# --- max, min -------------------------------------------------------------------------------
def _extremum_rule(np_fn, nan):
    """max/min: the cotangent goes to the entries equal to the result, split equally among ties
    (a NaN result, or an ``initial`` larger than every entry, sends nothing to ``x``)."""
    def rule(x, axis=None, out=None, keepdims=False, **kw):
        y = np_fn(x, axis=axis, keepdims=keepdims, **kw)
        shape = shape_of(x)

        def pullback(g):
            w = _extremum_weights(x, y, axis, keepdims, kw, nan)
            return expand_reduced(g, shape, axis, keepdims) * w
        return y, pullback
    return rule


def _extremum_weights(x, y, axis, keepdims, kw, nan):
    """1/count on the entries of ``x`` equal to their slice's extremum ``y`` (among those
    ``where=`` selects and, for nan*, not NaN), 0 elsewhere: a plain constant shaped like x."""
    shape = shape_of(x)
    hit = am.asarray(x == expand_reduced(y, shape, axis, keepdims))
    where = _where_kw(kw, x if nan else None)
    if where is not True:
        hit = hit & where
    axes = normalize_axis(axis, len(shape))
    return _const(hit / np.maximum(np.sum(hit, axis=axes, keepdims=True), 1), x)


def _extremum_frule(np_fn, nan):
    """The average of the tangents at the tied extrema (the pullback's equal split)."""
    def rule(x, dx, axis=None, out=None, keepdims=False, **kw):
        y = np_fn(x, axis=axis, keepdims=keepdims, **kw)
        w = _extremum_weights(x, y, axis, keepdims, kw, nan)
        return y, np.sum(dx * w, axis=lane_axes(axis, len(shape_of(x))), keepdims=keepdims)
    return rule


for _fns, _np_fn, _nan in [((np.max, np.amax), np.max, False), ((np.min, np.amin), np.min, False),
                           ((np.nanmax,), np.nanmax, True), ((np.nanmin,), np.nanmin, True)]:
    reduction_rule(*_fns)(_extremum_rule(_np_fn, _nan))
    reduction_frule(*_fns)(_extremum_frule(_np_fn, _nan))


# --- var, std -------------------------------------------------------------------------------
def _centered_scale(x, axis, ddof, kw, where):
    """``x - mean`` and ``1 / (N - ddof)`` per slice (N: entries selected by ``where``)."""
    shape = shape_of(x)
    axes = normalize_axis(axis, len(shape))
    ddof = kw.get("correction", ddof)
    if "mean" in kw:  # a user-supplied mean is a constant of the computation
        m = kw["mean"]
    elif where is True:
        m = np.mean(x, axis=axis, keepdims=True)
    else:
        m = np.mean(x, axis=axis, keepdims=True, where=where)
    if where is True:
        dof = _size(shape, axes) - ddof
        return x - m, (1.0 / dof if dof > 0 else np.inf)
    dof = _count(where, shape, axes) - ddof
    with np.errstate(divide="ignore"):
        return np.where(where, x - m, 0), _const(np.where(dof > 0, 1.0 / dof, np.inf), x)


def _var_rule(np_fn, nan, root):
    def rule(x, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kw):
        y = np_fn(x, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims, **kw)
        shape = shape_of(x)

        def pullback(g):
            where = _where_kw(kw, x if nan else None)
            c, scale = _centered_scale(x, axis, ddof, kw, where)
            gk = expand_reduced(g, shape, axis, keepdims)
            if not root:
                gx = gk * c * (2 * scale)
            else:
                # d std = (x - m) / ((N - ddof) std); a constant slice (std = 0) gets zero.
                yk = expand_reduced(y, shape, axis, keepdims)
                flat = am.asarray(yk == 0)
                gx = np.where(flat, 0, gk * c * scale / np.where(flat, 1, yk))
            return _like(_masked(gx, where), x)
        return y, pullback
    return rule


reduction_rule(np.var)(_var_rule(np.var, nan=False, root=False))
reduction_rule(np.nanvar)(_var_rule(np.nanvar, nan=True, root=False))
reduction_rule(np.std)(_var_rule(np.std, nan=False, root=True))
reduction_rule(np.nanstd)(_var_rule(np.nanstd, nan=True, root=True))


def _var_frule(np_fn, nan, root):
    """d var = 2 Σ (x - m)·dx / (N - ddof) (the mean's own change drops out, as Σ (x - m) = 0;
    with a constant ``mean=`` it is not varied); d std = d var / (2 std), 0 where std = 0."""
    def rule(x, dx, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kw):
        y = np_fn(x, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims, **kw)
        c, scale = _centered_scale(x, axis, ddof, kw, _where_kw(kw, x if nan else None))
        cs = c * scale
        if dtype_of(x).kind == "c":  # var = mean |x - m|²: 2 Re Σ conj(x - m)·dx / (N - ddof)
            s = np.sum(np.real(np.conjugate(cs) * dx), axis=lane_axes(axis, len(shape_of(x))),
                       keepdims=keepdims)
        else:
            s = np.sum(dx * cs, axis=lane_axes(axis, len(shape_of(x))), keepdims=keepdims)
        if not root:
            return y, 2 * s
        flat = am.asarray(y == 0)
        return y, np.where(flat, 0, s / np.where(flat, 1, y))
    return rule


reduction_frule(np.var)(_var_frule(np.var, nan=False, root=False))
reduction_frule(np.nanvar)(_var_frule(np.nanvar, nan=True, root=False))
reduction_frule(np.std)(_var_frule(np.std, nan=False, root=True))
reduction_frule(np.nanstd)(_var_frule(np.nanstd, nan=True, root=True))


# --- cumsum, cumprod ------------------------------------------------------------------------
def _scan_axis(x, axis):
    """(values scanned, axis): ``axis=None`` scans the flattened array."""
    if axis is None:
        return np.reshape(x, (-1,)), 0
    return x, axis


def _cumsum_rule(nan):
    def rule(x, axis=None, dtype=None, out=None):
        y = (np.nancumsum if nan else np.cumsum)(x, axis=axis, dtype=dtype)
        shape = shape_of(x)

        def pullback(g):
            gx = np.reshape(_revcumsum(g, 0 if axis is None else axis), shape)
            return _like(np.where(np.isnan(x), 0, gx) if nan else gx, x)
        return y, pullback
    return rule


reduction_rule(np.cumsum)(_cumsum_rule(nan=False))
reduction_rule(np.nancumsum)(_cumsum_rule(nan=True))


def _lane_scan_axis(dx, axis, ndim):
    """(lane-first tangent scanned, its axis): ``axis=None`` (or a 0-d primal, which NumPy scans
    as one entry) flattens each lane."""
    if axis is None or ndim == 0:
        return np.reshape(dx, (shape_of(dx)[0], -1)), 1
    return dx, int(axis) % ndim + 1


def _cumsum_frule(nan):
    def rule(x, dx, axis=None, dtype=None, out=None):
        y = (np.nancumsum if nan else np.cumsum)(x, axis=axis, dtype=dtype)
        if nan:
            dx = np.where(np.isnan(x), 0, dx)
        dxs, ax = _lane_scan_axis(dx, axis, len(shape_of(x)))
        return y, np.cumsum(dxs, axis=ax, dtype=dtype)
    return rule


reduction_frule(np.cumsum)(_cumsum_frule(nan=False))
reduction_frule(np.nancumsum)(_cumsum_frule(nan=True))


def _cumprod_vjp(x, y, g, ax):
    """Σ_{i≥k} g_i ∂y_i/∂x_k for y = cumprod(x) along ``ax``, exact with zeros.

    With z1, z2 the first two zeros of a slice and c1, c2 the cumulative products that leave
    out x_z1, resp. x_z1 and x_z2: before z1 it is revcumsum(g·y)_k / x_k; at z1,
    revcumsum(g·c1); between z1 and z2, x_z1 · revcumsum(g·c1)_k / x_k; at z2,
    x_z1 · revcumsum(g·c2); after z2, 0. The factors x_z1 (zero in value) keep the formula's
    own derivatives right, for second order through duals.
    """
    rs = _revcumsum(g * y, ax)
    zero = am.asarray(x == 0)
    if not np.any(zero):
        return rs / x
    seen = np.cumsum(zero, axis=ax)
    before, first, second = seen == 0, zero & (seen == 1), zero & (seen == 2)
    between = (seen == 1) & ~zero
    xz1 = np.cumsum(np.where(first, x, 0), axis=ax)  # x_z1 from z1 on, 0 before
    r1 = _revcumsum(g * np.cumprod(np.where(first, 1, x), axis=ax), ax)
    r2 = _revcumsum(g * np.cumprod(np.where(first | second, 1, x), axis=ax), ax)
    xs = np.where(before | between, x, 1)
    return np.where(before, rs / xs,
                    np.where(first, r1,
                             np.where(between, xz1 * r1 / xs,
                                      np.where(second, xz1 * r2, 0))))


def _cumprod_rule(nan):
    def rule(x, axis=None, dtype=None, out=None):
        y = (np.nancumprod if nan else np.cumprod)(x, axis=axis, dtype=dtype)
        shape = shape_of(x)

        def pullback(g):
            xs, ax = _scan_axis(x, axis)
            if nan:
                notnan = ~np.isnan(xs)
                gx = np.where(notnan, _cumprod_vjp(np.where(notnan, xs, 1), y, g, ax), 0)
            else:
                gx = _cumprod_vjp(xs, y, g, ax)
            return _like(np.reshape(gx, shape), x)
        return y, pullback
    return rule


reduction_rule(np.cumprod)(_cumprod_rule(nan=False))
reduction_rule(np.nancumprod)(_cumprod_rule(nan=True))


def _cumprod_jvp(x, y, dx, ax):
    """Σ_{j≤i} dx_j ∂y_i/∂x_j for y = cumprod(x) along ``ax``, exact with zeros; ``dx`` is
    lane-first (scanned along ``ax + 1``).

    With q the running sum of dx_j / x_j over the nonzero entries, z1 and z2 the first two zeros
    and c1, c12 the running products that leave out x_z1, resp. x_z1 and x_z2: before z1 it is
    y·q; from z1 on, c1·(dx_z1 + x_z1·q); from z2 on, c12·(dx_z1·x_z2 + dx_z2·x_z1); from a
    third zero on, 0. As in :func:`_cumprod_vjp`, terms with a single zero factor are kept (zero
    in value, with the right derivatives) and those with two or more are dropped.
    """
    la = ax + 1
    zero = am.asarray(x == 0)
    if not np.any(zero):
        return y * np.cumsum(dx / x, axis=la)
    seen = np.cumsum(zero, axis=ax)
    first, second = zero & (seen == 1), zero & (seen == 2)
    q = np.cumsum(np.where(zero, 0, dx / np.where(zero, 1, x)), axis=la)
    xz1 = np.cumsum(np.where(first, x, 0), axis=ax)  # x_z1 from z1 on, 0 before
    xz2 = np.cumsum(np.where(second, x, 0), axis=ax)
    dz1 = np.cumsum(np.where(first, dx, 0), axis=la)
    dz2 = np.cumsum(np.where(second, dx, 0), axis=la)
    c1 = np.cumprod(np.where(first, 1, x), axis=ax)
    c12 = np.cumprod(np.where(first | second, 1, x), axis=ax)
    return np.where(seen == 0, y * q,
                    np.where(seen == 1, c1 * (dz1 + xz1 * q),
                             np.where(seen == 2, c12 * (dz1 * xz2 + dz2 * xz1), 0)))


def _cumprod_frule(nan):
    def rule(x, dx, axis=None, dtype=None, out=None):
        y = (np.nancumprod if nan else np.cumprod)(x, axis=axis, dtype=dtype)
        nd = len(shape_of(x))
        xs, ax = _scan_axis(x, axis) if nd else (np.reshape(x, (-1,)), 0)
        dxs, _ = _lane_scan_axis(dx, axis, nd)
        if nan:
            notnan = ~np.isnan(xs)
            xs, dxs = np.where(notnan, xs, 1), np.where(notnan, dxs, 0)
        return y, _cumprod_jvp(xs, y, dxs, int(ax) % max(len(shape_of(xs)), 1))
    return rule


reduction_frule(np.cumprod)(_cumprod_frule(nan=False))
reduction_frule(np.nancumprod)(_cumprod_frule(nan=True))


# --- ufunc methods --------------------------------------------------------------------------
_ufunc_method((np.add, "reduce"), np.sum)
_ufunc_method((np.multiply, "reduce"), np.prod)
_ufunc_method((np.maximum, "reduce"), np.max)
_ufunc_method((np.minimum, "reduce"), np.min)
_ufunc_method((np.add, "accumulate"), np.cumsum)
_ufunc_method((np.multiply, "accumulate"), np.cumprod)

_METHOD_PARAMS = {"reduce": ("axis", "dtype", "out", "keepdims", "initial", "where"),
                  "accumulate": ("axis", "dtype", "out")}


def _ufunc_method_frule(key, fn):
    """The frule of ``ufunc.method`` as ``fn``'s, with the method's positional parameters named
    (their order differs from ``np.max``'s) and its default ``axis=0``."""
    names = _METHOD_PARAMS[key[1]]

    def rule(primals, tangents, **kwargs):
        if any(t is not None for t in tangents[1:]):
            raise MissingRuleError(_tracked_param_message(
                key, [t is not None for t in tangents], "tangent", ("array",) + names))
        kw = dict(zip(names, primals[1:]), **kwargs)
        kw.setdefault("axis", 0)
        for k in ("out",) + (("dtype",) if fn in (np.max, np.min) else ()):
            if k in kw and kw[k] is None:
                del kw[k]
        return FRULES[fn]([primals[0]], [tangents[0]], **kw)
    rule.__name__ = f"frule({key[0].__name__}.{key[1]})"
    frule(key, lanes=True)(rule)


for _key, _fn in [((np.add, "reduce"), np.sum), ((np.multiply, "reduce"), np.prod),
                  ((np.maximum, "reduce"), np.max), ((np.minimum, "reduce"), np.min),
                  ((np.add, "accumulate"), np.cumsum), ((np.multiply, "accumulate"), np.cumprod)]:
    _ufunc_method_frule(_key, _fn)


# --- np.linalg.norm -------------------------------------------------------------------------
def _split_ties(v, target, axes):
    """Weights 1/count on the entries of ``v`` equal to ``target`` in their slice, else 0."""
    hit = am.asarray(v == target)
    return hit / np.maximum(np.sum(hit, axis=axes, keepdims=True), 1)


def _safe(v):
    """``v`` with zeros replaced by ones, for divisions whose numerator vanishes there."""
    return np.where(am.asarray(v == 0), 1, v)


def unbounded_curvature(x, at):
    """Zeros shaped like ``x`` whose derivative is nan where ``at`` (a plain boolean mask).

    Added to a partial derivative that is continuous at a point where its own derivative is
    unbounded (``x/‖x‖`` at ``x = 0``), it changes no gradient, but a Hessian there comes out
    nan, as the truth (and JAX) says, instead of the finite value of the zero-safe formula.

    Example:
        >>> import numpy as np
        >>> unbounded_curvature(np.ones(2), np.array([True, False]))
        array([0., 0.])
    """
    return np.zeros_like(x)


unbounded_curvature = primitive(unbounded_curvature)


@frule(unbounded_curvature)
def _unbounded_curvature_frule(primals, tangents):
    x, at = primals
    tx = tangents[0]
    y = np.zeros_like(x)
    return y, None if tx is None else np.where(at, np.nan, 0.0) * tx


def _vector_norm_partials(x, yk, ord, axes):
    """∂‖x‖_ord / ∂x over ``axes`` (``yk``: the norm, broadcastable against ``x``)."""
    if ord is None or ord == 2:
        at0 = am.asarray(yk == 0)
        d = x / _safe(yk)
        if at0.any():  # x/‖x‖ is bounded at 0 (gradient 0 there), its derivative is not
            d = d + unbounded_curvature(x, np.broadcast_to(at0, shape_of(x)))
        return d
    if ord == 1:
        return np.sign(x)
    if ord == 0:
        return None  # a count of nonzeros: locally constant
    a = np.abs(x)
    if ord == np.inf or ord == -np.inf:
        pick = np.max if ord > 0 else np.min
        return np.sign(x) * _const(_split_ties(a, pick(a, axis=axes, keepdims=True), axes), x)
    # (|x_k| / ‖x‖)^(p-1) sign(x_k); entries at 0 get 0 (for p < 1 the derivative is infinite).
    at0 = am.asarray(x == 0)
    return np.where(at0, 0, np.sign(x) * (np.where(at0, 1, a) / _safe(yk)) ** (ord - 1))


def _matrix_norm(x, ord, axes, keepdims):
    """(y, partials) for the matrix norms over the axis pair ``axes``: ``partials()`` is ∂y/∂x,
    shaped like ``x`` (computed on demand, by the pullback or the frule)."""
    r, c = axes
    shape = shape_of(x)
    if ord in ("nuc", 2, -2):
        u, s, vt = np.linalg.svd(np.moveaxis(x, (r, c), (-2, -1)), full_matrices=False)
        rc = (r % len(shape), c % len(shape))
        out_shape = tuple(1 if i in rc else n for i, n in enumerate(shape)
                          if keepdims or i not in rc)
        k = {2: 0, -2: -1}.get(ord)
        y = np.reshape(np.sum(s, axis=-1) if k is None else s[..., k], out_shape)

        def partials():
            # (complex: vt is Vᴴ, and ∂σ = u vᴴ for the inner product Re Σ conj(a)·b)
            if k is None:  # d Σσ = U Vᵀ (a subgradient when rank-deficient)
                d = np.matmul(u, vt)
            else:          # d σ_k = u_k v_kᵀ
                sl = slice(k, k + 1 or None)
                d = u[..., :, sl] * vt[..., sl, :]
            return np.moveaxis(d, (-2, -1), (r, c))
        return y, partials
    y = np.linalg.norm(x, ord, axes, keepdims)
    if ord in (1, -1, np.inf, -np.inf):
        # 1: max over columns of the column sums |x| (sum over rows); inf: rows and columns swap.
        s_ax, m_ax = (r, c) if ord in (1, -1) else (c, r)
        def partials():
            sums = np.sum(np.abs(x), axis=s_ax, keepdims=True)
            target = (np.max if ord > 0 else np.min)(sums, axis=m_ax, keepdims=True)
            return np.sign(x) * _const(_split_ties(sums, target, m_ax), x)
        return y, partials
    # "fro" (and None): the 2-norm of the entries.
    return y, lambda: x / _safe(expand_reduced(y, shape, axes, keepdims))


def _norm_axis(axis, ord, nd):
    """``axis`` as NumPy reads it: a tuple, or (0, 1) for a matrix given an ``ord``; or None."""
    if isinstance(axis, (int, np.integer)):
        return (int(axis),)
    if axis is None and ord is not None and nd == 2:
        return (0, 1)
    return None if axis is None else tuple(axis)


@reduction_rule(np.linalg.norm)
def _norm(x, ord=None, axis=None, keepdims=False):
    shape = shape_of(x)
    nd = len(shape)
    axis = _norm_axis(axis, ord, nd)
    if axis is not None and len(axis) == 2:
        y, partials = _matrix_norm(x, ord, axis, keepdims)
        return y, lambda g: expand_reduced(g, shape, axis, keepdims) * partials()
    y = np.linalg.norm(x, ord, axis, keepdims)
    axes = normalize_axis(axis, nd)

    def pullback(g):
        d = _vector_norm_partials(x, expand_reduced(y, shape, axes, keepdims), ord, axes)
        return None if d is None else expand_reduced(g, shape, axes, keepdims) * d
    return y, pullback


@reduction_frule(np.linalg.norm)
def _norm_frule(x, dx, ord=None, axis=None, keepdims=False):
    """Σ dx · ∂‖x‖/∂x over the normed axes, with the pullback's partials (an SVD of the primal
    for the nuclear and spectral norms)."""
    shape = shape_of(x)
    nd = len(shape)
    axis = _norm_axis(axis, ord, nd)
    if axis is not None and len(axis) == 2:
        y, partials = _matrix_norm(x, ord, axis, keepdims)
        d = partials()
    else:
        y = np.linalg.norm(x, ord, axis, keepdims)
        axes = normalize_axis(axis, nd)
        d = _vector_norm_partials(x, expand_reduced(y, shape, axes, keepdims), ord, axes)
        if d is None:  # ord=0 counts nonzeros: locally constant
            return y, None
    if d.dtype.kind == "c":  # ẏ = ⟨∂y, ẋ⟩ = Re Σ conj(∂y)·ẋ: C as R²
        return y, np.sum(np.real(np.conjugate(d) * dx), axis=lane_axes(axis, nd),
                         keepdims=keepdims)
    return y, np.sum(dx * d, axis=lane_axes(axis, nd), keepdims=keepdims)


# --- by composition: median, average, ptp ---------------------------------------------------
# Built from sort, take, sum, max and min, whose rules exist, so every mode (and second order)
# follows with no rule of their own.
def _single_axis(fn, axis, ndim):
    if axis is not None and not isinstance(axis, (int, np.integer)):
        raise MissingRuleError(f"{fn}: differentiating with axis={axis!r} (several axes) is not "
                               "supported; reduce one axis at a time.")
    return None if axis is None else int(axis) % max(ndim, 1)


@composite(np.median)
def _median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    nd = len(shape_of(a))
    ax = _single_axis("np.median", axis, nd)
    s = np.sort(a, axis=ax)                       # axis=None sorts the flattened array
    along = -1 if ax is None else ax
    n = shape_of(s)[along]
    mid = [(n - 1) // 2] if n % 2 else [n // 2 - 1, n // 2]
    r = np.mean(np.take(s, mid, axis=along), axis=along)
    if keepdims:
        r = np.reshape(r, (1,) * nd) if ax is None else np.expand_dims(r, ax)
    return r


@composite(np.average)
def _average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    if weights is None:
        avg = np.mean(a, axis=axis, keepdims=keepdims)
        if not returned:
            return avg
        count = np.size(a) // max(np.size(avg), 1)
        return avg, np.full_like(avg, count) if np.ndim(avg) else avg * 0 + count
    nd = len(shape_of(a))
    w = weights
    if len(shape_of(w)) == 1 and nd > 1:  # 1-D weights along ``axis``
        ax = _single_axis("np.average", axis, nd)
        w = np.reshape(w, tuple(-1 if i == ax else 1 for i in range(nd)))
        w = np.broadcast_to(w, shape_of(a))
    wsum = np.sum(w, axis=axis, keepdims=keepdims)
    avg = np.sum(a * w, axis=axis, keepdims=keepdims) / wsum
    return (avg, wsum) if returned else avg


@composite(np.ptp)
def _ptp(a, axis=None, out=None, keepdims=False):
    return np.max(a, axis=axis, keepdims=keepdims) - np.min(a, axis=axis, keepdims=keepdims)


def _quantile_linear(fn, a, q, axis, keepdims, method):
    """Quantiles with NumPy's default 'linear' method: between the order statistics around
    q·(n-1), weighted by the fractional part (the weights are constants: q is not tracked)."""
    if method != "linear":
        raise MissingRuleError(f"{fn}: only method='linear' (the default) is differentiated; "
                               f"got method={method!r}.")
    if type(q) in WRAPPER_TYPES:
        raise MissingRuleError(f"{fn}: differentiating with respect to q is not supported; pass "
                               "q as a constant.")
    nd = len(shape_of(a))
    ax = _single_axis(fn, axis, nd)
    s = np.sort(a, axis=ax)
    along = -1 if ax is None else ax
    n = shape_of(s)[along]
    qs = np.asarray(q, dtype=np.float64)
    pos = qs * (n - 1)
    lo = np.floor(pos).astype(np.intp)
    hi = np.minimum(lo + 1, n - 1)
    frac = (pos - lo).astype(dtype_of(a))
    lo_v = np.moveaxis(np.take(s, np.ravel(lo), axis=along), along, 0)
    hi_v = np.moveaxis(np.take(s, np.ravel(hi), axis=along), along, 0)
    fr = np.reshape(np.ravel(frac), (-1,) + (1,) * (len(shape_of(lo_v)) - 1))
    r = lo_v + (hi_v - lo_v) * fr            # (number of q, rest of the axes)
    if keepdims:
        r = (np.reshape(r, (r.shape[0],) + (1,) * nd) if ax is None
             else np.expand_dims(r, ax + 1))
    return np.reshape(r, qs.shape + tuple(shape_of(r)[1:]))


@composite(np.quantile)
def _quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
              keepdims=False, **kw):
    return _quantile_linear("np.quantile", a, q, axis, keepdims, method)


@composite(np.percentile)
def _percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                keepdims=False, **kw):
    return _quantile_linear("np.percentile", a, np.true_divide(q, 100), axis, keepdims, method)
