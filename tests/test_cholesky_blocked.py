"""The blocked Cholesky pullback (``cholesky_blas.lower_cotangent``, factors above
``cholesky_blas.BLOCK`` rows): against the whole-matrix formula it replaces, finite differences
through ``mooncake_py.testing``, float32, Fortran-ordered and strided operands, an upper triangle
of the cotangent that must not be read, ill-conditioned kernel matrices (long-double oracle),
and the upper factor."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.rules import cholesky_blas as cb
from mooncake_py.rules import linear_algebra as la
from mooncake_py.testing import test_rule as check_rule


def _kernel(n, noise, dtype=np.float64):
    x = np.linspace(-3, 3, n)
    return (np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2) + noise * np.eye(n)).astype(dtype)


def _formula(L, g):
    """The whole-matrix formula's result, M ∘ sym(L⁻ᵀ Φ(Lᵀ L̄) L⁻¹)."""
    s = cb.cotangent(L, g, la._phi_mask(L.shape[0], L.dtype, L))
    return la._read_cotangent(s, True)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [cb.BLOCK + 1, 100, 128, 2 * cb.BLOCK + 3, 300])
def test_matches_the_whole_matrix_formula(dtype, n):
    rng = np.random.default_rng(n)
    L = np.linalg.cholesky(_kernel(n, 1e-2, dtype))
    g = rng.standard_normal((n, n)).astype(dtype)
    got = cb.lower_cotangent(L, g)
    want = _formula(L, g)
    assert got.dtype == dtype and got.flags.c_contiguous
    tol = 1e-12 if dtype == np.float64 else 1e-4
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * np.abs(want).max())
    assert not np.triu(got, 1).any()


@pytest.mark.parametrize("layout", ["F", "strided", "upper junk"])
def test_layouts_and_the_unread_upper_triangle(layout):
    n = 100
    rng = np.random.default_rng(1)
    L = np.linalg.cholesky(_kernel(n, 1e-3))
    g = np.tril(rng.standard_normal((n, n)))
    want = _formula(L, g)
    if layout == "F":
        L, g = np.asfortranarray(L), np.asfortranarray(g)
    elif layout == "strided":
        L = np.repeat(L, 2, axis=1)[:, ::2]
        g = np.repeat(g, 3, axis=0)[::3]
    else:
        g = g + np.triu(rng.standard_normal((n, n)), 1)
    got = cb.lower_cotangent(L, g)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * np.abs(want).max())


def test_declines_other_operands():
    L = np.linalg.cholesky(_kernel(cb.BLOCK + 8, 1e-2))
    g = np.ones_like(L)
    assert cb.lower_cotangent(L[:cb.BLOCK, :cb.BLOCK], g[:cb.BLOCK, :cb.BLOCK]) is None
    assert cb.lower_cotangent(L, g.astype(np.float32)) is None
    assert cb.lower_cotangent(L.astype(np.complex128), g.astype(np.complex128)) is None
    assert cb.lower_cotangent(L, g[:, :-1]) is None
    assert cb.lower_cotangent(L[None], g[None]) is None


def _lower_inverse_ld(L):
    L = L.astype(np.longdouble)
    n = len(L)
    x, eye = np.zeros_like(L), np.eye(n, dtype=np.longdouble)
    for i in range(n):
        x[i] = (eye[i] - L[i, :i] @ x[:i]) / L[i, i]
    return x


@pytest.mark.parametrize("noise", [1e-4, 1e-9])
def test_ill_conditioned_kernel_accuracy_stays_near_the_formula(noise):
    n = 128
    L = np.linalg.cholesky(_kernel(n, noise))
    g = np.tril(np.random.default_rng(7).standard_normal((n, n)))
    li = _lower_inverse_ld(L)
    mask = la._phi_mask(n, np.float64, L).astype(np.longdouble)
    s = li.T @ ((L.astype(np.longdouble).T @ g) * mask) @ li
    want = (s + s.T) * mask

    def err(got):
        return float(np.abs(got - want).max() / np.abs(want).max())

    # (measured 2-4x: the right-hand solve comes first, see lower_cotangent's docstring)
    assert err(cb.lower_cotangent(L, g)) <= 5 * err(_formula(L, g)) + 1e-14


def _spd(n, seed):
    a = np.random.default_rng(seed).standard_normal((n, n))
    return a @ a.T / n + np.eye(n)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_rule_by_finite_differences(upper):
    check_rule(np.linalg.cholesky, _spd(cb.BLOCK + 16, 3), upper=upper,
               modes=("reverse",))


def test_gradient_of_a_gp_log_likelihood_matches_finite_differences():
    x = np.linspace(-2, 2, 90)
    y = np.sin(x)

    def lml(log_s):
        K = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2) + np.exp(log_s) * np.eye(90)
        L = np.linalg.cholesky(K)
        a = mp.linalg.solve_triangular(L, y, lower=True)
        return -0.5 * np.sum(a ** 2) - np.sum(np.log(np.diag(L)))

    g = mp.grad(lml)(np.float64(-1.0))
    h = 1e-5
    fd = (lml(-1.0 + h) - lml(-1.0 - h)) / (2 * h)
    assert abs(g - fd) <= 1e-6 * abs(fd)
    cache = mp.prepare_gradient_cache(lml, np.float64(-1.0))
    for s in (-1.0, -0.5):
        _, gc = mp.value_and_gradient(cache, lml, np.float64(s))
        assert gc == mp.grad(lml)(np.float64(s))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [cb.MIN_N, 50, 128])
@pytest.mark.parametrize("layout", ["C", "F", "strided", "upper junk"])
def test_factor_agrees_with_numpy(dtype, n, layout):
    K = _spd(n, n).astype(dtype)
    want = np.linalg.cholesky(K)
    if layout == "F":
        K = np.asfortranarray(K)
    elif layout == "strided":
        K = np.repeat(K, 2, axis=0)[::2]
    elif layout == "upper junk":  # (only the lower triangle is read, as by NumPy)
        K = K + np.triu(np.full((n, n), np.nan, dtype), 1)
    before = K.copy()
    got = cb.factor(K)
    np.testing.assert_array_equal(K, before)
    assert got.dtype == dtype and got.flags.c_contiguous and not np.triu(got, 1).any()
    tol = 1e-13 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * np.abs(want).max())


def test_factor_leaves_failures_and_other_operands_to_numpy():
    n = 40
    bad = _spd(n, 1)
    bad[5, 5] = -1.0
    assert cb.factor(bad) is None
    with pytest.raises(np.linalg.LinAlgError, match="Matrix is not positive definite"):
        mp.grad(lambda a: np.sum(np.linalg.cholesky(a)))(bad)
    nan = _spd(n, 2)
    nan[7, 3] = np.nan
    assert cb.factor(nan) is None
    assert cb.factor(_spd(8, 3)) is None  # (below MIN_N)
    assert cb.factor(_spd(n, 4)[None]) is None
    assert cb.factor(_spd(n, 4).astype(np.complex128)) is None
    # the next call after the error works
    assert np.isfinite(mp.grad(lambda a: np.sum(np.linalg.cholesky(a)))(_spd(n, 5))).all()


def test_factor_in_gradients_matches_finite_differences():
    check_rule(np.linalg.cholesky, _spd(50, 6), modes=("reverse",))


def test_forward_rule_factor_and_tangent():
    K, dK = _spd(50, 7), _spd(50, 8)
    y, t = mp.jvp(np.linalg.cholesky, (K,), (dK,))
    np.testing.assert_allclose(y, np.linalg.cholesky(K), rtol=0, atol=1e-13)
    h = 1e-6
    fd = (np.linalg.cholesky(K + h * dK) - np.linalg.cholesky(K - h * dK)) / (2 * h)
    np.testing.assert_allclose(t, fd, rtol=0, atol=1e-7)
    check_rule(np.linalg.cholesky, K, modes=("forward", "forward_over_reverse"))
