"""Dual replay of scalar steps (replay.Plan.dual_steps): a prepared HVP cache runs the plan's
``x[i]``, ``+ - * /`` and unary-ufunc steps on dual scalars through dual_scalars.py's short
paths. Its value, gradient and H·v must be bitwise those of a fresh recording (``mp.hvp`` and
an unreplayed cache), and H·v must match finite differences of the gradient."""
import numpy as np
import pytest

import mooncake_py as mp
from benchmarks.namespaces import numpy_namespace
from benchmarks.suite import CASES
from mooncake_py.transforms.second_order import _replayed_hvp_one
from mooncake_py.replay import plans as replay


@pytest.fixture(autouse=True)
def _python_dual_replay(monkeypatch):
    """These tests are about the Python replay of dual plans, which must stay bitwise; the
    default HVP cache runs scalar runs as generated source instead (equal to rounding:
    tests/test_source_replay.py)."""
    from mooncake_py.transforms.second_order import HVPCache
    monkeypatch.setattr(HVPCache, "_new_replay", lambda self: (
        __import__("mooncake_py.replay.compiling", fromlist=["x"]).CompilingReplayer(
            dual=True, kind="hvp") if self._compile else replay.Replayer(dual=True, kind="hvp")))


def _same(a, b):
    la, lb = mp.ravel_pytree(a)[0], mp.ravel_pytree(b)[0]
    return type(a) is type(b) and np.array_equal(la, lb) and la.dtype == lb.dtype


def _check_bitwise(cache, f, v, args):
    nums = cache.spec.float_args
    got = mp.value_and_hvp(cache, f, v, *args)
    want = mp.value_and_hvp(mp.prepare_hvp_cache(f, *args, replay=False), f, v, *args)
    for a, b in zip(got, want):
        assert _same(a, b), (a, b)
    argnums = nums[0] if len(args) == 1 else tuple(nums)
    vs = v if len(args) == 1 else tuple(v[i] for i in nums)
    hv = mp.hvp(f, argnums=argnums)(*args, vs)
    if len(args) == 1:
        assert _same(got[2], hv)
    else:
        for i, h in zip(nums, hv):
            assert _same(got[2][i], h)
    return got


@pytest.mark.parametrize("name", list(CASES))
def test_suite_case_replay_is_bitwise_fresh(name):
    case = CASES[name]
    f = case.bind(numpy_namespace())
    rng = np.random.default_rng(3)
    cache = None
    for k in range(3):
        args = case.make_inputs(np.random.default_rng(k))
        if cache is None:
            cache = mp.prepare_hvp_cache(f, *args)
        v = tuple(rng.standard_normal(np.shape(a)) if i in cache.spec.float_args else None
                  for i, a in enumerate(args))
        _check_bitwise(cache, f, v[0] if len(args) == 1 else v, args)
    assert cache._replay.replays == 2


def _loop(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += np.sin(x[i]) * x[i - 1] - 2 * x[i] + 3.0 / (1.5 + x[i] ** 2)
    return s


def _mixed(x):
    a, b, c = x[0, 1], x[np.int64(1), -1], x[(1, 0)]
    u = np.add(a, b) * np.multiply(2.0, c) - np.true_divide(c, 3)  # ufuncs called directly
    w = -np.exp(a) + np.log(np.abs(b) + 1.0) * np.tanh(c) + np.sqrt(a * a + 1.0)
    z = 1 - a + (b - 0.5) * c / 4 + np.cos(u) * np.float64(0.25) + 7 // 2 * w
    return z * u + np.sum(x ** 2) * a + x[0, 0] * np.array(2.0)  # (a 0-d array constant)


def _branch(x):
    s = x[0] * x[1]
    if s > 0:
        return np.sin(s) + x[2] * x[2]
    t = 0.0
    for i in range(3):
        t = t + np.exp(x[i]) / (2.0 + x[i] * x[i])
    return t


def _plan_kinds(cache):
    return {st[0] for st in cache._replay.plan.dual_steps()}


def test_scalar_steps_run_the_short_paths_and_stay_bitwise():
    rng = np.random.default_rng(0)
    for f, shape in ((_loop, (7,)), (_mixed, (2, 3))):
        x0 = rng.standard_normal(shape)
        cache = mp.prepare_hvp_cache(f, x0)
        for k in range(4):
            x = x0 * (1 + 0.1 * k) + 0.05 * k
            _check_bitwise(cache, f, rng.standard_normal(shape), (x,))
        assert cache._replay.replays == 3
        assert {replay._DITEM, replay._DBIN, replay._DUNARY} <= _plan_kinds(cache)
        # the plan kept for the compiled kernel still holds the general steps
        assert all(st[0] in (replay._OP, replay._GUARD, replay._OBSERVE)
                   for st in cache._replay.plan.steps)


def test_branch_flips_rerecord_and_stay_bitwise():
    rng = np.random.default_rng(1)
    pos, neg = np.array([1.0, 2.0, 0.5]), np.array([-1.0, 2.0, 0.3])
    cache = mp.prepare_hvp_cache(_branch, pos)
    r = cache._replay
    for x in (pos, pos * 1.5, neg, neg * 0.5, pos * 0.7, pos * 0.6):
        _check_bitwise(cache, _branch, rng.standard_normal(3), (x,))
    assert r.replays == 3 and r.failures == 0  # (each flip re-planned; the next call replays)


@pytest.mark.parametrize("f,shape", [(_loop, (6,)), (_mixed, (2, 3)), (_branch, (3,))])
def test_replayed_hvp_matches_finite_differences_of_the_gradient(f, shape):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape) + (1.0 if f is _branch else 0.0)
    v = rng.standard_normal(shape)
    cache = mp.prepare_hvp_cache(f, x)
    mp.value_and_hvp(cache, f, v, x)
    _, g, hv = mp.value_and_hvp(cache, f, v, x)
    assert cache._replay.replays == 1
    grad = mp.grad(f)
    h = 1e-6
    fd = (grad(x + h * v) - grad(x - h * v)) / (2 * h)
    np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(g, grad(x))



@pytest.mark.parametrize("name", [n for n, c in CASES.items() if len(c.argnums) == 1])
def test_value_and_hvp_one_is_bitwise_value_and_hvp(name):
    # second_order._replayed_hvp_one: value_and_hvp's steps on one float64 array, for a direct
    # path in second_order.value_and_hvp; every result must be what the general path gives
    case = CASES[name]
    g, diff = case.closure(numpy_namespace(), case.make_inputs(np.random.default_rng(0)))
    x = diff[0]
    cache = mp.prepare_hvp_cache(g, x)
    r = replay.Replayer(dual=True, kind="hvp")
    rng = np.random.default_rng(5)
    for k in range(3):
        xk, v = x * (1 + 0.01 * k), rng.standard_normal(x.shape)
        want = mp.value_and_hvp(cache, g, v, xk)
        got = _replayed_hvp_one(r, g, xk, v)
        for a, b in zip(got, want):
            assert _same(a, b), (a, b)
    assert r.replays == cache._replay.replays == 2


def test_value_and_hvp_one_declines_other_calls_and_keeps_v():
    r = replay.Replayer(dual=True, kind="hvp")
    f = lambda x: np.sum(x ** 3)  # noqa: E731
    x = np.array([1.0, 2.0])
    assert _replayed_hvp_one(r, f, x.astype(np.float32), x) is None
    assert _replayed_hvp_one(r, f, x, np.ones(3)) is None
    assert _replayed_hvp_one(r, f, [1.0, 2.0], x) is None
    assert _replayed_hvp_one(r, f, x, 1.0) is None

    def writes(x):
        x += 1.0  # (moves the dual's own tangent copy, never the caller's v)
        return np.sum(x ** 2)
    v = np.array([1.0, -1.0])
    for _ in range(2):
        y, g, hv = _replayed_hvp_one(r, writes, x.copy(), v)
        np.testing.assert_array_equal(hv, 2 * v)
    np.testing.assert_array_equal(v, [1.0, -1.0])
    with pytest.raises(ZeroDivisionError):
        _replayed_hvp_one(r, lambda x: 1 / 0, x, v)
    assert _replayed_hvp_one(r, f, x, v)[2].tolist() == [6.0, -12.0]
