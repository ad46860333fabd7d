"""Laplace approximation of a Poisson regression posterior: mode by Newton steps, covariance from
the Hessian computed by ``mp.hessian`` (forward-over-reverse, several directions per sweep)."""
import numpy as np

import mooncake_py as mp

rng = np.random.default_rng(1)
n_obs, n_feat = 200, 4
X = np.column_stack([np.ones(n_obs), rng.standard_normal((n_obs, n_feat - 1))])
beta_true = np.array([0.5, -0.3, 0.8, 0.1])
counts = rng.poisson(np.exp(X @ beta_true)).astype(float)
prior_sd = 2.0


def neg_log_posterior(beta):
    """Poisson log-likelihood with a log link and a N(0, prior_sd²) prior, negated."""
    eta = X @ beta
    return np.sum(np.exp(eta) - counts * eta) + 0.5 * np.sum(beta ** 2) / prior_sd ** 2


grad = mp.grad(neg_log_posterior)
hessian = mp.hessian(neg_log_posterior)

beta = np.zeros(n_feat)
for it in range(50):
    step = np.linalg.solve(hessian(beta), grad(beta))
    beta = beta - step
    if np.max(np.abs(step)) < 1e-12:
        break
H = hessian(beta)
cov = np.linalg.inv(H)

# The closed form of this Hessian: Xᵀ diag(exp(Xβ)) X + I / prior_sd².
H_exact = X.T @ (np.exp(X @ beta)[:, None] * X) + np.eye(n_feat) / prior_sd ** 2
print(f"Newton iterations to the mode: {it + 1}")
print(f"{'coefficient':>11} {'true':>8} {'mode':>9} {'posterior sd':>13}")
for j in range(n_feat):
    print(f"{j:>11} {beta_true[j]:>8.3f} {beta[j]:>9.4f} {np.sqrt(cov[j, j]):>13.4f}")
err = np.max(np.abs(H - H_exact)) / np.max(np.abs(H_exact))
print(f"max relative error of mp.hessian against the closed form: {err:.1e}")
assert err < 1e-12
