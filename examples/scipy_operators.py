"""A small MLP's loss handed to SciPy through Hessian-vector products.

Training by trust-region Newton-CG (``method="trust-ncg"``, which copes with the negative
curvature of a network's loss where plain ``"Newton-CG"`` stalls) with ``mp.hessp``, then the
sharpness (the largest Hessian eigenvalue) with ``mp.hessian_operator`` and
``scipy.sparse.linalg.eigsh``. No Hessian is formed for either; each product is one
forward-over-reverse sweep. The parameters live in a dict, flattened with ``mp.ravel_pytree``.
"""
import time

import numpy as np
from scipy.optimize import minimize
from scipy.sparse.linalg import eigsh

import mooncake_py as mp

rng = np.random.default_rng(0)
n_in, n_hidden, n_obs = 3, 8, 200
X = rng.standard_normal((n_obs, n_in))
y = np.sin(X @ np.array([1.0, -2.0, 0.5])) + 0.05 * rng.standard_normal(n_obs)

params = {"W1": 0.5 * rng.standard_normal((n_in, n_hidden)), "b1": np.zeros(n_hidden),
          "w2": 0.5 * rng.standard_normal(n_hidden), "b2": 0.0}
theta0, unravel = mp.ravel_pytree(params)   # SciPy works on flat vectors


def loss(theta, X, y, decay):
    """Mean squared error of a one-hidden-layer tanh network, plus weight decay."""
    p = unravel(theta)
    pred = np.tanh(X @ p["W1"] + p["b1"]) @ p["w2"] + p["b2"]
    return np.mean((pred - y) ** 2) + decay * np.sum(theta ** 2)


args = (X, y, 1e-2)
t = time.perf_counter()
result = minimize(loss, theta0, args=args, jac=mp.grad(loss), hessp=mp.hessp(loss),
                  method="trust-ncg", options={"gtol": 1e-8, "maxiter": 300})
t_fit = time.perf_counter() - t

t = time.perf_counter()
H = mp.hessian_operator(loss, result.x, *args)           # (n, n) LinearOperator, float64
top, _ = eigsh(H, k=1, which="LA", tol=1e-10)           # largest curvature: the sharpness
t_eig = time.perf_counter() - t

gnorm = np.linalg.norm(mp.grad(loss)(result.x, *args))
print(f"MLP {n_in}-{n_hidden}-1, {theta0.size} parameters, {n_obs} observations")
print(f"trust-ncg: {result.nit} iterations, {result.nhev} Hessian-vector products, "
      f"loss {result.fun:.6f}, |grad| {gnorm:.1e}, {t_fit:.2f} s")
print(f"sharpness (top Hessian eigenvalue by eigsh): {top[0]:.6f}, {t_eig:.2f} s")

# checks: the gradient vanishes at the optimum, and eigsh agrees with the dense Hessian
H_dense = mp.hessian(loss)(result.x, *args)
assert gnorm < 1e-6, gnorm
assert np.isclose(top[0], np.linalg.eigvalsh(H_dense)[-1], rtol=1e-8)
assert np.allclose(H @ np.eye(theta0.size), H_dense, atol=1e-10)
