"""Compiled loops (replay/loops.py): a compile=True plan's repeated iterations run as a real
loop of a generated kernel, with the interpreter kernel's results bit for bit."""
import numpy as np
import pytest

import mooncake_py as mp

pytest.importorskip("numba")

from mooncake_py.dual.dual_array import DualArray, Tag
from mooncake_py.replay import compiled, loops
from mooncake_py.replay.compiling import compile_report


def _cache(f, x):
    c = mp.prepare_gradient_cache(f, x, compile=True)
    mp.value_and_gradient(c, f, x)
    mp.value_and_gradient(c, f, x)
    return c


def _loops(c):
    return [lp for kind, lp in getattr(c._replay.plan, "loops", ()) if kind == "l"]


def _check(f, x, xs, want_loops=True):
    """The cache's results on each of ``xs`` equal the interpreter kernel's on the same plan
    bit for bit, and mp.grad's to rounding."""
    c = _cache(f, x)
    cp = c._replay.plan
    assert type(cp) is compiled.CompiledPlan
    assert bool(_loops(c)) == want_loops
    interp = compiled.compile_plan(cp.plan, [x])
    for xn in xs:
        y, (g,) = mp.value_and_gradient(c, f, xn)
        y0, (g0,) = interp.run([xn])
        assert np.float64(y).tobytes() == np.float64(y0).tobytes()
        assert g.tobytes() == g0.tobytes()
        np.testing.assert_allclose(g, mp.grad(f)(xn), rtol=1e-12, atol=1e-300)
    assert c._replay.plan is cp  # (replayed, never recorded again)
    _check_hvp(f, x, xs, want_loops)
    return c


def _check_hvp(f, x, xs, want_loops=True):
    """As :func:`_check`, for the HVP cache against the forward-over-reverse interpreter."""
    v = np.cos(np.arange(x.size)).reshape(x.shape)
    c = mp.prepare_hvp_cache(f, x, compile=True)
    mp.value_and_hvp(c, f, v, x)
    mp.value_and_hvp(c, f, v, x)
    cp = c._replay.plan
    assert type(cp) is compiled.CompiledHVPPlan
    assert bool(_loops(c)) == want_loops
    interp = compiled.compile_plan(cp.plan, [DualArray(x, v, Tag(0))], dual=True)
    for xn in xs:
        _, _, hv = mp.value_and_hvp(c, f, v, xn)
        leaves = [DualArray(xn, v, Tag(0))]
        yd, (gd,) = cp.run(leaves)
        y0, (g0,) = interp.run(leaves)
        for u, w in ((yd._value, y0._value), (yd._tangent, y0._tangent),
                     (gd._value, g0._value), (gd._tangent, g0._tangent)):
            assert np.asarray(u).tobytes() == np.asarray(w).tobytes()
        assert np.asarray(hv).tobytes() == np.asarray(g0._tangent).tobytes()
        np.testing.assert_allclose(hv, mp.hvp(f)(xn, v), rtol=1e-12, atol=1e-300)
    assert c._replay.plan is cp


def _xs(n, k=3, seed=0, shape=None):
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.5, 1.5, shape or n) for _ in range(k)]


def test_sum_loop_is_one_loop():
    def f(x):
        s = 0.0
        for i in range(len(x)):
            s += x[i]
        return s
    x, *xs = _xs(200, 4)
    c = _check(f, x, xs)
    lp, = _loops(c)
    assert lp.count * lp.period >= 2 * 198
    r = compile_report(c._replay)
    assert "compiled loop" in r.status and r.compiled
    assert any(e.how == "compiled loop" for e in r.entries)


def test_carried_products_and_constants():
    def f(x):
        s = 1.0
        for i in range(len(x)):
            s = s * 0.5 + 2.0 * x[i] * x[i] - 1.0
        return s
    x, *xs = _xs(50)
    _check(f, x, xs)


def test_strided_reads_and_two_carried_values():
    def f(x):
        s, t = 0.0, 1.0
        for i in range(len(x) // 2):
            s = s + x[2 * i] * t
            t = t * 0.9 + x[2 * i + 1] / (1.0 + s * s)
        return s + t
    x, *xs = _xs(80)
    _check(f, x, xs)


def test_mixed_body_unary_pow_div_neg():
    def f(x):
        s = 0.5
        for i in range(len(x)):
            u = np.sin(x[i]) * np.exp(-x[i]) + np.sqrt(x[i]) ** 1.5
            s = s / (1.0 + u) + np.tanh(s) - (-x[i]) ** 2 + x[i] ** s
        return np.log(s * s)
    x, *xs = _xs(30)
    _check(f, x, xs)


def test_loop_invariant_operand():
    def f(x):
        y, a = x[0], x[1]
        for _ in range(60):
            y = y * a + a
        return y
    x = np.array([0.9, 0.99])
    _check(f, x, [np.array([0.8, 0.97]), np.array([1.1, 0.95])])


def test_two_loops_and_a_value_read_after_the_loop():
    def f(x):
        s = 0.0
        mid = 0.0
        for i in range(len(x)):
            s = s + x[i] * x[i]
            if i == 10:
                mid = s
        t = 1.0
        for i in range(len(x)):
            t = t * 0.5 + np.cos(x[i]) * mid
        return s + t * mid
    x, *xs = _xs(40)
    c = _check(f, x, xs)
    assert len(_loops(c)) >= 2


def test_two_dimensional_reads():
    def f(x):
        s = 0.0
        for i in range(x.shape[0]):
            for j in range(x.shape[1]):
                s = s + x[i, j] * x[j, i]
        return s
    x, *xs = _xs(None, shape=(6, 6))
    _check(f, x, xs)


def test_a_loop_too_short_stays_on_the_interpreter():
    def f(x):
        s = 0.0
        for i in range(3):
            s = s + np.sin(x[i]) * x[i]
        return s
    x, *xs = _xs(3)
    c = _check(f, x, xs, want_loops=False)
    assert compile_report(c._replay).status == "one compiled kernel"


def test_a_different_iteration_breaks_the_loop():
    def f(x):
        s = 0.0
        for i in range(len(x)):
            if i == 20:
                s = s * x[i]
            else:
                s = s + x[i] * 2.0
        return s
    x, *xs = _xs(40)
    c = _check(f, x, xs)
    for lp in _loops(c):  # (no loop runs over the odd iteration)
        assert not lp.s0 <= 40 < lp.s0 + lp.count * lp.period or lp.period > 2


def test_values_from_two_iterations_back():
    def f(x):
        a, b = x[0], x[1]
        for i in range(2, len(x)):
            a, b = b, a * 0.5 + b * x[i]
        return a + b
    x, *xs = _xs(30)
    c = mp.prepare_gradient_cache(f, x, compile=True)
    for xn in [x, x] + xs:
        _, (g,) = mp.value_and_gradient(c, f, xn)
        np.testing.assert_allclose(g, mp.grad(f)(xn), rtol=1e-12)


def test_a_guard_in_the_loop_falls_back_on_new_inputs():
    def f(x):
        s = 0.0
        for i in range(len(x)):
            if x[i] > 0:
                s = s + x[i] * x[i]
            else:
                s = s - x[i]
        return s
    x = np.linspace(0.1, 1.0, 30)
    c = _check(f, x, [x + 0.5])
    flipped = x.copy()
    flipped[7] = -0.3
    y, (g,) = mp.value_and_gradient(c, f, flipped)  # a guard fails: recorded again
    assert y == f(flipped)
    np.testing.assert_allclose(g, mp.grad(f)(flipped), rtol=1e-14)
    _, (g,) = mp.value_and_gradient(c, f, flipped * 1.1)  # the next call works
    np.testing.assert_allclose(g, mp.grad(f)(flipped * 1.1), rtol=1e-14)
    y, (g,) = mp.value_and_gradient(c, f, x)
    np.testing.assert_allclose(g, mp.grad(f)(x), rtol=1e-14)


def test_argument_checks_still_apply():
    def f(x):
        s = 0.0
        for i in range(len(x)):
            s += x[i] * x[i]
        return s
    x = np.ones(20)
    c = _cache(f, x)
    assert _loops(c)
    with pytest.raises(mp.PreparedCacheSpecError):
        mp.value_and_gradient(c, f, np.ones(21))
    with pytest.raises(mp.PreparedCacheSpecError):
        mp.value_and_gradient(c, f, np.ones(20, np.float32))
    y, (g,) = mp.value_and_gradient(c, f, x * 2)
    assert y == 80.0 and (g == 4.0).all()


def test_kernel_source_depends_on_shape_only():
    def f(x):
        s = 0.0
        for i in range(len(x)):
            s += np.sin(x[i])
        return s
    c1, c2 = _cache(f, np.ones(30)), _cache(f, np.ones(70))
    assert c1._replay.plan._k is c2._replay.plan._k


def test_sweep_flags_match_the_interpreter_rule():
    # y = x0 * x0: the second contribution to the same node is added
    op = np.array([0, 3])
    a = np.array([0, 0])
    b = np.array([-1, 0])
    reached, fa, fb, _, _ = loops.sweep_flags(op, a, b, np.array([0, 1]), 2, 1)
    assert reached.tolist() == [True, True] and fa.tolist() == [0, 1] and fb.tolist() == [0, 2]


def test_two_arguments():
    def f(x, y):
        s = 0.0
        for i in range(len(x)):
            s = s + x[i] * y[i]
        return s
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(30), rng.standard_normal(30)
    c = mp.prepare_gradient_cache(f, x, y, compile=True)
    ch = mp.prepare_hvp_cache(f, x, y, compile=True)
    for _ in range(2):
        mp.value_and_gradient(c, f, x, y)
        mp.value_and_hvp(ch, f, (x, y), x, y)
    assert _loops(c) and _loops(ch)
    x2, y2 = x + 1, y - 1
    _, (gx, gy) = mp.value_and_gradient(c, f, x2, y2)
    assert (gx == y2).all() and (gy == x2).all()
    _, _, (hx, hy) = mp.value_and_hvp(ch, f, (x, y), x2, y2)
    np.testing.assert_allclose(hx, y, rtol=1e-15)
    np.testing.assert_allclose(hy, x, rtol=1e-15)
