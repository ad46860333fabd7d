"""compile=True caches run scalar ``a ** b`` (np.power) in their kernels, segments and
generated source: gradients and H·v equal fresh recordings (bit for bit where the same
operations run; to 1e-12 where NumPy's vectorised pow or log and libm's differ in the last
bit), and compile_report() shows the steps compiled."""
import warnings

import numpy as np
import pytest

import mooncake_py as mp
from benchmarks.suite import CASES as SUITE
from mooncake_py.errors import PreparedCacheSpecError
from mooncake_py.replay import compiled

pytest.importorskip("numba")


def p_int(x):
    s = 0.0
    for i in range(x.size):
        s = s + x[i] ** 2 - x[i] ** 3 * 0.25
    return s


def p_float(x):
    s = 0.0
    for i in range(x.size):
        u = x[i] * x[i] + 1.0
        s = s + u ** 0.5 + u ** 1.7 + u ** -2 + u ** -0.5 + x[i] ** -1
    return s


def p_tracked(x):
    s = 0.0
    for i in range(x.size - 1):
        s = s + (x[i] * x[i] + 1.0) ** x[i + 1] + 2.0 ** x[i] + x[i] ** 1
    return s


def p_mixed(x):
    v = np.cumsum(x)  # an array op: the loop runs as a segment
    s = 0.0
    for i in range(x.size):
        s = s + (v[i] * v[i] + 1.0) ** 0.5 * x[i] ** 2 + x[i] ** 3
    return s


def _grad(c, f, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mp.CompileFallbackWarning)
        return mp.value_and_gradient(c, f, x)


def _hvp(c, f, x, v):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mp.CompileFallbackWarning)
        return mp.value_and_hvp(c, f, v, x)


def _close(a, b):
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-300)


CASES = [(p_int, 0.0, True), (p_float, 0.0, False), (p_tracked, 0.0, False),
         (p_mixed, 0.0, False), (p_int, -3.0, True)]  # (negative bases, int exponents)


@pytest.mark.parametrize("f, shift, exact", CASES)
@pytest.mark.parametrize("comp", [True, False])
def test_power_equals_recording(f, shift, exact, comp):
    rng = np.random.default_rng(1)
    n = 24
    x0 = rng.standard_normal(n) + shift
    c = mp.prepare_gradient_cache(f, x0, compile=comp)
    h = mp.prepare_hvp_cache(f, x0, compile=comp)
    for _ in range(3):
        x = rng.standard_normal(n) + shift
        v = rng.standard_normal(n)
        y, (g,) = _grad(c, f, x)
        y0, g0 = mp.value_and_grad(f)(x)
        got = _hvp(h, f, x, v)
        hv0 = mp.hvp(f)(x, v)
        assert y == y0
        _close(g, g0)
        _close(got[2], hv0)
        if exact and f is p_int:  # (2*a, 3*(a*a): pow(a, 1) is a; pow(a, 2) may round apart)
            assert np.array_equal(got[1], g0) or np.allclose(got[1], g0, rtol=1e-15)
    if comp:
        assert c.compile_report().compiled or f is p_mixed
        assert h.compile_report().compiled or f is p_mixed
        want = compiled.MixedPlan if f is p_mixed else compiled.CompiledPlan
        assert isinstance(c._replay.plan, want) and c._replay.plan.runs == 2
        assert isinstance(h._replay.plan, compiled.MixedPlan if f is p_mixed
                          else compiled.CompiledHVPPlan)
        names = {s.what for s in c.compile_report().entries if s.how != "compiled kernel"
                 and "segment" not in s.how}
        assert "np.power" not in names


def test_square_gradient_bitwise():
    """x ** 2: value pow(a, 2.0) and derivative 2·pow(a, 1) = 2a, as the tape's rule."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal(40)
    c = mp.prepare_gradient_cache(p_int, x, compile=True)
    _grad(c, p_int, x)
    for _ in range(2):
        x = rng.standard_normal(40) * 3
        y, (g,) = _grad(c, p_int, x)
        y0, g0 = mp.value_and_grad(p_int)(x)
        assert y == y0
        np.testing.assert_allclose(g, g0, rtol=4e-16, atol=0)
    assert type(c._replay.plan) is compiled.CompiledPlan


def test_power_zero_exponent_and_guards():
    def f(x):
        s = 0.0
        for i in range(x.size):
            s = s + x[i] ** 2 + x[i] ** 0
        return s
    x = np.linspace(0.5, 2.0, 20)
    c = mp.prepare_gradient_cache(f, x, compile=True)
    for _ in range(2):
        _, (g,) = _grad(c, f, x)
    _close(g, mp.grad(f)(x))
    causes = {e.what for e in c.compile_report().causes}
    assert causes <= {"np.power"}  # (x ** 0 stays Python)
    with pytest.raises(PreparedCacheSpecError):
        _grad(c, f, np.ones(7))
    _, (g,) = _grad(c, f, x * 2)
    _close(g, mp.grad(f)(x * 2))


# --- np.stack / np.hstack of scalars inside a segment ------------------------------------------
def s_read_elsewhere(x):
    ys = [np.sin(x[i]) * x[i] + np.exp(x[i] * 0.1) for i in range(x.size)]
    s = ys[0] * ys[-1]  # (scalars of the stack also read after it)
    return np.sum(np.stack(ys) ** 2) + s


def s_constants(x):
    ys = [np.cos(x[i]) * x[i] for i in range(x.size)]
    return np.sum(np.cumsum(np.stack(ys[:5] + [2.0, 0.5] + ys[5:] + [3])))


def s_hstack(x):
    return np.sum(np.hstack([np.tanh(x[i]) * x[i] for i in range(x.size)]) * np.arange(x.size))


def s_suite(x):
    return SUITE["map_sin_cos_exp"].fn(np, x)


@pytest.mark.parametrize("f", [s_read_elsewhere, s_constants, s_hstack, s_suite])
def test_stack_in_segment_equals_recording(f):
    rng = np.random.default_rng(4)
    shape = (10, 10) if f is s_suite else (20,)
    x0 = rng.standard_normal(shape)
    c = mp.prepare_gradient_cache(f, x0, compile=True)
    h = mp.prepare_hvp_cache(f, x0, compile=True)
    for _ in range(3):
        x = rng.standard_normal(shape)
        v = rng.standard_normal(shape)
        y, (g,) = _grad(c, f, x)
        y0, g0 = mp.value_and_grad(f)(x)
        got = _hvp(h, f, x, v)
        _close(y, y0)
        _close(g, g0)
        _close(got[0], y0)
        _close(got[1], g0)
        _close(got[2], mp.hvp(f)(x, v))
    for cache in (c, h):
        plan = cache._replay.plan
        assert type(plan) is compiled.MixedPlan and plan.runs == 2
        assert any(seg.made for seg in plan.segments)  # (the stack is the segment's)
        r = cache.compile_report()
        assert not any(e.what in ("np.stack", "np.hstack") for e in r.fallbacks)
    with pytest.raises(PreparedCacheSpecError):
        _grad(c, f, np.ones(7))
    x = rng.standard_normal(shape)
    _close(_grad(c, f, x)[1][0], mp.grad(f)(x))
