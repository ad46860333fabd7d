"""The lean replay of short plans (replay/lean.py) and the one-argument short path of
Replayer.call: results bitwise those of the step-by-step replay and of fresh recordings, and
every guard of the prepared caches still in force."""
import pickle
import warnings

import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.errors import PreparedCacheSpecError, StaleReplayError
from mooncake_py.replay import lean
from mooncake_py.replay.fused import FusedPlan
from mooncake_py.rules.registry import RRULES

SCALE = 2.0


def _scaled(x):
    return SCALE * np.sum(np.sin(x))


def _branchy(x):
    s = np.sum(x)
    return s * s if s > 0 else -np.sum(np.exp(x))


FUNCTIONS = {
    "sum": np.sum,
    "sum_sin": lambda x: np.sum(np.sin(x)),
    "sin_cos_exp": lambda x: np.sum(np.sin(np.cos(np.exp(x)))),
    "items": lambda x: np.sum(x * x) + np.sum(np.sin(x) * x[0]) / (1.0 + x[1]),
    "matmul": lambda x: x @ x + np.sum(np.tanh(x)),
    "mean_max": lambda x: np.mean(x ** 2) * np.max(x),
    "reused": lambda x: np.sum(x * x + x) * np.sum(x),
    "branchy": _branchy,
}


def _bits(tree):
    leaves = tree if isinstance(tree, tuple) else (tree,)
    out = []
    for v in leaves:
        if isinstance(v, tuple):
            out += _bits(v)
        else:
            out.append((type(v), None if v is None else np.asarray(v).tobytes()))
    return out


def _runs(f, compile, kind, monkeypatch=None, calls=5):
    """Results of ``calls`` calls of a prepared cache on the inputs of a fixed stream."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mp.CompileFallbackWarning)
        if kind == "gradient":
            c = mp.prepare_gradient_cache(f, x, compile=compile)
        else:
            c = mp.prepare_hvp_cache(f, x, compile=compile)
        out = []
        for _ in range(calls):
            x, v = rng.standard_normal(12), rng.standard_normal(12)
            if kind == "gradient":
                out.append(mp.value_and_gradient(c, f, x))
            else:
                out.append(mp.value_and_hvp(c, f, v, x))
    return c, out


def _fresh(f, kind, calls=5):
    rng = np.random.default_rng(3)
    rng.standard_normal(12)
    out = []
    for _ in range(calls):
        x, v = rng.standard_normal(12), rng.standard_normal(12)
        if kind == "gradient":
            y, g = mp.value_and_grad(f)(x)
            out.append((y, (g,)))
        else:
            g, hv = mp.value_and_grad(f)(x)[1], mp.hvp(f)(x, v)
            out.append((f(x), g, hv))
    return out


@pytest.mark.parametrize("kind", ["gradient", "hvp"])
@pytest.mark.parametrize("compile", [False, True], ids=["default", "compiled"])
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_lean_replay_is_bitwise_the_step_by_step_replay(name, compile, kind, monkeypatch):
    f = FUNCTIONS[name]
    c, got = _runs(f, compile, kind)
    assert c._replay.replays > 0
    plan = c._replay.plan
    run = plan.__dict__.get("run")
    if type(plan) is FusedPlan and plan.single() is not None:
        # one fused kernel and nothing else: FusedPlan.run_one serves it (no lean function is
        # made), compared below with the step-by-step replay
        assert type(run) is lean._Lazy
        monkeypatch.setattr(FusedPlan, "single", lambda self: None)
    elif name == "branchy":  # (its last call may have recorded a plan not replayed yet)
        assert type(run) is lean._Lazy or run.__name__ == "mp_lean"
    else:
        assert run.__name__ == "mp_lean"
    monkeypatch.setattr(lean, "leanable", lambda plan, dual: False)
    c2, want = _runs(f, compile, kind)
    assert "run" not in c2._replay.plan.__dict__
    assert c2._replay.replays == c._replay.replays
    for a, b in zip(got, want):
        assert _bits(a) == _bits(b)


@pytest.mark.parametrize("kind", ["gradient", "hvp"])
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_lean_replay_matches_fresh_recordings(name, kind):
    # (the default caches: compiled fused kernels differ from the rules in the last bits)
    f = FUNCTIONS[name]
    _, got = _runs(f, False, kind)
    for a, b in zip(got, _fresh(f, kind)):
        a = (a[0], a[1][0]) if kind == "gradient" else a
        b = (b[0], b[1][0]) if kind == "gradient" else b
        for u, w in zip(a, b):
            np.testing.assert_allclose(u, w, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("compile", [False, True], ids=["default", "compiled"])
def test_guards_still_fire(compile):
    x = np.ones((3, 4))
    f = FUNCTIONS["sum_sin"]
    c = mp.prepare_gradient_cache(f, x, compile=compile)
    h = mp.prepare_hvp_cache(f, x, compile=compile)
    for _ in range(3):
        mp.value_and_gradient(c, f, x)
        mp.value_and_hvp(h, f, x, x)
    ref = mp.prepare_gradient_cache(f, x, replay=False)
    for bad in (np.ones((4, 3)), np.ones((3, 4), np.float32), [1.0, 2.0]):
        with pytest.raises(PreparedCacheSpecError) as e:
            mp.value_and_gradient(c, f, bad)
        with pytest.raises(PreparedCacheSpecError) as e_ref:
            mp.value_and_gradient(ref, f, bad)
        assert str(e.value) == str(e_ref.value)
        with pytest.raises(PreparedCacheSpecError):
            mp.value_and_hvp(h, f, x, bad)
    with pytest.raises(PreparedCacheSpecError, match="different function"):
        mp.value_and_gradient(c, np.sum, x)


def test_rebinding_a_global_records_again():
    global SCALE
    x = np.linspace(0.1, 1.0, 6)
    c = mp.prepare_gradient_cache(_scaled, x)
    for _ in range(3):
        mp.value_and_gradient(c, _scaled, x)
    assert c._replay.plan.run.__name__ == "mp_lean"
    old = SCALE
    try:
        SCALE = 3.0
        y, (g,) = mp.value_and_gradient(c, _scaled, x)
    finally:
        SCALE = old
    assert y == 3.0 * np.sum(np.sin(x))
    np.testing.assert_array_equal(g, 3.0 * np.cos(x))


def test_branch_flip_records_again():
    x = np.ones(5)
    c = mp.prepare_gradient_cache(_branchy, x)
    for _ in range(3):
        mp.value_and_gradient(c, _branchy, x)
    y, (g,) = mp.value_and_gradient(c, _branchy, -x)
    want_y, want_g = mp.value_and_grad(_branchy)(-x)
    assert y == want_y
    np.testing.assert_array_equal(g, want_g)


def test_debug_mode_is_honoured():
    data = np.ones(4)
    f = lambda x: np.sum(x * data)
    x = np.arange(4.0)
    c = mp.prepare_gradient_cache(f, x)
    for _ in range(3):
        mp.value_and_gradient(c, f, x)
    n = c._replay.replays
    with mp.Config(debug_mode=True):
        mp.value_and_gradient(c, f, x)
        data[:] = 2.0  # (refilled in place: the guards cannot see it, debug mode does)
        with pytest.raises(StaleReplayError):
            mp.value_and_gradient(c, f, x)
    assert c._replay.replays == n + 2


@pytest.mark.parametrize("compile", [False, True], ids=["default", "compiled"])
def test_pickled_caches(compile):
    x = np.linspace(-1, 1, 12).reshape(3, 4)
    c = mp.prepare_gradient_cache(_scaled, x, compile=compile)
    h = mp.prepare_hvp_cache(_scaled, x, compile=compile)
    for _ in range(3):
        want = mp.value_and_gradient(c, _scaled, x)
        want_h = mp.value_and_hvp(h, _scaled, x, x)
    c2, h2 = pickle.loads(pickle.dumps(c)), pickle.loads(pickle.dumps(h))
    for _ in range(3):
        assert _bits(mp.value_and_gradient(c2, _scaled, x)) == _bits(want)
        assert _bits(mp.value_and_hvp(h2, _scaled, x, x)) == _bits(want_h)
    assert c2._replay.replays == 2


def test_a_plain_leaf_among_duals_takes_the_general_path():
    f = lambda x, w: np.sum(np.sin(x) * w)
    x, w = np.linspace(0, 1, 5), np.linspace(1, 2, 5)
    c = mp.prepare_hvp_cache(f, x, w)
    for _ in range(3):
        _y, _g, hv = mp.value_and_hvp(c, f, (np.ones(5), None), x, w)
    want = mp.hvp(f, argnums=(0, 1))(x, w, (np.ones(5), np.zeros(5)))
    np.testing.assert_array_equal(hv[0], want[0])
    assert c._replay.replays == 2


@pytest.mark.parametrize("kind", ["gradient", "hvp"])
@pytest.mark.parametrize("fn", [np.sum, np.sin])
def test_a_rule_registered_after_the_lean_function_is_seen(kind, fn, monkeypatch):
    f = FUNCTIONS["sum_sin"]
    x = np.linspace(0, 1, 6)
    c = (mp.prepare_gradient_cache if kind == "gradient" else mp.prepare_hvp_cache)(f, x)
    call = (lambda: mp.value_and_gradient(c, f, x)) if kind == "gradient" else \
        (lambda: mp.value_and_hvp(c, f, x, x))
    for _ in range(3):
        want = call()
    assert c._replay.plan.run.__name__ == "mp_lean"
    builtin, seen = RRULES[fn], []

    def rule(args, kw, needs):
        seen.append(1)
        return builtin(args, kw, needs)
    monkeypatch.setitem(RRULES, fn, rule)
    assert _bits(call()) == _bits(want)
    assert seen


def test_leaves_of_another_kind_run_the_plan_itself():
    f = FUNCTIONS["sum_sin"]
    x = np.linspace(0, 1, 6)
    c = mp.prepare_hvp_cache(f, x)
    for _ in range(3):
        mp.value_and_hvp(c, f, x, x)
    plan = c._replay.plan
    assert plan.run.__name__ == "mp_lean"
    y, (g,) = plan.run([x])  # (plain leaves for a plan on duals: Plan.run's plain steps)
    y0, g0 = mp.value_and_grad(f)(x)
    assert y == y0
    np.testing.assert_array_equal(g, g0)
