"""Replay of prepared HVP and Hessian caches: the tape-level plan of tape/replay.py run on this
call's dual numbers must give exactly what a fresh forward-over-reverse recording gives, and
every guard must send a changed function back to recording."""
import pickle
import warnings

import numpy as np
import pytest

import mooncake_py as mp
from benchmarks.namespaces import numpy_namespace
from benchmarks.suite import CASES

from test_replay import _buffer, _writer  # the same write programs the gradient replay is tested on


def _close(a, b):
    for u, w in zip(mp.ravel_pytree(a)[0:1], mp.ravel_pytree(b)[0:1]):
        np.testing.assert_allclose(u, w, rtol=1e-12, atol=1e-300)


def _check_hvp(cache, f, v, args):
    fresh = mp.prepare_hvp_cache(f, *args, replay=False)
    got, want = mp.value_and_hvp(cache, f, v, *args), mp.value_and_hvp(fresh, f, v, *args)
    for a, b in zip(got, want):
        _close(a, b)


def _check_hessian(cache, f, args):
    fresh = mp.prepare_hessian_cache(f, *args, chunk_size=cache.chunk_size, replay=False)
    got = mp.value_gradient_and_hessian(cache, f, *args)
    want = mp.value_gradient_and_hessian(fresh, f, *args)
    for a, b in zip(got, want):
        _close(a, b)


def _perturbed(case):
    out = []
    for k in range(3):  # new values at every call, same shapes
        args = case.make_inputs(np.random.default_rng(k))
        out.append(tuple(a * (1 + 0.01 * k) if i in case.argnums and
                         np.asarray(a).dtype.kind == "f" else a for i, a in enumerate(args)))
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_suite_case_hvp_replay_equals_fresh(name):
    case = CASES[name]
    f = case.bind(numpy_namespace())
    inputs = _perturbed(case)
    cache = mp.prepare_hvp_cache(f, *inputs[0])
    rng = np.random.default_rng(7)
    for args in inputs:
        v = tuple(rng.standard_normal(np.shape(a)) if i in cache.spec.float_args else None
                  for i, a in enumerate(args))
        _check_hvp(cache, f, v[0] if len(args) == 1 else v, args)
    assert cache._replay.replays >= 1, "expected this case to replay"


@pytest.mark.parametrize("name", list(CASES))
def test_suite_case_hessian_replay_equals_fresh(name):
    case = CASES[name]
    f = case.bind(numpy_namespace())
    inputs = _perturbed(case)
    # (the caches differentiate every float argument, the case's data too)
    n = sum(int(np.size(a)) for a in inputs[0] if np.asarray(a).dtype.kind == "f")
    if n > 300:
        pytest.skip("a dense Hessian this large is slow; the HVP test covers the case")
    # a chunk that does not divide n: two lane counts, so two plans
    cache = mp.prepare_hessian_cache(f, *inputs[0], chunk_size=max(1, (2 * n) // 3))
    for args in inputs:
        _check_hessian(cache, f, args)
    replays = sum(r.replays for r in cache._replay.values())
    assert replays >= 1, "expected this case to replay"


@pytest.mark.parametrize("f", [_writer, _buffer])
def test_mutation_programs_replay(f):
    xs = [np.array([1.0, 2.0, 3.0]) * k for k in (1.0, 1.5, -0.5)]
    cache = mp.prepare_hvp_cache(f, xs[0])
    hcache = mp.prepare_hessian_cache(f, xs[0])
    for x in xs:
        _check_hvp(cache, f, x + 1, (x,))
        _check_hessian(hcache, f, (x,))
    assert cache._replay.replays == 2  # (writes into x.copy() / zeros_like are plan steps)
    assert sum(r.replays for r in hcache._replay.values()) >= 2


def _branchy(x):
    if np.sum(x) > 0:
        return np.sum(x ** 3)
    return np.sum(np.sin(x))


def test_branch_flip_rerecords():
    pos, neg = np.array([1.0, 2.0]), np.array([-1.0, -3.0])
    v = np.array([0.5, -2.0])
    cache = mp.prepare_hvp_cache(_branchy, pos)
    r = cache._replay
    _check_hvp(cache, _branchy, v, (pos,))
    _check_hvp(cache, _branchy, v, (pos * 2,))
    assert r.replays == 1
    _check_hvp(cache, _branchy, v, (neg,))  # guard fails: recorded afresh
    assert r.replays == 1 and r.failures == 1
    _check_hvp(cache, _branchy, v, (neg * 2,))  # the new plan replays
    assert r.replays == 2 and r.failures == 0
    h = mp.prepare_hessian_cache(_branchy, pos)
    for x in (pos, pos * 2, neg, neg * 2, pos):
        _check_hessian(h, _branchy, (x,))
    (hr,) = h._replay.values()
    assert hr.replays == 2 and hr.failures == 1


def test_bool_of_traced_values_is_guarded():
    def f(x):
        s = x[0] * x[1]
        if s > 1.0:              # a comparison of duals: a guard on the primal
            s = s * x[2]
        return s * s
    cache = mp.prepare_hvp_cache(f, np.ones(3))
    v = np.array([1.0, -1.0, 2.0])
    for x in ([2.0, 2.0, 3.0], [2.0, 3.0, 3.0], [0.1, 0.1, 3.0], [0.2, 0.1, 3.0]):
        _check_hvp(cache, f, v, (np.array(x),))
    assert cache._replay.replays == 2


def test_constant_arguments_are_guarded():
    def f(x, idx):
        return np.sum(x[idx] ** 3)
    x = np.array([1.0, 2.0, 3.0])
    cache = mp.prepare_hvp_cache(f, x, np.array([0, 2]))
    for args in ((x, np.array([0, 2])), (x + 1, np.array([0, 2])), (x, np.array([1, 1]))):
        _check_hvp(cache, f, (np.ones(3), None), args)
    assert cache._replay.replays == 1


def test_stop_gradient_of_a_dual_is_not_planned():
    f = lambda x: np.sum(x ** 2 * mp.stop_gradient(x))  # noqa: E731
    cache = mp.prepare_hvp_cache(f, np.ones(2))
    for k in range(3):
        _check_hvp(cache, f, np.ones(2), (np.arange(2.0) + k,))
    assert cache._replay.replays == 0


def test_failing_guards_fall_back_with_one_warning():
    cache = mp.prepare_hvp_cache(_branchy, np.ones(2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(12):
            _check_hvp(cache, _branchy, np.ones(2), (np.ones(2) * (-1) ** k,))
    msgs = [w for w in caught if "stopped replaying" in str(w.message)]
    assert len(msgs) == 1 and cache._replay.disabled
    assert "hvp cache" in str(msgs[0].message)


def test_replay_false_and_pickling():
    f = lambda x: np.sum(np.exp(x))  # noqa: E731
    c = mp.prepare_hvp_cache(f, np.zeros(2), replay=False)
    h = mp.prepare_hessian_cache(f, np.zeros(2), replay=False)
    for x in (np.zeros(2), np.ones(2)):
        _check_hvp(c, f, x + 1, (x,))
        _check_hessian(h, f, (x,))
    assert c._replay is None and h._replay is None
    for cache in (mp.prepare_hvp_cache(np.sum, np.zeros(2)),
                  mp.prepare_hessian_cache(np.sum, np.zeros(2))):
        back = pickle.loads(pickle.dumps(cache))
        assert back._replay is not None


def test_float32_replays_and_debug_mode_is_recorded():
    f = lambda x: -0.5 * np.sum(x ** 2)  # noqa: E731
    x = np.ones(3, dtype=np.float32)
    c = mp.prepare_hvp_cache(f, x)
    for _ in range(3):
        _, _, hv = mp.value_and_hvp(c, f, x, x)
        assert hv.dtype == np.float32 and hv.tolist() == [-1.0, -1.0, -1.0]
    assert c._replay.replays == 2  # (tests/test_float32_plans.py compares them bitwise)
    g = lambda x: np.sum(np.sin(x))  # noqa: E731
    c = mp.prepare_hvp_cache(g, np.ones(2))
    with mp.Config(debug_mode=True):
        for k in range(3):
            _check_hvp(c, g, np.ones(2), (np.ones(2) * k,))
    assert c._replay.replays == 2  # (replayed to be compared with the debug recordings)


def test_lanes_of_a_hessian_do_not_share_a_plan():
    f = lambda x: np.sum(np.cos(x) * x[::-1])  # noqa: E731
    h = mp.prepare_hessian_cache(f, np.ones(5), chunk_size=2)
    for k in range(3):
        _check_hessian(h, f, (np.linspace(0, 1, 5) + k,))
    assert sorted(h._replay) == [1, 2]
    assert all(r.replays >= 2 for r in h._replay.values())
