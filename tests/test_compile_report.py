"""compile_report() says, per run of plan steps, what runs compiled and what falls back and
why; a compile=True cache that falls back warns once (CompileFallbackWarning)."""
import warnings

import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.replay.compiled import _F64_DT, _OP, _opcodes, why_not


def loop(x):
    s = 0.0
    for i in range(1, x.size):
        s = s + np.sin(x[i]) * x[i - 1]
    return s


def loop_arcsinh(x):
    s = 0.0
    for i in range(1, x.size):
        s = s + np.arcsinh(x[i] - x[i - 1])
    return s


def writes(x):
    y = np.empty_like(x)
    y[0] = x[0]
    for i in range(x.size - 1):
        y[i + 1] = y[i] * 0.9 + np.sin(x[i + 1])
    return np.sum(y * y)


def slice_writes(x):
    y = np.empty_like(x)
    for i in range(x.size // 2):
        y[2 * i:2 * i + 2] = x[2 * i:2 * i + 2] * 0.5
    return np.sum(y * y)


def _run(prepare, call, f, x, n=3):
    c = prepare(f, x, compile=True)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(n):
            call(c, f, x)
    return c, [m for m in w if issubclass(m.category, mp.CompileFallbackWarning)]


GRAD = (mp.prepare_gradient_cache, lambda c, f, x: mp.value_and_gradient(c, f, x))
HVP = (mp.prepare_hvp_cache, lambda c, f, x: mp.value_and_hvp(c, f, x, x))
HESS = (mp.prepare_hessian_cache, lambda c, f, x: mp.value_gradient_and_hessian(c, f, x))


@pytest.mark.parametrize("how", [GRAD, HVP, HESS])
def test_compiled_whole(how):
    c, w = _run(*how, loop, np.linspace(0.1, 1.0, 12))
    r = c.compile_report()
    assert not w and r.compiled and not r.fallbacks
    assert r.entries[0].how == "compiled kernel" and r.steps == r.entries[-1].stop
    assert "compiled kernel" in str(r) and "one compiled" in r.status


@pytest.mark.parametrize("how", [GRAD, HVP])
def test_non_kernel_op_named(how):
    c, w = _run(*how, loop_arcsinh, np.linspace(0.1, 1.0, 12))
    assert len(w) == 1 and "np.arcsinh" in str(w[0].message)
    r = c.compile_report()
    assert not r.compiled and {e.what for e in r.causes} == {"np.arcsinh"}
    assert all("kernel ops" in e.reason for e in r.causes)
    assert "np.arcsinh" in str(r) and "runs like it" in str(r)


def test_writes_named():
    c, w = _run(*GRAD, writes, np.linspace(0.0, 1.0, 30))
    assert len(w) == 1  # once per cache, however many calls
    reasons = {e.what: e.reason for e in c.compile_report().causes}
    # (the element writes run in the loop's compiled segment; a slice write does not)
    assert "write y[...] = v" not in reasons and "shape (30,)" in reasons["np.empty_like"]
    c, w = _run(*GRAD, slice_writes, np.linspace(0.0, 1.0, 30))
    reasons = {e.what: e.reason for e in c.compile_report().causes}
    assert "write" in reasons["write y[...] = v"]


def test_mixed_segment_and_user_rule():
    def f(x):
        v = np.cumsum(x)
        s = 0.0
        for i in range(20):
            s = s + np.sin(v[i]) * x[i]
        return s
    c, w = _run(*GRAD, f, np.linspace(0.0, 1.0, 20))
    r = c.compile_report()
    hows = {e.how for e in r.entries}
    assert "compiled segment" in hows and "rule call" in hows and len(w) == 1
    assert any(e.what == "np.cumsum" for e in r.causes)
    # a step whose rule is not the built-in one is named as such
    step = (_OP, np.sin, object(), ((0, 1),), {}, (True,), 2, (), _F64_DT)
    assert "registered by the user" in why_not(step, [None, ((), _F64_DT), None], _opcodes())[1]


def test_not_compiled_caches_and_states():
    x = np.linspace(0.1, 1.0, 5)
    assert "replay=False" in mp.prepare_gradient_cache(loop, x, replay=False).compile_report().status
    c = mp.prepare_gradient_cache(loop, x, compile=True)
    assert "no plan yet" in c.compile_report().status
    c2 = mp.prepare_gradient_cache(loop, x)
    mp.value_and_gradient(c2, loop, x)
    assert "not a compile=True cache" in c2.compile_report().status


def test_results_unchanged_by_report():
    x = np.linspace(0.1, 1.0, 12)
    c, _ = _run(*HVP, loop_arcsinh, x)
    c.compile_report()
    got = mp.value_and_hvp(c, loop_arcsinh, x, x)[2]
    np.testing.assert_allclose(got, mp.hvp(loop_arcsinh)(x, x), rtol=1e-12)
