"""Rules for scipy.special functions that are not ufuncs (logsumexp, softmax, log_softmax,
polygamma, multigammaln).

The scipy.special *ufuncs* (expit, logit, erf, erfc, gammaln, digamma, xlogy, ndtr, log_ndtr)
dispatch through ``__array_ufunc__`` and get their rules from the derivative table. The
functions here do not dispatch (scipy converts its inputs with ``np.asarray``), so they are
wrapped as primitives and exposed as ``mooncake_py.special.*``.

The primals are written here with NumPy (max-shifted, as scipy does), so scipy is not needed;
they agree with scipy's to rounding. Inside the rules they run on the unwrapped values with
``np.`` calls only, so on dual numbers (second order) they need no further rule.

The frules are lane-aware: tangents carry k directions on a leading axis, and every tangent is a
weighted sum (or weighted centring) over ``axis`` shifted past it.
"""
import math
import operator

import numpy as np

from ..core import array_module as am
from ..errors import MissingRuleError
from . import derivative_table
from .broadcasting import shape_of, unbroadcast
from .lanes import align
from .reductions import dtype_of, expand_reduced, lane_axes, normalize_axis, slice_rank
from .registry import _has_wrapper, frule, primitive, rrule, stop_gradient, zero_derivative

__all__ = ["logsumexp", "softmax", "log_softmax", "polygamma", "multigammaln"]


def _shift(a, axis, shape=None):
    """(``a`` as a constant, its max over ``axis`` with kept dims and non-finite maxima as 0,
    where that max is finite).

    Subtracting the max keeps ``exp`` in range; being a constant it carries no derivative, and
    the result does not depend on it mathematically.
    """
    a = stop_gradient(a)
    if shape is not None:
        a = np.broadcast_to(a, shape)
    m = np.max(a, axis=axis, keepdims=True)
    finite = np.isfinite(m)
    return a, np.where(finite, m, 0), finite


def _lse_parts(a, axis, b, keepdims):
    """(log Σ b·exp(a - m), m): the shifted log-sum over ``axis`` and the shift ``m`` (kept
    dims), with ``np.`` calls on ``a`` and ``b``. Keeping them apart lets the pullback form
    exp((a - m) - shifted) without the rounding of the large unshifted result."""
    if b is None:
        ap, m, finite = _shift(a, axis)
        # One maximal entry's term exp(0) = 1 is taken out of the sum as expm1(a - m) (zero in
        # value, with the right derivative) and added back by log1p: log1p(rest) keeps full
        # relative precision when the other terms are tiny. Where the maximum is not finite
        # nothing is taken out, and log1p(rest - 1) = log(rest).
        top = slice_rank(am.asarray((ap == m) & finite), normalize_axis(axis, np.ndim(ap))) == 1
        rest = np.sum(np.where(top, np.expm1(a - m), np.exp(a - m)), axis=axis,
                      keepdims=keepdims)
        one = am.asarray(np.sum(top, axis=axis, keepdims=keepdims) - 1, dtype=dtype_of(rest))
        with np.errstate(divide="ignore"):
            return np.log1p(rest + one), m
    _, m, _ = _shift(a, axis, _full_shape(a, b))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(np.sum(b * np.exp(a - m), axis=axis, keepdims=keepdims)), m


def _lse(a, axis=None, b=None, keepdims=False):
    """log Σ b·exp(a) over ``axis``."""
    shifted, m = _lse_parts(a, axis, b, keepdims)
    return shifted + (m if keepdims else np.reshape(m, shape_of(shifted)))


def _full_shape(a, b):
    return shape_of(a) if b is None else np.broadcast_shapes(shape_of(a), shape_of(b))


@primitive
def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """``log(sum(b * exp(a), axis))`` computed stably; scipy.special.logsumexp's signature.

    Differentiable in ``a`` and in the weights ``b``, which may be negative with
    ``return_sign=True``: then the outputs are ``log|Σ b·exp(a)|``, differentiable wherever the
    sum is not zero, and the sign of the sum, a piecewise constant without a derivative.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> float(mp.special.logsumexp(np.log([1.0, 2.0, 3.0])))
        1.791759469228055
        >>> mp.grad(lambda x: mp.special.logsumexp(x))(np.log([1.0, 3.0]))
        array([0.25, 0.75])
        >>> mp.grad(lambda x: mp.special.logsumexp(x, b=[1.0, -1.0], return_sign=True)[0])(
        ...     np.log([3.0, 1.0]))
        array([ 1.5, -0.5])
    """
    if return_sign:
        return _lse_signed(a, axis, b, keepdims)
    return _lse(a, axis, b, keepdims)


def _lse_signed_parts(a, axis, b, keepdims):
    """(log|Σ b·exp(a)|, the sign of the sum, the shifted sum s = Σ b·exp(a - m) and the shift
    m, both with kept dims), with ``np.`` calls on ``a`` and ``b``."""
    _, m, _ = _shift(a, axis, None if b is None else _full_shape(a, b))
    s = np.sum(np.exp(a - m) if b is None else b * np.exp(a - m), axis=axis, keepdims=True)
    with np.errstate(divide="ignore"):
        out = np.log(np.abs(s)) + m
    sign = np.sign(stop_gradient(s))
    if not keepdims:
        shape = shape_of(np.sum(sign, axis=axis))
        out, sign = np.reshape(out, shape), np.reshape(sign, shape)
    return out, sign, s, m


def _lse_signed(a, axis, b, keepdims):
    out, sign, _, _ = _lse_signed_parts(a, axis, b, keepdims)
    return out, sign


def _lse_cotangents(needs, g, a, b, axis, keepdims, weights):
    """(ā, None, b̄, ...) of log|Σ b·exp(a)| for the cotangent ``g``, from ``weights(shape)``
    = exp(a)/Σ b·exp(a), the derivative in each b_i (times b_i: in each a_i)."""
    shape = _full_shape(a, b)
    gk = expand_reduced(g, shape, axis, keepdims)
    w = weights(shape)
    ga = gb = None
    if needs[0]:
        ga = unbroadcast(gk * (w if b is None else b * w), shape_of(a))
    if len(needs) > 2 and needs[2]:
        gb = unbroadcast(np.broadcast_to(gk * w, shape), shape_of(b))
    return (ga, None, gb, None, None)[:len(needs)]


def _signed_rule(needs, a, axis, b, keepdims):
    out, sign, s, m = _lse_signed_parts(a, axis, b, keepdims)
    # the sign is piecewise constant; the weights hold whatever the sign of s
    return (out, sign), lambda gs: _lse_cotangents(needs, gs[0], a, b, axis, keepdims,
                                                   lambda shape: np.exp(a - m) / s)


@rrule(logsumexp, needs=True)
def _logsumexp(needs, a, axis=None, b=None, keepdims=False, return_sign=False):
    if return_sign:
        return _signed_rule(needs, a, axis, b, keepdims)
    shifted, m = _lse_parts(a, axis, b, keepdims)
    y = shifted + (m if keepdims else np.reshape(m, shape_of(shifted)))

    def weights(shape):
        # exp(a - y) with y = m + shifted: the weights b·exp(a - y) sum to one along axis
        return np.exp((a - m) - expand_reduced(shifted, shape, axis, keepdims))
    return y, lambda g: _lse_cotangents(needs, g, a, b, axis, keepdims, weights)


def _bind(names, defaults, primals, tangents, kwargs):
    """The call's parameters by name (positional primals, then keywords) and the tangents by
    name (None where absent)."""
    p = dict(zip(names, defaults), **dict(zip(names, primals)), **kwargs)
    t = dict(zip(names, tangents))
    return p, t


_LSE = (("a", "axis", "b", "keepdims", "return_sign"), (None, None, None, False, False))


@frule(logsumexp, lanes=True)
def _logsumexp_frule(primals, tangents, **kwargs):
    p, t = _bind(*_LSE, primals, tangents, kwargs)
    a, axis, b, keepdims = p["a"], p["axis"], p["b"], p["keepdims"]
    if p["return_sign"]:
        return _signed_frule(a, axis, b, keepdims, t.get("a"), t.get("b"))
    shifted, m = _lse_parts(a, axis, b, keepdims)
    y = shifted + (m if keepdims else np.reshape(m, shape_of(shifted)))
    da, db = t.get("a"), t.get("b")
    if da is None and db is None:
        return y, None
    shape = _full_shape(a, b)
    e = np.exp((a - m) - expand_reduced(shifted, shape, axis, keepdims))
    return y, _lse_tangent(da, db, b, e, axis, keepdims, len(shape))


def _lse_tangent(da, db, b, w, axis, keepdims, nd):
    """Σ (b·da + db)·w over ``axis``: the tangent of log|Σ b·exp(a)| for the weights ``w`` =
    exp(a)/Σ b·exp(a). Lane-first tangents get singleton axes so that they broadcast against
    the full shape (of rank ``nd``)."""
    terms = None
    if da is not None:
        terms = align(da, nd) * (w if b is None else b * w)
    if db is not None:
        tb = align(db, nd) * w
        terms = tb if terms is None else terms + tb
    return np.sum(terms, axis=lane_axes(axis, nd), keepdims=keepdims)


def _signed_frule(a, axis, b, keepdims, da, db):
    out, sign, s, m = _lse_signed_parts(a, axis, b, keepdims)
    if da is None and db is None:
        return (out, sign), None
    dy = _lse_tangent(da, db, b, np.exp(a - m) / s, axis, keepdims, len(_full_shape(a, b)))
    return (out, sign), (dy, None)


def _softmax(x, axis):
    _, m, _ = _shift(x, axis)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


@primitive
def softmax(x, axis=None):
    """``exp(x) / sum(exp(x), axis)`` computed stably; scipy.special.softmax's signature.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> mp.special.softmax(np.log([1.0, 3.0]))
        array([0.25, 0.75])
    """
    return _softmax(x, axis)


@rrule(softmax, needs=True)
def _softmax_rule(needs, x, axis=None):
    s = _softmax(x, axis)
    return s, lambda g: (s * (g - np.sum(g * s, axis=axis, keepdims=True)), None)[:len(needs)]


@frule(softmax, lanes=True)
def _softmax_frule(primals, tangents, **kwargs):
    p, t = _bind(("x", "axis"), (None, None), primals, tangents, kwargs)
    x, axis, dx = p["x"], p["axis"], t["x"]
    s = _softmax(x, axis)
    if dx is None:
        return s, None
    ax = lane_axes(axis, len(shape_of(x)))
    return s, s * (dx - np.sum(s * dx, axis=ax, keepdims=True))


def _log_softmax(x, axis):
    return x - _lse(x, axis, None, True)


@primitive
def log_softmax(x, axis=None):
    """``x - logsumexp(x, axis, keepdims=True)``; scipy.special.log_softmax's signature.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> np.exp(mp.special.log_softmax(np.log([1.0, 3.0])))
        array([0.25, 0.75])
    """
    return _log_softmax(x, axis)


@rrule(log_softmax, needs=True)
def _log_softmax_rule(needs, x, axis=None):
    y = _log_softmax(x, axis)
    return y, lambda g: (g - np.exp(y) * np.sum(g, axis=axis, keepdims=True), None)[:len(needs)]


@frule(log_softmax, lanes=True)
def _log_softmax_frule(primals, tangents, **kwargs):
    p, t = _bind(("x", "axis"), (None, None), primals, tangents, kwargs)
    x, axis, dx = p["x"], p["axis"], t["x"]
    y = _log_softmax(x, axis)
    if dx is None:
        return y, None
    ax = lane_axes(axis, len(shape_of(x)))
    return y, dx - np.sum(np.exp(y) * dx, axis=ax, keepdims=True)


# --- polygamma, multigammaln -------------------------------------------------------------------
@primitive
def polygamma(n, x):
    """The n-th derivative of the digamma function at ``x``; scipy.special.polygamma.

    Differentiable in ``x`` to any order (its derivative is ``polygamma(n + 1, x)``); the order
    ``n`` is a constant. scipy is imported on the first call.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> round(float(mp.special.polygamma(1, 1.0)), 12)  # π²/6
        1.644934066848
        >>> round(float(mp.grad(lambda x: mp.special.polygamma(0, x))(1.0)), 12)
        1.644934066848
    """
    return am.scipy_special(x, "scipy.special.polygamma").polygamma(n, x)


derivative_table.POLYGAMMA[0] = polygamma


def _order_error(fn, param):
    return MissingRuleError(
        f"scipy.special.{fn} has no derivative with respect to its argument {param!r}, an "
        f"integer order: mooncake_py treats it as a constant. Pass a plain integer (or integer "
        "array) for it, or wrap it in mp.stop_gradient(...).")


@rrule(polygamma, needs=True)
def _polygamma(needs, n, x):
    if needs[0]:
        raise _order_error("polygamma", "n")
    y = polygamma(n, x)
    return y, lambda g: (None, unbroadcast(g * polygamma(n + 1, x), shape_of(x)))


@frule(polygamma, lanes=True)
def _polygamma_frule(primals, tangents, **kwargs):
    p, t = _bind(("n", "x"), (None, None), primals, tangents, kwargs)
    if t.get("n") is not None:
        raise _order_error("polygamma", "n")
    n, x, dx = p["n"], p["x"], t.get("x")
    y = polygamma(n, x)
    if dx is None:
        return y, None
    return y, align(dx, len(shape_of(y))) * polygamma(n + 1, x)


def multigammaln(a, d):
    """The log of the multivariate gamma function of dimension ``d``;
    scipy.special.multigammaln.

    ``log Γ_d(a) = d(d-1)/4·log π + Σ_{j<d} gammaln(a - j/2)``, written with the table's
    ``gammaln``: differentiable in ``a`` to any order; ``d`` is a positive integer constant.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> float(mp.special.multigammaln(3.0, 1))  # log Γ(3)
        0.6931471805599453
        >>> round(float(mp.grad(lambda a: mp.special.multigammaln(a, 2))(3.0)), 12)  # ψ(3)+ψ(2.5)
        1.625940975744
    """
    sps = derivative_table.load_scipy()
    if not _has_wrapper((a,), {}):
        return sps.multigammaln(a, d)
    d = operator.index(d)
    if d < 1:
        raise ValueError(f"multigammaln: the dimension d must be a positive integer, got {d}")
    if np.any(am.unwrap(a) <= 0.5 * (d - 1)):
        raise ValueError(f"condition a ({am.unwrap(a)}) > 0.5 * (d-1) ({0.5 * (d - 1)}) not met")
    out = sps.gammaln(a)
    for j in range(1, d):
        out = out + sps.gammaln(a - 0.5 * j)
    return out + 0.25 * d * (d - 1) * math.log(math.pi)


# --- betainc (a scipy.special ufunc of three inputs: rules of its own) -------------------------
def beta_density(sps, a, b, x):
    """∂I_x(a, b)/∂x = x^(a-1)·(1-x)^(b-1)/B(a, b), the beta density, with ``np.``/table calls
    only (xlogy keeps the edges x = 0, 1 finite where the exponent is 0), so it differentiates
    again. ``sps`` is scipy.special (this module does not import it).

    Example:
        >>> import scipy.special as sps
        >>> round(float(beta_density(sps, 2.0, 3.0, 0.5)), 12)   # 12·x(1-x)²
        1.5
    """
    return np.exp(sps.xlogy(a - 1.0, x) + sps.xlog1py(b - 1.0, -x) - sps.betaln(a, b))


def _betainc_shape_error(param):
    return MissingRuleError(
        f"scipy.special.betainc has no derivative with respect to its argument {param!r}: "
        "mooncake_py differentiates the regularised incomplete beta function I_x(a, b) in x "
        "only (the derivatives in a and b are series with no cheap accurate closed form). Pass "
        f"a plain number or array for {param!r}, or wrap it in mp.stop_gradient(...) if its "
        "derivative may be dropped.")


@derivative_table.on_scipy_load
def _register_gammasgn(sps):
    zero_derivative(sps.gammasgn)  # the sign of Γ: piecewise constant


@derivative_table.on_scipy_load
def _register_betainc(sps):
    betainc = sps.betainc

    @rrule(betainc, needs=True)
    def _betainc(needs, a, b, x, **kw):
        """I_x(a, b) in x: the pullback is ``g · x^(a-1)(1-x)^(b-1)/B(a, b)``.

        Example:
            >>> import numpy as np, mooncake_py as mp
            >>> float(mp.grad(lambda x: mp.special.betainc(2.0, 3.0, x))(0.5))  # 12·x(1-x)²
            1.5
        """
        for k, param in ((0, "a"), (1, "b")):
            if needs[k]:
                raise _betainc_shape_error(param)
        y = betainc(a, b, x, **kw)
        return y, lambda g: (None, None, unbroadcast(g * beta_density(sps, a, b, x),
                                                     shape_of(x)))

    @frule(betainc, lanes=True)
    def _betainc_f(primals, tangents, **kw):
        a, b, x = primals
        for k, param in ((0, "a"), (1, "b")):
            if tangents[k] is not None:
                raise _betainc_shape_error(param)
        y = betainc(a, b, x, **kw)
        dx = tangents[2]
        if dx is None:
            return y, None
        return y, align(dx, len(shape_of(y))) * beta_density(sps, a, b, x)
