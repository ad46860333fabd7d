"""More univariate distributions common in probabilistic programs (half-normal and half-Cauchy
priors, inverse gamma, logistic, chi-squared, Weibull, negative binomial, geometric), written
as SciPy writes them, with ruled calls."""
import math

import numpy as np
import scipy.special as sc

from ._base import Univariate, Discrete, INF
from . import _primitives as P
from ...rules.registry import stop_gradient

_LOG_2_OVER_PI = math.log(2.0 / math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_SQRT2 = math.sqrt(2.0)
_LOG2 = math.log(2.0)


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
        return sc.xlogy(df / 2.0 - 1, z) - z / 2.0 - sc.gammaln(df / 2.0) - (_LOG2 * df) / 2.0

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
        return coeff + n * np.log(p) + P.xlog1py(k, -p)

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
        return P.xlog1py(k - 1.0, -p) + np.log(p)

    def _cdf(self, k, p):
        return -np.expm1(np.log1p(-p) * k)


halfnorm = halfnorm_gen("halfnorm")
halfcauchy = halfcauchy_gen("halfcauchy")
invgamma = invgamma_gen("invgamma")
logistic = logistic_gen("logistic")
chi2 = chi2_gen("chi2")
weibull_min = weibull_min_gen("weibull_min")
nbinom = nbinom_gen("nbinom")
geom = geom_gen("geom")
