"""Source replay (mooncake_py/replay/source.py): scalar runs of a replay plan as generated
Python. Every result is compared with the Python replay (replay.Replayer: bitwise where no
transcendental function is involved) and with a fresh recording."""
import os
import pickle
import warnings

import numpy as np
import pytest

import mooncake_py as mp
from benchmarks.namespaces import numpy_namespace
from benchmarks.suite import CASES
from mooncake_py.replay import source as sr
from mooncake_py.replay.plans import Plan, PullbackReplayer, Replayer


def _pair(f, args, nums=(0,)):
    """A Python replayer and a source replayer, both past their recording call."""
    py, src = Replayer(), sr.SourceReplayer()
    py.call(f, args, nums)
    src.call(f, args, nums)
    return py, src


def _same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert np.array_equal(a.view(np.int64), b.view(np.int64)), (a, b)


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-14, atol=1e-300)


def _compare(got, want, exact):
    (y, gs), (y0, gs0) = got, want
    assert type(y) is type(y0) is np.float64
    check = _same_bits if exact else _close
    check(y, y0)
    assert len(gs) == len(gs0)
    for g, g0 in zip(gs, gs0):
        assert type(g) is type(g0) is np.ndarray
        check(g, g0)


@pytest.mark.parametrize("name,exact,form", [
    ("_sum_1000", True, "_WholeProgram"), ("large_single_block", True, "_WholeProgram"),
    ("_sum_sin_1000", False, "_WholeProgram"), ("map_sin_cos_exp", False, "_MixedSource"),
    ("turing_broadcast_benchmark", False, "_MixedSource"),
    ("naive_map_sin_cos_exp", False, "_MixedSource")])
def test_suite_rows_equal_python_replay_and_fresh_recording(name, exact, form):
    case = CASES[name]
    f = case.bind(numpy_namespace())
    nums = tuple(case.argnums)
    args0 = case.make_inputs(np.random.default_rng(0))
    py, src = _pair(f, args0, nums)
    for k in (1, 2):
        args = tuple(a * (1 + 0.01 * k) if i in nums else a for i, a in enumerate(args0))
        got = src.call(f, args, nums)
        _compare(got, py.call(f, args, nums), exact)
        y0, g0 = mp.value_and_grad(f, argnums=nums)(*args)
        _close(got[0], y0)
        for g, w in zip(got[1], g0):
            _close(g, w)
    plan = src.plan
    assert type(plan) is sr.SourcePlan and type(plan._how).__name__ == form
    assert plan.runs == 2 and plan.fallbacks == 0


def _mixed(x):
    v = np.cumsum(x)                      # an array op between scalar runs
    s = 0.0
    for i in range(12):
        s = s + v[i] * x[i] - 0.5 / (1.0 + v[i] * v[i])
    w = np.tanh(x) * s                    # reads the run's output
    t = w[0]
    for i in range(1, 12):
        t = t * 0.9 + w[i] * x[i]
    return np.sum(x * x) + t + s


def test_mixed_plan_with_array_ops_between_runs():
    x0 = np.linspace(-1, 1, 12)
    py, src = _pair(_mixed, (x0,))
    for x in (x0 * 1.5, x0[::-1] + 0.25):
        got = src.call(_mixed, (x,), (0,))
        _compare(got, py.call(_mixed, (x,), (0,)), False)
        y0, (g0,) = mp.value_and_grad(_mixed, argnums=(0,))(x)
        _close(got[0], y0)
        _close(got[1][0], g0)
    plan = src.plan
    assert type(plan._how).__name__ == "_MixedSource" and len(plan._how.segments) == 2
    assert plan.runs == 2


def _loop(x):
    s = 0.0
    for i in range(len(x)):
        s = s + x[i] * x[(i + 1) % len(x)] - x[i] / 3
    return s


def test_long_run_split_into_chunks(monkeypatch):
    monkeypatch.setattr(sr, "MAX_RUN", 40)
    x0 = np.linspace(0.5, 2, 30)
    py, src = _pair(_loop, (x0,))
    got = src.call(_loop, (x0 * 2,), (0,))
    _compare(got, py.call(_loop, (x0 * 2,), (0,)), False)
    how = src.plan._how
    assert type(how).__name__ == "_MixedSource" and len(how.segments) >= 4


def _branchy(x):
    s = 0.0
    for i in range(len(x)):
        if x[i] > 0:
            s = s + x[i] * x[i]
        else:
            s = s - 2.0 * x[i]
        if s:                             # bool of a traced value: a guard too
            s = s * 1.0
    return s


def test_guards_flip_and_rerecord():
    x = np.array([1.0, -2.0, 3.0, 4.0, -0.5, 2.0])
    c = mp.prepare_gradient_cache(_branchy, x)
    for xi in (x, x * 1.1, -x, -x * 0.9, x):
        y, (g,) = mp.value_and_gradient(c, _branchy, xi)
        y0, g0 = mp.value_and_grad(_branchy)(xi)
        _same_bits(y, y0)
        _same_bits(g, g0)
    rp = c._replay
    assert rp.replays == 2 and not rp.disabled  # (x * 1.1 and -x * 0.9 replayed)


def _risky(x):
    s = 0.0
    for i in range(4):
        s = s + x[i] * x[4]
    return s + x[0] / x[1] + np.log(x[2]) + np.exp(x[3]) + np.sqrt(x[4])


@pytest.mark.parametrize("bad", [(1, 0.0), (2, 0.0), (3, 1000.0), (4, -1.0), (2, -1.0)])
def test_float_errors_fall_back_to_python_replay(bad):
    x0 = np.array([1.0, 2.0, 3.0, 0.5, 4.0])
    c = mp.prepare_gradient_cache(_risky, x0)
    mp.value_and_gradient(c, _risky, x0)
    mp.value_and_gradient(c, _risky, x0 * 1.5)
    plan = c._replay.plan
    assert type(plan) is sr.SourcePlan and plan.runs == 1
    x = x0.copy()
    x[bad[0]] = bad[1]
    with warnings.catch_warnings(record=True) as got_w:
        warnings.simplefilter("always")
        y, (g,) = mp.value_and_gradient(c, _risky, x)
    with warnings.catch_warnings(record=True) as want_w:
        warnings.simplefilter("always")
        y0, (g0,) = mp.value_and_grad(_risky, argnums=(0,))(x)
    _same_bits(y, y0)
    _same_bits(g, g0)
    assert sorted(str(w.message) for w in got_w) == sorted(str(w.message) for w in want_w)
    assert want_w  # NumPy did warn
    assert plan.fallbacks == 1 and c._replay.plan is plan
    y, (g,) = mp.value_and_gradient(c, _risky, x0)  # and the next call is generated again
    assert plan.runs == 2


def test_overflow_without_python_error_falls_back():
    # float * float overflows to inf in Python without an error; NumPy warns: replayed its way
    f = _loop
    x0 = np.linspace(0.5, 2, 10)
    c = mp.prepare_gradient_cache(f, x0)
    mp.value_and_gradient(c, f, x0)
    x = x0.copy()
    x[3] = x[4] = 1e200
    with warnings.catch_warnings(record=True) as got_w:
        warnings.simplefilter("always")
        y, (g,) = mp.value_and_gradient(c, f, x)
    with warnings.catch_warnings(record=True) as want_w:
        warnings.simplefilter("always")
        y0, (g0,) = mp.value_and_grad(f, argnums=(0,))(x)
    _same_bits(y, y0)
    _same_bits(g, g0)
    assert [str(w.message) for w in got_w] == [str(w.message) for w in want_w]
    assert c._replay.plan.fallbacks == 1


def _ints(x):
    s = 0
    for i in range(5):
        s = s + x[i] * 3 - 2 + 7 / x[i] - (2 ** 53) * x[i] + (2 ** 60) * x[i]
        s = 1 - s
    return s


def test_int_constants_exact():
    x0 = np.array([1.5, -2.25, 3.0, 0.1, 7.0])
    py, src = _pair(_ints, (x0,))
    got = src.call(_ints, (x0 * 1.3,), (0,))
    _compare(got, py.call(_ints, (x0 * 1.3,), (0,)), True)
    _compare(got, mp.value_and_grad(_ints, argnums=(0,))(x0 * 1.3), True)
    assert src.plan.runs == 1  # (2**60 is no exact float64: that step stays Python replay)


def _signed_zero(x):
    a = x[0] * x[1] - x[2] * x[2]
    b = -x[3] * 0.0 * x[4]
    c = x[5] * -0.0
    return a * x[6] + b + c + x[6] * 0.0


def test_negative_zero_as_the_tape():
    x0 = np.array([1.0, -0.0, 0.0, 2.0, -3.0, 4.0, -0.0])
    py, src = _pair(_signed_zero, (x0,))
    for x in (x0, -x0, x0 * 2):
        got = src.call(_signed_zero, (x,), (0,))
        _compare(got, py.call(_signed_zero, (x,), (0,)), True)
        _compare(got, mp.value_and_grad(_signed_zero, argnums=(0,))(x), True)
    assert src.plan.runs == 3


def _grid(x, w):
    s = 0.0
    for i in range(3):
        for j in range(4):
            s = s + x[i, j] * w[7 * i + 3 * j]
    return s


def test_two_dimensional_reads_and_sparse_reads_of_a_large_array():
    x0, w0 = np.arange(12.0).reshape(3, 4), np.linspace(0, 1, 200)
    py, src = _pair(_grid, (x0, w0), (0, 1))
    got = src.call(_grid, (x0 + 1, w0 * 2), (0, 1))
    _compare(got, py.call(_grid, (x0 + 1, w0 * 2), (0, 1)), True)
    assert got[1][0].shape == (3, 4) and type(src.plan._how).__name__ == "_WholeProgram"


def test_plan_too_short_for_a_segment_stays_plain():
    f = lambda x: x[0] * x[1] + x[2]    # noqa: E731
    x = np.array([1.0, 2.0, 3.0])
    py, src = _pair(f, (x,))
    _compare(src.call(f, (x * 2,), (0,)), py.call(f, (x * 2,), (0,)), True)
    assert type(src.plan) is Plan


def test_plan_without_a_scalar_run_unwraps():
    f = lambda x: np.sum(np.sin(x) * x) + np.sum(x[:2] ** 2) + np.sum(np.cos(x) * x ** 2)  # noqa
    x = np.linspace(0, 1, 5)
    py, src = _pair(f, (x,))
    assert type(src.plan) is sr.SourcePlan
    _compare(src.call(f, (x * 2,), (0,)), py.call(f, (x * 2,), (0,)), True)
    assert type(src.plan) is Plan  # (no run: the replayer holds the plain plan again)


def test_cache_default_pickles_and_replays_source_again():
    f = _loop
    x = np.random.default_rng(1).standard_normal(300)
    c = mp.prepare_gradient_cache(f, x)
    assert type(c._replay) is sr.SourceReplayer
    mp.value_and_gradient(c, f, x)
    want = mp.value_and_gradient(c, f, x * 0.5)
    c2 = pickle.loads(pickle.dumps(c))
    assert type(c2._replay) is sr.SourceReplayer and c2._replay.plan is None
    mp.value_and_gradient(c2, f, x)
    _compare(mp.value_and_gradient(c2, f, x * 0.5), want, True)
    _compare(want, Replayer().call(f, (x * 0.5,), (0,)), True)
    assert c2._replay.plan.runs == 1
    c3 = pickle.loads(pickle.dumps(mp.prepare_gradient_cache(f, x, replay=False)))
    assert c3._replay is None
    _compare(mp.value_and_gradient(c3, f, x * 0.5), want, False)


def test_pullback_cache_equals_python_replay_and_vjp():
    def f(x):
        s, t = 0.0, 1.0
        for i in range(6):
            s = s + x[i] * x[i]
            t = t * np.cos(x[i])
        return s, np.sin(x) * t
    x0 = np.linspace(0.1, 0.6, 6)
    ybar = (2.0, np.linspace(1, 2, 6))
    py, src = PullbackReplayer(), sr.SourcePullbackReplayer()
    py.call(f, (x0,), (0,), ybar)
    src.call(f, (x0,), (0,), ybar)
    (ys, ts), (g,) = src.call(f, (x0 * 2,), (0,), ybar)
    (ys0, ts0), (g0,) = py.call(f, (x0 * 2,), (0,), ybar)
    _close(ys, ys0)
    _close(ts, ts0)
    _close(g, g0)
    _, pb = mp.vjp(f, x0 * 2)
    _close(g, pb(ybar)[0])
    assert type(src.plan) is sr.SourcePlan and src.plan.runs == 1
    c = mp.prepare_pullback_cache(f, x0)
    assert type(c._replay) is sr.SourcePullbackReplayer


def test_bad_input_then_next_call_works():
    f = _loop
    x0 = np.linspace(0.5, 2, 10)
    c = mp.prepare_gradient_cache(f, x0)
    mp.value_and_gradient(c, f, x0)
    mp.value_and_gradient(c, f, x0)
    with pytest.raises(mp.PreparedCacheSpecError):
        mp.value_and_gradient(c, f, np.ones(3))
    _compare(mp.value_and_gradient(c, f, x0 * 3), Replayer().call(f, (x0 * 3,), (0,)), True)


def test_one_time_cost_is_recorded():
    before = dict(sr.TIMES)
    f = CASES["_sum_1000"].bind(numpy_namespace())
    x = np.ones(1000)
    c = mp.prepare_gradient_cache(f, x)
    mp.value_and_gradient(c, f, x)
    mp.value_and_gradient(c, f, x)
    assert sr.TIMES["functions"] == before["functions"] + 1
    assert sr.TIMES["compile_s"] > before["compile_s"]


# --- HVP caches: plans recorded on dual numbers ----------------------------------------------
def _hvp_cache(f, *args):
    """An HVP cache whose replayer is the source one (prepare_hvp_cache's default once
    second_order.HVPCache chooses it)."""
    c = mp.prepare_hvp_cache(f, *args)
    c._replay = sr.SourceReplayer(dual=True, kind="hvp")
    return c


def _python_hvp_cache(f, *args):
    c = mp.prepare_hvp_cache(f, *args)
    c._replay = Replayer(dual=True, kind="hvp")
    return c


def _compare_hvp(got, want, exact):
    check = _same_bits if exact else _close
    for a, b in zip(got, want):
        if type(a) is tuple:
            for p, q in zip(a, b):
                check(p, q)
        else:
            check(a, b)


@pytest.mark.parametrize("name,exact,form", [
    ("_sum_1000", True, "_DualWholeProgram"), ("large_single_block", True, "_DualWholeProgram"),
    ("_sum_sin_1000", False, "_DualWholeProgram"), ("map_sin_cos_exp", False, "_MixedSource"),
    ("naive_map_sin_cos_exp", False, "_MixedSource")])
def test_hvp_suite_rows_equal_python_replay_and_fresh_hvp(name, exact, form):
    case = CASES[name]
    f = case.bind(numpy_namespace())
    x, = case.make_inputs(np.random.default_rng(0))
    v = np.random.default_rng(1).standard_normal(x.shape)
    c, cp = _hvp_cache(f, x), _python_hvp_cache(f, x)
    mp.value_and_hvp(c, f, v, x)
    mp.value_and_hvp(cp, f, v, x)
    for k in (1, 2):
        got = mp.value_and_hvp(c, f, v * k, x * (1 + 0.01 * k))
        _compare_hvp(got, mp.value_and_hvp(cp, f, v * k, x * (1 + 0.01 * k)), exact)
        _close(got[2], mp.hvp(f)(x * (1 + 0.01 * k), v * k))
        assert [type(a) for a in got] == [np.float64, np.ndarray, np.ndarray]
    plan = c._replay.plan
    assert type(plan._how).__name__ == form and plan.runs == 2


def test_hvp_mixed_plan_with_array_ops_between_runs():
    x0 = np.linspace(-1, 1, 12)
    v = np.cos(np.arange(12.0))
    c, cp = _hvp_cache(_mixed, x0), _python_hvp_cache(_mixed, x0)
    mp.value_and_hvp(c, _mixed, v, x0)
    mp.value_and_hvp(cp, _mixed, v, x0)
    for x in (x0 * 1.5, x0[::-1] + 0.25):
        got = mp.value_and_hvp(c, _mixed, v, x)
        _compare_hvp(got, mp.value_and_hvp(cp, _mixed, v, x), False)
        _close(got[2], mp.hvp(_mixed)(x, v))
    how = c._replay.plan._how
    assert type(how).__name__ == "_MixedSource" and len(how.segments) == 2
    assert type(how.segments[0]).__name__ == "_DualSegment" and c._replay.plan.runs == 2


def _two(x, w):
    s = 0.0
    for i in range(4):
        s = s + np.exp(x[i] * w[i]) / (1.0 + w[i] * w[i]) - 3 * x[i] * x[i] * x[i]
        s = -s if s > 100 else s
    return s


def test_hvp_two_arguments_and_guards():
    x, w = np.array([0.1, 0.2, -0.3, 0.4]), np.array([1.0, -2.0, 0.5, 0.25])
    vs = (np.array([1.0, 0.0, -1.0, 2.0]), np.array([0.5, 0.5, 0.0, 1.0]))
    c, cp = _hvp_cache(_two, x, w), _python_hvp_cache(_two, x, w)
    calls = [(x, w), (x * 2, w), (x * 30, w), (x * 31, w), (x, w), (x * 1.5, w)]
    for args in calls:
        got = mp.value_and_hvp(c, _two, vs, *args)
        _compare_hvp(got, mp.value_and_hvp(cp, _two, vs, *args), False)
        want = mp.hvp(_two, argnums=(0, 1))(*args, vs)
        for a, b in zip(got[2], want):
            _close(a, b)
    assert c._replay.replays == 3 and c._replay.plan.runs == 1


@pytest.mark.parametrize("bad", [(1, 0.0), (2, 0.0), (3, 1000.0), (4, -1.0)])
def test_hvp_float_errors_fall_back_to_python_replay(bad):
    x0 = np.array([1.0, 2.0, 3.0, 0.5, 4.0])
    v = np.array([1.0, -1.0, 0.5, 2.0, 0.25])
    c, cp = _hvp_cache(_risky, x0), _python_hvp_cache(_risky, x0)
    mp.value_and_hvp(c, _risky, v, x0)
    mp.value_and_hvp(cp, _risky, v, x0)
    x = x0.copy()
    x[bad[0]] = bad[1]
    with warnings.catch_warnings(record=True) as got_w:
        warnings.simplefilter("always")
        got = mp.value_and_hvp(c, _risky, v, x)
    with warnings.catch_warnings(record=True) as want_w:
        warnings.simplefilter("always")
        want = mp.value_and_hvp(cp, _risky, v, x)
    _compare_hvp(got, want, True)
    assert sorted(str(m.message) for m in got_w) == sorted(str(m.message) for m in want_w)
    assert want_w and c._replay.plan.fallbacks == 1
    _compare_hvp(mp.value_and_hvp(c, _risky, v, x0 * 2), mp.value_and_hvp(cp, _risky, v, x0 * 2),
                 False)
    assert c._replay.plan.runs == 1


def test_code_cache_across_processes_and_a_damaged_file(tmp_path, monkeypatch):
    monkeypatch.setattr(sr, "_cache_dir", lambda: str(tmp_path))
    monkeypatch.setattr(sr, "_CODE", {})
    x = np.linspace(0.5, 2, 25)

    def run():
        r = sr.SourceReplayer()
        r.call(_loop, (x,), (0,))
        return r.call(_loop, (x * 2,), (0,))
    before = dict(sr.TIMES)
    want = run()
    files = list(tmp_path.glob("source_*.marshal"))
    assert len(files) == 1 and sr.TIMES["compiled"] == before["compiled"] + 1
    sr._CODE.clear()                       # (as a new process would start)
    _compare(run(), want, True)
    assert sr.TIMES["loaded"] == before["loaded"] + 1
    data = files[0].read_bytes()
    files[0].write_bytes(data[:-7] + b"garbage")
    sr._CODE.clear()
    _compare(run(), want, True)            # the damaged file is ignored, compiled again...
    assert sr.TIMES["compiled"] == before["compiled"] + 2
    assert files[0].read_bytes() != data[:-7] + b"garbage"   # ...and written again
    assert sr._read_code(str(files[0])) is not None


def test_code_cache_is_evicted_least_recently_used_first(tmp_path, monkeypatch):
    # every plan ever replayed leaves a file: the directory keeps the most recently used
    # within $MOONCAKE_PY_SOURCE_CACHE_MB, and a file loaded again counts as used now
    monkeypatch.setattr(sr, "_cache_dir", lambda: str(tmp_path))
    monkeypatch.setattr(sr, "_CODE", {})
    x = np.linspace(0.5, 2, 25)

    def replay(f):
        r = sr.SourceReplayer()
        r.call(f, (x,), (0,))
        return r.call(f, (x * 2,), (0,))
    fns = [eval(f"lambda x: _loop(x) * {k}.0", {"_loop": _loop}) for k in range(1, 5)]
    sizes = []
    for i, f in enumerate(fns[:3]):
        replay(f)
        files = sorted(tmp_path.glob("source_*.marshal"), key=lambda p: p.stat().st_mtime_ns)
        assert len(files) == i + 1
        os.utime(files[-1], ns=(10**9 * (i + 1), 10**9 * (i + 1)))  # (distinct ages)
        sizes.append(files[-1].stat().st_size)
    oldest = min(tmp_path.glob("source_*.marshal"), key=lambda p: p.stat().st_mtime_ns)
    sr._CODE.clear()
    want = replay(fns[0])                    # loaded from disk: now the most recent
    assert oldest.stat().st_mtime_ns > 3 * 10**9
    # room for about two files: the fourth plan's file pushes out the least recently used,
    # which is the second plan's, not the first one's that was just loaded
    monkeypatch.setenv(sr.CACHE_LIMIT_ENV, str((max(sizes) * 2.5) / (1 << 20)))
    replay(fns[3])
    left = sorted(tmp_path.glob("source_*.marshal"))
    assert len(left) == 2 and oldest in left
    sr._CODE.clear()
    _compare(replay(fns[0]), want, True)     # what is left still serves
    monkeypatch.setenv(sr.CACHE_LIMIT_ENV, "0")
    assert sr.evict(str(tmp_path)) == 2 and not list(tmp_path.glob("source_*.marshal"))
    monkeypatch.setenv(sr.CACHE_LIMIT_ENV, "not a number")
    assert sr.cache_limit_bytes() == 256 << 20


def test_hessian_lanes_stay_python_replay(monkeypatch):
    # a Hessian cache's duals carry lanes (one tangent per direction): nothing is generated
    # for them, the replayer keeps the plain plan
    import mooncake_py.transforms.second_order as so
    monkeypatch.setattr(so, "Replayer", sr.SourceReplayer)
    x = np.linspace(0.2, 1.4, 6)
    c = mp.prepare_hessian_cache(_loop, x)
    c._replay.mode = "lanes"  # (by default this loop's Hessian is served one direction a time)
    for k in (1.0, 1.5, 2.0):
        y, g, H = mp.value_gradient_and_hessian(c, _loop, x * k)
        _close(H, mp.hessian(_loop)(x * k))
        _close(g, mp.grad(_loop)(x * k))
    replayers = [rp for d in vars(c).values() if isinstance(d, dict) for rp in d.values()
                 if isinstance(rp, sr.SourceReplayer)]
    assert replayers and all(type(rp.plan) is Plan and rp.replays == 2 for rp in replayers)


def test_values_of_another_kind_replay_the_python_way():
    x = np.linspace(0.5, 2, 10)
    py, src = _pair(_loop, (x,))
    src.call(_loop, (x,), (0,))
    plan = src.plan
    assert plan.runs == 1

    def unfit(leaves):
        raise sr._Unfit()
    plan._how.run = unfit     # (as for a call whose values the code was not written for)
    _compare(src.call(_loop, (x * 3,), (0,)), py.call(_loop, (x * 3,), (0,)), True)
    assert plan.runs == 1 and plan.fallbacks == 1 and src.failures == 0 and src.plan is plan


def _writes(x):
    y = np.zeros_like(x, shape=(3,))
    s = 0.0
    for i in range(8):
        s = s + x[i] * x[i + 1] - 0.25 * x[i]
    y[0] = s                              # a segment's output, read by a write step
    y[1] = s * 2
    t = 0.0
    for i in range(8):
        t = t + np.sin(x[i]) * x[9 - i]
    y[2] = t
    return np.sum(y * y) + t * x[0]


def test_runs_between_write_steps():
    x0 = np.linspace(-1, 1, 10)
    py, src = _pair(_writes, (x0,))
    assert src.plan.writes  # (a plan with write steps)
    for x in (x0 * 1.5, x0 + 0.25):
        got = src.call(_writes, (x,), (0,))
        _compare(got, py.call(_writes, (x,), (0,)), False)
        y0, (g0,) = mp.value_and_grad(_writes, argnums=(0,))(x)
        _close(got[0], y0)
        _close(got[1][0], g0)
    how = src.plan._how  # (the two runs and the writes between them: one segment)
    assert type(how).__name__ == "_MixedSource" and len(how.segments) == 1
    assert src.plan.runs == 2 and how.writes == [] and src.plan.base.writes


def _write_chains(x):
    y = np.empty_like(x)                  # a chain of writes: folded into the segment
    for i in range(x.shape[0]):
        y[i] = np.exp(x[i]) * x[i] - 1.0
    z = np.copy(x)                        # a copy's writes: x gets the rest of z's cotangent
    for i in range(0, x.shape[0], 2):
        z[i] = x[i] * x[i] + 0.5 * x[(i + 1) % x.shape[0]]
    z[1] = 2.0                            # a number written
    w = np.zeros_like(x)                  # read between writes: stays Python replay
    for i in range(3):
        w[i] = x[i] * 3.0
        w[i + 1] = w[i] * x[i] + np.sin(x[i])
    return np.sum(y * z) + np.sum(w * w)


def test_write_chains_folded_into_segments():
    x0 = np.linspace(-1, 1, 9)
    py, src = _pair(_write_chains, (x0,))
    for x in (x0 * 1.5, x0 - 0.25):
        got = src.call(_write_chains, (x,), (0,))
        _compare(got, py.call(_write_chains, (x,), (0,)), False)
        y0, (g0,) = mp.value_and_grad(_write_chains, argnums=(0,))(x)
        _close(got[0], y0)
        _close(got[1][0], g0)
    plan = src.plan
    how = plan._how
    assert type(how).__name__ == "_MixedSource" and plan.runs == 2
    assert 0 < len(how.writes) < len(plan.base.writes)  # (w's writes are not folded)
    c, cp = _hvp_cache(_write_chains, x0), _python_hvp_cache(_write_chains, x0)
    v = np.cos(np.arange(9.0))
    for x in (x0, x0 * 1.5, x0 - 0.25):  # (and the same on duals, for an HVP)
        got = mp.value_and_hvp(c, _write_chains, v, x)
        _compare_hvp(got, mp.value_and_hvp(cp, _write_chains, v, x), False)
        _close(got[2], mp.hvp(_write_chains)(x, v))
    plan = c._replay.plan
    assert plan.runs == 2 and 0 < len(plan._how.writes) < len(plan.base.writes)


def _like_buffer(x):
    y = np.zeros(6, like=x)               # a like= constructor: a plan step, then written into
    for i in range(6):
        y[i] = np.cos(x[i]) * x[i + 1] + 2.0 * x[i]
    s = 0.0
    for i in range(6):
        s = s + y[i] * x[i]
    return s + np.sum(y)


def test_like_constructor_buffer():
    x0 = np.linspace(-1, 1, 7)
    py, src = _pair(_like_buffer, (x0,))
    for x in (x0 * 1.5, x0 + 0.25):
        got = src.call(_like_buffer, (x,), (0,))
        _compare(got, py.call(_like_buffer, (x,), (0,)), False)
        _close(got[1][0], mp.grad(_like_buffer)(x))
    how = src.plan._how
    assert type(how).__name__ == "_MixedSource" and how.writes == [] and src.plan.base.writes
