"""The direct path of ``mp.hvp`` (one float64 ndarray argument, int argnums) and the direct
frule of a whole-array ``np.sum`` on duals: each compared with the general path (a tuple
``argnums`` takes it; ``jvp`` of ``grad`` is a third route) and with finite differences, plus the
errors and escapes the general path gives."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.transforms import second_order
from mooncake_py.errors import EscapedValueError, OutputTypeError, TangentError, NonDifferentiableInputError

rng = np.random.default_rng(7)


def general_hvp(f, x, v, *rest):
    """The general path: a tuple argnums never takes the direct one."""
    return mp.hvp(f, argnums=(0,))(x, *rest, (v,))[0]


def fd_hvp(f, x, v, h=1e-6):
    g = mp.grad(f)
    return (g(x + h * v) - g(x - h * v)) / (2 * h)


@pytest.fixture
def direct_calls(monkeypatch):
    """Counts the calls the direct path answered (not _NOT_FAST), so a test can tell it ran."""
    calls = []
    original = second_order._fast_hvp

    def spy(*a, **k):
        r = original(*a, **k)
        if r is not second_order._NOT_FAST:
            calls.append(1)
        return r
    monkeypatch.setattr(second_order, "_fast_hvp", spy)
    return calls


FUNCTIONS = [
    np.sum,
    lambda x: np.sum(np.sin(x)),
    lambda x: np.sum(x ** 3) * np.sum(np.exp(x)),
    lambda x: np.sum(np.tanh(x[:, None] * x[None, :])),
    lambda x: np.mean(np.exp(-x ** 2)) * np.prod(np.cos(x)),
    lambda x: x @ x * np.sum(x),
]


@pytest.mark.parametrize("n", [1, 3, 40])
@pytest.mark.parametrize("f", FUNCTIONS)
def test_direct_path_matches_general_path_and_fd(f, n, direct_calls):
    x, v = rng.uniform(-1, 1, n), rng.standard_normal(n)
    hv = mp.hvp(f)(x, v)
    assert direct_calls, "the direct path did not run"
    assert type(hv) is np.ndarray and hv.dtype == np.float64 and hv.shape == x.shape
    assert hv.flags.writeable
    np.testing.assert_allclose(hv, general_hvp(f, x, v), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(hv, fd_hvp(f, x, v), rtol=1e-6, atol=1e-7)


def test_direct_path_matrix_argument_and_constants(direct_calls):
    A = rng.standard_normal((4, 4))
    W, V = rng.standard_normal((4, 4)), rng.standard_normal((4, 4))
    f = lambda c, W, s: s * np.sum(np.sin(W @ c) ** 2)
    hv = mp.hvp(f, argnums=1)(A, W, 2.0, V)
    assert direct_calls
    want = mp.hvp(f, argnums=(1,))(A, W, 2.0, (V,))[0]
    np.testing.assert_allclose(hv, want, rtol=1e-13)
    g = lambda W: f(A, W, 2.0)
    np.testing.assert_allclose(hv, fd_hvp(g, W, V), rtol=1e-6, atol=1e-7)
    # negative argnums, and keywords passed through
    h = lambda s, W, scale=1.0: scale * np.sum(W ** 4) * s
    np.testing.assert_allclose(mp.hvp(h, argnums=-1)(3.0, W, V, scale=0.5),
                               0.5 * 3.0 * 12 * W ** 2 * V, rtol=1e-13)


def test_direct_path_leaves_inputs_alone_and_results_owned(direct_calls):
    x, v = rng.standard_normal(5), rng.standard_normal(5)
    x0, v0 = x.copy(), v.copy()

    def writes(x):
        x[0] = 2.0 * x[1]  # f writes into its argument: the tangent written is the dual's own
        return np.sum(x ** 2)
    hv = mp.hvp(writes)(x, v)
    assert direct_calls
    np.testing.assert_array_equal(v, v0)
    want = mp.hvp(writes, argnums=(0,))(x0.copy(), (v0,))[0]
    np.testing.assert_allclose(hv, want, rtol=1e-14)
    # np.sum's Hessian is zero: an owned, writable zero array, not a view of the tape's buffers
    z = mp.hvp(np.sum)(x0, v0)
    np.testing.assert_array_equal(z, np.zeros(5))
    assert z.flags.writeable and z.base is None


def test_direct_path_constant_function():
    x, v = np.ones(3), np.ones(3)
    np.testing.assert_array_equal(mp.hvp(lambda x: 2.5)(x, v), np.zeros(3))
    np.testing.assert_array_equal(mp.hvp(lambda x: np.float64(2.5))(x, v), np.zeros(3))


def test_direct_path_errors_and_recovery():
    x = np.ones(3)
    with pytest.raises(OutputTypeError):
        mp.hvp(lambda x: x ** 2)(x, x)
    with pytest.raises(TangentError):
        mp.hvp(np.sum)(x, np.ones(4))            # wrong shape: the general path's error
    with pytest.raises(TangentError):  # (a float32 direction is cast: docs/conventions.md)
        mp.hvp(np.sum)(x, np.ones(3, np.complex128))
    with pytest.raises(NonDifferentiableInputError):
        mp.hvp(np.sum)(np.ones(3, int), np.ones(3))

    def boom(x):
        np.sin(x)
        raise ValueError("inside f")
    with pytest.raises(ValueError, match="inside f"):
        mp.hvp(boom)(x, x)
    np.testing.assert_allclose(mp.hvp(lambda x: np.sum(np.sin(x)))(x, x), -np.sin(x))


def test_direct_path_escaped_values_raise():
    saved = []

    def f(x):
        saved.append(x)
        return np.sum(x ** 2)
    mp.hvp(f)(np.ones(2), np.ones(2))
    with pytest.raises(EscapedValueError):
        np.sin(saved[0])


def test_direct_path_debug_mode(debug_mode):
    x, v = rng.standard_normal(6), rng.standard_normal(6)
    f = lambda x: np.sum(np.cos(x) * x)
    np.testing.assert_allclose(mp.hvp(f)(x, v), fd_hvp(f, x, v), rtol=1e-6, atol=1e-7)


# --- np.sum on duals: the direct frule against the registered one -----------------------------
@pytest.mark.parametrize("shape", [(), (1,), (7,), (3, 4), (2, 3, 5)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sum_frule_direct_matches_registered(shape, dtype):
    from mooncake_py.dual.core_rules import _sum_frule
    from mooncake_py.dual.dual_array import _run_rule
    x = rng.standard_normal(shape).astype(dtype)
    t = rng.standard_normal(shape).astype(dtype)
    T = rng.standard_normal((3,) + shape).astype(dtype)
    for tan, lanes in ((t, 0), (T, 3)):
        want = _run_rule(np.sum, _sum_frule, [x], [tan], lanes, {})
        for kw in ({}, {"axis": None, "dtype": None, "keepdims": False}):
            got = _sum_frule._mc_native([x], [tan], lanes, kw)
            np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
            np.testing.assert_allclose(got[1], want[1], rtol=1e-5 if dtype == np.float32
                                       else 1e-13)
            assert np.shape(got[1]) == np.shape(want[1])
            assert got[1].dtype == want[1].dtype


@pytest.mark.parametrize("kw", [{"axis": 0}, {"keepdims": True}, {"axis": (0, 1)},
                                {"where": np.array([[True, False, True]] * 2)}])
def test_sum_frule_keywords_take_registered_rule(kw):
    x, t = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    y, ty = mp.jvp(lambda x: np.sum(x, **kw), (x,), (t,))
    np.testing.assert_allclose(ty, np.sum(t, **kw), rtol=1e-14)
    np.testing.assert_allclose(y, np.sum(x, **kw), rtol=1e-14)


def test_sum_frule_lanes_in_hessian():
    f = lambda x: np.sum(x) ** 2 + np.sum(np.sin(x))
    x = rng.standard_normal(4)
    H = mp.hessian(f)(x)
    np.testing.assert_allclose(H, 2 * np.ones((4, 4)) - np.diag(np.sin(x)), rtol=1e-13,
                               atol=1e-15)
