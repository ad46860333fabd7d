"""compile=True caches whose plan the numba kernels do not take (no whole-plan kernel, no run
long enough for a compiled segment) must still replay through generated source, as the
default caches do, not step by step in Python; and give what a fresh recording gives."""
import numpy as np
import pytest

import mooncake_py as mp
from benchmarks.namespaces import numpy_namespace
from benchmarks.suite import CASES
from mooncake_py.replay import compiled, plans as replay
from mooncake_py.replay.source import SourcePlan


def _naive_map_inputs():
    case = CASES["naive_map_sin_cos_exp"]
    g, (x,) = case.closure(numpy_namespace(), case.make_inputs(np.random.default_rng(0)))
    return g, [x * (1 + 0.1 * k) for k in range(3)]


def test_naive_map_compiled_gradient_runs_one_compiled_segment():
    g, xs = _naive_map_inputs()
    c = mp.prepare_gradient_cache(g, xs[0], compile=True)
    for x in xs:
        y, (gx,) = mp.value_and_gradient(c, g, x)
        want_y, want_g = mp.value_and_grad(g)(x)
        np.testing.assert_allclose(y, want_y, rtol=1e-13, atol=0)
        np.testing.assert_allclose(gx, want_g, rtol=1e-13, atol=1e-300)
    plan = c._replay.plan
    # (its element writes are segment slots: the loop is one compiled segment)
    assert type(plan).__name__ == "MixedPlan", type(plan)
    assert plan.runs == len(xs) - 1
    assert c._replay.replays == len(xs) - 1


def test_naive_map_compiled_hvp_runs_one_compiled_segment():
    g, xs = _naive_map_inputs()
    v = np.random.default_rng(1).standard_normal(xs[0].shape)
    c = mp.prepare_hvp_cache(g, xs[0], compile=True)
    for x in xs:
        y, gx, hv = mp.value_and_hvp(c, g, v, x)
        want = mp.hvp(g)(x, v)
        np.testing.assert_allclose(gx, mp.grad(g)(x), rtol=1e-13, atol=1e-300)
        np.testing.assert_allclose(hv, want, rtol=1e-12, atol=1e-300)
    assert type(c._replay.plan).__name__ == "MixedPlan", type(c._replay.plan)
    assert c._replay.plan.runs == len(xs) - 1
    assert c._replay.replays == len(xs) - 1


def _short_runs(x):
    # array steps with scalar runs of ~10 steps between them: each run too short for a
    # compiled segment (16 steps), long enough for a source segment (8)
    s = np.sum(np.exp(x))
    s = s * x[0] + np.sin(x[1]) - 0.5 * x[2] / (1.0 + x[3] * x[3])
    t = np.sum(np.cos(x * s))
    t = t + np.tanh(x[0] * t) * 0.25 + x[2] * 3.0 - x[3] * x[4]
    return t


def _long_and_short_runs(x):
    s = np.sum(np.exp(x))
    for i in range(4):                   # ~40 scalar steps: a compiled segment
        s = s * x[i] + np.sin(x[i + 1]) - 0.5
        s = s / (1.0 + x[i] * x[i])
    t = np.sum(np.cos(x * s))
    t = t + np.tanh(x[0] * t) * 0.25 + x[2] * 3.0 - x[3] * x[4]   # ~10: a source segment
    return t


def _replays_like_fresh_recordings(f, rng, calls=4):
    c = mp.prepare_gradient_cache(f, rng.standard_normal(8), compile=True)
    for _ in range(calls):
        x = rng.standard_normal(8)
        y, (gx,) = mp.value_and_gradient(c, f, x)
        want_y, want_g = mp.value_and_grad(f)(x)
        np.testing.assert_allclose(y, want_y, rtol=1e-13, atol=0)
        np.testing.assert_allclose(gx, want_g, rtol=1e-12, atol=1e-300)
    assert c._replay.replays == calls - 1
    return c._replay.plan


def test_short_scalar_runs_replay_as_source_segments():
    plan = _replays_like_fresh_recordings(_short_runs, np.random.default_rng(2))
    assert type(plan) is SourcePlan and type(plan._how).__name__ == "_MixedSource"
    assert plan.runs == 3


def test_mixed_plan_keeps_its_compiled_segment_and_generates_source_for_a_short_run():
    pytest.importorskip("numba")
    plan = _replays_like_fresh_recordings(_long_and_short_runs, np.random.default_rng(3))
    assert type(plan) is SourcePlan and type(plan.base) is compiled.MixedPlan
    kinds = [st[1] for st in plan._how.steps if st[0] == replay._OP]
    assert compiled._segment_forward in kinds                      # the numba segment
    assert [type(s).__name__ for s in plan._how.segments] == ["_SourceSegment"]
    assert plan.runs == 3 and plan.fallbacks == 0
