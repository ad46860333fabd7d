"""Compiled HVP replay (``prepare_hvp_cache(compile=True)``, the forward-over-reverse kernel of
mooncake_py/replay/compiled.py): its value, gradient and H·v must equal the Python replay's and an
unprepared ``mp.hvp``'s, and finite differences of the gradient; its guards must send a changed
function back to recording; plans it cannot run must stay Python replay."""
import pickle

import numpy as np
import pytest

import mooncake_py as mp
from benchmarks.suite import CASES
from mooncake_py.replay import compiled, compiling

pytest.importorskip("numba")


def _close(a, b, rtol=1e-12):
    np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-300)


def _check(f, c, x, v):
    """The compiled cache's (value, gradient, Hv) against the Python replay's, a recording's
    and mp.hvp; returns the compiled triple."""
    got = mp.value_and_hvp(c, f, v, x)
    py = mp.prepare_hvp_cache(f, x)
    mp.value_and_hvp(py, f, v, x)  # (records)
    replayed = mp.value_and_hvp(py, f, v, x)
    recorded = mp.value_and_hvp(mp.prepare_hvp_cache(f, x, replay=False), f, v, x)
    for want in (replayed, recorded):
        for a, b in zip(got, want):
            assert type(a) is type(b) and np.shape(a) == np.shape(b)
            _close(a, b)
    _close(got[2], mp.hvp(f)(x, v))
    _close(got[0], f(x))
    return got


def _fd_hvp(f, x, v, eps=1e-6):
    g = mp.grad(f)
    return (g(x + eps * v) - g(x - eps * v)) / (2 * eps)


@pytest.mark.parametrize("name", ["_sum_1000", "_sum_sin_1000", "large_single_block"])
def test_suite_scalar_loops_equal_python_replay_and_hvp(name):
    case = CASES[name]
    f = lambda x: case.fn(np, x)  # noqa: E731
    rng = np.random.default_rng(3)
    inputs = [case.make_inputs(np.random.default_rng(seed))[0] for seed in range(3)]
    c = mp.prepare_hvp_cache(f, inputs[0], compile=True)
    for x in inputs:
        _check(f, c, x, rng.standard_normal(x.shape))
    plan = c._replay.plan
    assert type(plan) is compiled.CompiledHVPPlan and plan.runs == len(inputs) - 1


def _mixed_ops(x):
    s = np.sqrt(x[0] * x[0] + 1.0)
    for i in range(1, len(x)):
        t = np.tanh(x[i]) / (2.0 + np.cos(x[i - 1])) - np.log1p(x[i] * x[i])
        s = s * 0.5 + np.exp(t / 4) * x[i] - 3 / (1.5 + np.square(x[i])) + np.arctan(s)
        s = -s + np.sinh(x[i] / 3) - np.cosh(x[i] / 5) + np.expm1(x[i] / 7) + np.tan(x[i] / 9)
    return s / 7.0 + 2.0 * np.log(2.0 + np.sin(s))


def test_every_kernel_op_against_finite_differences():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(8)
    c = mp.prepare_hvp_cache(_mixed_ops, x, compile=True)
    for k in range(3):
        z, v = x * (1 + 0.1 * k), rng.standard_normal(8)
        y, g, hv = _check(_mixed_ops, c, z, v)
        _close(hv, _fd_hvp(_mixed_ops, z, v), rtol=1e-6)
    assert type(c._replay.plan) is compiled.CompiledHVPPlan and c._replay.plan.runs == 2


def _branchy(x):
    s = 0.0
    for i in range(len(x)):
        if x[i] > 0:
            s = s + np.sin(x[i]) * x[i]
        else:
            s = s - x[i] / (1.5 - x[i])
        if s:  # bool of a traced scalar: a guard too
            s = s * x[i]
    return np.exp(s / 10)


def test_branch_flip_records_again_and_compiles_the_new_plan():
    x = np.array([0.5, -1.0, 2.0, 0.25])
    v = np.array([1.0, -2.0, 0.5, 3.0])
    c = mp.prepare_hvp_cache(_branchy, x, compile=True)
    _check(_branchy, c, x, v)
    _check(_branchy, c, 2 * x, v)
    first = c._replay.plan
    assert type(first) is compiled.CompiledHVPPlan and first.runs == 1
    flipped = x * np.array([-1.0, -1.0, 1.0, 1.0])  # two comparisons change: the guard fails
    _, g, hv = _check(_branchy, c, flipped, v)
    _close(hv, _fd_hvp(_branchy, flipped, v), rtol=1e-6)
    assert first.runs == 1 and c._replay.plan is not first
    _check(_branchy, c, 3 * flipped, v)
    assert type(c._replay.plan) is compiled.CompiledHVPPlan and c._replay.plan.runs == 1


def test_constant_operands_zeros_and_infinities_as_the_recording_gives_them():
    def f(x):
        return x[0] / 0.0 + 2.0 / x[1] + x[2] * 0.0 + 0.0 * x[3] + (x[0] - x[1]) / x[2]
    x = np.array([1.0, 2.0, 4.0, 1.0])
    c = mp.prepare_hvp_cache(f, x, compile=True)
    with np.errstate(all="ignore"):
        mp.value_and_hvp(c, f, np.ones(4), x)
        for z in (np.array([1.0, 0.0, 4.0, np.inf]), np.array([-1.0, 3.0, 0.0, 2.0])):
            v = np.array([1.0, 2.0, 3.0, 4.0])
            got = mp.value_and_hvp(c, f, v, z)
            want = mp.value_and_hvp(mp.prepare_hvp_cache(f, z, replay=False), f, v, z)
            for a, b in zip(got, want):
                np.testing.assert_array_equal(a, b)
    assert c._replay.plan.runs == 2


def test_plans_with_other_steps_stay_python_replay():
    f = lambda x: np.sum(np.sin(x)) + x[0] * x[1]  # noqa: E731  (an array op: not compiled)
    x = np.array([0.3, 0.7])
    c = mp.prepare_hvp_cache(f, x, compile=True)
    for z in (x, 2 * x, 3 * x):
        _check(f, c, z, np.array([1.0, -1.0]))
    assert type(c._replay.plan) is not compiled.CompiledHVPPlan and c._replay.replays == 2

    def g(x, a):  # a float scalar argument: not compiled
        return x[0] * a * a
    c = mp.prepare_hvp_cache(g, x, 2.0, compile=True)
    for _ in range(3):
        y, (gx, ga), (hx, ha) = mp.value_and_hvp(c, g, (np.ones(2), 1.0), x, 3.0)
    assert (y, ga, ha) == (0.3 * 9.0, 0.3 * 6.0, 0.3 * 2.0 + 6.0)
    assert gx.tolist() == [9.0, 0.0] and hx.tolist() == [6.0, 0.0]
    assert type(c._replay.plan) is not compiled.CompiledHVPPlan


def test_several_arguments_pytrees_and_element_reads_of_matrices():
    def f(p, m):
        s = p["w"][-1] * m[1, 0]
        for i in range(2):
            s = s + np.sin(p["w"][i] * m[i, 1]) / (2.0 + p["b"][i]) - m[0, i] * m[1, -1]
        return s * s
    p = {"w": np.array([0.5, 1.5, -2.0]), "b": np.array([3.0, -0.5])}
    m = np.array([[0.1, 0.2], [0.3, 0.4]])
    c = mp.prepare_hvp_cache(f, p, m, compile=True)
    rng = np.random.default_rng(2)
    for k in range(3):
        q = {key: val * (1 + 0.1 * k) for key, val in p.items()}
        vs = ({key: rng.standard_normal(val.shape) for key, val in p.items()},
              rng.standard_normal(m.shape))
        got = mp.value_and_hvp(c, f, vs, q, m)
        want = mp.value_and_hvp(mp.prepare_hvp_cache(f, p, m, replay=False), f, vs, q, m)
        _close(got[0], want[0])
        for part in (1, 2):
            for a, b in zip(got[part], want[part]):
                _close(mp.ravel_pytree(a)[0], mp.ravel_pytree(b)[0])
    assert type(c._replay.plan) is compiled.CompiledHVPPlan and c._replay.plan.runs == 2


def test_a_rule_registered_after_compiling_is_used(monkeypatch):
    from mooncake_py.rules.registry import RRULES
    f = lambda x: np.sin(x[0]) * x[1]  # noqa: E731
    x, v = np.array([0.3, 0.7]), np.array([1.0, 2.0])
    c = mp.prepare_hvp_cache(f, x, compile=True)
    mp.value_and_hvp(c, f, v, x)
    mp.value_and_hvp(c, f, v, x)
    plan = c._replay.plan
    assert plan.runs == 1
    builtin = RRULES[np.sin]
    monkeypatch.setitem(RRULES, np.sin, lambda args, kw, needs: builtin(args, kw, needs))
    _close(mp.value_and_hvp(c, f, v, x)[2], mp.hvp(f)(x, v))
    assert plan.runs == 1  # the kernel was not used


def test_cache_pickles_with_its_compile_flag_and_errors_leave_it_working():
    x = np.array([0.3, 0.7])
    f = lambda x: np.sin(x[0]) * x[1]  # noqa: E731
    back = pickle.loads(pickle.dumps(mp.prepare_hvp_cache(np.prod, x, compile=True)))
    assert back._compile is True and type(back._replay) is compiling.CompilingReplayer
    c = mp.prepare_hvp_cache(f, x, compile=True)
    for _ in range(2):
        mp.value_and_hvp(c, f, x, x)
    with pytest.raises(mp.errors.PreparedCacheSpecError):
        mp.value_and_hvp(c, f, x, np.ones(3))
    _close(mp.value_and_hvp(c, f, x, x)[2], mp.hvp(f)(x, x))
    assert c._replay.plan.runs == 2


def test_a_kernel_that_answers_wrongly_fails_its_self_test():
    k, _ = compiled.hvp_kernel()
    assert compiled._self_test_hvp(k)

    def wrong(*args):
        ok, y, yt, g, hv = k(*args)
        return ok, y, yt, g, hv * 2
    assert not compiled._self_test_hvp(wrong)
