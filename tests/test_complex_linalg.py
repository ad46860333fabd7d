"""Complex linear algebra (C treated as R², cotangents for Re Σ conj(a)·b, docs/complex.md):
norm, cholesky, eigh/eigvalsh, svd, qr, the triangular and Cholesky solves, lstsq, and the
composites (cov, gradient, nan_to_num, correlate, var/std, arccosh), in reverse, forward (lanes)
and forward-over-reverse mode, plus closed forms. Eigen- and singular vectors carry a phase
(gauge) freedom: only gauge-invariant functions of them are tested."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.testing import test_rule
from test_rules_linear_algebra import read_lower

RNG = np.random.default_rng(11)


def c(*shape):
    return RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)


def _mH(x):
    return np.conjugate(np.swapaxes(x, -1, -2))


def hpd(x):
    """A Hermitian positive definite matrix (stack) from any square x."""
    n = x.shape[-1]
    return np.matmul(x, _mH(x)) + n * np.eye(n)


def herm(x):
    return (x + _mH(x)) / 2 + np.diag(np.arange(x.shape[-1]) * 3.0)  # separated eigenvalues


# --- norm -----------------------------------------------------------------------------------
@pytest.mark.parametrize("ord", [None, 1, 2, 3, np.inf, -np.inf, 0.5])
def test_vector_norm(ord):
    test_rule(lambda z: np.linalg.norm(z, ord), c(5))
    test_rule(lambda z: np.linalg.norm(z, ord, axis=-1), c(2, 4))


@pytest.mark.parametrize("ord", ["fro", 1, -1, np.inf, -np.inf, "nuc", 2, -2])
def test_matrix_norm(ord):
    test_rule(lambda z: np.linalg.norm(z, ord, axis=(-2, -1)), c(2, 3, 4))


def test_frobenius_closed_form():
    a = c(3, 4)
    g = mp.grad(lambda a: np.linalg.norm(a))(a)
    np.testing.assert_allclose(g, a / np.linalg.norm(a), rtol=1e-12)


# --- cholesky -------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(3, 3), (2, 3, 3)])
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(shape, upper):
    test_rule(lambda x: np.linalg.cholesky(hpd(x), upper=upper), c(*shape))


def test_cholesky_logdet_closed_form():
    # log det A = 2 Σ log Re L_ii: its gradient (∂/∂Re + i∂/∂Im, Hermitian A) is A⁻ᴴ = A⁻¹.
    a = hpd(c(4, 4))
    g = mp.grad(lambda a: 2 * np.sum(np.log(np.real(np.einsum("ii->i",
                                                              np.linalg.cholesky(a))))))(a)
    np.testing.assert_allclose(g, read_lower(np.linalg.inv(a)), rtol=1e-10, atol=1e-12)


# --- eigh -----------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(4, 4), (2, 3, 3)])
def test_eigh_gauge_invariant(shape):
    test_rule(lambda x: np.linalg.eigh(herm(x))[0], c(*shape))
    test_rule(lambda x: np.linalg.eigvalsh(herm(x)), c(*shape))
    test_rule(lambda x: np.abs(np.linalg.eigh(herm(x))[1]) ** 2, c(*shape))

    def projector(x):  # v₀ v₀ᴴ
        v = np.linalg.eigh(herm(x))[1][..., :, :1]
        return np.matmul(v, _mH(v))
    test_rule(projector, c(*shape))


def test_eigh_eigenvalue_closed_form():
    a = herm(c(4, 4))
    w, v = np.linalg.eigh(a)
    g = mp.grad(lambda a: np.linalg.eigvalsh(a)[2])(a)  # dλ_k/dA = v_k v_kᴴ, lower triangle read
    np.testing.assert_allclose(g, read_lower(np.outer(v[:, 2], v[:, 2].conj())), atol=1e-12)


# --- triangular and Cholesky solves ---------------------------------------------------------
@pytest.mark.parametrize("trans", [0, 1, 2, "C"])
@pytest.mark.parametrize("lower", [True, False])
def test_solve_triangular(trans, lower):
    a = c(3, 3) + 4 * np.eye(3)
    test_rule(lambda a, b: mp.linalg.solve_triangular(a, b, trans=trans, lower=lower), a, c(3, 2))
    test_rule(lambda a, b: mp.linalg.solve_triangular(a, b, trans=trans, lower=lower), a, c(3))
    # a real triangle with a complex right-hand side, and the other way round
    test_rule(lambda a, b: mp.linalg.solve_triangular(a, b, trans=trans, lower=lower),
              a.real, c(3, 2))
    test_rule(lambda a, b: mp.linalg.solve_triangular(a, b, trans=trans, lower=lower),
              a, RNG.standard_normal((3, 2)))


def test_solve_triangular_batched():
    a = c(2, 3, 3) + 4 * np.eye(3)
    test_rule(lambda a, b: mp.linalg.solve_triangular(a, b, lower=True, trans="C"), a, c(2, 3, 2))


@pytest.mark.parametrize("lower", [True, False])
def test_cho_solve(lower):
    a = hpd(c(3, 3))
    f = np.linalg.cholesky(a, upper=not lower)
    test_rule(lambda f, b: mp.linalg.cho_solve((f, lower), b), f, c(3, 2))
    test_rule(lambda f, b: mp.linalg.cho_solve((f, lower), b), f, c(3))
    test_rule(lambda f, b: mp.linalg.cho_solve((f, lower), b), f.real + 4 * np.eye(3), c(3))


def test_cho_solve_matches_solve():
    a = hpd(c(3, 3))
    b = c(3)
    x = mp.linalg.cho_solve((np.linalg.cholesky(a), True), b)
    np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-10)


# --- composites and elementwise -------------------------------------------------------------
def test_arccosh():
    z = np.array([0.3 + 0.5j, -2 - 1j, 1.5 + 0.2j, -0.5 - 2j, 2 - 0.1j])
    test_rule(np.arccosh, z)
    g = mp.grad(lambda z: np.real(np.sum(np.arccosh(z))))(z)
    np.testing.assert_allclose(g, np.conj(1 / (np.sqrt(z - 1) * np.sqrt(z + 1))), rtol=1e-12)


def test_cov():
    test_rule(np.cov, c(3, 5))
    test_rule(lambda x, y: np.cov(x, y, bias=True, aweights=np.arange(1.0, 6)), c(2, 5), c(5))
    z = c(2, 6)
    np.testing.assert_allclose(mp.jvp(np.cov, (z,), (z,))[1], 2 * np.cov(z))


def test_gradient():
    z = c(3, 5)
    test_rule(np.gradient, z[0])
    test_rule(lambda z: np.gradient(z, axis=1, edge_order=2), z)
    test_rule(lambda z: np.gradient(z, np.array([0, 1, 3, 4, 7.0]), axis=-1), z)


def test_nan_to_num():
    z = c(3, 4)
    z[0, 0], z[1, 1], z[2, 2] = np.nan, complex(np.inf, 1), complex(1, -np.inf)
    test_rule(lambda z: np.nan_to_num(z, nan=2.0, posinf=3.0, neginf=-4.0), z)
    g = mp.grad(lambda z: np.real(np.sum(np.nan_to_num(z))))(z)
    np.testing.assert_array_equal(g[[0, 1, 2], [0, 1, 2]], [0, 0, 1])  # real parts replaced


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_correlate_and_convolve(mode):
    from mooncake_py.scipy import signal
    for a, v in ((c(5), c(3)), (c(3), c(5)), (c(5).real, c(3)), (c(5), c(3).real)):
        test_rule(lambda a, v: np.correlate(a, v, mode), a, v)
        test_rule(lambda a, v: np.convolve(a, v, mode), a, v)
    test_rule(lambda a, v: signal.correlate(a, v, mode), c(4, 3), c(2, 2))
    # np.correlate conjugates its second argument: Σ a[n+k]·conj(v[k])
    a, v = c(4), c(4)
    g = mp.grad(lambda v: np.real(np.correlate(a, v)[0]))(v)
    np.testing.assert_allclose(g, a, rtol=1e-12)


@pytest.mark.parametrize("fn", [np.var, np.std])
def test_var_std(fn):
    z = c(3, 4)
    test_rule(fn, z)
    test_rule(lambda z: fn(z, axis=0, ddof=1), z)
    g = mp.grad(lambda z: np.var(z))(z)  # var = mean |z − m|²: gradient 2(z − m)/N
    np.testing.assert_allclose(g, 2 * (z - z.mean()) / z.size, rtol=1e-12)


# --- svd ------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(3, 3), (4, 3), (3, 4), (2, 4, 3)])
@pytest.mark.parametrize("full", [False, True])
def test_svd_gauge_invariant(shape, full):
    def pairs(x):  # Σ_i w_i u_i v_iᴴ: each pair's common phase cancels
        u, s, vh = np.linalg.svd(x, full_matrices=full)
        k = s.shape[-1]
        return np.matmul(u[..., :, :k] * np.arange(1.0, k + 1), vh[..., :k, :])
    test_rule(lambda x: np.linalg.svd(x, full_matrices=full)[1], c(*shape))
    test_rule(lambda x: np.linalg.svd(x, compute_uv=False), c(*shape))
    test_rule(pairs, c(*shape))
    test_rule(lambda x: np.abs(np.linalg.svd(x, full_matrices=full)[0][..., :, :2]) ** 2,
              c(*shape))
    test_rule(lambda x: np.abs(np.linalg.svd(x, full_matrices=full)[2][..., :2, :]) ** 2,
              c(*shape))


def test_svd_projector_on_the_complement():
    def proj(x):  # U₂ U₂ᴴ of a full decomposition: a function of A
        u = np.linalg.svd(x)[0][..., :, 2:]
        return np.matmul(u, _mH(u))
    test_rule(proj, c(4, 2))


def test_svdvals_and_nuclear_norm_closed_form():
    a = c(4, 3)
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    g = mp.grad(lambda a: np.sum(np.linalg.svdvals(a)))(a)
    np.testing.assert_allclose(g, u @ vh, atol=1e-12)
    g = mp.grad(lambda a: np.linalg.norm(a, "nuc"))(a)
    np.testing.assert_allclose(g, u @ vh, atol=1e-12)


# --- qr -------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(3, 3), (4, 3), (3, 4), (2, 4, 3)])
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr(shape, mode):
    # LAPACK's R has a real diagonal: Q and R are functions of A (no gauge), except the extra
    # columns of a complete Q, tested through their projector.
    def f(x):
        out = np.linalg.qr(x, mode)
        if mode == "r":
            return out
        q, r = out
        k = min(shape[-2:])
        q1, q2 = q[..., :, :k], q[..., :, k:]
        return q1, r, np.matmul(q2, _mH(q2))
    test_rule(f, c(*shape))


def test_scipy_qr():
    from mooncake_py.scipy import linalg as sla
    test_rule(lambda x: sla.qr(x, mode="economic"), c(4, 3))
    test_rule(lambda x: sla.qr(x, mode="r")[0], c(3, 4))


# --- lstsq ----------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(4, 3), (3, 3), (3, 4)])
def test_lstsq(shape):
    a = c(*shape)
    test_rule(lambda a, b: np.linalg.lstsq(a, b)[0], a, c(shape[0]))
    test_rule(lambda a, b: np.linalg.lstsq(a, b)[0], a, c(shape[0], 2))
    test_rule(lambda a, b: np.linalg.lstsq(a, b)[3], a, c(shape[0]))
    if shape[0] > shape[1]:
        test_rule(lambda a, b: np.linalg.lstsq(a, b)[1], a, c(shape[0], 2))
