"""Prepared caches guard what f reads from outside its arguments: its globals and closure cells
by identity (a rebinding records again); debug mode compares every replay with a fresh
recording (StaleReplayError); sparse caches detect the pattern again on another branch."""
import numpy as np
import pytest

import mooncake_py as mp

SCALE = 1.0


def scaled(x):
    return SCALE * np.sum(x ** 2)


def helper(x):
    return SCALE * np.sum(np.sin(x))


def calls_helper(x):
    return helper(x) + np.sum(x)


def test_closure_rebinding_records_again():
    s = 1.0
    g = lambda x: s * np.sum(x ** 2)  # noqa: E731
    c = mp.prepare_gradient_cache(g, np.ones(3))
    mp.value_and_gradient(c, g, np.ones(3))
    mp.value_and_gradient(c, g, np.ones(3))
    s = 10.0
    y, (gx,) = mp.value_and_gradient(c, g, np.ones(3))
    assert float(y) == 30.0 and gx.tolist() == [20.0, 20.0, 20.0]


@pytest.mark.parametrize("f", [scaled, calls_helper])
def test_global_rebinding_records_again(f):
    global SCALE
    c = mp.prepare_gradient_cache(f, np.ones(3))
    h = mp.prepare_hvp_cache(f, np.ones(3))
    try:
        for s in (1.0, 1.0, 10.0, 10.0, 3.0):
            SCALE = s
            y, (g,) = mp.value_and_gradient(c, f, np.ones(3))
            y0, g0 = mp.value_and_grad(f)(np.ones(3))
            assert np.allclose(y, y0) and np.allclose(g, g0)
            _, _, hv = mp.value_and_hvp(h, f, np.ones(3), np.ones(3))
            assert np.allclose(hv, mp.hvp(f)(np.ones(3), np.ones(3)))
        mp.value_and_gradient(c, f, np.ones(3))
        assert c._replay.replays == 1  # (unchanged globals still replay)
    finally:
        SCALE = 1.0


def test_debug_mode_names_a_stale_replay():
    data = np.ones(3)
    f = lambda x: np.sum(x * data)  # noqa: E731
    c = mp.prepare_gradient_cache(f, np.ones(3))
    mp.value_and_gradient(c, f, np.ones(3))
    with mp.Config(debug_mode=True):
        mp.value_and_gradient(c, f, np.ones(3))  # (same data: replay and recording agree)
        data[:] = 2.0  # refilled in place: identity cannot see it
        with pytest.raises(mp.StaleReplayError, match="value"):
            mp.value_and_gradient(c, f, np.ones(3))
    assert issubclass(mp.StaleReplayError, mp.MooncakeError) and "StaleReplayError" in mp.__all__


def test_debug_mode_catches_random_draws_in_hvp_and_hessian_caches():
    rng = np.random.default_rng(0)
    f = lambda x: np.sum(x ** 3) * rng.uniform(1, 2)  # noqa: E731
    for prep, call in ((mp.prepare_hvp_cache, lambda c: mp.value_and_hvp(c, f, np.ones(2),
                                                                         np.ones(2))),
                       (mp.prepare_hessian_cache,
                        lambda c: mp.value_gradient_and_hessian(c, f, np.ones(2)))):
        c = prep(f, np.ones(2))
        call(c)
        with mp.Config(debug_mode=True), pytest.raises(mp.StaleReplayError):
            call(c)


def branchy(x):
    if x[0] > 0:
        return np.sum(x[1:] ** 2)
    return x[0] ** 2 + x[0] * x[4] + np.sum(x[1:] ** 2)


def test_sparse_hessian_cache_takes_the_other_branch():
    c = mp.prepare_sparse_hessian_cache(branchy, np.ones(5))
    mp.value_gradient_and_sparse_hessian(c, branchy, np.ones(5))
    _, _, H = mp.value_gradient_and_sparse_hessian(c, branchy, -np.ones(5))
    assert H.toarray()[0].tolist() == [2.0, 0.0, 0.0, 0.0, 1.0]
    for x in (-2 * np.ones(5), 3 * np.ones(5), 2 * np.ones(5), -np.ones(5)):
        _, _, H = mp.value_gradient_and_sparse_hessian(c, branchy, x)
        assert np.allclose(H.toarray(), mp.hessian(branchy)(x))


def branchy_map(x):
    return x[1:] ** 2 if x[0] > 0 else x[1:] * x[0]


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_sparse_jacobian_cache_takes_the_other_branch(mode):
    c = mp.prepare_sparse_jacobian_cache(branchy_map, np.ones(5), mode=mode)
    for x in (np.ones(5), -np.ones(5), 2 * np.ones(5)):
        _, J = mp.value_and_sparse_jacobian(c, branchy_map, x)
        assert np.allclose(J.toarray(), mp.jacobian(branchy_map)(x))


def test_sparse_cache_guards_globals():
    global SCALE
    f = lambda x: SCALE * np.sum(x ** 3)  # noqa: E731
    c = mp.prepare_sparse_hessian_cache(f, np.ones(3))
    try:
        mp.value_gradient_and_sparse_hessian(c, f, np.ones(3))
        SCALE = 2.0
        _, _, H = mp.value_gradient_and_sparse_hessian(c, f, np.ones(3))
        assert np.allclose(H.toarray(), np.diag([12.0, 12.0, 12.0]))
    finally:
        SCALE = 1.0
