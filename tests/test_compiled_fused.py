"""compile=True caches run elementwise runs ending in a full np.sum as one fused kernel
(mooncake_py/replay/fused.py): results as a fresh recording's, for gradients and HVPs."""
import warnings

import numpy as np
import pytest

import mooncake_py as mp
from benchmarks.namespaces import numpy_namespace
from benchmarks.suite import CASES
from mooncake_py.replay.fused import FusedPlan

pytest.importorskip("numba")

_RNG = np.random.default_rng(7)


def _fused(plan):
    while not isinstance(plan, FusedPlan):
        plan = plan.__dict__.get("base") or plan.plan
    return plan


def _close(a, b, tol):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    scale = max(1.0, float(np.max(np.abs(b))) if b.size else 1.0)
    assert float(np.max(np.abs(a - b))) <= tol * scale if a.size else True


def _check(f, x, v=None, tol=1e-12, calls=3, fused=True):
    """Compiled gradient and HVP caches of ``f`` against fresh recordings, ``calls`` times."""
    v = _RNG.standard_normal(x.shape).astype(x.dtype) if v is None else v
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mp.CompileFallbackWarning)
        c = mp.prepare_gradient_cache(f, x, compile=True)
        h = mp.prepare_hvp_cache(f, x, compile=True)
        y0, g0 = mp.value_and_grad(f)(x)
        hv0 = mp.hvp(f)(x, v)
        for _ in range(calls):
            y, (g,) = mp.value_and_gradient(c, f, x)
            yh, gh, hv = mp.value_and_hvp(h, f, v, x)
            _close(y, y0, tol)
            _close(g, g0, tol)
            _close(yh, y0, tol)
            _close(gh, g0, tol)
            _close(hv, hv0, tol)
    assert type(y) is type(y0)
    if not fused:
        return c, h
    assert isinstance(_fused(c._replay.plan), FusedPlan)
    assert isinstance(_fused(h._replay.plan), FusedPlan)
    return c, h


@pytest.mark.parametrize("f", [
    lambda x: np.sum(np.sin(x)),
    lambda x: np.sum(np.sin(np.cos(np.exp(x)))),
    lambda x: np.sum(np.sin(x) * np.cos(x)),
    lambda x: np.sum(np.tanh(x) / (1.0 + x * x)),
    lambda x: 2.5 * np.sum(np.log1p(x * x)) + 1.0,
    lambda x: np.sum(np.sqrt(np.exp(x)) - np.arctan(x)),
])
@pytest.mark.parametrize("shape", [(10,), (10, 10), (1000,)])
def test_fused_runs_equal_fresh_recordings(f, shape):
    _check(f, _RNG.standard_normal(shape))


def test_broadcast_scalar_constants_and_powers():
    k = np.float64(0.3)
    c0 = np.array(1.25)       # a 0-d constant
    arr = _RNG.standard_normal(20)  # an array constant, captured

    def f(x):
        return np.sum(2.0 * x ** 2 + k * x - c0 / (1.5 + x * x) + arr * x ** 3 - x / 3)
    _check(f, _RNG.standard_normal(20))


def test_scalars_read_from_outside_the_run_get_summed_cotangents():
    data = _RNG.lognormal(1.0, 0.5, 500)

    def f(t):
        mu, s = t[0], np.exp(t[1])
        return np.sum(-np.log(data) - np.log(s) - (np.log(data) - mu) ** 2 / (2 * s ** 2)) \
            + t[0] * t[1]
    _check(f, np.array([0.3, -0.2]), tol=1e-11)


def test_non_contiguous_input():
    base = _RNG.standard_normal(41)

    def f(x):
        return np.sum(np.sin(np.exp(x[::2])))
    _check(f, base)
    _check(lambda x: np.sum(np.cos(x) * x), base[::2].copy())
    x = base[::2]  # a non-contiguous argument itself

    def h(x):
        return np.sum(np.cos(x) * x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mp.CompileFallbackWarning)
        c = mp.prepare_gradient_cache(h, x, compile=True)
        for _ in range(3):
            y, (g,) = mp.value_and_gradient(c, h, x)
    y0, g0 = mp.value_and_grad(h)(x)
    _close(y, y0, 1e-12)
    _close(g, g0, 1e-12)


def test_float32_stays_float32():
    # (the plans take float64 values only: a float32 function is recorded every call, and
    # the fused kernels, which are written for float32 too, do not meet it yet)
    x = _RNG.standard_normal(300).astype(np.float32)
    f = lambda x: np.sum(np.sin(x) * x + 0.5 * x)
    c, _ = _check(f, x, tol=1e-6, fused=False)
    y, (g,) = mp.value_and_gradient(c, f, x)
    assert g.dtype == np.float32 and np.asarray(y).dtype == np.float32


def test_the_sum_is_numpys_pairwise_sum_bit_for_bit():
    for n in (7, 100, 129, 1000, 12345):
        x = _RNG.standard_normal(n)
        f = lambda x: np.sum(x * 3.0 + x)
        c = mp.prepare_gradient_cache(f, x, compile=True)
        for _ in range(2):
            y, (g,) = mp.value_and_gradient(c, f, x)
        y0, g0 = mp.value_and_grad(f)(x)
        assert y == y0 and np.array_equal(g, g0)


def test_an_intermediate_read_elsewhere_stays_a_rule_call():
    def f(x):
        e = np.exp(x)
        return np.sum(np.sin(np.cos(e))) + e[0] * 2.0 + np.sum(e)
    c, _ = _check(f, _RNG.standard_normal(30))
    text = str(c.compile_report())
    assert "fused kernel" in text and "rule call" in text


def test_two_sums_and_a_shared_input():
    def f(x):
        return np.sum(np.sin(x)) * np.sum(np.cos(x) * x)
    _check(f, _RNG.standard_normal(50))


@pytest.mark.parametrize("name", ["broadcast_sin_cos_exp", "sum_sin_1000",
                                  "turing_broadcast_benchmark"])
def test_suite_rows(name):
    case = CASES[name]
    args = case.make_inputs(np.random.default_rng(0))
    g, (x,) = case.closure(numpy_namespace(), args)
    c, h = _check(g, x, tol=1e-11)
    assert any(e.how == "fused kernel" for e in c.compile_report().entries)
    assert any(e.how == "fused kernel" for e in h.compile_report().entries)


def test_compile_report_shows_the_fused_run():
    f = lambda x: np.sum(np.sin(np.cos(np.exp(x))))
    c, h = _check(f, _RNG.standard_normal((10, 10)))
    for cache in (c, h):
        r = cache.compile_report()
        assert r.compiled and not r.fallbacks
        assert [e.how for e in r.entries] == ["fused kernel"]
        assert r.status == "fused kernels"
        assert "np.exp" in str(r) and "np.sum" in str(r)


def test_new_shape_records_again_or_raises_as_before():
    f = lambda x: np.sum(np.sin(x) * x)
    errs = []
    for compile in (False, True):
        c = mp.prepare_gradient_cache(f, np.ones(5), compile=compile)
        mp.value_and_gradient(c, f, np.ones(5))
        mp.value_and_gradient(c, f, np.ones(5))
        try:
            mp.value_and_gradient(c, f, np.ones(6))
        except Exception as e:  # noqa: BLE001
            errs.append(type(e))
        else:
            errs.append(None)
    assert errs[0] is errs[1]
    # the fused step's own guard: a value of another shape or dtype reaching the run is a
    # failed replay (the plan records again)
    from mooncake_py.replay.fused import _fused_sum
    from mooncake_py.replay.plans import _Failed
    mp.value_and_gradient(c, f, np.ones(5))
    step = next(st for st in _fused(c._replay.plan).steps if st[1] is _fused_sum)
    run = step[3][0][1]
    for bad in (np.ones(6), np.ones(5, np.float32), [1.0] * 5):
        with pytest.raises(_Failed):
            run.run([bad])


def test_a_rule_registered_after_fusing_is_used(monkeypatch):
    from mooncake_py.rules.registry import RRULES
    f = lambda x: np.sum(np.sin(x))
    x = np.linspace(0, 1, 5)
    c = mp.prepare_gradient_cache(f, x, compile=True)
    for _ in range(2):
        mp.value_and_gradient(c, f, x)
    old = RRULES[np.sin]

    def rule(args, kwargs, needs):
        y, pb = old(args, kwargs, needs)
        return y, lambda g: tuple(None if p is None else 2 * p for p in pb(g))
    monkeypatch.setitem(RRULES, np.sin, rule)
    _, (g,) = mp.value_and_gradient(c, f, x)
    np.testing.assert_allclose(g, 2 * np.cos(x), rtol=1e-14)
