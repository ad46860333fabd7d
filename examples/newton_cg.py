"""Newton-CG (trust-region) on a Bayesian logistic regression with mooncake_py HVPs.

The negative log posterior of a logistic regression with a Gaussian prior is minimised with
``scipy.optimize.minimize(method="trust-ncg")``, given the gradient (``mp.grad``) and
Hessian-vector products (``mp.hvp``, forward-over-reverse), and compared with a quasi-Newton run
(L-BFGS-B) that uses the gradient only.
"""
import time

import numpy as np
from scipy.optimize import minimize

import mooncake_py as mp

rng = np.random.default_rng(0)
n_obs, n_feat = 4000, 300
X = rng.standard_normal((n_obs, n_feat)) / np.sqrt(n_feat)
w_true = rng.standard_normal(n_feat)
y = np.where(rng.random(n_obs) < 1 / (1 + np.exp(-X @ w_true)), 1.0, -1.0)
prior_precision = 1.0


def neg_log_posterior(w):
    """Σ log(1 + exp(-yᵢ xᵢ·w)) + ½ λ |w|² in plain NumPy."""
    return np.sum(np.logaddexp(0.0, -y * (X @ w))) + 0.5 * prior_precision * np.sum(w * w)


value_and_grad = mp.value_and_grad(neg_log_posterior)
hvp = mp.hvp(neg_log_posterior)
w0 = np.zeros(n_feat)

t = time.perf_counter()
newton = minimize(value_and_grad, w0, jac=True, hessp=hvp, method="trust-ncg",
                  options={"gtol": 1e-8})
t_newton = time.perf_counter() - t

t = time.perf_counter()
quasi = minimize(value_and_grad, w0, jac=True, method="L-BFGS-B",
                 options={"gtol": 1e-8, "ftol": 1e-15, "maxiter": 10000})
t_quasi = time.perf_counter() - t

print(f"Bayesian logistic regression: {n_obs} observations, {n_feat} features")
print(f"{'method':<28} {'iterations':>10} {'f evals':>8} {'HVPs':>6} {'time (s)':>9} {'f(w*)':>14}")
print(f"{'trust-ncg + mp.hvp':<28} {newton.nit:>10} {newton.nfev:>8} {newton.nhev:>6} "
      f"{t_newton:>9.3f} {newton.fun:>14.8f}")
print(f"{'L-BFGS-B (gradient only)':<28} {quasi.nit:>10} {quasi.nfev:>8} {'-':>6} "
      f"{t_quasi:>9.3f} {quasi.fun:>14.8f}")
gnorm = np.linalg.norm(mp.grad(neg_log_posterior)(newton.x))
print(f"|grad| at the trust-ncg optimum: {gnorm:.2e}")
assert newton.success and gnorm < 1e-6, newton.message
assert abs(newton.fun - quasi.fun) < 1e-6 * max(1.0, abs(quasi.fun))
