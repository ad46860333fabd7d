"""argnums on every prepare_*_cache: data passed as non-differentiated arguments is an input of
the replayed plan (read afresh on every call, never a constant), checked for shape and dtype,
and gets no derivative."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py import PreparedCacheSpecError


def loss(w, X, y):
    r = np.tanh(X @ w) - y
    return np.sum(r ** 2) + 0.1 * np.sum(np.exp(-(X.T @ X)) @ w)


def _data(k):
    rng = np.random.default_rng(k)
    return rng.normal(size=(6, 3)), rng.normal(size=6)


W = np.array([0.3, -0.2, 0.5])


def test_gradient_cache_reads_data_afresh_and_replays():
    c = mp.prepare_gradient_cache(loss, W, *_data(0), argnums=0)
    for k in range(4):
        X, y = _data(k)
        v, g = mp.value_and_gradient(c, loss, W, X, y)
        v0, g0 = mp.value_and_grad(loss)(W, X, y)
        assert np.allclose(v, v0) and np.allclose(g, g0)
        assert g.shape == W.shape  # an int argnums: the one gradient, not a tuple
    # the data changed every call: replayed, not re-recorded (data are inputs, not constants)
    assert c._replay.replays == 3 and not c._replay.disabled


def test_tuple_argnums_in_their_order():
    X, y = _data(1)
    c = mp.prepare_gradient_cache(loss, W, X, y, argnums=(1, 0))
    for k in range(3):
        _, (gX, gw) = mp.value_and_gradient(c, loss, W + k, X, y)
        gw0, gX0 = mp.grad(loss, argnums=(0, 1))(W + k, X, y)
        assert np.allclose(gX, gX0) and np.allclose(gw, gw0)


def test_default_stays_every_float_argument():
    X, y = _data(2)
    c = mp.prepare_gradient_cache(loss, W, X, y)
    _, gs = mp.value_and_gradient(c, loss, W, X, y)
    assert type(gs) is tuple and len(gs) == 3 and gs[2].shape == y.shape


def test_data_checked_for_shape_and_dtype():
    X, y = _data(3)
    c = mp.prepare_gradient_cache(loss, W, X, y, argnums=0)
    with pytest.raises(PreparedCacheSpecError):
        mp.value_and_gradient(c, loss, W, X[:4], y[:4])
    with pytest.raises(PreparedCacheSpecError):
        mp.value_and_gradient(c, loss, W, X.astype(np.float32), y)


def test_branch_on_data_is_a_guard():
    def f(w, X):
        return np.sum(X @ w) if X[0, 0] > 0 else np.sum((X @ w) ** 2)
    X = np.ones((2, 2))
    c = mp.prepare_gradient_cache(f, W[:2], X, argnums=0)
    for s in (1.0, 2.0, -1.0, -2.0, 3.0):
        _, g = mp.value_and_gradient(c, f, W[:2], s * X)
        assert np.allclose(g, mp.grad(f)(W[:2], s * X))


def test_pullback_derivative_and_hvp_caches():
    X, y = _data(4)
    h = lambda w, X: np.sin(X @ w)  # noqa: E731
    c = mp.prepare_pullback_cache(h, W, X, argnums=0)
    d = mp.prepare_derivative_cache(h, W, X, argnums=0)
    v = mp.prepare_hvp_cache(loss, W, X, y, argnums=0)
    for k in range(3):
        Xk = X + k
        _, gw = mp.value_and_pullback(c, h, np.ones(6), W, Xk)
        assert np.allclose(gw, mp.vjp(lambda w: h(w, Xk), W)[1](np.ones(6))[0])
        _, dy = mp.value_and_derivative(d, h, np.ones(3), W, Xk)
        assert np.allclose(dy, mp.jvp(lambda w: h(w, Xk), (W,), (np.ones(3),))[1])
        _, g, hv = mp.value_and_hvp(v, loss, np.ones(3), W, Xk, y)
        assert np.allclose(hv, mp.hvp(loss)(W, Xk, y, np.ones(3)))
        assert g.shape == W.shape
    assert c._replay.replays == 2 and d._replay.replays == 3 and v._replay.replays == 2


def nlml(theta, X, y):
    ls, sf, sn = np.exp(theta)
    d = (X[:, None, 0] - X[None, :, 0]) / ls
    K = sf ** 2 * np.exp(-0.5 * d ** 2) + (sn ** 2 + 1e-6) * np.eye(X.shape[0])
    L = np.linalg.cholesky(K)
    return 0.5 * y @ np.linalg.solve(K, y) + np.sum(np.log(np.diag(L)))


def test_hessian_cache_of_the_parameters_only():
    rng = np.random.default_rng(0)
    X, y = rng.uniform(-3, 3, size=(20, 1)), rng.normal(size=20)
    theta = np.array([0.0, 0.0, -1.0])
    c = mp.prepare_hessian_cache(nlml, theta, X, y, argnums=0)
    for k in range(3):
        v, g, H = mp.value_gradient_and_hessian(c, nlml, theta, X + k, y * k)
        assert H.shape == (3, 3) and g.shape == (3,)
        assert np.allclose(H, mp.hessian(nlml)(theta, X + k, y * k))
    assert sum(r.replays for r in c._replay.values()) == 2
