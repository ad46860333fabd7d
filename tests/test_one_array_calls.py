"""The one-array call of prepared gradient and HVP caches (replay/one_array.py): bit for bit
what the general path gives, and every guard of the general path still fires on it."""
import pickle
import warnings

import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.replay.source import SourceReplayer
from mooncake_py.rules.registry import RRULES

SCALE = 1.0


def scaled_sum(x):
    return SCALE * np.sum(np.sin(x))


def loop(x):
    s = 0.0
    for i in range(x.size):
        s = s + x[i] * x[i]
    return s


FUNCTIONS = {
    "sum": lambda x: np.sum(x),
    "sum_sin": lambda x: np.sum(np.sin(x)),
    "sum_sq": lambda x: -0.5 * np.sum(x ** 2),
    "broadcast": lambda x: np.sum(np.sin(x) * np.cos(x) + np.exp(x)),
    "loop": loop,
}


def _bits(out):
    leaves = []
    for a in out:
        if isinstance(a, tuple):
            leaves += _bits(a)
        else:
            a = np.asarray(a)
            leaves.append((a.dtype.str, a.shape, a.tobytes()))
    return leaves


def _caches(f, x, kind, compile):
    prep = mp.prepare_gradient_cache if kind == "gradient" else mp.prepare_hvp_cache
    return prep(f, x, compile=compile)


def _call(c, f, x, v):
    if type(c).__name__ == "GradientCache":
        return mp.value_and_gradient(c, f, x)
    return mp.value_and_hvp(c, f, v, x)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mp.CompileFallbackWarning)
        yield


@pytest.mark.parametrize("compile", [False, True])
@pytest.mark.parametrize("kind", ["gradient", "hvp"])
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_the_one_array_call_is_the_general_path_bit_for_bit(name, kind, compile):
    f = FUNCTIONS[name]
    rng = np.random.default_rng(0)
    shape = (3, 4) if name == "broadcast" else (12,)
    x0, v = rng.standard_normal(shape), rng.standard_normal(shape)
    fast, general = _caches(f, x0, kind, compile), _caches(f, x0, kind, compile)
    for _ in range(2):
        _call(fast, f, x0, v), _call(general, f, x0, v)
    assert fast._fast is not None
    served = fast._replay.replays
    for _ in range(3):
        x = rng.standard_normal(shape)
        general._fast = None  # (the general path alone)
        want = _call(general, f, x, v)
        got = _call(fast, f, x, v)
        assert _bits(got) == _bits(want)
    assert fast._replay.replays == served + 3


@pytest.mark.parametrize("compile", [False, True])
@pytest.mark.parametrize("kind", ["gradient", "hvp"])
def test_the_one_array_call_takes_no_general_step(kind, compile, monkeypatch):
    f = FUNCTIONS["sum_sin"]
    x = np.linspace(0.0, 1.0, 7)
    c = _caches(f, x, kind, compile)
    for _ in range(2):
        _call(c, f, x, x)

    def general(*args, **kwargs):
        raise AssertionError("the general path ran")
    monkeypatch.setattr(c._replay, "call", general)
    _call(c, f, x, x)


@pytest.mark.parametrize("compile", [False, True])
@pytest.mark.parametrize("kind", ["gradient", "hvp"])
def test_wrong_arguments_raise_as_before(kind, compile):
    f = FUNCTIONS["sum_sin"]
    x = np.linspace(0.0, 1.0, 5)
    c = _caches(f, x, kind, compile)
    for _ in range(2):
        _call(c, f, x, x)
    with pytest.raises(mp.PreparedCacheSpecError, match=r"shape \(6,\)"):
        _call(c, f, np.ones(6), np.ones(6))
    with pytest.raises(mp.PreparedCacheSpecError, match="float32"):
        _call(c, f, x.astype(np.float32), x.astype(np.float32))
    with pytest.raises(mp.PreparedCacheSpecError, match="different function"):
        _call(c, lambda x: np.sum(x), x, x)
    if kind == "hvp":
        with pytest.raises(Exception, match="shape"):
            mp.value_and_hvp(c, f, np.ones(6), x)
    # and the next call is served as before
    before = c._replay.replays
    out = _call(c, f, x, x)
    assert c._replay.replays == before + 1
    assert np.allclose(out[1][0] if kind == "gradient" else out[1], np.cos(x))


@pytest.mark.parametrize("compile", [False, True])
@pytest.mark.parametrize("kind", ["gradient", "hvp"])
def test_a_rule_registered_after_preparing_is_used(kind, compile, monkeypatch):
    f = FUNCTIONS["sum_sin"]
    x, v = np.linspace(0.0, 1.0, 5), np.ones(5)
    c = _caches(f, x, kind, compile)
    for _ in range(2):
        _call(c, f, x, v)
    old = RRULES[np.sin]

    def rule(args, kwargs, needs):
        y, pb = old(args, kwargs, needs)
        return y, lambda g: tuple(None if p is None else 2 * p for p in pb(g))
    monkeypatch.setitem(RRULES, np.sin, rule)
    out = _call(c, f, x, v)
    if kind == "gradient":
        np.testing.assert_allclose(out[1][0], 2 * np.cos(x), rtol=1e-14)
    else:
        np.testing.assert_allclose(out[1], 2 * np.cos(x), rtol=1e-14)
        np.testing.assert_allclose(out[2], -2 * np.sin(x) * v, rtol=1e-14)


@pytest.mark.parametrize("compile", [False, True])
@pytest.mark.parametrize("kind", ["gradient", "hvp"])
def test_a_rebound_global_records_again(kind, compile):
    global SCALE
    x, v = np.linspace(0.0, 1.0, 5), np.ones(5)
    c = _caches(scaled_sum, x, kind, compile)
    try:
        for s in (1.0, 1.0, 3.0, 3.0, 1.0):
            SCALE = s
            out = _call(c, scaled_sum, x, v)
            g = out[1][0] if kind == "gradient" else out[1]
            np.testing.assert_allclose(g, s * np.cos(x), rtol=1e-14)
            if kind == "hvp":
                np.testing.assert_allclose(out[2], -s * np.sin(x) * v, rtol=1e-14)
        assert c._fast is not None
    finally:
        SCALE = 1.0


@pytest.mark.parametrize("kind", ["gradient", "hvp"])
def test_debug_mode_still_checks_the_replay(kind):
    data = np.ones(4)
    f = lambda x: np.sum(x * data)
    x = np.ones(4)
    c = _caches(f, x, kind, False)
    for _ in range(2):
        _call(c, f, x, x)
    with mp.Config(debug_mode=True):
        data[:] = 2.0  # (refilled in place: only debug mode sees it)
        with pytest.raises(mp.StaleReplayError):
            _call(c, f, x, x)
    data[:] = 1.0
    _call(c, f, x, x)


def test_float32_caches_keep_float32():
    f = FUNCTIONS["sum_sq"]
    x = np.ones(3, dtype=np.float32)
    c, h = mp.prepare_gradient_cache(f, x), mp.prepare_hvp_cache(f, x)
    for _ in range(3):
        _, (g,) = mp.value_and_gradient(c, f, x)
        _, g2, hv = mp.value_and_hvp(h, f, x, x)
    assert g.dtype == g2.dtype == hv.dtype == np.float32


def test_an_exception_inside_f_leaves_the_cache_working():
    def f(x):
        if x[0] > 5:
            raise ValueError("too large")
        return np.sum(np.sin(x))
    x = np.zeros(3)
    for prep, call in ((mp.prepare_gradient_cache, lambda c, x: mp.value_and_gradient(c, f, x)),
                       (mp.prepare_hvp_cache, lambda c, x: mp.value_and_hvp(c, f, x, x))):
        c = prep(f, x)
        for _ in range(2):
            call(c, x)
        with pytest.raises(ValueError, match="too large"):
            call(c, np.full(3, 10.0))
        out = call(c, x)
        assert np.allclose(out[1][0] if isinstance(out[1], tuple) else out[1], 1.0)


def test_pickled_caches_serve_the_one_array_call():
    x = np.arange(4.0)
    c = pickle.loads(pickle.dumps(mp.prepare_gradient_cache(scaled_sum, x)))
    for _ in range(3):
        _, (g,) = mp.value_and_gradient(c, scaled_sum, x)
    assert c._fast is not None and c._replay.replays == 2
    assert g.tolist() == np.cos(x).tolist()


def test_a_replaced_replayer_serves_the_calls():
    f = FUNCTIONS["sum_sin"]
    x = np.linspace(0.0, 1.0, 5)
    c = mp.prepare_gradient_cache(f, x)
    for _ in range(3):
        mp.value_and_gradient(c, f, x)
    old = c._replay
    c._replay = SourceReplayer()
    for _ in range(2):
        mp.value_and_gradient(c, f, x)
    assert (old.replays, c._replay.replays) == (2, 1)


def _running_sum(x):
    s = 0.0
    for i in range(len(x)):
        s += x[i]
    return s


def test_a_compiled_loop_gradient_is_owned_and_the_general_path_bit_for_bit():
    from mooncake_py.replay.compiled import CompiledPlan
    f = _running_sum
    rng = np.random.default_rng(2)
    x0 = rng.standard_normal(40)
    fast, general = _caches(f, x0, "gradient", True), _caches(f, x0, "gradient", True)
    for _ in range(2):
        _call(fast, f, x0, x0), _call(general, f, x0, x0)
    assert type(fast._replay.plan) is CompiledPlan
    for _ in range(3):
        x = rng.standard_normal(40)
        general._fast = None  # (the general path alone)
        want = _call(general, f, x, x)
        got = _call(fast, f, x, x)
        assert _bits(got) == _bits(want)
        g = got[1][0]
        assert g.flags.writeable and g.base is None and g.flags.c_contiguous
        g[...] = 5.0  # (the caller's own: the next call is not affected)
    assert _bits(_call(fast, f, x, x)) == _bits(want)


def test_a_getitem_rule_registered_after_compiling_a_loop_is_used(monkeypatch):
    import operator
    f = _running_sum
    x = np.linspace(0.0, 1.0, 9)
    c = _caches(f, x, "gradient", True)
    for _ in range(2):
        _call(c, f, x, x)
    old, calls = RRULES[operator.getitem], []

    def rule(args, kwargs, needs):
        calls.append(1)
        return old(args, kwargs, needs)
    monkeypatch.setitem(RRULES, operator.getitem, rule)
    y, (g,) = _call(c, f, x, x)
    assert calls  # (recorded again, with the new rule)
    assert float(y) == float(f(x))
    np.testing.assert_array_equal(g, np.ones(9))


def _lean_one(c):
    return getattr(c._replay.plan.__dict__.get("run"), "one", None)


@pytest.mark.parametrize("kind", ["gradient", "hvp"])
@pytest.mark.parametrize("name", ["broadcast", "sum", "sum_sin", "sum_sq"])  # (lean plans)
def test_a_lean_plans_generated_one_array_form_is_its_run_bit_for_bit(name, kind):
    from mooncake_py.replay.one_array import _hvp_plan

    f = FUNCTIONS[name]
    rng = np.random.default_rng(1)
    shape = (3, 4) if name == "broadcast" else (12,)
    x, v = rng.standard_normal(shape), rng.standard_normal(shape)
    c = _caches(f, x, kind, False)
    for _ in range(3):
        _call(c, f, x, v)
    one, plan = _lean_one(c), c._replay.plan
    assert one is not None
    x = rng.standard_normal(shape)
    if kind == "hvp":
        got, want = one(x, v), _hvp_plan(plan, x, v)
    else:
        y, cts = plan.run([x])
        got, want = one(x), (y, plan.finish(cts)[0])
    assert _bits(got) == _bits(want)
    # and the cache's call is served by it
    served = c._replay.replays
    assert _bits(_call(c, f, x, v)) == _bits((got[0], (got[1],)) if kind == "gradient" else got)
    assert c._replay.replays == served + 1


@pytest.mark.parametrize("kind", ["gradient", "hvp"])
def test_the_generated_form_hands_out_owned_results(kind):
    # np.sum: a gradient of ones the sweep makes as a read-only broadcast view, and (HVP) a
    # gradient the direction does not move, whose H·v is zeros: each call's results are its
    # own arrays, which the caller may write into
    f = FUNCTIONS["sum"]
    x, v = np.linspace(0.0, 1.0, 6), np.ones(6)
    c = _caches(f, x, kind, False)
    for _ in range(3):
        _call(c, f, x, v)
    assert _lean_one(c) is not None
    first = _call(c, f, x, v)
    arrays = list(first[1]) if kind == "gradient" else [first[1], first[2]]
    for a in arrays:
        assert a.flags.writeable and a.base is None
        a[...] = 7.0
    again = _call(c, f, x, v)
    assert np.array_equal(again[1][0] if kind == "gradient" else again[1], np.ones(6))
    if kind == "hvp":
        assert np.array_equal(again[2], np.zeros(6))
        assert not np.shares_memory(v, again[2])


def test_the_generated_hvp_returns_none_on_a_failed_guard_and_closes_its_tag(monkeypatch):
    from mooncake_py.dual import dual_array

    f = FUNCTIONS["sum_sin"]
    x, v = np.linspace(0.0, 1.0, 5), np.ones(5)
    c = _caches(f, x, "hvp", False)
    for _ in range(3):
        _call(c, f, x, v)
    one = _lean_one(c)
    tags = []
    real = dual_array.Tag

    def tag(lanes=0):
        tags.append(real(lanes))
        return tags[-1]
    monkeypatch.setitem(one.__globals__, "_Tag", tag)
    assert one(x, v) is not None and tags[-1].closed
    monkeypatch.setitem(RRULES, np.sin, RRULES[np.sin])  # (the same rule, the entry replaced)

    def other(*args, **kwargs):
        return RRULES[np.cos](*args, **kwargs)
    monkeypatch.setitem(RRULES, np.sin, other)
    assert one(x, v) is None and tags[-1].closed
    # the cache's call then takes the general path, which records with the new rule
    y, g, hv = _call(c, f, x, v)
    assert np.allclose(g, -np.sin(x))
