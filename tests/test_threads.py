"""Threads: concurrent gradients, the garbage-collector pause, Config, and caches that pickle."""
import gc
import pickle
import threading

import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.config import current_config


def logp(x):
    return -0.5 * np.sum(x ** 2) + np.sum(np.sin(x))


def logp2(x, w):
    return np.sum(np.tanh(x * w))


def _run(targets):
    """Run each callable in its own thread; re-raise the first failure."""
    errors = []

    def wrap(t):
        def run():
            try:
                t()
            except BaseException as e:  # noqa: B902 - reported below
                errors.append(e)
        return run
    threads = [threading.Thread(target=wrap(t)) for t in targets]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    if errors:
        raise errors[0]


def test_concurrent_gradients_are_correct_and_leave_gc_enabled():
    assert gc.isenabled()

    def worker(seed):
        def run():
            rng = np.random.default_rng(seed)
            for _ in range(15):
                x = rng.standard_normal(7)
                tol = dict(rtol=1e-12, atol=1e-14)  # -x + cos(x) cancels near x = 0.74
                np.testing.assert_allclose(mp.grad(logp)(x), -x + np.cos(x), **tol)
                v = rng.standard_normal(7)
                np.testing.assert_allclose(mp.hvp(logp)(x, v), (-1 - np.sin(x)) * v, **tol)
                _, t = mp.jvp(logp, (x,), (v,))
                np.testing.assert_allclose(t, np.dot(-x + np.cos(x), v), **tol)
                if seed % 2:  # errors in some threads must not disturb the others
                    with pytest.raises(mp.OutputTypeError):
                        mp.grad(lambda x: x)(x)
        return run
    _run([worker(s) for s in range(6)])
    assert gc.isenabled()


def test_gc_stays_paused_while_any_recording_runs():
    """A starts, B starts, A ends while B still records: the collector stays paused until B
    ends (a save-and-restore per call would re-enable it under B, or leave it off)."""
    assert gc.isenabled()
    a_in, b_in, a_done, release_b = (threading.Event() for _ in range(4))
    seen = {}

    def fa(x):
        a_in.set()
        assert b_in.wait(10)
        return np.sum(x ** 2)

    def fb(x):
        b_in.set()
        assert release_b.wait(10)
        return np.sum(x ** 3)

    def a():
        mp.grad(fa)(np.ones(2))
        a_done.set()

    def b():
        assert a_in.wait(10)
        mp.grad(fb)(np.ones(2))

    def observer():
        assert a_done.wait(10)
        seen["during_b"] = gc.isenabled()
        release_b.set()
    _run([a, b, observer])
    assert seen["during_b"] is False
    assert gc.isenabled()


def test_gc_pause_keeps_a_disabled_collector_disabled():
    gc.disable()
    try:
        mp.grad(logp)(np.ones(3))
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_one_config_entered_by_several_threads_at_once():
    cfg = mp.Config(chunk_size=3)
    n = 6
    inside = threading.Barrier(n)
    seen = []

    def worker(i):
        def run():
            for _ in range(20):
                with cfg:
                    inside.wait(10) if _ == 0 else None
                    assert current_config() is cfg
                    with cfg:  # nested in the same thread, too
                        assert current_config() is cfg
                    # exits in another order than the entries
                    H = mp.hessian(logp)(np.arange(4.0) + i)
                    np.testing.assert_allclose(np.diag(H), -1 - np.sin(np.arange(4.0) + i),
                                               rtol=1e-13)
                assert current_config() is not cfg
            seen.append(i)
        return run
    _run([worker(i) for i in range(n)])
    assert sorted(seen) == list(range(n))
    assert current_config() is not cfg


def test_configs_are_per_thread():
    results = {}
    go = threading.Barrier(2)

    def with_debug():
        with mp.Config(debug_mode=True):
            go.wait(10)
            results["debug"] = current_config().debug_mode
            go.wait(10)

    def without():
        go.wait(10)
        results["plain"] = current_config().debug_mode
        go.wait(10)
    _run([with_debug, without])
    assert results == {"debug": True, "plain": False}


def _caches():
    x, w = np.linspace(-1, 1, 4), 0.7
    return {
        "gradient": (mp.prepare_gradient_cache(logp2, x, w),
                     lambda c: mp.value_and_gradient(c, logp2, x, w)),
        "pullback": (mp.prepare_pullback_cache(logp2, x, w),
                     lambda c: mp.value_and_pullback(c, logp2, 1.0, x, w)),
        "derivative": (mp.prepare_derivative_cache(logp2, x, w),
                       lambda c: mp.value_and_derivative(c, logp2, (np.ones(4), 1.0), x, w)),
        "hvp": (mp.prepare_hvp_cache(logp2, x, w),
                lambda c: mp.value_and_hvp(c, logp2, (np.ones(4), 1.0), x, w)),
        "hessian": (mp.prepare_hessian_cache(logp2, x, w),
                    lambda c: mp.value_gradient_and_hessian(c, logp2, x, w)),
    }


def _flat(tree):
    leaves = []

    def walk(t):
        if isinstance(t, (tuple, list)):
            for u in t:
                walk(u)
        else:
            leaves.append(np.asarray(t, dtype=float))
    walk(tree)
    return leaves


@pytest.mark.parametrize("kind", ["gradient", "pullback", "derivative", "hvp", "hessian"])
def test_every_cache_pickles_and_works_after_loading(kind):
    cache, use = _caches()[kind]
    loaded = pickle.loads(pickle.dumps(cache))
    assert type(loaded) is type(cache)
    for a, b in zip(_flat(use(cache)), _flat(use(loaded))):
        np.testing.assert_allclose(a, b, rtol=1e-14)
    # the loaded cache checks its calls as the original does
    with pytest.raises(mp.PreparedCacheSpecError, match="shape"):
        loaded.spec.check(logp2, (np.ones(5), 0.7))


def test_gradient_cache_shared_by_threads():
    cache, _ = _caches()["gradient"]

    def worker(seed):
        def run():
            rng = np.random.default_rng(seed)
            for _ in range(10):
                x, w = rng.standard_normal(4), float(rng.uniform(0.5, 1.5))
                _, (gx, gw) = mp.value_and_gradient(cache, logp2, x, w)
                s = 1 - np.tanh(x * w) ** 2
                np.testing.assert_allclose(gx, s * w, rtol=1e-13)
                np.testing.assert_allclose(gw, np.sum(s * x), rtol=1e-13)
        return run
    _run([worker(s) for s in range(4)])
