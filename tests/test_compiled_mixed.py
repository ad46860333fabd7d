"""Mixed plans (mooncake_py/replay/compiled.py, ``mix_plan``): long runs of scalar steps become
compiled segments between Python-replayed array steps. The result must equal a fresh recording;
guards inside a segment must send a changed function back to recording; short runs stay
Python."""
import numpy as np
import pytest

import mooncake_py as mp
from benchmarks.namespaces import numpy_namespace
from benchmarks.suite import CASES
from mooncake_py.replay import compiled

pytest.importorskip("numba")


def _check(c, f, args, rtol=1e-13):
    got = mp.value_and_gradient(c, f, *args)
    want = mp.value_and_grad(f, argnums=tuple(range(len(args))))(*args)
    np.testing.assert_allclose(got[0], want[0], rtol=rtol, atol=0)
    for a, b in zip(got[1], want[1]):
        assert np.shape(a) == np.shape(b)
        np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-300)


@pytest.mark.parametrize("name", ["map_sin_cos_exp", "turing_broadcast_benchmark"])
def test_suite_cases_with_scalar_runs_equal_fresh_recording(name):
    case = CASES[name]
    inputs = []
    for seed in range(3):
        g, diff = case.closure(numpy_namespace(), case.make_inputs(np.random.default_rng(0)))
        inputs.append(tuple(d * (1 + 0.1 * seed) for d in diff))
    c = mp.prepare_gradient_cache(g, *inputs[0], compile=True)
    for args in inputs:
        _check(c, g, args)
    plan = c._replay.plan
    assert type(plan) is compiled.MixedPlan and plan.runs == len(inputs) - 1
    assert len(plan.segments) == 1


def _two_segments(x, w):
    m = x.reshape(3, 4)                    # Python: an array op
    s = 0.0
    for i in range(3):                     # segment 1: reads elements of m and of w
        for j in range(4):
            s = s + np.tanh(m[i, j] * w[j]) / (1.0 + w[j] * w[j])
    t = np.sum(np.exp(x)) * s              # Python: reads s (an output of segment 1)
    u = t
    for i in range(12):                    # segment 2: reads t, s and x
        if x[i] > 0:
            u = u * 0.9 + np.sin(x[i] - s)
        else:
            u = u - np.cos(x[i]) / 3
    return u + s


def test_two_segments_reading_each_other_and_arrays_and_a_branch_flip():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal(12), rng.standard_normal(4)
    c = mp.prepare_gradient_cache(_two_segments, x, w, compile=True)
    for k in range(3):
        _check(c, _two_segments, (x * (1 + 0.1 * k), w))
    plan = c._replay.plan
    assert type(plan) is compiled.MixedPlan and plan.runs == 2 and len(plan.segments) == 2
    _check(c, _two_segments, (-x, w))      # comparisons inside segment 2 flip: records again
    assert plan.runs == 2 and c._replay.plan is not plan
    _check(c, _two_segments, (-2 * x, w))
    assert type(c._replay.plan) is compiled.MixedPlan and c._replay.plan.runs == 1


def test_a_run_whose_first_node_is_read_later_starts_after_it():
    def f(x):
        a = x[0]                           # read after the run: the segment starts after it
        s = a
        for i in range(1, 10):
            s = s * 0.5 + np.sqrt(1.0 + x[i] * x[i]) - a / (2.0 + x[i])
        return s * np.arcsinh(a)           # (not a kernel op: a is read outside)
    x = np.linspace(0.1, 1.0, 10)
    c = mp.prepare_gradient_cache(f, x, compile=True)
    for k in range(3):
        _check(c, f, (x + k,))
    plan = c._replay.plan
    assert type(plan) is compiled.MixedPlan and plan.runs == 2
    assert plan.segments[0].external == (1, 0)  # x[0] (a scalar made outside), then x


def test_short_runs_stay_python_replay():
    def f(x):
        s = x[0] * x[1] + np.sin(x[2])     # 5 scalar steps: below MIN_SEGMENT
        return np.sum(x ** 2) * s
    x = np.array([0.3, 0.7, 1.1])
    c = mp.prepare_gradient_cache(f, x, compile=True)
    for k in range(3):
        _check(c, f, (x + k,))
    assert type(c._replay.plan) is not compiled.MixedPlan and c._replay.replays == 2


def test_a_rule_registered_after_mixing_is_used(monkeypatch):
    from mooncake_py.rules.registry import RRULES
    case = CASES["map_sin_cos_exp"]
    g, (x,) = case.closure(numpy_namespace(), case.make_inputs(np.random.default_rng(0)))
    c = mp.prepare_gradient_cache(g, x, compile=True)
    mp.value_and_gradient(c, g, x)
    mp.value_and_gradient(c, g, x)
    plan = c._replay.plan
    assert type(plan) is compiled.MixedPlan and plan.runs == 1
    builtin = RRULES[np.cos]
    monkeypatch.setitem(RRULES, np.cos, lambda args, kw, needs: builtin(args, kw, needs))
    _check(c, g, (x,))
    assert plan.runs == 1  # the segment was not run


def test_float_arguments_and_an_output_the_result_does_not_reach():
    def f(x, a):
        s = a * 1.0
        for i in range(8):
            s = s * 0.5 + np.sin(x[i] * a)
        unused = s * 3.0                    # read after the segment, by a comparison only:
        t = np.sum(np.exp(x))               # its cotangent never comes
        return t * s if unused < t + 100.0 else t
    x = np.linspace(-1.0, 1.0, 8)
    c = mp.prepare_gradient_cache(f, x, 0.7, compile=True)
    for k in range(3):
        _check(c, f, (x * (1 + k), 0.7 + 0.1 * k))
    plan = c._replay.plan
    assert type(plan) is compiled.MixedPlan and plan.runs == 2
    assert plan.segments[0].external == (1, 0)  # the float argument a, then x
