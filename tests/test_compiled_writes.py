"""compile=True caches on loops that read and write scalar elements of an array they
allocated (RK4): the loop runs as one compiled segment, for the gradient and the HVP, with
the results of a fresh recording."""
import warnings

import numpy as np
import pytest

import mooncake_py as mp
from benchmarks.rk4 import make_rk4
from benchmarks.suite import CASES
from mooncake_py.errors import PreparedCacheSpecError

pytest.importorskip("numba")

TH = np.array([1.1, 0.4, 0.1, 0.4])
V = np.array([1.0, -0.5, 0.25, 2.0])


def _caches(f, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mp.CompileFallbackWarning)
        g = mp.prepare_gradient_cache(f, x, compile=True)
        h = mp.prepare_hvp_cache(f, x, compile=True)
        mp.value_and_gradient(g, f, x)
        mp.value_and_hvp(h, f, V[:x.size] if x.size <= 4 else np.ones_like(x), x)
    return g, h


def _check(f, x, v, bitwise=True):
    g, h = _caches(f, x)
    for t in (x, x * 1.01, x * 0.97 - 0.01):
        y1, (g1,) = mp.value_and_gradient(g, f, t)
        y0, g0 = mp.value_and_grad(f)(t)
        hv1 = mp.value_and_hvp(h, f, v, t)[-1]
        hv1 = hv1[0] if type(hv1) is tuple else hv1
        hv0 = mp.hvp(f)(t, v)
        if bitwise:
            assert y1 == y0
            np.testing.assert_array_equal(g1, g0)
            np.testing.assert_array_equal(hv1, hv0)
        else:
            np.testing.assert_allclose(g1, g0, rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(hv1, hv0, rtol=1e-12, atol=1e-14)
    assert g._replay.replays >= 3 and h._replay.replays >= 3
    return g, h


def _loop_compiled(cache):
    r = cache.compile_report()
    loop = max(r.entries, key=lambda e: e.stop - e.start)
    assert loop.how == "compiled segment", str(r)
    return r


def test_rk4_gradient_and_hvp_bitwise():
    f = make_rk4(25)
    g, h = _check(f, TH, V)
    for c in (g, h):
        r = _loop_compiled(c)
        # only the allocation and the array steps at the end stay outside
        assert len(r.fallbacks) == 3, str(r)
    assert type(g._replay.plan.plan).__name__ == "Plan"


def test_naive_map_sin_cos_exp():
    case = CASES["naive_map_sin_cos_exp"]
    f, x = case.bind(np), case.make_inputs(np.random.default_rng(0))[0]
    g, h = _check(f, x, np.linspace(-1, 1, x.size).reshape(x.shape), bitwise=False)
    _loop_compiled(g)
    _loop_compiled(h)


def _plus_equals(x):
    y = np.zeros_like(x, shape=(3,))
    for i in range(12):
        y[i % 3] += np.sin(x[i % 4]) * x[(i + 1) % 4]
        y[(i + 1) % 3] += y[i % 3] * 0.5
    return np.sum(y * y)


def _overwrite_twice(x):
    y = np.zeros_like(x)
    s = x[0]
    for i in range(8):
        y[1] = s * x[2]
        y[1] = y[1] * x[3] + s   # the same element again, reading the first write
        s = y[1] * 0.25 + np.cos(s)
        y[0] = s
    return np.sum(y * x)


def _read_after_write(x):
    y = np.empty_like(x)
    y[0] = x[0]
    for i in range(1, 4):
        y[i] = y[i - 1] * x[i] + np.exp(y[i - 1] * 0.1)
    s = 0.0
    for i in range(4):
        s = s + y[i] * y[(i + 1) % 4]
    return s


@pytest.mark.parametrize("f", [_plus_equals, _overwrite_twice, _read_after_write])
def test_item_writes(f):
    g, h = _check(f, TH, V, bitwise=False)
    _loop_compiled(g)
    _loop_compiled(h)


def test_finite_differences():
    f = make_rk4(10)
    g, _ = _caches(f, TH)
    grad = mp.value_and_gradient(g, f, TH)[1][0]
    eps = 1e-6
    fd = np.array([(f(TH + eps * e) - f(TH - eps * e)) / (2 * eps) for e in np.eye(4)])
    np.testing.assert_allclose(grad, fd, rtol=1e-6)


def test_guards_other_shape():
    f = make_rk4(10)
    g, h = _caches(f, TH)
    x = np.array([1.1, 0.4, 0.1, 0.4, 0.3])
    for run in (lambda: mp.value_and_gradient(g, f, x),
                lambda: mp.value_and_hvp(h, f, np.ones(5), x)):
        with pytest.raises(PreparedCacheSpecError):
            run()
    # the caches still serve their own shape afterwards
    _, g0 = mp.value_and_grad(f)(TH)
    np.testing.assert_array_equal(mp.value_and_gradient(g, f, TH)[1][0], g0)


def _branchy(x):
    y = np.zeros_like(x, shape=(6,))
    y[0] = x[0]
    for i in range(5):
        if y[i] > 1.0:   # a guard on an element written in the loop
            y[i + 1] = y[i] * x[1] - x[2]
        else:
            y[i + 1] = y[i] * x[3] + x[1] * x[2]
    return np.sum(y * y)


def test_guard_on_written_element_flips():
    x = np.array([0.5, 1.5, 0.2, 1.8])
    g, h = _caches(_branchy, x)
    _loop_compiled(g)
    for t in (x, np.array([1.5, 0.5, 0.2, 0.9]), x):  # the middle one takes other branches
        _, (g1,) = mp.value_and_gradient(g, _branchy, t)
        np.testing.assert_allclose(g1, mp.value_and_grad(_branchy)(t)[1], rtol=1e-12)
        hv1 = mp.value_and_hvp(h, _branchy, V, t)[-1]
        hv1 = hv1[0] if type(hv1) is tuple else hv1
        np.testing.assert_allclose(hv1, mp.hvp(_branchy)(t, V), rtol=1e-12)
