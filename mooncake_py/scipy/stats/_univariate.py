"""Univariate distributions of the stats mirror, each written as SciPy writes its standard form
(same formulas, so values agree to rounding), with ruled ``np.``/scipy.special calls."""
import math

import numpy as np
import scipy.special as sc

from ...errors import MissingRuleError
from ...rules.registry import stop_gradient
from . import _primitives as P
from ._base import INF, LOG2, LOG_PI, NORM_LOGC, Discrete, Univariate, tracked

_NORM_C = math.sqrt(2 * math.pi)


class norm_gen(Univariate):
    """Normal distribution, ``norm.logpdf(x, loc=0, scale=1)``: differentiable in ``x``,
    ``loc`` and ``scale``.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> float(mp.grad(lambda mu: stats.norm.logpdf(1.0, mu, 2.0))(0.0))   # (x - mu)/scale²
        0.25
    """

    def _logpdf(self, z):
        return -z * z / 2.0 - NORM_LOGC

    def _pdf(self, z):
        return np.exp(-z * z / 2.0) / _NORM_C

    def _cdf(self, z):
        return sc.ndtr(z)

    def _logcdf(self, z):
        return sc.log_ndtr(z)

    def _sf(self, z):
        return sc.ndtr(-z)

    def _logsf(self, z):
        return sc.log_ndtr(-z)


class t_gen(Univariate):
    """Student's t distribution, ``t.logpdf(x, df, loc=0, scale=1)``; ``t.cdf`` has no
    derivative in ``df`` (MissingRuleError).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> g = mp.grad(lambda df: stats.t.logpdf(0.5, df))(3.0)
        >>> fd = (stats.t.logpdf(0.5, 3 + 1e-6) - stats.t.logpdf(0.5, 3 - 1e-6)) / 2e-6
        >>> bool(np.isclose(g, fd))
        True
    """
    _shape_names = ("df",)

    def _logpdf(self, z, df):
        inf = np.isinf(df)
        if not np.any(inf):
            return P.t_logpdf_std(z, df)
        return np.where(inf, -z * z / 2.0 - NORM_LOGC, P.t_logpdf_std(z, np.where(inf, 1.0, df)))

    def _pdf(self, z, df):
        inf = np.isinf(df)
        if not np.any(inf):
            return np.exp(P.t_logpdf_std(z, df))
        return np.where(inf, np.exp(-z * z / 2.0) / _NORM_C,
                        np.exp(P.t_logpdf_std(z, np.where(inf, 1.0, df))))

    def _cdf(self, z, df):
        return P.stdtr(df, z)

    def _sf(self, z, df):
        return P.stdtr(df, -z)


class gamma_gen(Univariate):
    """Gamma distribution, ``gamma.logpdf(x, a, loc=0, scale=1)``; ``gamma.cdf`` has no
    derivative in ``a`` (MissingRuleError), but has one in ``x``, ``loc`` and ``scale``.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> float(mp.grad(lambda x: stats.gamma.cdf(x, 2.0))(1.0))   # the density x·e^-x
        0.36787944117144233
    """
    _shape_names = ("a",)
    _std_support = (0.0, INF)
    _safe_z = 1.0

    def _logpdf(self, z, a):
        return sc.xlogy(a - 1.0, z) - z - sc.gammaln(a)

    def _cdf(self, z, a):
        return P.gammainc(a, z)

    def _sf(self, z, a):
        return P.gammaincc(a, z)


class beta_gen(Univariate):
    """Beta distribution, ``beta.logpdf(x, a, b, loc=0, scale=1)``; ``beta.cdf`` has no
    derivative in ``a`` or ``b`` (MissingRuleError).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> float(mp.grad(lambda x: stats.beta.logpdf(x, 2.0, 2.0))(0.25))   # 1/x - 1/(1-x)
        2.666666666666667
    """
    _shape_names = ("a", "b")
    _std_support = (0.0, 1.0)
    _safe_z = 0.5

    def _logpdf(self, z, a, b):
        return sc.xlog1py(b - 1.0, -z) + sc.xlogy(a - 1.0, z) - sc.betaln(a, b)

    def _cdf(self, z, a, b):
        return P.betainc(a, b, z)

    def _sf(self, z, a, b):
        return P.betaincc(a, b, z)


class laplace_gen(Univariate):
    """Laplace distribution, ``laplace.logpdf(x, loc=0, scale=1)``.

    ``logpdf`` is ``-|z| - log 2 - log(scale)`` (finite far in the tails, where SciPy's
    log of an underflowed density gives -inf).

    Example:
        >>> import mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> float(mp.grad(lambda b: stats.laplace.logpdf(3.0, 1.0, b))(2.0))   # -1/b + |x-mu|/b²
        0.0
    """

    def _logpdf(self, z):
        return -np.abs(z) - LOG2

    def _pdf(self, z):
        return 0.5 * np.exp(-np.abs(z))

    def _cdf(self, z):
        pos = z > 0
        zp, zn = np.where(pos, z, 0.0), np.where(pos, 0.0, z)
        return np.where(pos, 1.0 - 0.5 * np.exp(-zp), 0.5 * np.exp(zn))

    def _sf(self, z):
        return self._cdf(-z)


class cauchy_gen(Univariate):
    """Cauchy distribution, ``cauchy.logpdf(x, loc=0, scale=1)``.

    Example:
        >>> import mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> float(mp.grad(lambda x: stats.cauchy.logpdf(x))(1.0))   # -2x/(1+x²)
        -1.0
    """

    def _logpdf(self, z):
        small = np.abs(z) < 1
        if np.all(small):
            return -LOG_PI - np.log1p(z * z)
        zs = np.where(small, z, 0.0)
        zl = np.abs(np.where(small, 1.0, z))
        return np.where(small, -LOG_PI - np.log1p(zs * zs),
                        -LOG_PI - (2 * np.log(zl) + np.log1p((1 / zl) ** 2)))

    def _pdf(self, z):
        return 1.0 / math.pi / (1.0 + z * z)

    def _cdf(self, z):
        return np.arctan2(1.0, -z) / math.pi

    def _sf(self, z):
        return np.arctan2(1.0, z) / math.pi


class lognorm_gen(Univariate):
    """Log-normal distribution, ``lognorm.logpdf(x, s, loc=0, scale=1)``.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> float(mp.grad(lambda s: stats.lognorm.logpdf(np.e, s))(1.0))   # -1/s + log(x)²/s³
        0.0
    """
    _shape_names = ("s",)
    _std_support = (0.0, INF)
    _safe_z = 1.0

    def _logpdf(self, z, s):
        zero = z == 0
        zs = np.where(zero, 1.0, z) if np.any(zero) else z
        val = -np.log(zs) ** 2 / (2 * s ** 2) - np.log(s * zs * math.sqrt(2 * math.pi))
        return np.where(zero, -INF, val) if np.any(zero) else val

    def _pdf(self, z, s):
        return np.exp(self._logpdf(z, s))

    def _cdf(self, z, s):
        return sc.ndtr(np.log(z) / s)

    def _logcdf(self, z, s):
        return sc.log_ndtr(np.log(z) / s)

    def _sf(self, z, s):
        return sc.ndtr(-np.log(z) / s)

    def _logsf(self, z, s):
        return sc.log_ndtr(-np.log(z) / s)


class uniform_gen(Univariate):
    """Uniform distribution on ``[loc, loc + scale]``, ``uniform.logpdf(x, loc=0, scale=1)``.

    Example:
        >>> import mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> float(mp.grad(lambda w: stats.uniform.logpdf(0.5, 0.0, w))(2.0))
        -0.5
    """
    _std_support = (0.0, 1.0)
    _safe_z = 0.5

    def _logpdf(self, z):
        return 0.0 * z

    def _pdf(self, z):
        return 0.0 * z + 1.0

    def _cdf(self, z):
        return z


class expon_gen(Univariate):
    """Exponential distribution, ``expon.logpdf(x, loc=0, scale=1)`` (``scale`` = 1/rate).

    Example:
        >>> import mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> float(mp.grad(lambda s: stats.expon.logpdf(2.0, scale=s))(2.0))   # -1/s + x/s²
        0.0
    """
    _std_support = (0.0, INF)
    _safe_z = 1.0

    def _logpdf(self, z):
        return -z

    def _pdf(self, z):
        return np.exp(-z)

    def _cdf(self, z):
        return -np.expm1(-z)

    def _sf(self, z):
        return np.exp(-z)

    def _logsf(self, z):
        return -z


def _integral(v):
    plain = np.asarray(stop_gradient(v), dtype=float)
    return plain == np.round(plain)


class poisson_gen(Discrete):
    """Poisson distribution, ``poisson.logpmf(k, mu, loc=0)``: differentiable in ``mu``
    (``cdf`` too: its derivative is minus the mass at ``floor(k)``).

    Example:
        >>> import mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> float(mp.grad(lambda mu: stats.poisson.logpmf(3, mu))(2.0))   # k/mu - 1
        0.5
    """
    _shape_names = ("mu",)

    def _shape_ok(self, name, v):
        return v >= 0

    def _support(self, mu):
        return 0.0, INF

    def _logpmf(self, k, mu):
        return sc.xlogy(k, mu) - sc.gammaln(k + 1.0) - mu

    def _cdf(self, k, mu):
        return P.pdtr(k, mu)


class binom_gen(Discrete):
    """Binomial distribution, ``binom.logpmf(k, n, p, loc=0)``: differentiable in ``p``; the
    count ``n`` has no derivative (MissingRuleError if it is tracked).

    Example:
        >>> import mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> float(mp.grad(lambda p: stats.binom.logpmf(3, 10, p))(0.5))   # k/p - (n-k)/(1-p)
        -8.0
    """
    _shape_names = ("n", "p")

    def _shape_ok(self, name, v):
        if name == "n":
            return (v >= 0) & _integral(v)
        return (v >= 0) & (v <= 1)

    def _support(self, n, p):
        return 0.0, n

    def _params(self, method, k, args, kwds):
        n = (args[0] if args else kwds.get("n")) if self._shape_names[0] == "n" else None
        if tracked(n):
            raise MissingRuleError(
                f"mooncake_py.scipy.stats.binom.{method} has no derivative with respect to "
                f"`n`: n is a count (SciPy gives nan for a non-integer n). Pass n as a plain "
                f"number or array (or wrap it in mp.stop_gradient); the derivative in p works.")
        return super()._params(method, k, args, kwds)

    def _safe(self, name):
        return 1.0 if name == "n" else 0.5

    def _logpmf(self, k, n, p):
        combiln = sc.gammaln(n + 1.0) - (sc.gammaln(k + 1.0) + sc.gammaln(n - k + 1.0))
        return combiln + sc.xlogy(k, p) + sc.xlog1py(n - k, -p)

    def _cdf(self, k, n, p):
        return P.bdtr(k, n, p)


class bernoulli_gen(binom_gen):
    """Bernoulli distribution, ``bernoulli.logpmf(k, p, loc=0)``: differentiable in ``p``.

    Example:
        >>> import mooncake_py as mp
        >>> from mooncake_py.scipy import stats
        >>> float(mp.grad(lambda p: stats.bernoulli.logpmf(1, p))(0.25))
        4.0
    """
    _shape_names = ("p",)

    def _shape_ok(self, name, v):
        return (v >= 0) & (v <= 1)

    def _support(self, p):
        return 0.0, 1.0

    def _logpmf(self, k, p):
        return binom_gen._logpmf(self, k, 1.0, p)

    def _cdf(self, k, p):
        return P.bdtr(k, 1.0, p)


norm = norm_gen("norm")
t = t_gen("t")
gamma = gamma_gen("gamma")
beta = beta_gen("beta")
laplace = laplace_gen("laplace")
cauchy = cauchy_gen("cauchy")
lognorm = lognorm_gen("lognorm")
uniform = uniform_gen("uniform")
expon = expon_gen("expon")
poisson = poisson_gen("poisson")
binom = binom_gen("binom")
bernoulli = bernoulli_gen("bernoulli")
