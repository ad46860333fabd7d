"""mooncake_py.scipy.linalg (= mp.linalg): plain calls are SciPy's, tracked and dual calls are
differentiated in every mode (test_rule), keyword variants and batches included."""
import numpy as np
import pytest

sla = pytest.importorskip("scipy.linalg")

import mooncake_py as mp  # noqa: E402
from mooncake_py.scipy import linalg as L
from mooncake_py.rules import linear_algebra as la
from mooncake_py.testing import test_rule, check_grads

RNG = np.random.default_rng(7)


def rand(*shape):
    return RNG.standard_normal(shape)


def well_conditioned(*shape):
    n = shape[-1]
    return rand(*shape) + 2 * n ** 0.5 * np.eye(n)


def spd(*shape):
    m = well_conditioned(*shape)
    return m @ np.swapaxes(m, -1, -2)


def near_spd(*shape):
    """An SPD matrix plus a non-symmetric perturbation: the triangle read is what counts."""
    return spd(*shape) + 0.1 * rand(*shape)


def test_module_identity_and_exports():
    import mooncake_py.linalg
    assert mp.linalg is L and mooncake_py.linalg is L
    assert L.solve_triangular is la.solve_triangular and L.cho_solve is la.cho_solve
    for name in L.__all__:
        assert callable(getattr(L, name)), name


# --- plain calls are SciPy's --------------------------------------------------------------------
PLAIN = [
    ("solve", lambda f, a: f(a, a[:, 0], assume_a="sym", lower=True)),
    ("inv", lambda f, a: f(a)), ("det", lambda f, a: f(a)),
    ("cholesky", lambda f, a: f(a)), ("cho_factor", lambda f, a: f(a, lower=True)[0]),
    ("qr", lambda f, a: f(a, mode="economic")[0]), ("lu", lambda f, a: f(a)[1]),
    ("eigh", lambda f, a: f(a)[1]), ("eigvalsh", lambda f, a: f(a)),
    ("expm", lambda f, a: f(a / 10)), ("sqrtm", lambda f, a: f(a)),
    ("solve_sylvester", lambda f, a: f(a, a, a)), ("logm", lambda f, a: f(a)),
    ("lu_factor", lambda f, a: f(a)[0]), ("lu_solve", lambda f, a: f(sla.lu_factor(a), a[0])),
    ("svd", lambda f, a: f(a)[0]), ("svdvals", lambda f, a: f(a)), ("pinv", lambda f, a: f(a)),
    ("norm", lambda f, a: f(a, "nuc")), ("solve_continuous_lyapunov", lambda f, a: f(a, a)),
    ("block_diag", lambda f, a: f(a, 2.0, a[0])),
]


@pytest.mark.parametrize("name,call", PLAIN)
def test_plain_calls_equal_scipy(name, call):
    a = spd(3, 3)
    np.testing.assert_array_equal(call(getattr(L, name), a), call(getattr(sla, name), a))


# --- tracked values: every mode -----------------------------------------------------------------
SOLVE_CASES = [
    ({}, (3, 3), (3,)), ({}, (2, 3, 3), (2, 3, 2)), ({}, (3, 3), (3, 4)),
    (dict(transposed=True), (3, 3), (3, 2)),
    (dict(assume_a="pos"), "near_spd", (3,)),
    (dict(assume_a="sym", lower=True), "near_spd", (3, 2)),
    (dict(assume_a="gen"), (3, 3), (3,)),
    (dict(assume_a="lower triangular"), (3, 3), (3,)),
    (dict(assume_a="upper triangular"), (3, 3), (3,)),
    (dict(assume_a="diagonal"), (3, 3), (3,)),
    (dict(assume_a="tridiagonal"), (4, 4), (4,)),
]


@pytest.mark.parametrize("kw,sa,sb", SOLVE_CASES)
def test_solve(kw, sa, sb):
    a = near_spd(3, 3) if sa == "near_spd" else well_conditioned(*sa)
    test_rule(lambda a, b: L.solve(a, b, **kw), a, rand(*sb))


def test_solve_tracked_keyword_b_and_bad_structure():
    check_grads(lambda a, b: np.sum(L.solve(a, b=b) ** 2), well_conditioned(3, 3), rand(3))
    with pytest.raises(ValueError, match="not a recognized"):
        mp.grad(lambda a: np.sum(L.solve(a, np.ones(3), assume_a="bogus")))(spd(3, 3))


@pytest.mark.parametrize("kw", [{}, dict(assume_a="pos", lower=True), dict(assume_a="sym")])
def test_inv(kw):
    test_rule(lambda a: L.inv(a, **kw), near_spd(3, 3) if kw else well_conditioned(2, 3, 3))


def test_det():
    test_rule(L.det, well_conditioned(3, 3))
    test_rule(L.det, well_conditioned(2, 3, 3))


@pytest.mark.parametrize("lower", [False, True])
def test_cholesky_reads_one_triangle(lower):
    test_rule(lambda a: L.cholesky(a, lower=lower), near_spd(3, 3))
    test_rule(lambda a: L.cholesky(a, lower=lower), near_spd(2, 3, 3))
    # default is SciPy's: upper
    a = spd(3, 3)
    u = L.cholesky(a)
    np.testing.assert_allclose(u, np.triu(u))


def test_cholesky_gradient_on_symmetric_directions_matches_numpy():
    a, v = spd(3, 3), rand(3, 3)
    v = v + v.T
    f1 = lambda a: np.sum(np.log(np.diagonal(L.cholesky(a))))  # noqa: E731
    f2 = lambda a: np.sum(np.log(np.diagonal(np.linalg.cholesky(a))))  # noqa: E731
    np.testing.assert_allclose(np.sum(mp.grad(f1)(a) * v), np.sum(mp.grad(f2)(a) * v),
                               rtol=1e-10)


@pytest.mark.parametrize("lower", [False, True])
def test_cho_factor_and_cho_solve(lower):
    test_rule(lambda a: L.cho_factor(a, lower=lower)[0], near_spd(3, 3))
    test_rule(lambda a, b: L.cho_solve(L.cho_factor(a, lower=lower), b), near_spd(3, 3),
              rand(3, 2))
    c, low = L.cho_factor(spd(3, 3), lower=lower)
    assert low is lower


@pytest.mark.parametrize("trans", [0, 1, 2, "N", "T"])
@pytest.mark.parametrize("lower,unit", [(True, False), (False, True)])
def test_solve_triangular_keywords(trans, lower, unit):
    test_rule(lambda a, b: L.solve_triangular(a, b, trans=trans, lower=lower,
                                              unit_diagonal=unit),
              well_conditioned(3, 3), rand(3, 2))


@pytest.mark.parametrize("mode,shape", [("full", (4, 3)), ("full", (3, 3)), ("full", (3, 5)),
                                        ("economic", (4, 3)), ("economic", (2, 3, 5)),
                                        ("r", (4, 3)), ("r", (3, 4))])
def test_qr(mode, shape):
    if mode == "full" and shape[0] > shape[1]:
        test_rule(lambda a: L.qr(a)[1], rand(*shape))  # Q's extra columns are not unique
    else:
        test_rule(lambda a: L.qr(a, mode=mode), rand(*shape))


def test_qr_pivoting_refused():
    with pytest.raises(mp.MissingRuleError, match="pivoting"):
        mp.grad(lambda a: np.sum(L.qr(a, pivoting=True)[1]))(rand(3, 3))


def sign_free(res):
    """eigh's (w, v) with each eigenvector column multiplied by its first entry: LAPACK picks
    eigenvector signs, and may flip one under a tiny perturbation (finite differences would
    see a jump); these products do not see the sign."""
    w, v = res
    return w, v * v[..., :1, :]


@pytest.mark.parametrize("kw", [{}, dict(lower=False), dict(subset_by_index=[1, 2]),
                                dict(driver="evd")])
def test_eigh(kw):
    test_rule(lambda a: sign_free(L.eigh(a, **kw)), near_spd(4, 4))


def test_eigh_generalized_batched_and_values_only():
    test_rule(lambda a, b: sign_free(L.eigh(a, b)), spd(3, 3), spd(3, 3))
    test_rule(lambda a: sign_free(L.eigh(a)), spd(2, 3, 3))
    test_rule(lambda a: L.eigh(a, eigvals_only=True), spd(2, 3, 3))
    test_rule(lambda a: L.eigh(a, eigvals_only=True, subset_by_index=[0, 0]), near_spd(3, 3))
    test_rule(L.eigvalsh, spd(3, 3))


def test_eigh_vectors_follow_scipy_signs():
    a = spd(2, 4, 4)
    w, v = L.eigh(a)
    y, _ = mp.vjp(L.eigh, a)
    assert isinstance(y, list)  # as SciPy's batched eigh
    np.testing.assert_allclose(y[1], v, atol=1e-12)
    test_rule(lambda a: L.qr(a, mode="r"), rand(2, 4, 3))  # batched 'r': R alone, as SciPy


def test_eigh_generalized_closed_form():
    # a v = w b v with b = βI: w = λ(a)/β, so dΣw/dβ = −Σλ/β² (β enters through b only)
    a = spd(3, 3)
    g = mp.grad(lambda beta: np.sum(L.eigh(a, beta * np.eye(3), eigvals_only=True)))(2.0)
    np.testing.assert_allclose(g, -np.trace(a) / 4, rtol=1e-10)


def test_eigh_subset_by_value_refused():
    with pytest.raises(mp.MissingRuleError, match="subset_by_value"):
        mp.grad(lambda a: np.sum(L.eigh(a, subset_by_value=(0, 10))[0]))(spd(3, 3))


def test_hvp_through_mirror_functions():
    a0, v = spd(3, 3), rand(3, 3)

    def f(a):
        return (np.sum(L.solve(a, np.ones(3), assume_a="pos")) + L.det(a) / 100
                + np.sum(L.expm(a / 20)))

    eps = 1e-5
    fd = (mp.grad(f)(a0 + eps * v) - mp.grad(f)(a0 - eps * v)) / (2 * eps)
    np.testing.assert_allclose(mp.hvp(f)(a0, v), fd, rtol=1e-6, atol=1e-8)


# --- lu_factor/lu_solve, svd, pinv, norm, logm, Lyapunov, block_diag ----------------------------
@pytest.mark.parametrize("trans", [0, 1])
def test_lu_factor_lu_solve(trans):
    test_rule(lambda a: L.lu_factor(a)[0], rand(4, 4))
    test_rule(lambda a, b: L.lu_solve(L.lu_factor(a), b, trans=trans), rand(4, 4), rand(4, 2))
    a, b = well_conditioned(3, 3), rand(3)
    g1 = mp.grad(lambda a: np.sum(L.lu_solve(L.lu_factor(a), b, trans=trans) ** 2))(a)
    g2 = mp.grad(lambda a: np.sum(np.linalg.solve(a.T if trans else a, b) ** 2))(a)
    np.testing.assert_allclose(g1, g2, rtol=1e-10)


def test_lu_factor_batch_refused():
    with pytest.raises(mp.MissingRuleError, match="2-D"):
        mp.grad(lambda a: np.sum(L.lu_factor(a)[0]))(rand(2, 3, 3))


@pytest.mark.parametrize("kw", [dict(full_matrices=False), dict(compute_uv=False),
                                dict(full_matrices=False, lapack_driver="gesvd")])
def test_svd(kw):
    test_rule(lambda a: L.svd(a, **kw), rand(4, 3))
    test_rule(L.svdvals, rand(3, 5))


def test_svd_gesvd_signs_follow_scipy():
    a = rand(4, 3)
    y, _ = mp.vjp(lambda a: L.svd(a, lapack_driver="gesvd"), a)
    for got, want in zip(y, sla.svd(a, lapack_driver="gesvd")):
        np.testing.assert_allclose(got, want, atol=1e-12)


def test_pinv_and_norm():
    test_rule(L.pinv, rand(4, 3))
    test_rule(lambda a: L.pinv(a, atol=1e-3, return_rank=True), rand(3, 4))
    for ord in (None, "fro", "nuc", 1, 2, -2, np.inf):
        test_rule(lambda a: L.norm(a, ord), rand(3, 4))
    test_rule(lambda x: L.norm(x, 3, axis=0), rand(4, 2))


def test_logm():
    test_rule(L.logm, well_conditioned(3, 3), ndirs=1)  # SciPy's logm is slow
    test_rule(L.logm, spd(2, 2, 2), ndirs=1)
    # logm(expm(A)) = A for small A: the composition's Jacobian is the identity
    a, v = rand(3, 3) / 4, rand(3, 3)
    _, t = mp.jvp(lambda a: L.logm(L.expm(a)), (a,), (v,))
    np.testing.assert_allclose(t, v, rtol=1e-8, atol=1e-10)


def test_solve_continuous_lyapunov_and_block_diag():
    test_rule(L.solve_continuous_lyapunov, well_conditioned(3, 3), rand(3, 3))
    test_rule(lambda a, b, c: L.block_diag(a, b, c), rand(2, 2), rand(3), 1.5)
    test_rule(lambda a: L.block_diag(a, np.ones((1, 2))), rand(2, 3))
