"""mp.hessp and mp.hessian_operator driving SciPy: the optimizers that take Hessian products,
Krylov solvers and eigsh, checked against known optima and closed-form eigenvalues."""
import numpy as np
import pytest

scipy = pytest.importorskip("scipy")
from scipy.optimize import minimize, rosen, rosen_hess  # noqa: E402
from scipy.sparse.linalg import LinearOperator, cg, eigsh, minres  # noqa: E402

import mooncake_py as mp  # noqa: E402

rng = np.random.default_rng(7)


def rosenbrock(x, scale=100.0):
    return np.sum(scale * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


@pytest.mark.parametrize("method", ["Newton-CG", "trust-ncg", "trust-krylov", "trust-constr"])
def test_minimize_rosenbrock_with_args(method):
    # args= goes through SciPy's hessp(x, p, *args) order; the optimum is all ones for any scale
    x0 = np.array([1.3, 0.7, 0.8, 1.9, 1.2])
    opts = {"xtol": 1e-10} if method == "Newton-CG" else {"gtol": 1e-10}
    r = minimize(rosenbrock, x0, args=(50.0,), jac=mp.grad(rosenbrock),
                 hessp=mp.hessp(rosenbrock), method=method, options=opts)
    assert r.success, r.message
    np.testing.assert_allclose(r.x, np.ones(5), atol=1e-6)
    assert r.nhev > 0


def test_trust_constr_with_hessian_operator_as_hess():
    # a quadratic with a known minimiser A⁻¹ b, with the Hessian given as an operator
    B = rng.standard_normal((6, 6))
    A = B @ B.T + 6 * np.eye(6)
    b = rng.standard_normal(6)
    f = lambda x, A, b: 0.5 * x @ A @ x - b @ x
    r = minimize(f, np.zeros(6), args=(A, b), jac=mp.grad(f), method="trust-constr",
                 hess=lambda x, A, b: mp.hessian_operator(f, x, A, b),
                 options={"gtol": 1e-12, "xtol": 1e-14})
    np.testing.assert_allclose(r.x, np.linalg.solve(A, b), rtol=1e-7, atol=1e-9)


def test_hessp_matches_rosen_hess_for_every_direction_form():
    x = rng.uniform(-1, 1, 5)
    H = rosen_hess(x)
    hp = mp.hessp(lambda x: rosenbrock(x))
    p = rng.standard_normal(5)
    np.testing.assert_allclose(hp(x, p), H @ p, rtol=1e-12)
    P = rng.standard_normal((5, 3))
    np.testing.assert_allclose(hp(x, P), H @ P, rtol=1e-12)                  # (n, k): lanes
    np.testing.assert_allclose(hp(x, P[:, :1]), H @ P[:, :1], rtol=1e-12)    # (n, 1)
    e = np.zeros(5, dtype=np.int8)
    e[2] = 1
    out = hp(x, e)                                                           # SciPy's int8 probe
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, H[:, 2], rtol=1e-12)
    np.testing.assert_allclose(hp(x, e.astype(bool)), H[:, 2], rtol=1e-12)


def test_hessp_refuses_complex_and_misshapen_directions():
    hp = mp.hessp(rosenbrock)
    x = np.zeros(3)
    with pytest.raises(mp.TangentError, match="complex|real"):
        hp(x, np.ones(3, dtype=complex))
    with pytest.raises(mp.TangentError, match=r"\(3, k\)"):
        hp(x, np.ones((2, 3)))
    with pytest.raises(mp.NonDifferentiableInputError):
        hp(np.zeros(3, dtype=int), np.ones(3))


def test_hvp_in_scipy_order_names_hessp():
    # the mistake mp.hessp exists for: mp.hvp given SciPy's (x, p, *args)
    f = lambda x, tau: tau * np.sum(x ** 4)
    with pytest.raises(mp.TangentError, match="mp.hessp"):
        mp.hvp(f)(np.ones(3), np.ones(3), 2.0)


def test_operator_float32_and_shapes():
    A = np.diag(np.arange(1.0, 5.0)).astype(np.float32)
    H = mp.hessian_operator(lambda x: 0.5 * x @ A @ x, np.ones(4, dtype=np.float32))
    assert H.shape == (4, 4) and H.dtype == np.float32
    assert isinstance(H, LinearOperator)
    y = H @ np.ones(4, dtype=np.int64)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, np.arange(1.0, 5.0))
    np.testing.assert_allclose(H.T @ np.eye(4), A)          # symmetric: rmatmat = matmat
    np.testing.assert_allclose(H.matvec(np.ones((4, 1))), np.arange(1.0, 5.0)[:, None])


def test_operator_without_explicit_dtype_probe():
    # LinearOperator built from hessp alone (no dtype): SciPy probes with an int8 vector
    x = rng.uniform(-1, 1, 4)
    hp = mp.hessp(rosenbrock)
    H = LinearOperator((4, 4), matvec=lambda p: hp(x, p))
    assert H.dtype == np.float64
    np.testing.assert_allclose(H @ np.eye(4), rosen_hess(x), rtol=1e-12)


@pytest.mark.parametrize("solver", [cg, minres])
def test_krylov_newton_step(solver):
    # Newton step of a strongly convex function: H s = -g, checked against the dense Hessian
    W = rng.standard_normal((20, 8))
    f = lambda w: np.sum(np.logaddexp(0.0, W @ w)) + 0.5 * w @ w
    w = rng.standard_normal(8)
    H = mp.hessian_operator(f, w)
    g = mp.grad(f)(w)
    s, info = solver(H, -g, rtol=1e-12)
    assert info == 0
    np.testing.assert_allclose(s, np.linalg.solve(mp.hessian(f)(w), -g), rtol=1e-8, atol=1e-10)


def test_eigsh_largest_curvature_closed_form():
    # f(x) = ½ Σ λᵢ (qᵢ·x)² + ¼ |x|⁴ at x = 0 has Hessian Q diag(λ) Qᵀ
    n = 30
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    lam = np.linspace(0.5, 7.0, n)
    f = lambda x: 0.5 * np.sum(lam * (Q.T @ x) ** 2) + 0.25 * (x @ x) ** 2
    H = mp.hessian_operator(f, np.zeros(n))
    top = eigsh(H, k=2, which="LA", return_eigenvectors=False)
    np.testing.assert_allclose(np.sort(top), lam[-2:], rtol=1e-9)


def test_operator_on_matrix_and_container_arguments():
    X = rng.standard_normal((3, 2))
    f = lambda M: np.sum(np.sin(M) * M)
    H = mp.hessian_operator(f, X)
    assert H.shape == (6, 6)
    dense = mp.hessian(f)(X).reshape(6, 6)
    np.testing.assert_allclose(H @ np.eye(6), dense, rtol=1e-12, atol=1e-14)
    params = {"w": rng.standard_normal(3), "b": 0.5, "n": 2}
    g = lambda p, c: c * np.sum(np.tanh(p["w"] * p["b"])) * p["n"]
    Hp = mp.hessian_operator(g, params, 1.5)
    flat, unravel = mp.ravel_pytree(params)
    assert Hp.shape == (4, 4)
    np.testing.assert_allclose(Hp @ np.eye(4), mp.hessian(g)(params, 1.5), rtol=1e-12)


def test_operator_matmat_in_chunks():
    # matmat in chunks: more directions than one chunk still gives the dense Hessian
    x = rng.uniform(-1, 1, 10)
    H = mp.hessian_operator(rosenbrock, x)
    with mp.Config(chunk_size=3):
        np.testing.assert_allclose(H @ np.eye(10), rosen_hess(x), rtol=1e-12, atol=1e-12)
    assert np.isclose(rosenbrock(x), rosen(x))
