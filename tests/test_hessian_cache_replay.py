"""Hessian caches served one basis direction at a time by the HVP cache's replayer (generated
source, or with compile=True the forward-over-reverse kernel) when that pays, by the k-lane
Python replay otherwise: every result equals the unprepared mp.hessian."""
import pickle

import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.replay.compiled import CompiledHVPPlan
from mooncake_py.replay.source import SourcePlan

_Y = np.cumsum(np.random.default_rng(0).standard_normal(300)) * 0.1


def ar1(theta):
    """AR(1) log-likelihood as a scalar loop (phi, sigma)."""
    phi, s = theta[0], theta[1]
    ll = 0.0
    for i in range(1, _Y.size):
        r = (_Y[i] - phi * _Y[i - 1]) / s
        ll = ll - 0.5 * r * r - np.log(s)
    return ll


_A = np.random.default_rng(5).normal(size=(30, 2))


def array_steps(theta):
    """Array steps only (no scalar run to replay cheaply): the lanes serve."""
    return np.sum(np.tanh(_A @ theta) ** 2) + np.sum(np.exp(0.1 * theta))


def ar1_pow(theta):
    """The same with r ** 2: np.power is a scalar step, so one direction at a time serves."""
    phi, s = theta[0], theta[1]
    ll = 0.0
    for i in range(1, _Y.size):
        r = (_Y[i] - phi * _Y[i - 1]) / s
        ll = ll - 0.5 * r ** 2 - np.log(s)
    return ll


def chain(x):
    s = 0.0
    for i in range(1, x.size):
        s = s + np.sin(x[i] * x[i - 1]) + x[i] * x[i] * x[0]
    return s


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


THETAS = [np.array([0.5, 1.3]), np.array([0.2, 0.9]), np.array([-0.4, 2.0])]


@pytest.mark.parametrize("compile", [False, True])
def test_ar1_columns_equal_hessian(compile):
    c = mp.prepare_hessian_cache(ar1, THETAS[0], compile=compile)
    for th in THETAS + THETAS:
        y, g, H = mp.value_gradient_and_hessian(c, ar1, th)
        _close(H, mp.hessian(ar1)(th))
        _close(g, mp.grad(ar1)(th))
        _close(y, ar1(th))
    rs = c._replay
    assert rs.mode == "columns"
    assert type(rs.columns.plan) is (CompiledHVPPlan if compile else SourcePlan)
    assert rs.columns.replays >= 2 * (len(THETAS) * 2 - 2)


def test_array_steps_stay_lanes():
    c = mp.prepare_hessian_cache(array_steps, THETAS[0], compile=True)
    for th in THETAS:
        _close(mp.value_gradient_and_hessian(c, array_steps, th)[2],
               mp.hessian(array_steps)(th))
    assert c._replay.mode == "lanes" and c._replay.columns.plan is None
    assert sum(r.replays for r in dict.values(c._replay)) == 2


def test_power_compiles_one_direction_at_a_time():
    c = mp.prepare_hessian_cache(ar1_pow, THETAS[0], compile=True)
    for th in THETAS:
        _close(mp.value_gradient_and_hessian(c, ar1_pow, th)[2], mp.hessian(ar1_pow)(th))
    assert c._replay.mode == "columns"


@pytest.mark.parametrize("compile", [False, True])
@pytest.mark.parametrize("n", [1, 2, 7])
def test_chain_sizes(compile, n):
    xs = [np.linspace(0.1, 0.9, n) * k for k in (1.0, -1.5, 0.7, 2.0)]
    c = mp.prepare_hessian_cache(chain, xs[0], compile=compile, chunk_size=3)
    for x in xs:
        _, g, H = mp.value_gradient_and_hessian(c, chain, x)
        assert H.shape == (n, n)
        _close(H, mp.hessian(chain)(x))
        _close(g, mp.grad(chain)(x))


def test_several_arguments_and_containers():
    def f(a, p, scale):
        s = 0.0
        for i in range(a.size):
            s = s + a[i] * p["w"][i] * p["w"][i] + np.exp(p["b"][0] * a[i])
        return s * scale
    a, p = np.array([0.3, -0.2, 0.5]), {"w": np.array([1.0, 2.0, 0.5]), "b": np.array([0.1])}
    for compile in (False, True):
        c = mp.prepare_hessian_cache(f, a, p, 2.0, compile=compile)
        for k in (1.0, 1.1, 0.9):
            ak = a * k
            _, g, H = mp.value_gradient_and_hessian(c, f, ak, p, 2.0)
            want = mp.hessian(f, argnums=(0, 1, 2))(ak, p, 2.0)
            wg = mp.grad(f, argnums=(0, 1, 2))(ak, p, 2.0)
            for i in range(3):
                _close(mp.ravel_pytree(g[i])[0], mp.ravel_pytree(wg[i])[0])
                for j in range(3):
                    _close(H[i][j], want[i][j])


def _branchy(x):
    s = 0.0
    for i in range(x.size):
        if x[i] > 0:
            s = s + x[i] * x[i] * x[i]
        else:
            s = s + np.sin(x[i]) * x[0]
    return s


@pytest.mark.parametrize("compile", [False, True])
def test_branch_flips(compile):
    x = np.linspace(-1.0, 1.0, 9)
    c = mp.prepare_hessian_cache(_branchy, x, compile=compile)
    for k in (1.0, 1.2, -1.0, -0.8, 1.0, 0.5):
        _close(mp.value_gradient_and_hessian(c, _branchy, x * k)[2], mp.hessian(_branchy)(x * k))
    assert c._replay.mode == "columns"


def test_array_code_stays_lanes():
    f = lambda x: np.sum(np.sin(x) * np.cos(x[::-1]))
    x = np.linspace(0.0, 1.0, 20)
    c = mp.prepare_hessian_cache(f, x, compile=True)
    for k in (1.0, 2.0, 3.0):
        _close(mp.value_gradient_and_hessian(c, f, x * k)[2], mp.hessian(f)(x * k))
    assert c._replay.mode == "lanes"


def test_gives_up_to_lanes():
    c = mp.prepare_hessian_cache(ar1, THETAS[0])
    mp.value_gradient_and_hessian(c, ar1, THETAS[0])
    mp.value_gradient_and_hessian(c, ar1, THETAS[1])
    assert c._replay.mode == "columns"
    c._replay.columns.disabled = True  # (as after repeated guard failures)
    _close(mp.value_gradient_and_hessian(c, ar1, THETAS[2])[2], mp.hessian(ar1)(THETAS[2]))
    assert c._replay.mode == "lanes"


def test_float32_stays_lanes():
    x = np.linspace(0.1, 0.9, 4).astype(np.float32)
    c = mp.prepare_hessian_cache(chain, x)
    for _ in range(3):
        H = mp.value_gradient_and_hessian(c, chain, x)[2]
        assert H.dtype == np.float32
    np.testing.assert_allclose(H, mp.hessian(chain)(x), rtol=1e-5)
    assert c._replay.mode == "lanes"


def test_pickle_keeps_compile():
    c = mp.prepare_hessian_cache(ar1, THETAS[0], compile=True)
    mp.value_gradient_and_hessian(c, ar1, THETAS[0])
    c2 = pickle.loads(pickle.dumps(c))
    assert c2._compile and c2._replay.mode is None
    for th in THETAS:
        _close(mp.value_gradient_and_hessian(c2, ar1, th)[2], mp.hessian(ar1)(th))
    assert type(c2._replay.columns.plan) is CompiledHVPPlan
