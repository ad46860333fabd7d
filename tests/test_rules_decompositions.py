"""Rules of rules/decompositions.py (np.linalg qr, eig, eigvals, lstsq, matrix_power, cond, the
norm's ord variants; scipy.linalg lu, expm, sqrtm, solve_sylvester, solve_banded) against finite
differences in every mode (test_rule), closed forms, and the named errors."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.testing import test_rule, check_grads
from mooncake_py.scipy import linalg as L

RNG = np.random.default_rng(20261203)


def rand(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


def well_conditioned(*shape):
    n = shape[-1]
    return rand(*shape) + 2 * n ** 0.5 * np.eye(n)


def spd(*shape):
    m = well_conditioned(*shape)
    return m @ np.swapaxes(m, -1, -2)


def real_spectrum(*shape):
    """Non-symmetric matrices with well separated real eigenvalues."""
    n = shape[-1]
    v = well_conditioned(*shape)
    return (v * (np.arange(1.0, n + 1) * 2)) @ np.linalg.inv(v)  # V diag(2, 4, ...) V⁻¹


# --- np.linalg.qr -----------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(4, 3), (3, 3), (3, 5), (2, 4, 3), (2, 3, 4)])
@pytest.mark.parametrize("mode", ["reduced", "r"])
def test_qr(shape, mode):
    test_rule(lambda a: np.linalg.qr(a, mode), rand(*shape))


@pytest.mark.parametrize("shape", [(3, 3), (3, 5), (2, 3, 4)])
def test_qr_complete_where_unique(shape):
    test_rule(lambda a: np.linalg.qr(a, "complete"), rand(*shape))


def test_qr_complete_tall():
    # The extra columns Q₂ are not functions of A, but the projector Q₂Q₂ᵀ and R are.
    def f(a):
        q, r = np.linalg.qr(a, "complete")
        return q[:, 3:] @ q[:, 3:].T, r, q[:, :3]
    test_rule(f, rand(5, 3))


def test_qr_closed_form():
    # R's diagonal magnitudes: |r_11| = ‖a_1‖, so d|r_11|/dA = a_1 / ‖a_1‖ in the first column.
    a = rand(4, 3)
    g = mp.grad(lambda a: np.abs(np.linalg.qr(a)[1][0, 0]))(a)
    want = np.zeros_like(a)
    want[:, 0] = a[:, 0] / np.linalg.norm(a[:, 0])
    np.testing.assert_allclose(g, want, atol=1e-12)


def test_qr_raw_is_refused():
    with pytest.raises(mp.MissingRuleError, match="raw"):
        mp.grad(lambda a: np.sum(np.linalg.qr(a, "raw")[0]))(rand(3, 3))


# --- np.linalg.eig, eigvals -------------------------------------------------------------------
def sign_free_eig(a):
    """eig's (w, V) with each column of V times its first entry: LAPACK picks the sign (a
    real factor ±1 after making the largest component real) and may flip it under a tiny
    perturbation, which finite differences would see as a jump; these products do not."""
    w, v = np.linalg.eig(a)
    return w, v * v[..., :1, :]


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4)])
def test_eig_real_spectrum(shape):
    test_rule(sign_free_eig, real_spectrum(*shape))


def test_eigvals():
    test_rule(np.linalg.eigvals, real_spectrum(4, 4))
    test_rule(np.linalg.eigvals, real_spectrum(2, 3, 3))


def test_eig_eigenvalue_closed_form():
    # dλ_i/dA = u_i v_iᵀ / (u_iᵀ v_i) with left eigenvectors u_i (rows of V⁻¹).
    a = real_spectrum(3, 3)
    w, v = np.linalg.eig(a)
    i = int(np.argmax(w))
    g = mp.grad(lambda a: np.max(np.linalg.eigvals(a)))(a)
    u = np.linalg.inv(v)[i]
    np.testing.assert_allclose(g, np.outer(u, v[:, i]), rtol=1e-9, atol=1e-12)


def rotation_like(*shape):
    """Real matrices whose eigenvalues come in complex-conjugate pairs."""
    n = shape[-1]
    v = well_conditioned(*shape)
    blocks = np.zeros((n, n))
    for i in range(0, n - 1, 2):
        blocks[i:i + 2, i:i + 2] = [[i + 1.0, -(i + 2.0)], [i + 2.0, i + 1.0]]
    if n % 2:
        blocks[-1, -1] = -3.0
    return v @ blocks @ np.linalg.inv(v)


@pytest.mark.parametrize("shape", [(2, 2), (3, 3), (2, 4, 4)])
def test_eig_complex_eigenvalues_of_real_matrix(shape):
    a = rotation_like(*shape)
    assert np.iscomplexobj(np.linalg.eigvals(a))
    test_rule(sign_free_eig, a)
    test_rule(np.linalg.eigvals, a)
    test_rule(lambda a: np.abs(np.linalg.eigvals(a)), a)


def test_eig_complex_input():
    a = rand(3, 3) + 1j * rand(3, 3)
    test_rule(sign_free_eig, a)


def test_eig_complex_closed_forms():
    # [[a, -b], [b, a]] has eigenvalues a ± ib: d Re λ / da = 1, d |λ|² / db = 2b
    m = lambda a, b: np.stack([np.stack([a, -b]), np.stack([b, a])])  # noqa: E731
    g = mp.grad(lambda a, b: np.real(np.linalg.eigvals(m(a, b))[0]), argnums=(0, 1))(0.5, 2.0)
    np.testing.assert_allclose(g, (1.0, 0.0), atol=1e-12)
    g = mp.grad(lambda b: np.abs(np.linalg.eigvals(m(0.5, b))[0]) ** 2)(2.0)
    np.testing.assert_allclose(g, 4.0, rtol=1e-12)
    # the spectral abscissa's HVP against finite differences of its gradient
    a0, v = rotation_like(3, 3), rand(3, 3)
    f = lambda a: np.sum(np.real(np.linalg.eigvals(a)) ** 2 * np.imag(np.linalg.eigvals(a)))  # noqa: E731,E501
    fd = (mp.grad(f)(a0 + 1e-6 * v) - mp.grad(f)(a0 - 1e-6 * v)) / 2e-6
    np.testing.assert_allclose(mp.hvp(f)(a0, v), fd, rtol=1e-6, atol=1e-7)


def test_eig_hvp_against_hessian_of_symmetric_case():
    # For a symmetric input eig and eigh give the same spectrum: the same Hessian of Σλ³.
    a = spd(3, 3)
    v = rand(3, 3)
    h1 = mp.hvp(lambda a: np.sum(np.linalg.eigvals(a) ** 3))(a, v)
    h2 = mp.hvp(lambda a: np.sum(np.linalg.eigvalsh((a + a.T) / 2) ** 3))(a, (v + v.T) / 2)
    np.testing.assert_allclose((h1 + h1.T) / 2, h2, rtol=1e-7, atol=1e-7)


# --- np.linalg.lstsq --------------------------------------------------------------------------
@pytest.mark.parametrize("sa,sb", [((5, 3), (5,)), ((5, 3), (5, 2)), ((3, 5), (3,)),
                                   ((3, 5), (3, 2)), ((3, 3), (3,))])
def test_lstsq(sa, sb):
    test_rule(lambda a, b: np.linalg.lstsq(a, b), rand(*sa), rand(*sb))


def test_lstsq_rcond_keyword_and_constant_matrix():
    a, b = rand(6, 2), rand(6)
    test_rule(lambda b: np.linalg.lstsq(a, b, rcond=None)[0], b)
    # x is linear in b: its Jacobian is the pseudo-inverse
    jac = mp.jacobian(lambda b: np.linalg.lstsq(a, b)[0])(b)
    np.testing.assert_allclose(jac, np.linalg.pinv(a), rtol=1e-10)


# --- matrix_power, cond, norm -----------------------------------------------------------------
@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 8, -1, -3])
def test_matrix_power(n):
    a = well_conditioned(3, 3) / 3
    test_rule(lambda a: np.linalg.matrix_power(a, n), a)


def test_matrix_power_batched_and_closed_form():
    test_rule(lambda a: np.linalg.matrix_power(a, 4), rand(2, 3, 3))
    a = rand(3, 3)
    # d tr(A³)/dA = 3 (A²)ᵀ
    g = mp.grad(lambda a: np.trace(np.linalg.matrix_power(a, 3)))(a)
    np.testing.assert_allclose(g, 3 * (a @ a).T, rtol=1e-12)


@pytest.mark.parametrize("p", [None, 2, -2, 1, -1, np.inf, -np.inf, "fro", "nuc"])
def test_cond(p):
    test_rule(lambda a: np.linalg.cond(a, p), well_conditioned(3, 3))


def test_cond_batched():
    test_rule(np.linalg.cond, well_conditioned(2, 3, 3))


@pytest.mark.parametrize("ord", [None, 1, -1, 2, -2, np.inf, -np.inf, "fro", "nuc"])
def test_matrix_norm_ords(ord):
    test_rule(lambda a: np.linalg.norm(a, ord), rand(3, 4))
    test_rule(lambda a: np.linalg.norm(a, ord, axis=(2, 0)), rand(3, 2, 4))


@pytest.mark.parametrize("ord", [None, 1, 2, 3, 0.5, 1.5, -1, np.inf, -np.inf])
def test_vector_norm_ords(ord):
    test_rule(lambda x: np.linalg.norm(x, ord), rand(5))
    test_rule(lambda x: np.linalg.norm(x, ord, axis=1, keepdims=True), rand(2, 4))


def test_spectral_norm_closed_form():
    a = rand(4, 3)
    u, s, vh = np.linalg.svd(a)
    np.testing.assert_allclose(mp.grad(lambda a: np.linalg.norm(a, 2))(a),
                               np.outer(u[:, 0], vh[0]), rtol=1e-9)


# --- scipy.linalg.lu --------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(3, 3), (5, 3), (3, 5), (2, 4, 4)])
def test_lu(shape):
    test_rule(L.lu, rand(*shape))


@pytest.mark.parametrize("kw", [dict(permute_l=True), dict(p_indices=True)])
def test_lu_flags(kw):
    test_rule(lambda a: L.lu(a, **kw), rand(4, 4))
    test_rule(lambda a: L.lu(a, **kw), rand(2, 3, 5))


def test_lu_logdet_closed_form():
    a = well_conditioned(4, 4)
    g = mp.grad(lambda a: np.sum(np.log(np.abs(np.diagonal(L.lu(a)[2])))))(a)
    np.testing.assert_allclose(g, np.linalg.inv(a).T, rtol=1e-10)


# --- expm, sqrtm, solve_sylvester -------------------------------------------------------------
@pytest.mark.parametrize("shape", [(3, 3), (2, 3, 3), (1, 1)])
def test_expm(shape):
    test_rule(L.expm, rand(*shape) / 2)


def test_expm_closed_forms():
    a = rand(3, 3) / 2
    # d/dt expm(tA) = A expm(tA); det(expm(A)) = exp(tr A)
    _, ydot = mp.jvp(lambda t: L.expm(t * a), (1.0,), (1.0,))
    np.testing.assert_allclose(ydot, a @ L.expm(a), rtol=1e-10)
    g = mp.grad(lambda a: np.log(np.linalg.det(L.expm(a))))(a)
    np.testing.assert_allclose(g, np.eye(3), atol=1e-10)


def test_expm_second_order_full_hessian():
    a = rand(2, 2) / 2
    w = rand(2, 2)
    f = lambda a: np.sum(w * L.expm(a))  # noqa: E731
    h = mp.hessian(f)(a)
    eps = 1e-5
    for i in range(2):
        for j in range(2):
            e = np.zeros((2, 2))
            e[i, j] = eps
            fd = (mp.grad(f)(a + e) - mp.grad(f)(a - e)) / (2 * eps)
            np.testing.assert_allclose(h[..., i, j], fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("shape", [(3, 3), (2, 3, 3)])
def test_sqrtm(shape):
    test_rule(L.sqrtm, spd(*shape))


def test_sqrtm_closed_form_and_complex_root():
    a = np.diag([4.0, 9.0])
    np.testing.assert_allclose(mp.grad(lambda a: np.trace(L.sqrtm(a)))(a),
                               np.diag([0.25, 1 / 6]), rtol=1e-12)
    # a negative eigenvalue: the root is complex; d Im √(−x)/dx = −1/(2√x) at x = 1
    g = mp.grad(lambda a: np.imag(L.sqrtm(a)[0, 0]))(np.diag([-1.0, 2.0]))
    np.testing.assert_allclose(g, np.diag([-0.5, 0.0]), atol=1e-12)
    test_rule(L.sqrtm, np.diag([-1.0, 2.0, 3.0]) + 0.1 * rand(3, 3))


def crand(*shape):
    return rand(*shape) + 1j * rand(*shape)


COMPLEX_CASES = [
    (L.expm, lambda: [crand(3, 3) / 2]),
    (L.sqrtm, lambda: [crand(3, 3) + 3 * np.eye(3)]),
    (L.solve_sylvester, lambda: [crand(3, 3) + 4 * np.eye(3), crand(2, 2) + 4 * np.eye(2),
                                 crand(3, 2)]),
    (L.lu, lambda: [crand(3, 3)]),
    (lambda ab, b: L.solve_banded((1, 1), ab, b),
     lambda: [crand(3, 4) + np.array([[0.0], [5.0], [0.0]]), crand(4)]),
]


@pytest.mark.parametrize("fn,make", COMPLEX_CASES)
def test_complex_differentiable_functions(fn, make):
    test_rule(fn, *make())


def test_qr_of_complex():  # (more in test_complex_linalg.py)
    a = crand(3, 3)
    g = mp.grad(lambda a: np.abs(np.linalg.qr(a)[1][0, 0]))(a)
    np.testing.assert_allclose(g, a[:, :1] / np.linalg.norm(a[:, 0]) * np.eye(3)[:1], atol=1e-12)


@pytest.mark.parametrize("sa,sb,sq", [((3, 3), (2, 2), (3, 2)), ((2, 3, 3), (2, 2), (2, 3, 2)),
                                      ((3, 3), (2, 2), (2, 3, 2))])
def test_solve_sylvester(sa, sb, sq):
    test_rule(L.solve_sylvester, well_conditioned(*sa), well_conditioned(*sb), rand(*sq))


# --- solve_banded -----------------------------------------------------------------------------
def banded(l, u, n):
    ab = rand(l + u + 1, n)
    ab[u] += 5.0  # a dominant diagonal
    return ab


@pytest.mark.parametrize("l,u,sb", [(1, 1, (5,)), (1, 2, (5, 2)), (2, 0, (4,)), (0, 1, (4, 3)),
                                    (0, 0, (3,))])
def test_solve_banded(l, u, sb):
    test_rule(lambda ab, b: L.solve_banded((l, u), ab, b), banded(l, u, sb[0]), rand(*sb))


def test_solve_banded_matches_dense_gradient():
    l, u, n = 1, 2, 5
    ab, b = banded(l, u, n), rand(n)

    def dense(ab):
        return sum(np.diag(ab[u - k, max(k, 0):n + min(k, 0)], k) for k in range(-l, u + 1))

    g_band = mp.grad(lambda ab: np.sum(L.solve_banded((l, u), ab, b) ** 2))(ab)
    g_dense = mp.grad(lambda ab: np.sum(np.linalg.solve(dense(ab), b) ** 2))(ab)
    np.testing.assert_allclose(g_band, g_dense, rtol=1e-10, atol=1e-14)


# --- float32 ----------------------------------------------------------------------------------
F32 = [
    (lambda a: np.linalg.qr(a)[1], lambda: rand(4, 3)),
    (lambda a: np.linalg.eig(a)[0], lambda: real_spectrum(3, 3)),
    (lambda a: np.linalg.matrix_power(a, 3), lambda: rand(3, 3)),
    (L.expm, lambda: rand(3, 3) / 2),
    (L.sqrtm, lambda: spd(3, 3)),
    (lambda a: L.lu(a)[2], lambda: rand(3, 3)),
]


@pytest.mark.parametrize("fn,make", F32)
def test_float32_stays_float32(fn, make):
    a = make().astype(np.float32)
    assert fn(a).dtype == np.float32
    g = mp.grad(lambda a: np.sum(fn(a)))(a)
    assert g.dtype == np.float32
    check_grads(lambda a: np.sum(fn(a)), a)


def test_debug_mode_structures(debug_mode):
    test_rule(lambda a: np.linalg.qr(a, "complete")[1], rand(3, 4))
    test_rule(lambda a, b: np.linalg.lstsq(a, b), rand(4, 2), rand(4))
    test_rule(L.lu, rand(3, 4))
    test_rule(L.expm, rand(2, 2))


# --- NumPy 2's array-API spellings and tensorinv/tensorsolve (compositions) -------------------
ARRAY_API = [
    (lambda x: np.linalg.matrix_transpose(x), [(2, 3, 4)]),
    (lambda x: np.linalg.diagonal(x, offset=1), [(2, 3, 4)]),
    (lambda x: np.linalg.svdvals(x), [(2, 4, 3)]),
    (lambda x: np.linalg.matrix_norm(x, ord="nuc", keepdims=True), [(2, 3, 4)]),
    (lambda x: np.linalg.matrix_norm(x), [(3, 4)]),
    (lambda x: np.linalg.vector_norm(x), [(2, 3, 4)]),
    (lambda x: np.linalg.vector_norm(x, axis=(0, 2), keepdims=True, ord=3), [(2, 3, 4)]),
    (lambda x: np.linalg.vector_norm(x, axis=1, ord=np.inf), [(2, 3, 4)]),
    (lambda a, b: np.linalg.vecdot(a, b), [(2, 3), (3,)]),
    (lambda a, b: np.linalg.cross(a, b), [(2, 3), (3,)]),
    (lambda a: np.linalg.tensorinv(a), [(2, 3, 6)]),
    (lambda a, b: np.linalg.tensorsolve(a, b), [(2, 3, 6), (2, 3)]),
    (lambda a, b: np.linalg.tensorsolve(a, b, axes=(0,)), [(6, 2, 3), (2, 3)]),
]


@pytest.mark.parametrize("fn,shapes", ARRAY_API)
def test_array_api_spellings(fn, shapes):
    if not hasattr(np.linalg, "vecdot"):
        pytest.skip("NumPy < 2")
    test_rule(fn, *[rand(*s) for s in shapes])


def test_matrix_rank_is_a_constant():
    a = rand(3, 3)
    np.testing.assert_allclose(mp.grad(lambda a: np.sum(a) * np.linalg.matrix_rank(a))(a),
                               np.full((3, 3), 3.0))


# --- full Hessians (lanes through every pullback) against finite differences of the gradient --
W3 = rand(3, 3)
HESSIAN_CASES = [
    (lambda a: np.sum(W3 * np.linalg.qr(a)[0]) + np.sum(np.linalg.qr(a)[1] ** 2), (3, 3)),
    (lambda a: np.sum(np.abs(np.linalg.eigvals(a)) ** 2 * np.angle(np.linalg.eigvals(a))),
     (3, 3)),
    (lambda a: np.sum(W3 * L.lu(a)[1]) + np.sum(L.lu(a)[2] ** 2), (3, 3)),
    (lambda a: np.sum(np.linalg.lstsq(a, np.ones(4))[0] ** 2), (4, 3)),
]


@pytest.mark.parametrize("f,shape", HESSIAN_CASES)
def test_hessian_matches_gradient_differences(f, shape):
    x = rand(*shape)
    h = mp.hessian(f)(x).reshape(x.size, x.size)
    eps = 1e-6
    for i in range(x.size):
        e = np.zeros(x.size)
        e[i] = eps
        e = e.reshape(shape)
        fd = (mp.grad(f)(x + e) - mp.grad(f)(x - e)) / (2 * eps)
        np.testing.assert_allclose(h[:, i], fd.ravel(), rtol=1e-5, atol=1e-6)
