"""mooncake_py.scipy.stats: values equal SciPy's over parameter grids (in and out of support,
invalid parameters, nan), derivatives in the variate and every parameter in every mode
(test_rule: reverse, forward with lanes, forward-over-reverse), refusals, frozen
distributions, plain calls going to SciPy."""
import numpy as np
import pytest
import scipy.stats as ss

import mooncake_py as mp
from mooncake_py.scipy import stats
from mooncake_py.testing import test_rule, check_grads

INF, NAN = np.inf, np.nan


def through_tracking(dist, method, x, *args, **kwds):
    """``dist.method`` evaluated by the differentiable path: the variate carries a (zero)
    tangent, so the call cannot take the plain-SciPy route."""
    x = np.asarray(x, dtype=float)
    y, _ = mp.jvp(lambda v: getattr(dist, method)(v, *args, **kwds), (x,), (np.zeros_like(x),))
    return np.asarray(y)


def tracking_params(dist, method, x, *params, plain=()):
    """The same, with the (array) parameters carrying the tangents instead (but those at
    positions in ``plain``): the variate stays plain, so parameter-only tracking is
    exercised."""
    params = [np.asarray(p, dtype=float) for p in params]
    idx = [i for i in range(len(params)) if i not in plain]

    def f(*tracked):
        ps = list(params)
        for i, v in zip(idx, tracked):
            ps[i] = v
        return getattr(dist, method)(x, *ps)
    y, _ = mp.jvp(f, tuple(params[i] for i in idx), tuple(np.zeros_like(params[i]) for i in idx))
    return np.asarray(y)


def grid(*axes):
    """Each 1-D axis on its own dimension, so that the call broadcasts over the full grid."""
    n = len(axes)
    return [np.reshape(np.asarray(a, dtype=float), (-1,) + (1,) * (n - 1 - i))
            for i, a in enumerate(axes)]


def assert_same(got, want):
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300, equal_nan=True)


XS = [-INF, -40.0, -3.0, -0.5, 0.0, 1e-3, 0.3, 1.0, 2.5, 40.0, INF, NAN]
LOC = [-1.0, 0.0, 2.0]
SCALE = [-1.0, 0.0, 0.5, 3.0]

UNIVARIATE = [  # name, shape-parameter grids
    ("norm", []),
    ("t", [[-1.0, 0.0, 0.5, 3.0, 30.0, 1e4, INF]]),
    ("gamma", [[-1.0, 0.0, 0.5, 1.0, 2.5, 100.0]]),
    ("beta", [[-1.0, 0.5, 1.0, 2.5, 50.0], [0.0, 0.5, 1.0, 3.0, 40.0]]),
    ("laplace", []),
    ("cauchy", []),
    ("lognorm", [[-1.0, 0.0, 0.5, 2.0]]),
    ("uniform", []),
    ("expon", []),
    ("halfnorm", []),
    ("halfcauchy", []),
    ("invgamma", [[-1.0, 0.0, 0.5, 1.0, 4.0]]),
    ("logistic", []),
    ("chi2", [[-1.0, 0.0, 0.5, 2.0, 7.0]]),
    ("weibull_min", [[-1.0, 0.0, 0.5, 1.0, 3.0]]),
    ("truncnorm", [[-INF, -2.0, 0.5, 1.0], [-1.0, 0.7, 3.0, INF]]),
    ("vonmises", [[-1.0, 0.0, 0.5, 2.0, 30.0]]),
]
METHODS = ["logpdf", "pdf", "logcdf", "cdf", "logsf", "sf"]


@pytest.mark.parametrize("name,shapes", UNIVARIATE, ids=[u[0] for u in UNIVARIATE])
def test_univariate_values_equal_scipy(name, shapes):
    xs = XS if name != "beta" else [-0.1, 0.0, 1e-3, 0.3, 0.999, 1.0, 1.2, NAN]
    args = grid(xs, *shapes, LOC, SCALE)
    for method in METHODS:
        with np.errstate(all="ignore"):   # SciPy's own warnings on the invalid entries
            want = getattr(getattr(ss, name), method)(*args)
            got = through_tracking(getattr(stats, name), method, *args)
        assert got.shape == want.shape, (name, method)
        assert_same(got, want)


def test_parameter_only_tracking_equals_scipy():
    x = np.linspace(-2.0, 4.0, 7)
    assert_same(tracking_params(stats.norm, "logpdf", x, 0.5, 2.0), ss.norm.logpdf(x, 0.5, 2.0))
    assert_same(tracking_params(stats.gamma, "cdf", x, 1.5, 0.5, 2.0, plain=(0,)),
                ss.gamma.cdf(x, 1.5, 0.5, 2.0))


DISCRETE = [
    ("poisson", [[-1.0, 0.0, 0.5, 3.0, 20.0]]),
    ("binom", [[-1.0, 0.0, 5.0, 10.0, 5.5], [-0.1, 0.0, 0.3, 1.0, 1.2]]),
    ("bernoulli", [[-0.1, 0.0, 0.3, 1.0, 1.5]]),
    ("nbinom", [[-1.0, 0.0, 0.5, 3.0, 12.0], [-0.1, 0.0, 0.3, 0.9, 1.0, 1.2]]),
    ("geom", [[-0.1, 0.0, 0.3, 1.0, 1.5]]),
]


@pytest.mark.parametrize("name,shapes", DISCRETE, ids=[d[0] for d in DISCRETE])
def test_discrete_values_equal_scipy(name, shapes):
    ks = [-INF, -1.0, 0.0, 0.5, 1.0, 2.5, 3.0, 5.0, 10.0, 11.0, INF, NAN]
    args = grid(ks, *shapes, [0.0, 1.0])
    for method in ["logpmf", "pmf", "logcdf", "cdf"]:
        with np.errstate(all="ignore"):   # SciPy's own warnings on the invalid entries
            want = getattr(getattr(ss, name), method)(*args)
            # binom.cdf has no derivative in n: n stays plain there
            got = tracking_params(getattr(stats, name), method, *args,
                                  plain=(0,) if name in ("binom", "nbinom") else ())
        assert got.shape == want.shape, (name, method)
        assert_same(got, want)


X = np.linspace(-1.5, 2.5, 5)
POS = np.linspace(0.2, 3.0, 5)
UNIT = np.linspace(0.1, 0.9, 5)

RULES = [  # (id, function of float arguments, arguments)
    ("norm.logpdf", lambda x, m, s: stats.norm.logpdf(x, m, s), (X, 0.3, 1.7)),
    ("norm.pdf", lambda x, m, s: stats.norm.pdf(x, loc=m, scale=s), (X, 0.3, 1.7)),
    ("norm.logcdf", lambda x, m, s: stats.norm.logcdf(x, m, s), (X, 0.3, 1.7)),
    ("norm.cdf", lambda x, m, s: stats.norm.cdf(x, m, s), (X, 0.3, 1.7)),
    ("t.logpdf", lambda x, df, m, s: stats.t.logpdf(x, df, m, s), (X, 3.5, 0.2, 1.3)),
    ("t.pdf", lambda x, df: stats.t.pdf(x, df=df), (X, 2.5)),
    ("t.cdf", lambda x, m, s: stats.t.cdf(x, 3.5, m, s), (X, 0.2, 1.3)),
    ("t.logcdf", lambda x: stats.t.logcdf(x, 4.0), (X,)),
    ("gamma.logpdf", lambda x, a, s: stats.gamma.logpdf(x, a, scale=s), (POS, 2.5, 1.5)),
    ("gamma.pdf", lambda x, a: stats.gamma.pdf(x, a), (POS, 0.7)),
    ("gamma.cdf", lambda x, m, s: stats.gamma.cdf(x, 2.5, m, s), (POS, -0.1, 1.5)),
    ("gamma.logcdf", lambda x: stats.gamma.logcdf(x, a=3.0), (POS,)),
    ("beta.logpdf", lambda x, a, b: stats.beta.logpdf(x, a, b), (UNIT, 2.5, 1.5)),
    ("beta.pdf", lambda x, a, b: stats.beta.pdf(x, a, b), (UNIT, 0.8, 1.0)),
    ("beta.cdf", lambda x, m, s: stats.beta.cdf(x, 2.0, 3.0, m, s), (UNIT, -0.05, 1.1)),
    ("beta.logcdf", lambda x: stats.beta.logcdf(x, 2.0, 3.0), (UNIT,)),
    ("laplace.logpdf", lambda x, m, s: stats.laplace.logpdf(x, m, s), (X + 0.05, 0.3, 1.7)),
    ("laplace.cdf", lambda x, m, s: stats.laplace.cdf(x, m, s), (X + 0.05, 0.3, 1.7)),
    ("laplace.logcdf", lambda x: stats.laplace.logcdf(x), (X + 0.05,)),
    ("cauchy.logpdf", lambda x, m, s: stats.cauchy.logpdf(x, m, s), (3 * X, 0.3, 1.7)),
    ("cauchy.pdf", lambda x, m, s: stats.cauchy.pdf(x, m, s), (3 * X, 0.3, 1.7)),
    ("cauchy.cdf", lambda x, m, s: stats.cauchy.cdf(x, m, s), (X, 0.3, 1.7)),
    ("lognorm.logpdf", lambda x, s, sc: stats.lognorm.logpdf(x, s, scale=sc), (POS, 0.8, 1.4)),
    ("lognorm.cdf", lambda x, s, sc: stats.lognorm.cdf(x, s, scale=sc), (POS, 0.8, 1.4)),
    ("lognorm.logcdf", lambda x, s: stats.lognorm.logcdf(x, s), (POS, 0.8)),
    ("uniform.logpdf", lambda x, m, s: stats.uniform.logpdf(x, m, s), (UNIT, -0.5, 2.0)),
    ("uniform.cdf", lambda x, m, s: stats.uniform.cdf(x, m, s), (UNIT, -0.5, 2.0)),
    ("expon.logpdf", lambda x, m, s: stats.expon.logpdf(x, m, s), (POS, -0.1, 1.5)),
    ("expon.pdf", lambda x, s: stats.expon.pdf(x, scale=s), (POS, 1.5)),
    ("expon.logcdf", lambda x, s: stats.expon.logcdf(x, scale=s), (POS, 1.5)),
    ("halfnorm.logpdf", lambda x, m, s: stats.halfnorm.logpdf(x, m, s), (POS, -0.1, 1.5)),
    ("halfnorm.logcdf", lambda x, s: stats.halfnorm.logcdf(x, scale=s), (POS, 1.5)),
    ("halfcauchy.logpdf", lambda x, s: stats.halfcauchy.logpdf(x, scale=s), (POS, 1.5)),
    ("halfcauchy.logsf", lambda x, s: stats.halfcauchy.logsf(x, scale=s), (POS, 1.5)),
    ("invgamma.logpdf", lambda x, a, s: stats.invgamma.logpdf(x, a, scale=s), (POS, 2.5, 1.5)),
    ("invgamma.cdf", lambda x, s: stats.invgamma.cdf(x, 2.5, scale=s), (POS, 1.5)),
    ("logistic.logpdf", lambda x, m, s: stats.logistic.logpdf(x, m, s), (X, 0.3, 1.7)),
    ("logistic.logcdf", lambda x, m, s: stats.logistic.logcdf(x, m, s), (X, 0.3, 1.7)),
    ("chi2.logpdf", lambda x, df: stats.chi2.logpdf(x, df), (POS, 3.5)),
    ("chi2.logsf", lambda x, s: stats.chi2.logsf(x, 3.5, scale=s), (POS, 1.5)),
    ("weibull_min.logpdf", lambda x, c, s: stats.weibull_min.logpdf(x, c, scale=s),
     (POS, 1.7, 1.5)),
    ("weibull_min.logcdf", lambda x, c: stats.weibull_min.logcdf(x, c), (POS, 1.7)),
    ("nbinom.logpmf", lambda n, p: stats.nbinom.logpmf(np.arange(6), n, p), (2.5, 0.4)),
    ("nbinom.logcdf", lambda p: stats.nbinom.logcdf(np.arange(12), 2.5, p), (0.4,)),
    ("geom.logpmf", lambda p: stats.geom.logpmf(np.arange(1, 6), p), (0.3,)),
    ("geom.cdf", lambda p: stats.geom.cdf(np.arange(1, 6), p), (0.3,)),
    ("truncnorm.logpdf", lambda x, a, b, m, s: stats.truncnorm.logpdf(x, a, b, m, s),
     (X / 3, -1.5, 2.0, 0.1, 1.2)),
    ("truncnorm.left", lambda x, b: stats.truncnorm.logpdf(x, -INF, b), (X - 3.1, -0.5)),
    ("truncnorm.right", lambda x, a: stats.truncnorm.logpdf(x, a, INF), (X + 2.1, 0.5)),
    ("truncnorm.logcdf", lambda x, a, b: stats.truncnorm.logcdf(x, a, b), (X / 3, -1.5, 2.0)),
    ("truncnorm.logsf", lambda x, a, b: stats.truncnorm.logsf(x, a, b), (X / 3, -1.5, 2.0)),
    ("truncnorm.cdf", lambda x, a: stats.truncnorm.cdf(x, a, INF), (POS + 0.1, 0.2)),
    ("vonmises.logpdf", lambda x, k, m: stats.vonmises.logpdf(x, k, loc=m), (X, 2.5, 0.3)),
    ("vonmises.cdf", lambda x, m: stats.vonmises.cdf(x, 2.5, loc=m), (X / 2, 0.3)),
    ("vonmises.logsf", lambda x: stats.vonmises.logsf(x, 0.7), (X / 2,)),
    ("poisson.logpmf", lambda mu: stats.poisson.logpmf(np.arange(6), mu), (2.3,)),
    ("poisson.pmf", lambda mu: stats.poisson.pmf(np.arange(6), mu), (2.3,)),
    ("poisson.cdf", lambda mu: stats.poisson.cdf(np.arange(6) + 0.5, mu), (2.3,)),
    ("poisson.logcdf", lambda mu: stats.poisson.logcdf(np.arange(6), mu), (2.3,)),
    ("binom.logpmf", lambda p: stats.binom.logpmf(np.arange(7), 6, p), (0.3,)),
    ("binom.pmf", lambda p: stats.binom.pmf(np.arange(7), 6, p), (0.3,)),
    ("binom.cdf", lambda p: stats.binom.cdf(np.arange(7), 6, p), (0.3,)),
    ("binom.logcdf", lambda p: stats.binom.logcdf(np.arange(7), 6, p), (0.3,)),
    ("bernoulli.logpmf", lambda p: stats.bernoulli.logpmf(np.array([0, 1, 1]), p), (0.3,)),
    ("bernoulli.cdf", lambda p: stats.bernoulli.cdf(np.array([0.0, 0.5]), p), (0.3,)),
]


@pytest.mark.parametrize("fn,args", [r[1:] for r in RULES], ids=[r[0] for r in RULES])
def test_derivatives_every_mode(fn, args):
    test_rule(fn, *args, noncontiguous=False)


def test_broadcast_parameters_get_unbroadcast_cotangents():
    test_rule(lambda x, m, s: stats.norm.logpdf(x[:, None], m, s),
              X, np.array([0.0, 0.5, 1.0]), np.array([0.5, 1.0, 2.0]))
    test_rule(lambda x, a, b: stats.beta.logpdf(x[:, None], a, b[:, None, None]),
              UNIT, np.array([0.8, 2.0]), np.array([1.0, 3.0]), noncontiguous=False)


REFUSED = [
    ("gamma.cdf", "a", lambda a: stats.gamma.cdf(1.0, a), 2.0),
    ("beta.cdf", "a", lambda a: stats.beta.cdf(0.3, a, 2.0), 2.0),
    ("beta.cdf", "b", lambda b: stats.beta.cdf(0.3, 2.0, b), 2.0),
    ("t.cdf", "df", lambda df: stats.t.cdf(0.3, df), 3.0),
    ("binom.cdf", "n", lambda n: stats.binom.cdf(2, n, 0.3), 6.0),
    ("binom.logpmf", "n", lambda n: stats.binom.logpmf(2, n, 0.3), 6.0),
    ("invgamma.cdf", "a", lambda a: stats.invgamma.cdf(2.0, a), 2.0),
    ("chi2.cdf", "df", lambda df: stats.chi2.logsf(2.0, df), 2.0),   # named with its family
    ("nbinom.cdf", "n", lambda n: stats.nbinom.cdf(2, n, 0.3), 2.0),
    ("vonmises.cdf", "kappa", lambda k: stats.vonmises.cdf(0.3, k), 2.0),
]


@pytest.mark.parametrize("public,param,fn,at", REFUSED, ids=[f"{r[0]}-{r[1]}" for r in REFUSED])
def test_refused_derivatives_name_function_and_parameter(public, param, fn, at):
    for run in (lambda: mp.grad(fn)(at), lambda: mp.jvp(fn, (at,), (1.0,))):
        with pytest.raises(mp.MissingRuleError) as e:
            run()
        assert public in str(e.value) and f"`{param}`" in str(e.value)


def test_discrete_variate_carries_no_derivative():
    k = np.array([0.0, 2.0, 5.0])
    g = mp.grad(lambda k: np.sum(stats.poisson.logpmf(k, 2.0)))(k)
    np.testing.assert_array_equal(g, np.zeros(3))
    mu_grad = mp.grad(lambda mu: np.sum(stats.poisson.logpmf(k, mu)))(2.0)
    np.testing.assert_allclose(mu_grad, np.sum(k / 2.0 - 1.0), rtol=1e-12)


def test_refused_parameter_as_constant_leaves_other_derivatives():
    check_grads(lambda x, s: stats.gamma.cdf(x, 2.5, scale=s), 1.3, 0.8)
    check_grads(lambda x: stats.beta.cdf(x, 2.0, 3.0), 0.4)


def test_plain_calls_are_scipys():
    x = np.linspace(-1, 2, 4)
    for got, want in [(stats.norm.logpdf(x, 0.5, 2.0), ss.norm.logpdf(x, 0.5, 2.0)),
                      (stats.gamma.cdf(x, 2.0), ss.gamma.cdf(x, 2.0)),
                      (stats.poisson.pmf(3, 2.0), ss.poisson.pmf(3, 2.0)),
                      (stats.norm(1.0, 2.0).cdf(x), ss.norm(1.0, 2.0).cdf(x))]:
        assert type(got) is type(want)
        np.testing.assert_array_equal(got, want)
    assert stats.norm.ppf(0.5) == 0.0 and stats.norm(3.0).mean() == 3.0
    assert stats.norm.rvs(size=3, random_state=0).shape == (3,)


def test_unmirrored_methods_refuse_tracked_values():
    with pytest.raises(mp.MissingRuleError, match="norm.ppf"):
        mp.grad(lambda q: stats.norm.ppf(q))(0.3)
    with pytest.raises(mp.MissingRuleError, match="norm"):
        mp.grad(lambda m: stats.norm(m).mean())(0.3)
    with pytest.raises(mp.MissingRuleError, match="multivariate_normal.cdf"):
        mp.grad(lambda x: stats.multivariate_normal.cdf(x))(np.zeros(2))


def test_frozen_distributions():
    x = np.linspace(-1, 2, 4)
    check_grads(lambda m, s: np.sum(stats.norm(m, s).logpdf(x)), 0.3, 1.2)
    check_grads(lambda a: np.sum(stats.gamma(a, scale=2.0).logpdf(x + 1.5)), 1.7)
    check_grads(lambda mu: np.sum(stats.poisson(mu).logpmf([0, 1, 4])), 1.7)
    C = np.array([[1.0, 0.3], [0.3, 2.0]])
    check_grads(lambda m: np.sum(stats.multivariate_normal(m, C).logpdf(np.ones((3, 2)))),
                np.array([0.1, -0.2]))


def test_keyword_calls_match_scipy():
    x = np.linspace(-1.0, 3.0, 5)
    cases = [("t", "logpdf", dict(x=x, df=3.0, loc=0.5, scale=2.0)),
             ("gamma", "cdf", dict(x=x + 1.5, a=2.0, scale=0.5)),
             ("beta", "logpdf", dict(x=np.linspace(0.1, 0.9, 5), b=2.0, a=0.7)),
             ("poisson", "logpmf", dict(k=np.arange(5), mu=1.5, loc=1)),
             ("multivariate_normal", "logpdf", dict(x=np.ones((2, 3)), cov=np.eye(3) * 2.0,
                                                    mean=np.zeros(3)))]
    for name, method, kw in cases:
        want = getattr(getattr(ss, name), method)(**kw)
        var = "k" if "k" in kw else "x"
        v = np.asarray(kw.pop(var), dtype=float)
        got, _ = mp.jvp(lambda u: getattr(getattr(stats, name), method)(**{var: u}, **kw), (v,),
                        (np.zeros_like(v),))
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_signature_errors():
    with pytest.raises(TypeError, match="missing"):
        mp.grad(lambda x: stats.gamma.logpdf(x))(1.0)
    with pytest.raises(TypeError, match="unexpected keyword"):
        mp.grad(lambda x: stats.norm.logpdf(x, mean=1.0))(1.0)


def test_float32_stays_float32():
    x = np.array([0.5, 1.5], dtype=np.float32)
    for f in [lambda v: stats.norm.logpdf(v, 0.1, 2.0), lambda v: stats.t.logpdf(v, 3.0),
              lambda v: stats.gamma.logpdf(v, 2.0), lambda v: stats.beta.cdf(v / 2, 2.0, 3.0),
              lambda v: stats.multivariate_normal.logpdf(v, cov=np.eye(2, dtype=np.float32))]:
        y, dy = mp.jvp(f, (x,), (np.ones_like(x),))
        assert y.dtype == np.float32 and dy.dtype == np.float32


# --- multivariate -----------------------------------------------------------------------

def _spd(d, seed):
    a = np.random.default_rng(seed).standard_normal((d, d))
    return a @ a.T + d * np.eye(d)


MVN_CASES = [  # x, mean, cov
    (np.array([0.3, -0.2, 1.0]), np.array([0.1, 0.0, -0.5]), _spd(3, 0)),
    (np.random.default_rng(1).standard_normal((4, 3)), None, _spd(3, 1)),
    (np.random.default_rng(2).standard_normal((2, 5, 3)), np.ones(3), np.array([0.5, 1.0, 2.0])),
    (np.random.default_rng(3).standard_normal((4, 2)), np.zeros(2), 1.7),
    (np.array([0.3, -0.2, 1.0]), 0.5, 2.0),            # dimension 1: x holds 3 points
    (0.4, None, np.array([[1.5]])),
]


@pytest.mark.parametrize("case", range(len(MVN_CASES)))
def test_multivariate_normal_values(case):
    x, mean, cov = MVN_CASES[case]
    want = ss.multivariate_normal.logpdf(x, mean, cov)
    got = through_tracking(stats.multivariate_normal, "logpdf", x, mean, cov)
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    got = through_tracking(stats.multivariate_normal, "pdf", x, mean=mean, cov=cov)
    np.testing.assert_allclose(got, ss.multivariate_normal.pdf(x, mean, cov), rtol=1e-12)
    if mean is not None and np.ndim(mean):
        got = tracking_params(stats.multivariate_normal, "logpdf", x, mean, cov)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_multivariate_normal_derivatives():
    x, mean, cov = MVN_CASES[1]
    B = np.linalg.cholesky(cov)
    # cov through a parametrisation that stays symmetric positive definite
    test_rule(lambda x, m, b: stats.multivariate_normal.logpdf(x, m, b @ b.T + np.eye(3)),
              x, np.zeros(3), B, noncontiguous=False)
    test_rule(lambda x, m, d: stats.multivariate_normal.logpdf(x, m, d),
              *MVN_CASES[2], noncontiguous=False)
    test_rule(lambda x, s: stats.multivariate_normal.logpdf(x, np.zeros(2), s),
              MVN_CASES[3][0], 1.7)


def test_multivariate_normal_bad_covariance():
    bad = np.array([[1.0, 2.0], [2.0, 1.0]])
    with pytest.raises(np.linalg.LinAlgError, match="positive definite"):
        mp.grad(lambda x: stats.multivariate_normal.logpdf(x, cov=bad))(np.zeros(2))
    # allow_singular=True has a rule now (tests/test_rules_polyfit_special.py): a zero
    # covariance gives SciPy's -inf, an indefinite one SciPy's ValueError
    f = lambda x: stats.multivariate_normal.logpdf(x, cov=np.zeros((2, 2)), allow_singular=True)  # noqa: E731
    assert np.isneginf(mp.value_and_grad(f)(np.zeros(2))[0])
    with pytest.raises(ValueError, match="semidefinite"):
        mp.grad(lambda x: stats.multivariate_normal.logpdf(x, cov=bad, allow_singular=True))(
            np.zeros(2))
    with pytest.raises(ValueError, match="cov"):
        mp.grad(lambda m: stats.multivariate_normal.logpdf(np.zeros(3), m, np.eye(3)))(
            np.zeros(2))
    with pytest.raises(ValueError, match="mean"):
        mp.grad(lambda m: stats.multivariate_normal.logpdf(np.zeros(4), m, np.eye(4)))(
            np.zeros((2, 2)))
    with pytest.raises(mp.MissingRuleError, match="Covariance object"):
        cov = ss.Covariance.from_precision(np.eye(2))
        mp.grad(lambda x: stats.multivariate_normal.logpdf(x, cov=cov))(np.zeros(2))
    with pytest.raises(ValueError, match="last axis"):
        mp.grad(lambda x: stats.multivariate_normal.logpdf(x, cov=1.0))(np.zeros((4, 2)))


@pytest.mark.parametrize("df", [1.0, 4.5, np.inf])
def test_multivariate_t(df):
    x = np.random.default_rng(4).standard_normal((5, 3))
    loc, shape = np.array([0.2, -0.1, 0.0]), _spd(3, 5)
    want = ss.multivariate_t.logpdf(x, loc, shape, df)
    got = through_tracking(stats.multivariate_t, "logpdf", x, loc, shape, df)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    B = np.linalg.cholesky(shape)
    if np.isfinite(df):  # SciPy's own multivariate_t.pdf fails at df=inf
        np.testing.assert_allclose(
            through_tracking(stats.multivariate_t, "pdf", x, loc, shape, df),
            ss.multivariate_t.pdf(x, loc, shape, df), rtol=1e-12)
        test_rule(lambda x, l, b, df: stats.multivariate_t.logpdf(x, l, b @ b.T, df),
                  x, loc, B, df, noncontiguous=False)


def test_dirichlet():
    alpha = np.array([0.7, 2.0, 3.5])
    x = np.array([[0.2, 0.5], [0.3, 0.1], [0.5, 0.4]])      # components on the first axis
    for xv in (x, x[:, 0], x[:2], x[:2, 0]):               # K or K - 1 components
        for method in ("logpdf", "pdf"):
            want = getattr(ss.dirichlet, method)(xv, alpha)
            got = through_tracking(stats.dirichlet, method, xv, alpha)
            assert got.shape == np.shape(want)
            np.testing.assert_allclose(got, want, rtol=1e-12)
    test_rule(lambda x, a: stats.dirichlet.logpdf(x, a), x[:2], alpha, noncontiguous=False)
    test_rule(lambda a: stats.dirichlet(a).logpdf(x), alpha, noncontiguous=False)
    with pytest.raises(ValueError, match="simplex"):
        mp.grad(lambda a: stats.dirichlet.logpdf(np.array([0.2, 0.2, 0.2]), a))(alpha)
    with pytest.raises(ValueError, match="greater than 0"):
        mp.grad(lambda v: stats.dirichlet.logpdf(v, -alpha))(x[:, 0])


def test_private_primitives_under_debug_mode(debug_mode):
    """The scipy.special primitives behind the CDFs, betaln and t's log-normaliser, with
    broadcasting parameters: debug mode checks every rule's shapes and dtypes."""
    col = POS[:, None]
    test_rule(lambda x, s: stats.gamma.logcdf(x, 2.5, scale=s), col, np.array([0.5, 1.5]),
              noncontiguous=False)
    test_rule(lambda x, df: stats.t.logpdf(x, df), X[:, None], np.array([1.5, 4.0]),
              noncontiguous=False)
    test_rule(lambda x: stats.t.sf(x, np.array([1.5, 4.0])), X[:, None], noncontiguous=False)
    test_rule(lambda x, a: stats.beta.logpdf(x, a, np.array([[1.0], [3.0]])), UNIT,
              np.array([0.7, 2.0, 4.0, 1.0, 1.5]), noncontiguous=False)
    test_rule(lambda x: stats.beta.sf(x, np.array([[1.0], [3.0]]), 2.0), UNIT,
              noncontiguous=False)
    test_rule(lambda mu: stats.poisson.logcdf(np.arange(4)[:, None], mu), np.array([0.5, 3.0]),
              noncontiguous=False)
    test_rule(lambda p: stats.binom.cdf(np.arange(4)[:, None], 5, p), np.array([0.2, 0.7]),
              noncontiguous=False)


MASKED = [  # functions of x whose masks or branches see out-of-range values somewhere
    lambda x: stats.gamma.cdf(x, 2.5),
    lambda x: stats.gamma.logcdf(x, 30.0),
    lambda x: stats.gamma.logsf(x / 100, 3.0),
    lambda x: stats.laplace.cdf(x),
    lambda x: stats.laplace.logcdf(x / 5),
    lambda x: stats.lognorm.cdf(x, 0.7),
    lambda x: stats.beta.cdf(x / 1000, 2.0, 3.0),
    lambda x: stats.cauchy.logpdf(x, 0.0, 0.1),
    lambda x: stats.t.logpdf(x[:, None], np.array([2.0, np.inf])),
    lambda x: stats.gamma.logpdf(x, 2.5),
    lambda x: stats.truncnorm.logcdf(x, np.array([[-INF], [0.3]]), np.array([[1.0], [INF]])),
    lambda x: stats.invgamma.logpdf(x, 2.5),
]


@pytest.mark.parametrize("fn", range(len(MASKED)))
def test_masks_keep_gradients_and_hvps_finite(fn):
    """Entries outside the support (or in the other branch of a piecewise formula) must not
    leak inf or nan into the derivatives of the others."""
    def f(x):
        v = MASKED[fn](x)
        return np.sum(np.where(np.isfinite(v), v, 0.0))   # -inf out of support
    x = np.array([-1.0, 0.5, 2.0, 800.0, -3.0])
    g = mp.grad(f)(x)
    hv = mp.hvp(f)(x, np.ones(5))
    assert np.all(np.isfinite(g)) and np.all(np.isfinite(hv))
    check_grads(f, x)


MULTINOMIAL = [  # x, n, p
    (np.array([1, 2, 3]), 6, np.array([0.2, 0.3, 0.5])),
    (np.array([[1, 2, 3], [0, 0, 6], [2, 2, 2]]), 6, np.array([0.2, 0.3, 0.5])),
    (np.array([1, 2, 3]), np.array([6, 5, -1]), np.array([[0.2, 0.3, 0.5]])),   # bad x, bad n
    (np.array([1.5, 1.5, 3.0]), 6, np.array([[0.2, 0.3, 0.5], [1.2, -0.5, 0.3]])),
    (np.array([1, 2, 3]), 6, np.array([0.2, 0.3, 0.4])),    # SciPy adjusts the last entry
]


@pytest.mark.filterwarnings("ignore:Some rows of `p`:FutureWarning")
@pytest.mark.parametrize("case", range(len(MULTINOMIAL)))
def test_multinomial_values(case):
    x, n, p = MULTINOMIAL[case]
    for method in ("logpmf", "pmf"):
        want = getattr(ss.multinomial, method)(x, n, p)
        got = tracking_params(stats.multinomial, method, x, n, p, plain=(0,))
        assert got.shape == np.shape(want)
        assert_same(got, want)


def test_multinomial_derivatives():
    x = np.array([[1, 2, 3], [0, 4, 2]])
    # logits keep p on the simplex under the finite-difference steps
    test_rule(lambda z: stats.multinomial.logpmf(x, 6, np.exp(z) / np.sum(np.exp(z))),
              np.array([0.1, -0.4, 0.3]), noncontiguous=False)
    with pytest.warns(FutureWarning):   # off the simplex: the derivative follows SciPy's fix
        test_rule(lambda p: stats.multinomial.logpmf(x, 6, p), np.array([0.2, 0.3, 0.4]),
                  noncontiguous=False)
    with pytest.raises(mp.MissingRuleError, match="`n`"):
        mp.grad(lambda n: stats.multinomial.logpmf(x, n, np.array([0.2, 0.3, 0.5])))(6.0)


_S3 = _spd(3, 1)
_X3 = np.stack([_spd(3, i) for i in range(4)], axis=-1)     # SciPy's layout: samples last
WISHART = [(_spd(3, 7), 5.0, _S3), (_X3, 4.5, _S3), (_X3, 3.0, np.array([1.0, 2.0, 0.5])),
           (2.5, 3.0, 1.5), (np.array([1.5, 2.0]), 4.0, 2.0), (1.7, 4.0, np.eye(2))]


@pytest.mark.parametrize("name", ["wishart", "invwishart"])
def test_wishart_values(name):
    for x, df, scale in WISHART:
        for method in ("logpdf", "pdf"):
            want = getattr(getattr(ss, name), method)(x, df, scale)
            got = through_tracking(getattr(stats, name), method, x, df, scale)
            assert got.shape == np.shape(want)
            np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("name", ["wishart", "invwishart"])
def test_wishart_derivatives(name):
    dist = getattr(stats, name)
    # x and scale through factors, so that finite-difference steps keep them positive definite
    B = np.linalg.cholesky(_S3)
    Bx = np.stack([np.linalg.cholesky(_X3[..., i]) for i in range(2)])

    def f(bx, df, b):
        x = np.moveaxis(bx @ np.swapaxes(bx, -1, -2), 0, -1) + np.eye(3)[:, :, None]
        return dist.logpdf(x, df, b @ b.T + np.eye(3))
    test_rule(f, Bx, 4.5, B, noncontiguous=False)
    check_grads(lambda s, df: np.sum(dist(df, s).logpdf(_X3)), np.array([1.0, 2.0, 0.5]), 5.0)
    with pytest.raises(ValueError, match="Degrees of freedom"):
        mp.grad(lambda s: dist.logpdf(_X3, 1.5, s))(_S3)
