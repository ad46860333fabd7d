"""Prepared caches: results equal the uncached API; every mismatch is refused with a clear error."""
import numpy as np
import pytest

import mooncake_py as mp


def f(x, w):
    return np.sum(np.tanh(x * w)) + w ** 2


def test_gradient_cache_matches_grad_and_is_reusable():
    x = np.linspace(-1, 1, 4)
    c = mp.prepare_gradient_cache(f, x, 0.5)
    for xx in (x, x + 1.0):
        y, (gx, gw) = mp.value_and_gradient(c, f, xx, 0.5)
        gx2, gw2 = mp.grad(f, argnums=(0, 1))(xx, 0.5)
        np.testing.assert_allclose(gx, gx2)
        np.testing.assert_allclose(gw, gw2)
        assert y == f(xx, 0.5)


def test_gradient_cache_with_constant_int_argument():
    g = lambda x, n: np.sum(x ** n)
    c = mp.prepare_gradient_cache(g, np.ones(2), 3)
    y, (gx, gn) = mp.value_and_gradient(c, g, np.full(2, 2.0), 3)
    np.testing.assert_allclose(gx, [12.0, 12.0])
    assert gn is None


@pytest.mark.parametrize("args, match", [
    ((np.ones(5), 0.5), r"shape \(5,\)"),
    ((np.ones(4, np.float32), 0.5), "float32"),
    (((np.ones(4),), 0.5), "structure"),
    ((np.ones(4),), "called with 1"),
])
def test_gradient_cache_refuses_mismatches_then_works(args, match):
    c = mp.prepare_gradient_cache(f, np.ones(4), 0.5)
    with pytest.raises(mp.PreparedCacheSpecError, match=match):
        mp.value_and_gradient(c, f, *args)
    y, _ = mp.value_and_gradient(c, f, np.ones(4), 0.5)
    assert np.isfinite(y)


def test_gradient_cache_refuses_other_function():
    c = mp.prepare_gradient_cache(f, np.ones(4), 0.5)
    with pytest.raises(mp.PreparedCacheSpecError, match="different function"):
        mp.value_and_gradient(c, lambda x, w: np.sum(x), np.ones(4), 0.5)


def test_pullback_cache():
    h = lambda x: (np.sin(x), np.sum(x))
    c = mp.prepare_pullback_cache(h, np.zeros(3))
    y, (gx,) = mp.value_and_pullback(c, (np.ones(3), 2.0), h, np.zeros(3))
    np.testing.assert_allclose(gx, np.cos(np.zeros(3)) + 2.0)
    with pytest.raises(mp.PreparedCacheSpecError, match="cotangent"):
        mp.value_and_pullback(c, (np.ones(4), 2.0), h, np.zeros(3))
