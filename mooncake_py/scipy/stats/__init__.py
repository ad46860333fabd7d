"""Differentiable mirror of ``scipy.stats``: a port changes one import.

``from scipy import stats`` becomes ``from mooncake_py.scipy import stats``. On plain arrays
every call goes straight to SciPy. On tracked or dual values (inside ``mp.grad``, ``mp.jvp``,
``mp.hvp``, ...) ``logpdf``/``pdf``/``logcdf``/``cdf``/``logsf``/``sf`` (``logpmf``/``pmf``/
``logcdf``/``cdf`` for discrete distributions) are computed by compositions of ruled
``np.``/scipy.special calls that follow SciPy's own formulas, so values agree with SciPy's and
gradients, HVPs and Hessians flow in the variate and every parameter. Out-of-support values
give -inf (log-density) or 0 like SciPy, invalid parameters nan. Frozen distributions
(``stats.norm(loc, scale)``) work too.

Derivatives with no practical closed form raise MissingRuleError naming the function and the
parameter: the CDFs (and sf, logcdf, logsf) of ``gamma``/``invgamma`` in ``a``, ``chi2`` and
``t`` in ``df``, ``beta`` in ``a``/``b``, ``nbinom`` in ``n``, ``vonmises`` in ``kappa``;
``binom`` in its count ``n``.
Other methods (``rvs``, ``ppf``, ``mean``, ``entropy``, ...) forward to SciPy on plain arrays
and raise MissingRuleError on tracked ones. See docs/scipy_stats.md.

Example:
    >>> import numpy as np, mooncake_py as mp
    >>> from mooncake_py.scipy import stats
    >>> data = np.array([0.5, 1.5, 2.0])
    >>> nll = lambda mu: -np.sum(stats.norm.logpdf(data, loc=mu, scale=1.0))
    >>> float(mp.grad(nll)(1.0))          # -Σ (x - mu)
    -1.0
    >>> float(mp.hvp(nll)(1.0, 1.0))      # n / scale²
    3.0
"""
from ._matrix import invwishart, wishart
from ._more import (
    chi2,
    geom,
    halfcauchy,
    halfnorm,
    invgamma,
    logistic,
    nbinom,
    truncnorm,
    vonmises,
    weibull_min,
)
from ._multivariate import dirichlet, multinomial, multivariate_normal, multivariate_t
from ._univariate import (
    bernoulli,
    beta,
    binom,
    cauchy,
    expon,
    gamma,
    laplace,
    lognorm,
    norm,
    poisson,
    t,
    uniform,
)

__all__ = ["norm", "t", "gamma", "beta", "laplace", "cauchy", "lognorm", "uniform", "expon",
           "halfnorm", "halfcauchy", "invgamma", "logistic", "chi2", "weibull_min", "truncnorm",
           "vonmises",
           "poisson", "binom", "bernoulli", "nbinom", "geom",
           "multivariate_normal", "multivariate_t", "dirichlet", "multinomial", "wishart",
           "invwishart"]
