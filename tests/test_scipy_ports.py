"""Three probabilistic programs ported from SciPy to mooncake_py.scipy by changing only the
imports: each is written once against the module-level names ``stats`` and ``special``; run
with SciPy's modules bound there it gives the reference value, run with mooncake_py.scipy's it
is differentiated (gradient and Hessian-vector products, checked by finite differences)."""
import sys

import numpy as np
import pytest
import scipy.special
import scipy.stats

import mooncake_py as mp
import mooncake_py.scipy.special
import mooncake_py.scipy.stats
from mooncake_py.testing import check_grads

stats, special = scipy.stats, scipy.special    # the two lines a port changes

_RNG = np.random.default_rng(11)
X_GP = np.sort(_RNG.uniform(-3, 3, 12))
Y_GP = np.sin(X_GP) + 0.1 * _RNG.standard_normal(12)
A_REG = _RNG.standard_normal((20, 3))
Y_REG = A_REG @ np.array([0.5, -1.0, 2.0]) + 0.3 * _RNG.standard_t(4, 20)
X_GMM = np.concatenate([_RNG.normal(-2, 0.5, 15), _RNG.normal(1.5, 1.0, 15)])


def gp_log_marginal_likelihood(theta):
    """GP regression: log N(y | 0, K(theta) + noise) in (log lengthscale, log signal sd,
    log noise sd)."""
    log_ls, log_sf, log_sn = theta[0], theta[1], theta[2]
    d2 = (X_GP[:, None] - X_GP[None, :]) ** 2
    K = np.exp(2 * log_sf) * np.exp(-0.5 * d2 / np.exp(2 * log_ls))
    K = K + (np.exp(2 * log_sn) + 1e-8) * np.eye(len(X_GP))
    return stats.multivariate_normal.logpdf(Y_GP, mean=np.zeros(len(X_GP)), cov=K)


def robust_regression_log_posterior(theta):
    """Bayesian regression with Student-t noise: weights, log scale and log df."""
    w, log_s, log_df = theta[:3], theta[3], theta[4]
    prior = (np.sum(stats.norm.logpdf(w, 0.0, 2.0)) + stats.norm.logpdf(log_s, 0.0, 1.0)
             + stats.gamma.logpdf(np.exp(log_df), 2.0, scale=5.0) + log_df)
    lik = np.sum(stats.t.logpdf(Y_REG, np.exp(log_df), loc=A_REG @ w, scale=np.exp(log_s)))
    return prior + lik


def gmm_log_likelihood(theta):
    """Two-component Gaussian mixture: means, log sds and component logits."""
    mu, log_sd, logits = theta[:2], theta[2:4], theta[4:6]
    log_w = special.log_softmax(logits)
    comp = stats.norm.logpdf(X_GMM[:, None], mu, np.exp(log_sd)) + log_w
    return np.sum(special.logsumexp(comp, axis=1)) + np.sum(stats.norm.logpdf(mu, 0.0, 3.0))


PROGRAMS = [
    (gp_log_marginal_likelihood, np.array([0.1, 0.2, -1.5])),
    (robust_regression_log_posterior, np.array([0.3, -0.8, 1.5, -1.0, 1.2])),
    (gmm_log_likelihood, np.array([-1.5, 1.0, -0.5, 0.1, 0.2, -0.3])),
]
IDS = ["gp", "regression", "gmm"]


@pytest.fixture
def ported(monkeypatch):
    """Bind mooncake_py.scipy's modules where the programs look up ``stats`` and ``special``."""
    module = sys.modules[__name__]
    monkeypatch.setattr(module, "stats", mooncake_py.scipy.stats)
    monkeypatch.setattr(module, "special", mooncake_py.scipy.special)


@pytest.mark.parametrize("program,theta", PROGRAMS, ids=IDS)
def test_port_gradient_and_hvp(program, theta, ported):
    with pytest.MonkeyPatch.context() as m:      # the unported program, on plain SciPy
        m.setattr(sys.modules[__name__], "stats", scipy.stats)
        m.setattr(sys.modules[__name__], "special", scipy.special)
        reference = program(theta)
    value, g = mp.value_and_grad(program)(theta)
    np.testing.assert_allclose(value, reference, rtol=1e-11)
    check_grads(program, theta)
    rng = np.random.default_rng(0)
    for _ in range(2):
        v = rng.standard_normal(theta.shape)
        hv = mp.hvp(program)(theta, v)
        h = 1e-5
        fd = (mp.grad(program)(theta + h * v) - mp.grad(program)(theta - h * v)) / (2 * h)
        np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-6 * np.max(np.abs(fd)))
    # the full Hessian (all directions as lanes of one sweep) agrees with the HVPs
    H = mp.hessian(program)(theta)
    np.testing.assert_allclose(H @ v, hv, rtol=1e-9, atol=1e-9 * np.max(np.abs(hv)))
    np.testing.assert_allclose(H, H.T, rtol=1e-9, atol=1e-9 * np.max(np.abs(H)))


def test_unported_program_loses_tracking():
    """Why the port is needed: SciPy's stats converts tracked values with np.asarray."""
    with pytest.raises(mp.TrackingLostError):
        mp.grad(gp_log_marginal_likelihood)(PROGRAMS[0][1])
