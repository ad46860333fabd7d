"""Interpolation and evaluation of fixed-form functions: np.interp, np.sinc, and polynomials
(np.polyval, np.polyadd, np.polysub, np.polymul, np.polyder, np.polyint).

np.interp and np.polyval are :func:`~.registry.composite`: np.interp locates each ``x`` among
the sample points with ``np.searchsorted`` (a constant) and then evaluates NumPy's own formula
``fp[j] + (fp[j+1] - fp[j]) / (xp[j+1] - xp[j]) · (x - xp[j])`` with differentiable gathers, so
``x``, ``xp`` and ``fp`` (and ``left``/``right``) are all differentiable; np.polyval is Horner's
scheme, differentiable in the coefficients and in ``x``.

np.sinc has rules: its derivatives of every order are :func:`sinc_derivative`, a primitive whose
own rules call it with the next order, so ``sinc'(0) = 0`` and ``sinc''(0) = -π²/3`` come out as
the limits they are instead of 0/0.

The polynomial arithmetic functions are composites of padding, ``+``/``-``, np.convolve and
products with constant ``arange``s, differentiable in every coefficient. (They return arrays;
for np.poly1d inputs NumPy returns a poly1d, which cannot hold tracked coefficients.)

Example:
    >>> import numpy as np, mooncake_py as mp
    >>> xp, fp = np.array([0.0, 1.0, 3.0]), np.array([0.0, 2.0, 3.0])
    >>> mp.grad(lambda x: np.sum(np.interp(x, xp, fp)))(np.array([0.5, 2.0]))
    array([2. , 0.5])
    >>> mp.grad(lambda p: np.polyval(p, 2.0))(np.array([1.0, 0.0, 3.0]))
    array([4., 2., 1.])
    >>> print(round(float(mp.hessian(lambda x: np.sinc(x[0]))(np.zeros(1))[0, 0]), 6))
    -3.289868
"""
import math
import warnings

import numpy as np

from ..core import array_module as am
from ..errors import MissingRuleError
from .broadcasting import shape_of
from .differences import as_array
from .registry import composite, frule, primitive, rrule


# --- np.interp ------------------------------------------------------------------------------------
@composite(np.interp)
def _interp(x, xp, fp, left=None, right=None, period=None):
    """Piecewise-linear interpolation; at a sample point the derivative in ``x`` is the slope
    of the segment to its right (of the last segment at ``xp[-1]``)."""
    x, xp, fp = as_array(x), as_array(xp), as_array(fp)
    if len(shape_of(xp)) != 1 or len(shape_of(fp)) != 1:
        raise ValueError("Data points must be 1D sequences")
    if shape_of(xp)[0] != shape_of(fp)[0]:
        raise ValueError("fp and xp are not of the same length.")
    if shape_of(xp)[0] == 0:
        raise ValueError("array of sample points is empty")
    if period is not None:
        if period == 0:
            raise ValueError("period must be a non-zero value")
        period = abs(period)
        left = right = None
        x, xp = np.remainder(x, period), np.remainder(xp, period)
        order = np.argsort(xp)
        xp, fp = np.take(xp, order), np.take(fp, order)
        xp = np.concatenate([xp[-1:] - period, xp, xp[0:1] + period])
        fp = np.concatenate([fp[-1:], fp, fp[0:1]])
    n = shape_of(xp)[0]
    if n == 1:
        y = np.broadcast_to(fp[0], shape_of(x))
    else:
        j = np.clip(np.searchsorted(xp, x, side="right") - 1, 0, n - 2)
        x0, f0 = np.take(xp, j), np.take(fp, j)
        slope = (np.take(fp, j + 1) - f0) / (np.take(xp, j + 1) - x0)
        y = slope * (x - x0) + f0
        # NumPy returns the sample value exactly at the last sample point
        y = np.where(x == xp[-1], fp[-1], y)
    y = np.where(x < xp[0], fp[0] if left is None else left, y)
    y = np.where(x > xp[-1], fp[-1] if right is None else right, y)
    return y


# --- np.polyval -----------------------------------------------------------------------------------
@composite(np.polyval)
def _polyval(p, x):
    """Horner's scheme ``y = y·x + p[i]``, the operations NumPy performs."""
    if isinstance(p, np.poly1d):
        p = p.coeffs
    p, x = as_array(p), as_array(x)
    y = np.zeros_like(x)
    for i in range(shape_of(p)[0]):
        y = y * x + p[i]
    return y


# --- np.polyfit -----------------------------------------------------------------------------------
@composite(np.polyfit)
def _polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
    """NumPy's own least squares, step by step: the Vandermonde matrix (weighted by ``w``), its
    columns scaled to unit norm, np.linalg.lstsq, and the scale divided out. Every step has a
    rule, so the coefficients differentiate in ``x``, ``y`` and ``w``, to every order (the
    lstsq rules assume full column rank, which polyfit also needs for a unique fit).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> x = np.array([0.0, 1.0, 2.0, 3.0])
        >>> mp.grad(lambda y: np.polyfit(x, y, 1)[0])(np.array([1.0, 2.0, 2.0, 4.0]))
        array([-0.3, -0.1,  0.1,  0.3])
    """
    if full or cov:
        raise MissingRuleError(
            f"np.polyfit with {'full=True' if full else 'cov=' + repr(cov)} has no rule in "
            "mooncake_py: only the coefficients (full=False, cov=False) are differentiated. For "
            "the residuals, compute them from the fit: r = y - np.polyval(p, x); for the "
            "covariance, from the scaled Vandermonde matrix (np.linalg.inv(V.T @ V) * "
            "np.sum(r ** 2) / (len(x) - deg - 1)).")
    order = int(deg) + 1
    x, y = as_array(x) + 0.0, as_array(y) + 0.0
    if deg < 0:
        raise ValueError("expected deg >= 0")
    if len(shape_of(x)) != 1:
        raise TypeError("expected 1D vector for x")
    if shape_of(x)[0] == 0:
        raise TypeError("expected non-empty vector for x")
    if len(shape_of(y)) not in (1, 2):
        raise TypeError("expected 1D or 2D array for y")
    if shape_of(x)[0] != shape_of(y)[0]:
        raise TypeError("expected x and y to have same length")
    if rcond is None:
        rcond = shape_of(x)[0] * np.finfo(np.result_type(x)).eps
    lhs, rhs = np.vander(x, order), y
    if w is not None:
        w = as_array(w) + 0.0
        if len(shape_of(w)) != 1:
            raise TypeError("expected a 1-d array for weights")
        if shape_of(w)[0] != shape_of(y)[0]:
            raise TypeError("expected w and y to have the same length")
        lhs = lhs * w[:, np.newaxis]
        rhs = rhs * (w[:, np.newaxis] if len(shape_of(rhs)) == 2 else w)
    scale = np.sqrt(np.sum(lhs * lhs, axis=0))  # to improve the condition number, as NumPy
    c, _, rank, _ = np.linalg.lstsq(lhs / scale, rhs, rcond)
    if rank != order:
        warnings.warn("Polyfit may be poorly conditioned", np.exceptions.RankWarning,
                      stacklevel=4)
    return (c.T / scale).T


# --- np.sinc --------------------------------------------------------------------------------------
_SERIES_TERMS = 14  # |πx| < 1: the Taylor terms after these are below 1e-30


def _unnormalised_derivative(u, n):
    """The n-th derivative of sin(u)/u at ``u`` (plain arrays).

    Near 0 the closed forms cancel catastrophically, so there the Taylor series
    Σ_k (-1)^k u^{2k}/(2k+1)! is differentiated term by term; elsewhere the recurrence from
    differentiating u·f(u) = sin(u) n times, f⁽ⁿ⁾ = (sin(u + nπ/2) - n·f⁽ⁿ⁻¹⁾) / u.
    """
    series = np.zeros_like(u)
    for k in range((n + 1) // 2, (n + 1) // 2 + _SERIES_TERMS):
        coef = (-1) ** k * math.factorial(2 * k) / (math.factorial(2 * k - n)
                                                    * math.factorial(2 * k + 1))
        series = series + coef * u ** (2 * k - n)
    with np.errstate(divide="ignore", invalid="ignore"):
        f = np.sin(u) / u
        for i in range(1, n + 1):
            f = (np.sin(u + i * np.pi / 2) - i * f) / u
    return np.where(np.abs(u) < 1, series, f)


@primitive
def sinc_derivative(x, n):
    """The ``n``-th derivative of ``np.sinc`` (``sin(πx)/(πx)``) at ``x``, ``n >= 1``.

    Differentiable to any order: its own derivative is ``sinc_derivative(x, n + 1)``. The
    removable singularity at 0 is evaluated as its limit.

    Example:
        >>> import numpy as np
        >>> sinc_derivative(np.array([0.0, 0.5]), 1).round(6).tolist()
        [0.0, -1.27324]
        >>> bool(np.isclose(sinc_derivative(0.0, 2), -np.pi ** 2 / 3))
        True
    """
    x = x if hasattr(x, "dtype") else np.asarray(x)  # a NumPy or CuPy array, or a number
    dt = x.dtype if x.dtype.kind == "f" else np.dtype(np.float64)
    out = np.pi ** n * _unnormalised_derivative(np.pi * x.astype(np.float64), n)
    return out.astype(dt)[()] if out.ndim == 0 else out.astype(dt, copy=False)


@rrule(sinc_derivative)
def _sinc_derivative(x, n):
    return sinc_derivative(x, n), lambda g: (g * sinc_derivative(x, n + 1), None)


@frule(sinc_derivative, lanes=True)
def _sinc_derivative_f(primals, tangents):
    (x, n), dx = primals, tangents[0]
    y = sinc_derivative(x, n)
    return y, None if dx is None else sinc_derivative(x, n + 1) * dx


@rrule(np.sinc)
def _sinc(x):
    return np.sinc(x), lambda g: (g * sinc_derivative(x, 1),)


@frule(np.sinc, lanes=True)
def _sinc_f(primals, tangents):
    (x,), (dx,) = primals, tangents
    return np.sinc(x), None if dx is None else sinc_derivative(x, 1) * dx


# --- polynomial arithmetic (coefficients highest power first, as np.polyval reads them) ----------
def _coefficients(p):
    if isinstance(p, np.poly1d):
        p = p.coeffs
    p = as_array(p)
    return np.reshape(p, (1,)) if len(shape_of(p)) == 0 else p


def _aligned(a1, a2):
    """Both coefficient vectors, the shorter padded with leading zeros (NumPy's polyadd)."""
    a1, a2 = _coefficients(a1), _coefficients(a2)
    d = shape_of(a2)[0] - shape_of(a1)[0]
    if d > 0:
        a1 = np.concatenate((am.zeros(d, a1.dtype, like=am.unwrap(a1)), a1))
    elif d < 0:
        a2 = np.concatenate((am.zeros(-d, a2.dtype, like=am.unwrap(a2)), a2))
    return a1, a2


def _polynomial(result, a1, a2):
    """A poly1d if either input was one, as NumPy returns."""
    return np.poly1d(result) if isinstance(a1, np.poly1d) or isinstance(a2, np.poly1d) \
        else result


@composite(np.polyadd)
def _polyadd(a1, a2):
    x, y = _aligned(a1, a2)
    return x + y


@composite(np.polysub)
def _polysub(a1, a2):
    x, y = _aligned(a1, a2)
    return x - y


@composite(np.polymul)
def _polymul(a1, a2):
    return np.convolve(_coefficients(a1), _coefficients(a2))


@composite(np.polyder)
def _polyder(p, m=1):
    m = int(m)
    if m < 0:
        raise ValueError("Order of derivative must be positive (see polyint)")
    p = _coefficients(p)
    for _ in range(m):
        n = shape_of(p)[0] - 1
        p = p[:-1] * np.arange(n, 0, -1)
    return p


@composite(np.polyint)
def _polyint(p, m=1, k=None):
    """Antiderivatives with integration constants ``k`` (differentiable too)."""
    m = int(m)
    if m < 0:
        raise ValueError("Order of integral must be positive (see polyder)")
    if k is None:
        k = [0.0] * m
    else:
        k = as_array(k)
        if len(shape_of(k)) == 0:
            k = [k] * m
    if len(k) < m:
        raise ValueError("k must be a scalar or a rank-1 array of length 1 or >m.")
    p = _coefficients(p)
    for i in range(m):
        p = np.concatenate((p / np.arange(shape_of(p)[0], 0, -1),
                            np.reshape(as_array(k[i]), (1,))))
    return p
