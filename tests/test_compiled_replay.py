"""Compiled replay (mooncake_py/replay/compiled.py): a plan run by the numba kernel must give what
a fresh recording gives, its guards must send a changed function back to recording, and its
on-disk cache must survive a new process and a damaged file."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mooncake_py as mp
from benchmarks.suite import CASES
from mooncake_py.replay import compiled, compiling

pytest.importorskip("numba")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _fresh(f, x):
    return mp.value_and_grad(f)(x)


def _check(got, want):
    (y, (g,)), (y0, g0) = got, want
    assert type(y) is type(y0) and type(g) is type(g0) and g.shape == g0.shape
    # bitwise in practice; 1e-14 leaves room for a libm that differs from NumPy's in a last bit
    np.testing.assert_allclose(y, y0, rtol=1e-14, atol=0)
    np.testing.assert_allclose(g, g0, rtol=1e-14, atol=1e-300)


@pytest.mark.parametrize("name", ["_sum_1000", "_sum_sin_1000", "large_single_block"])
def test_suite_scalar_loops_equal_fresh_recording(name):
    case = CASES[name]
    f = lambda x: case.fn(np, x)  # noqa: E731
    inputs = [case.make_inputs(np.random.default_rng(seed))[0] for seed in range(4)]
    c = mp.prepare_gradient_cache(f, inputs[0], compile=True)
    for x in inputs:
        _check(mp.value_and_gradient(c, f, x), _fresh(f, x))
    plan = c._replay.plan
    assert type(plan) is compiled.CompiledPlan and plan.runs == len(inputs) - 1


def _branchy(x):
    s = 0.0
    for i in range(len(x)):
        if x[i] > 0:
            s = s + np.sin(x[i]) * x[i]
        else:
            s = s - x[i] / (1.5 - x[i])
        if s:  # bool of a traced scalar: a guard too
            s = s * 1.0
    return np.exp(s / 10)


def test_branch_flip_records_again_and_compiles_the_new_plan():
    x = np.array([0.5, -1.0, 2.0, 0.25])
    c = mp.prepare_gradient_cache(_branchy, x, compile=True)
    _check(mp.value_and_gradient(c, _branchy, x), _fresh(_branchy, x))
    _check(mp.value_and_gradient(c, _branchy, 2 * x), _fresh(_branchy, 2 * x))
    first = c._replay.plan
    assert type(first) is compiled.CompiledPlan and first.runs == 1
    flipped = x * np.array([-1.0, -1.0, 1.0, 1.0])  # two comparisons change: guard fails
    _check(mp.value_and_gradient(c, _branchy, flipped), _fresh(_branchy, flipped))
    assert first.runs == 1 and c._replay.plan is not first
    _check(mp.value_and_gradient(c, _branchy, 3 * flipped), _fresh(_branchy, 3 * flipped))
    assert type(c._replay.plan) is compiled.CompiledPlan and c._replay.plan.runs == 1


def test_zeros_infinities_and_nans_as_the_recording_gives_them():
    def f(x):
        return (x[0] / x[1]) * x[2] + np.log(x[3]) - np.sqrt(x[2]) + x[0] * 0
    x = np.array([1.0, 2.0, 4.0, 1.0])
    c = mp.prepare_gradient_cache(f, x, compile=True)
    mp.value_and_gradient(c, f, x)
    for z in (np.array([1.0, 0.0, 4.0, 0.0]), np.array([np.inf, 1.0, -1.0, np.nan])):
        with np.errstate(all="ignore"):
            (y, (g,)), (y0, g0) = mp.value_and_gradient(c, f, z), _fresh(f, z)
        np.testing.assert_array_equal(y, y0)
        np.testing.assert_array_equal(g, g0)
    assert c._replay.plan.runs == 2


def test_plans_with_other_steps_stay_python_replay():
    f = lambda x: np.sum(np.sin(x)) + x[0] * x[1]  # noqa: E731  (an array op: not compiled)
    x = np.array([0.3, 0.7])
    c = mp.prepare_gradient_cache(f, x, compile=True)
    for z in (x, 2 * x):
        got = mp.value_and_gradient(c, f, z)
        _check(got, _fresh(f, z))
    assert type(c._replay.plan) is not compiled.CompiledPlan and c._replay.replays == 1

    g = lambda x, a: x[0] * a  # noqa: E731  (a float scalar argument: not compiled)
    c = mp.prepare_gradient_cache(g, x, 2.0, compile=True)
    for _ in range(2):
        y, (gx, ga) = mp.value_and_gradient(c, g, x, 3.0)
    assert (y, ga) == (0.3 * 3.0, 0.3) and type(c._replay.plan) is not compiled.CompiledPlan


def test_a_rule_registered_after_compiling_is_used(monkeypatch):
    from mooncake_py.rules.registry import RRULES
    f = lambda x: np.sin(x[0]) * x[1]  # noqa: E731
    x = np.array([0.3, 0.7])
    c = mp.prepare_gradient_cache(f, x, compile=True)
    mp.value_and_gradient(c, f, x)
    mp.value_and_gradient(c, f, x)
    plan = c._replay.plan
    assert plan.runs == 1
    builtin = RRULES[np.sin]
    monkeypatch.setitem(RRULES, np.sin, lambda args, kw, needs: builtin(args, kw, needs))
    _check(mp.value_and_gradient(c, f, x), _fresh(f, x))
    assert plan.runs == 1  # the kernel was not used


def test_cache_is_pickled_with_its_compile_flag():
    import pickle
    back = pickle.loads(pickle.dumps(mp.prepare_gradient_cache(np.sum, np.ones(2),
                                                               compile=True)))
    assert back._compile is True and type(back._replay) is compiling.CompilingReplayer
    for _ in range(2):
        y, (g,) = mp.value_and_gradient(back, np.sum, np.ones(2))
    assert y == 2.0 and g.tolist() == [1.0, 1.0]


_CHILD = textwrap.dedent("""
    import json, sys, numpy as np, mooncake_py as mp
    from benchmarks.suite import _sum_sin_1000
    from mooncake_py.replay import compiled
    f = lambda x: _sum_sin_1000(np, x)
    x = np.random.default_rng(1).standard_normal(1000)
    c = mp.prepare_gradient_cache(f, x, compile=True)
    mp.value_and_gradient(c, f, x)
    y, (g,) = mp.value_and_gradient(c, f, 2 * x)
    y0, g0 = mp.value_and_grad(f)(2 * x)
    k, _ = compiled.kernel()
    st = k.stats
    print(json.dumps({"same": bool(y == y0 and np.array_equal(g, g0)),
                      "runs": c._replay.plan.runs, "hits": sum(st.cache_hits.values()),
                      "misses": sum(st.cache_misses.values())}))
""")


def _child(cache_dir):
    import json
    env = dict(os.environ, MOONCAKE_PY_CACHE_DIR=str(cache_dir), PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", _CHILD], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # (two cold compiles in child processes: ~12 s)
def test_disk_cache_serves_a_second_process_and_survives_damage(tmp_path):
    first = _child(tmp_path)
    assert first["same"] and first["runs"] == 1 and first["misses"] >= 1
    second = _child(tmp_path)  # loads the machine code numba stored: nothing compiled
    assert second["same"] and second["hits"] >= 1 and second["misses"] == 0

    src = [p for p in os.listdir(tmp_path) if p.startswith("replay_") and p.endswith(".py")]
    pyc = tmp_path / "__pycache__"
    blobs = [p for p in os.listdir(pyc) if p.startswith("replay_")]
    assert len(src) == 1 and blobs
    (tmp_path / src[0]).write_text("def mp_replay(*a):\n    return True, 0.0, None\n")
    for b in blobs:
        (pyc / b).write_bytes(b"\x80\x04garbage")
    third = _child(tmp_path)  # the damaged files are ignored, and rebuilt
    assert third["same"] and third["runs"] == 1
    assert (tmp_path / src[0]).read_text() == compiled.kernel_source()
    assert _child(tmp_path)["misses"] == 0  # the rebuilt entry serves the next process


def test_several_arguments_pytrees_negative_indices_and_constant_arguments():
    def f(p, n):
        s = p["b"][-1] * 2
        for i in range(n):
            s = s + p["w"][i] * p["b"][i % 2] - 3 / p["w"][-1 - i]
        return s
    p = {"w": np.array([0.5, 1.5, -2.0]), "b": np.array([3.0, -4.0]), "m": np.ones((2, 2))}
    c = mp.prepare_gradient_cache(f, p, 2, compile=True)
    for q, n in [(p, 2), (p, 2), ({k: 2 * v for k, v in p.items()}, 2), (p, 3), (p, 3)]:
        y, (g, gn) = mp.value_and_gradient(c, f, q, n)
        assert gn is None
        want_y, want_g = mp.value_and_grad(lambda q: f(q, n))(q)
        np.testing.assert_allclose(y, want_y, rtol=1e-14)
        for k in p:
            assert g[k].shape == p[k].shape
            np.testing.assert_allclose(g[k], want_g[k], rtol=1e-14, atol=1e-300)
    # two calls at n=2 then one more (compiled), a changed n records, then compiled again
    assert type(c._replay.plan) is compiled.CompiledPlan and c._replay.plan.runs == 1


def test_warmup_loads_the_replay_kernels():
    assert mp.warmup(dtypes=(), replay_kernels=True) >= 0
    assert all(compiled._KERNELS[k][0] is not None for k in ("gradient", "hvp", "segment"))
