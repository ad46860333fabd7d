"""More univariate distributions common in probabilistic programs (half-normal and half-Cauchy
priors, inverse gamma, logistic, chi-squared, Weibull, truncated normal, von Mises, negative
binomial, geometric), written
as SciPy writes them, with ruled calls."""
import math

import numpy as np
import scipy.special as sc

from ...rules.registry import stop_gradient
from . import _primitives as P
from ._base import INF, LOG2, NORM_LOGC, Discrete, Univariate, scipy_stats

_LOG_2_OVER_PI = math.log(2.0 / math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_SQRT2 = math.sqrt(2.0)


class halfnorm_gen(Univariate):
    """Half-normal distribution, ``halfnorm.logpdf(x, loc=0, scale=1)``.

    Example:
        >>> import mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> float(mp.grad(lambda s: stats.halfnorm.logpdf(2.0, scale=s))(2.0))   # -1/s + x²/s³
        0.0
    """
    _std_support = (0.0, INF)
    _safe_z = 1.0

    def _logpdf(self, z):
        return 0.5 * _LOG_2_OVER_PI - z * z / 2.0

    def _pdf(self, z):
        return _SQRT_2_OVER_PI * np.exp(-z * z / 2.0)

    def _cdf(self, z):
        return sc.erf(z / _SQRT2)

    def _sf(self, z):
        return 2 * sc.ndtr(-z)


class halfcauchy_gen(Univariate):
    """Half-Cauchy distribution, ``halfcauchy.logpdf(x, loc=0, scale=1)``.

    Example:
        >>> import mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> float(mp.grad(lambda x: stats.halfcauchy.logpdf(x))(1.0))   # -2x/(1+x²)
        -1.0
    """
    _std_support = (0.0, INF)
    _safe_z = 1.0

    def _logpdf(self, z):
        return _LOG_2_OVER_PI - np.log1p(z * z)

    def _pdf(self, z):
        return 2.0 / math.pi / (1.0 + z * z)

    def _cdf(self, z):
        return 2.0 / math.pi * np.arctan(z)

    def _sf(self, z):
        return 2.0 / math.pi * np.arctan2(1.0, z)


_invgamma_P, _invgamma_Q = P.incomplete_gamma("invgamma")


class invgamma_gen(Univariate):
    """Inverse gamma distribution, ``invgamma.logpdf(x, a, loc=0, scale=1)``; its ``cdf`` has
    no derivative in ``a`` (MissingRuleError).

    Example:
        >>> import mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> float(mp.grad(lambda x: stats.invgamma.logpdf(x, 1.0))(1.0))   # -(a+1)/x + 1/x²
        -1.0
    """
    _shape_names = ("a",)
    _std_support = (0.0, INF)
    _safe_z = 1.0
    _open_density = True   # SciPy: the density is evaluated on the open support

    def _logpdf(self, z, a):
        return -(a + 1) * np.log(z) - sc.gammaln(a) - 1.0 / z

    def _cdf(self, z, a):
        return _invgamma_Q(a, 1.0 / z)

    def _sf(self, z, a):
        return _invgamma_P(a, 1.0 / z)


def _log_expit(x):
    return -np.logaddexp(0.0, -x)


class logistic_gen(Univariate):
    """Logistic distribution, ``logistic.logpdf(x, loc=0, scale=1)``.

    Example:
        >>> import mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> float(mp.grad(lambda x: stats.logistic.logcdf(x))(0.0))   # expit(-x)
        0.5
    """

    def _logpdf(self, z):
        y = -np.abs(z)
        return y - 2.0 * np.log1p(np.exp(y))

    def _cdf(self, z):
        return sc.expit(z)

    def _logcdf(self, z):
        return _log_expit(z)

    def _sf(self, z):
        return sc.expit(-z)

    def _logsf(self, z):
        return _log_expit(-z)


_chi2_P, _chi2_Q = P.incomplete_gamma("chi2", "df")


class chi2_gen(Univariate):
    """Chi-squared distribution, ``chi2.logpdf(x, df, loc=0, scale=1)``; its ``cdf`` has no
    derivative in ``df`` (MissingRuleError).

    Example:
        >>> import mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> float(mp.grad(lambda x: stats.chi2.logpdf(x, 4.0))(2.0))   # (df/2 - 1)/x - 1/2
        0.0
    """
    _shape_names = ("df",)
    _std_support = (0.0, INF)
    _safe_z = 1.0

    def _logpdf(self, z, df):
        return sc.xlogy(df / 2.0 - 1, z) - z / 2.0 - sc.gammaln(df / 2.0) - (LOG2 * df) / 2.0

    def _cdf(self, z, df):
        return _chi2_P(df / 2.0, z / 2.0)

    def _sf(self, z, df):
        return _chi2_Q(df / 2.0, z / 2.0)


class weibull_min_gen(Univariate):
    """Weibull distribution, ``weibull_min.logpdf(x, c, loc=0, scale=1)``.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> float(mp.grad(lambda c: stats.weibull_min.logsf(np.e, c))(1.0))   # -x^c·log x
        -2.718281828459045
    """
    _shape_names = ("c",)
    _std_support = (0.0, INF)
    _safe_z = 1.0

    def _logpdf(self, z, c):
        return np.log(c) + sc.xlogy(c - 1, z) - z ** c

    def _pdf(self, z, c):
        return c * z ** (c - 1) * np.exp(-z ** c)

    def _cdf(self, z, c):
        return -np.expm1(-z ** c)

    def _sf(self, z, c):
        return np.exp(-z ** c)

    def _logsf(self, z, c):
        return -z ** c


def _plain(v):
    return np.asarray(stop_gradient(v), dtype=float)


def _log_diff(lp, lq):
    """log(exp(lp) - exp(lq)) for lq < lp."""
    return lp + np.log1p(-np.exp(lq - lp))


def _left_mass(a, b):
    """log(Φ(b) - Φ(a)) for b <= 0, in the left tail where log_ndtr is accurate. a = -inf
    gives log Φ(b); it is moved off -inf first, as log_ndtr's derivative there is nan."""
    lb = sc.log_ndtr(b)
    low = np.isneginf(_plain(a))
    if not np.any(low):
        return _log_diff(lb, sc.log_ndtr(a))
    a = np.where(low, _plain(b) - 1.0, a)
    return np.where(low, lb, _log_diff(lb, sc.log_ndtr(a)))


def _log_gauss_mass(a, b):
    """log(Φ(b) - Φ(a)) as SciPy computes it: in the left tail for intervals left of 0, by
    symmetry for those right of 0, as log1p(-Φ(a) - Φ(-b)) for those around 0. Each case
    sees only its own (a, b) pairs (the others get a safe pair), so no case's inf or nan
    reaches the derivative of another's entries."""
    pa, pb = _plain(a), _plain(b)
    cases = [(pb <= 0, (-2.0, -1.0), _left_mass),
             (pa > 0, (1.0, 2.0), lambda a, b: _left_mass(-b, -a)),
             (~((pb <= 0) | (pa > 0)), (-1.0, 1.0),
              lambda a, b: np.log1p(-sc.ndtr(a) - sc.ndtr(-b)))]
    out = None
    for mask, (sa, sb), f in cases:
        if not np.any(mask):
            continue
        if np.all(mask):
            return f(a, b)
        v = f(np.where(mask, a, sa), np.where(mask, b, sb))
        out = v if out is None else np.where(mask, v, out)
    return out


class truncnorm_gen(Univariate):
    """Truncated normal on ``[a, b]`` (standard coordinates), ``truncnorm.logpdf(x, a, b,
    loc=0, scale=1)``: differentiable in ``x``, ``a``, ``b``, ``loc`` and ``scale``.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> g = mp.grad(lambda m: stats.truncnorm.logpdf(0.5, -m, np.inf, loc=m))(0.0)
        >>> bool(np.isclose(g, 0.5 - 2 * stats.norm.pdf(0.0)))   # the mass moves with loc
        True
    """
    _shape_names = ("a", "b")

    def _shapes_ok(self, shapes):
        a, b = shapes
        ok = a < b
        if np.all(ok):
            return [a, b], ok
        return [np.where(ok, a, -1.0), np.where(ok, b, 1.0)], ok

    def _support_of(self, shapes):
        a, b = (_plain(s) for s in shapes)
        fa, fb = np.isfinite(a), np.isfinite(b)
        with np.errstate(invalid="ignore"):
            inner = np.where(fa & fb, (a + b) / 2,
                             np.where(fa, a + 1.0, np.where(fb, b - 1.0, 0.0)))
        return a, b, inner

    def _logpdf(self, z, a, b):
        return -z * z / 2.0 - NORM_LOGC - _log_gauss_mass(a, b)

    def _log_tail(self, z, a, b, upper):
        """log cdf (log sf with ``upper``), SciPy's way: the ratio of two masses, or, where
        that is above -0.1 (cancellation), log1p(-exp(the other tail))."""
        total = _log_gauss_mass(a, b)

        def ratio(v, up):
            return (_log_gauss_mass(v, b) if up else _log_gauss_mass(a, v)) - total
        basic = ratio(z, upper)
        fix = np.asarray(_plain(basic) > -0.1)
        if not np.any(fix):
            return basic
        inner = self._support_of((a, b))[2]
        zf = np.where(fix, z, inner)
        return np.where(fix, np.log1p(-np.exp(ratio(zf, not upper))), basic)

    def _logcdf(self, z, a, b):
        return self._log_tail(z, a, b, False)

    def _logsf(self, z, a, b):
        return self._log_tail(z, a, b, True)

    def _cdf(self, z, a, b):
        return np.exp(self._logcdf(z, a, b))

    def _sf(self, z, a, b):
        return np.exp(self._logsf(z, a, b))


def _cosm1(x):
    # cos(x) - 1 without the cancellation near 0 (scipy.special.cosm1 has no rule)
    return -2.0 * np.sin(x / 2) ** 2


def _vonmises_cdf_value(kappa, x):
    return scipy_stats().vonmises.cdf(x, kappa)


_vonmises_cdf = P._elementwise(
    _vonmises_cdf_value,
    (("vonmises.cdf (and sf, logcdf, logsf)", "kappa",
      "the derivative of the von Mises CDF in kappa has no practical closed form."),
     lambda kappa, x: np.exp(kappa * _cosm1(x)) / (2 * math.pi * sc.i0e(kappa))))


class vonmises_gen(Univariate):
    """Von Mises distribution, ``vonmises.logpdf(x, kappa, loc=0, scale=1)`` (as in SciPy, the
    density is not wrapped to one period); its ``cdf`` has no derivative in ``kappa``
    (MissingRuleError).

    Example:
        >>> import mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> float(mp.grad(lambda m: stats.vonmises.logpdf(0.0, 2.0, loc=m))(0.0))   # κ·sin(x-m)
        0.0
    """
    _shape_names = ("kappa",)

    def _shape_ok(self, name, v):
        return v >= 0

    def _logpdf(self, z, kappa):
        return kappa * _cosm1(z) - math.log(2 * math.pi) - np.log(sc.i0e(kappa))

    def _pdf(self, z, kappa):
        return np.exp(kappa * _cosm1(z)) / (2 * math.pi * sc.i0e(kappa))

    def _cdf(self, z, kappa):
        return _vonmises_cdf(kappa, z)


_nbinom_I, _ = P.incomplete_beta("nbinom", "n", "k")
_nbinom_upper, _ = P.incomplete_beta("nbinom", "k", "n")


class nbinom_gen(Discrete):
    """Negative binomial distribution, ``nbinom.logpmf(k, n, p, loc=0)``: ``logpmf``/``pmf``
    differentiable in ``n`` and ``p``; ``cdf``/``logcdf`` in ``p`` only (MissingRuleError for
    ``n``).

    Example:
        >>> import mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> float(mp.grad(lambda p: stats.nbinom.logpmf(2, 3.0, p))(0.5))   # n/p - k/(1-p)
        2.0
    """
    _shape_names = ("n", "p")

    def _shape_ok(self, name, v):
        return (v > 0) if name == "n" else (v > 0) & (v <= 1)

    def _support(self, n, p):
        return 0.0, INF

    def _logpmf(self, k, n, p):
        coeff = sc.gammaln(n + k) - sc.gammaln(k + 1.0) - sc.gammaln(n)
        return coeff + n * np.log(p) + sc.xlog1py(k, -p)

    def _cdf(self, k, n, p):
        return _nbinom_I(n, k + 1.0, p)

    def _logcdf(self, k, n, p):
        # SciPy: log1p(-I_{1-p}(k+1, n)) where the CDF exceeds 1/2, log(cdf) elsewhere; each
        # side sees only its own parameters (p moved to 1/2 elsewhere keeps both finite).
        cdf = self._cdf(k, n, p)
        upper = np.asarray(stop_gradient(cdf)) > 0.5
        if not np.any(upper):
            with np.errstate(divide="ignore"):
                return np.log(cdf)
        p_up = np.where(upper, p, 0.5)
        p_lo = np.where(upper, 0.5, p)
        with np.errstate(divide="ignore"):
            return np.where(upper, np.log1p(-_nbinom_upper(k + 1.0, n, 1.0 - p_up)),
                            np.log(self._cdf(k, n, p_lo)))


class geom_gen(Discrete):
    """Geometric distribution on 1, 2, ..., ``geom.logpmf(k, p, loc=0)``: differentiable in
    ``p``.

    Example:
        >>> import mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> float(mp.grad(lambda p: stats.geom.logpmf(3, p))(0.5))   # 1/p - (k-1)/(1-p)
        -2.0
    """
    _shape_names = ("p",)

    def _shape_ok(self, name, v):
        return (v <= 1) & (v > 0)

    def _support(self, p):
        return 1.0, INF

    def _logpmf(self, k, p):
        return sc.xlog1py(k - 1.0, -p) + np.log(p)

    def _cdf(self, k, p):
        return -np.expm1(np.log1p(-p) * k)


halfnorm = halfnorm_gen("halfnorm")
halfcauchy = halfcauchy_gen("halfcauchy")
invgamma = invgamma_gen("invgamma")
logistic = logistic_gen("logistic")
chi2 = chi2_gen("chi2")
weibull_min = weibull_min_gen("weibull_min")
truncnorm = truncnorm_gen("truncnorm")
vonmises = vonmises_gen("vonmises")
nbinom = nbinom_gen("nbinom")
geom = geom_gen("geom")
