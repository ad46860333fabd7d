"""The Cholesky pullback's primitive ``_cholesky_cotangent`` and its frule (what HVPs through
``np.linalg.cholesky`` run): checked against the composition it replaces, finite differences,
lanes, float32, stacks, small matrices (no trmm) and non-contiguous operands."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.rules.linear_algebra import _cholesky_cotangent, _mT, _phi_mask
from mooncake_py.rules.registry import FRULES


def _spd(rng, n, batch=()):
    a = rng.standard_normal(batch + (n, n))
    return a @ _mT(a) + n * np.eye(n)


def _reference(L, g):
    """M ∘ sym(L⁻ᵀ Φ(Lᵀ ḡ) L⁻¹) by dense inverses (the oracle), M = 2Φ's mask: the cotangent of
    the lower triangle cholesky reads."""
    n = L.shape[-1]
    p = (_mT(L) @ g) * _phi_mask(n, L.dtype, L)
    li = np.linalg.inv(L)
    s = _mT(li) @ p @ li
    return (s + _mT(s)) * _phi_mask(n, L.dtype, L)


def _frule(L, g, dL, dg):
    return FRULES[_cholesky_cotangent](
        (L, g), (None if dL is None else dL, None if dg is None else dg))


@pytest.mark.parametrize("n,batch", [(40, ()), (5, ()), (20, (3,))])
def test_value_matches_dense_formula(n, batch):
    rng = np.random.default_rng(0)
    L = np.linalg.cholesky(_spd(rng, n, batch))
    g = rng.standard_normal(L.shape)
    np.testing.assert_allclose(_cholesky_cotangent(L, g), _reference(L, g), rtol=1e-10,
                               atol=1e-12)


@pytest.mark.parametrize("n,batch,k", [(40, (), 1), (40, (), 3), (6, (), 1), (20, (2,), 2)])
@pytest.mark.parametrize("which", ["both", "L", "g"])
def test_frule_matches_finite_differences(n, batch, k, which):
    rng = np.random.default_rng(1)
    L = np.linalg.cholesky(_spd(rng, n, batch))
    g = rng.standard_normal(L.shape)
    dL = np.tril(rng.standard_normal((k,) + L.shape)) if which != "g" else None
    dg = rng.standard_normal((k,) + L.shape) if which != "L" else None
    y, dy = _frule(L, g, dL, dg)
    np.testing.assert_allclose(y, _reference(L, g), rtol=1e-10, atol=1e-12)
    assert dy.shape == (k,) + L.shape
    h = 1e-6
    for lane in range(k):
        step_L = h * dL[lane] if dL is not None else 0
        step_g = h * dg[lane] if dg is not None else 0
        fd = (_reference(L + step_L, g + step_g) - _reference(L - step_L, g - step_g)) / (2 * h)
        np.testing.assert_allclose(dy[lane], fd, rtol=1e-5, atol=1e-7 * np.abs(fd).max())


def test_frule_reads_only_the_lower_triangle():
    rng = np.random.default_rng(2)
    L = np.linalg.cholesky(_spd(rng, 30))
    g = rng.standard_normal(L.shape)
    dL = np.tril(rng.standard_normal((1,) + L.shape))
    upper = np.triu(rng.standard_normal(L.shape), 1)
    for k_dl in (dL, np.concatenate([dL, dL])):  # trmm path (one lane) and matmul path
        _, a = _frule(L, g, k_dl, None)
        _, b = _frule(L, g, k_dl + upper, None)
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_frule_float32_and_noncontiguous():
    rng = np.random.default_rng(3)
    L64 = np.linalg.cholesky(_spd(rng, 32))
    g64 = rng.standard_normal(L64.shape)
    dL64 = np.tril(rng.standard_normal((1,) + L64.shape))
    dg64 = rng.standard_normal((1,) + L64.shape)
    y64, t64 = _frule(L64, g64, dL64, dg64)
    L32, g32, dL32, dg32 = (x.astype(np.float32) for x in (L64, g64, dL64, dg64))
    y32, t32 = _frule(L32, g32, dL32, dg32)
    assert y32.dtype == np.float32 and t32.dtype == np.float32
    np.testing.assert_allclose(t32, t64, rtol=2e-3, atol=2e-3 * np.abs(t64).max())
    # Fortran-ordered and strided operands give the C-ordered result
    Lf, gs = np.asfortranarray(L64), np.repeat(g64, 2, axis=1)[:, ::2]
    dgs = np.repeat(dg64, 2, axis=2)[:, :, ::2]
    y2, t2 = _frule(Lf, gs, np.asfortranarray(dL64[0])[None], dgs)
    np.testing.assert_allclose(y2, y64, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(t2, t64, rtol=1e-10, atol=1e-12 * np.abs(t64).max())


def test_frule_is_the_old_dual_composition():
    """The frule equals the pullback run on duals before it existed (six dual products and
    solves), lane by lane."""
    from mooncake_py.rules.linear_algebra import _solve_nonsingular
    rng = np.random.default_rng(4)
    L = np.linalg.cholesky(_spd(rng, 24))
    g = rng.standard_normal(L.shape)
    dL = np.tril(rng.standard_normal((1,) + L.shape))
    dg = rng.standard_normal((1,) + L.shape)

    def old(Lx, gx):
        p = np.matmul(_mT(Lx), gx) * _phi_mask(24, np.float64, L)
        s = _solve_nonsingular(Lx, p, trans=1, lower=True)
        s = _mT(_solve_nonsingular(Lx, _mT(s), trans=1, lower=True))
        return (s + _mT(s)) * _phi_mask(24, np.float64, L)  # (the lower triangle's cotangent)
    y, dy = mp.jvp(old, (L, g), (dL[0], dg[0]))
    y2, dy2 = _frule(L, g, dL, dg)
    np.testing.assert_allclose(y2, y, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(dy2[0], dy, rtol=1e-10, atol=1e-12 * np.abs(dy).max())


@pytest.mark.parametrize("n,upper", [(5, False), (40, False), (24, True)])
def test_hvp_through_cholesky_matches_gradient_differences(n, upper):
    rng = np.random.default_rng(6)
    c = rng.standard_normal((n, n)) / n
    y = rng.standard_normal(n)

    def f(x):
        K = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2) + np.eye(n) + c @ c.T * x[0] ** 2
        L = np.linalg.cholesky(K, upper=True).T if upper else np.linalg.cholesky(K)
        a = mp.linalg.solve_triangular(L, y, lower=True)
        return -0.5 * np.sum(a ** 2) - np.sum(np.log(np.diag(L))) + np.sum(L ** 2)
    x = 0.3 * np.arange(float(n))
    v = rng.standard_normal(n)
    hv = mp.hvp(f)(x, v)
    gr = mp.grad(f)
    eps = 1e-5
    fd = (gr(x + eps * v) - gr(x - eps * v)) / (2 * eps)
    np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-6 * np.abs(fd).max())
    cache = mp.prepare_hvp_cache(f, x)
    for _ in range(2):  # replayed: equal to a fresh recording
        _, _, hv2 = mp.value_and_hvp(cache, f, v, x)
        np.testing.assert_allclose(hv2, hv, rtol=1e-13, atol=1e-15 * np.abs(hv).max())
