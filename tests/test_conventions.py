"""Derivatives at kinks, zeros and poles: the conventions of docs/conventions.md.

Each convention is checked three ways: against its documented value (a closed form, or a
one-sided finite difference where the function is smooth on that side), in reverse mode
(grad) and in forward mode (jvp along each basis direction), which must agree entry by entry.
"""
import warnings

import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.dual import elementwise as ew


def _modes(f, x):
    """(grad, the jvp along each basis direction) of a scalar f at a float array x."""
    g = mp.grad(f)(x)
    j = np.array([mp.jvp(f, (x,), (e,))[1] for e in np.eye(x.size).reshape((-1,) + x.shape)])
    return g, j.reshape(x.shape)


def _same(a, b):
    np.testing.assert_array_equal(np.asarray(a, dtype=float), np.asarray(b, dtype=float))


# name, f, point, documented gradient, documented Hessian (None: not checked here)
KINKS = [
    ("x**0 at 0", lambda x: np.sum(x ** 0), [0.0], [0.0], [[0.0]]),
    ("x**1 at 0", lambda x: np.sum(x ** 1.0), [0.0], [1.0], [[0.0]]),
    ("x**2 at 0", lambda x: np.sum(x ** 2), [0.0], [0.0], [[2.0]]),
    ("x**0.5 at 0", lambda x: np.sum(x ** 0.5), [0.0], [np.inf], [[-np.inf]]),
    ("x**-1 at 0", lambda x: np.sum(x ** -1.0), [0.0], [-np.inf], [[np.inf]]),
    ("0**y, y > 0", lambda y: np.sum(0.0 ** y), [1.5], [0.0], [[0.0]]),
    ("0**y, y = 0", lambda y: np.sum(0.0 ** y), [0.0], [0.0], [[0.0]]),
    ("x**y at (0, 2)", lambda v: v[0] ** v[1], [0.0, 2.0], [0.0, 0.0], [[2.0, 0.0], [0.0, 0.0]]),
    ("x**y at (0, 3)", lambda v: v[0] ** v[1], [0.0, 3.0], [0.0, 0.0], [[0.0, 0.0], [0.0, 0.0]]),
    ("x**y at (-2, 2)", lambda v: v[0] ** v[1], [-2.0, 2.0], [-4.0, np.nan],
     [[2.0, np.nan], [np.nan, np.nan]]),
    ("sqrt at 0", lambda x: np.sum(np.sqrt(x)), [0.0], [np.inf], [[-np.inf]]),
    ("abs at 0", lambda x: np.sum(np.abs(x)), [0.0], [0.0], [[0.0]]),
    ("maximum tie", lambda v: np.maximum(v[0], v[1]), [1.0, 1.0], [0.5, 0.5], None),
    ("minimum tie", lambda v: np.minimum(v[0], v[1]), [1.0, 1.0], [0.5, 0.5], None),
    ("max reduction ties", lambda x: np.max(x), [2.0, 2.0, 1.0, 2.0], [1 / 3, 1 / 3, 0, 1 / 3],
     None),
    ("clip at the lower bound", lambda v: np.clip(v[0], v[1], v[2]), [0.0, 0.0, 1.0],
     [1.0, 0.0, 0.0], None),
    ("clip at the upper bound", lambda v: np.clip(v[0], v[1], v[2]), [1.0, 0.0, 1.0],
     [1.0, 0.0, 0.0], None),
    ("where at the switch", lambda x: np.sum(np.where(x > 0, x, 2 * x)), [0.0], [2.0], [[0.0]]),
    ("norm at 0", lambda x: np.linalg.norm(x), [0.0, 0.0], [0.0, 0.0],
     [[np.nan, np.nan], [np.nan, np.nan]]),
    ("hypot at 0", lambda v: np.hypot(v[0], v[1]), [0.0, 0.0], [0.0, 0.0],
     [[np.nan, np.nan], [np.nan, np.nan]]),
    ("x / 0", lambda x: np.sum(x / 0.0), [1.0, -1.0], [np.inf, np.inf], None),
    ("0 / y at 0", lambda y: np.sum(1.0 / y), [0.0], [-np.inf], None),
]


@pytest.mark.parametrize("name, f, x, g_doc, h_doc", KINKS, ids=[k[0] for k in KINKS])
def test_documented_convention_in_both_modes(name, f, x, g_doc, h_doc):
    x = np.array(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        g, j = _modes(f, x)
        _same(g, g_doc)
        _same(j, g_doc)  # forward mode agrees with reverse mode, entry by entry
        if h_doc is not None:
            _same(mp.hessian(f)(x), h_doc)
            for e, row in zip(np.eye(x.size), h_doc):  # hvp and jvp-of-grad: the same rows
                _same(mp.hvp(f)(x, e), row)
                _same(mp.jvp(mp.grad(f), (x,), (e,))[1], row)


def test_scaled_monomials_at_zero_match_their_closed_forms():
    c = 1.7
    f = lambda x: np.sum(c * x ** np.arange(4))       # c(1 + x + x² + x³)
    _same(mp.grad(f)(0.0), c)
    _same(mp.hessian(f)(np.float64(0.0)), 2 * c)
    fv = lambda x: np.sum(c * x ** np.arange(4))       # elementwise: c·x_k^k
    _same(mp.grad(fv)(np.zeros(4)), [0, c, 0, 0])
    _same(mp.hessian(fv)(np.zeros(4)), np.diag([0, 0, 2 * c, 0]))
    _same(mp.jvp(fv, (np.zeros(4),), (np.ones(4),))[1], c)


def test_power_with_both_operands_differentiated_matches_finite_differences():
    f = lambda x, y: x ** y
    for x, y in [(0.0, 2.0), (0.0, 2.5), (1.5, 0.0), (2.0, -1.0)]:
        gx, gy = mp.grad(f, argnums=(0, 1))(x, y)
        h = 1e-6
        # one-sided in x at 0 (x**2.5 is not real for x < 0), central elsewhere
        fdx = (f(x + h, y) - f(x, y)) / h if x == 0 else (f(x + h, y) - f(x - h, y)) / (2 * h)
        fdy = (f(x, y + h) - f(x, y - h)) / (2 * h)
        np.testing.assert_allclose([gx, gy], [fdx, fdy], atol=1e-5)
        _, t = mp.jvp(f, (x, y), (1.0, 1.0))
        np.testing.assert_allclose(t, gx + gy, atol=1e-12)
        H = mp.hessian(f, argnums=(0, 1))(x, y)
        assert np.isfinite(np.array(H, dtype=float)).all()


def test_power_hessian_blocks_at_zero_base():
    H = mp.hessian(lambda x, y: x ** y, argnums=(0, 1))(0.0, 2.0)
    _same(np.array(H, dtype=float), [[2.0, 0.0], [0.0, 0.0]])
    _, t = mp.jvp(lambda x, y: x ** y, (0.0, 2.0), (1.0, 1.0))
    _same(t, 0.0)


@pytest.mark.parametrize("fused", [False, True])
def test_zero_lane_never_multiplies_an_undefined_partial(monkeypatch, fused):
    """x**y at x < 0: ∂/∂y is nan (the power is not real nearby), ∂/∂x is fine. A direction or
    Hessian lane moving only x must see ∂/∂x alone, in the NumPy path and the fused kernels."""
    if fused:
        monkeypatch.setattr(ew, "KERNEL_MIN_SIZE", 0)
    n = 64
    x, y = -np.linspace(1, 2, n), np.full(n, 2.0)
    f = lambda x, y: np.sum(x ** y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        gx, gy = mp.grad(f, argnums=(0, 1))(x, y)
        _, t = mp.jvp(f, (x, y), (np.ones(n), np.zeros(n)))
        np.testing.assert_allclose(t, np.sum(gx), rtol=1e-13)
        assert np.isnan(gy).all()
        hx, hy = mp.hvp(f, argnums=(0, 1))(x, y, (np.ones(n), np.zeros(n)))
        np.testing.assert_allclose(hx, 2.0, rtol=1e-13)
        assert np.isnan(hy).all()


def test_division_by_zero_behaves_as_numpy():
    with np.errstate(divide="ignore"):
        _same(mp.grad(lambda x: x / 0.0)(1.0), np.inf)
        _same(mp.grad(lambda x: np.sum(x / 0.0))(np.ones(20000)), np.full(20000, np.inf))
        _same(mp.jvp(lambda x: x / 0.0, (1.0,), (1.0,))[1], np.inf)
        _same(mp.grad(lambda y: 0.0 / y)(1.0), -0.0)


def test_norm_hessian_is_nan_only_at_zero():
    v = np.array([1.0, -2.0])
    assert np.isnan(mp.hvp(np.linalg.norm)(np.zeros(2), v)).all()
    x = np.array([3.0, 4.0])
    want = (np.eye(2) - np.outer(x, x) / 25) / 5 @ v
    np.testing.assert_allclose(mp.hvp(np.linalg.norm)(x, v), want, rtol=1e-13)
    # rows: only the zero one is undefined
    X = np.array([[0.0, 0.0], [3.0, 4.0]])
    Hv = mp.hvp(lambda X: np.sum(np.linalg.norm(X, axis=1)))(X, np.ones((2, 2)))
    assert np.isnan(Hv[0]).all() and np.isfinite(Hv[1]).all()


def test_grad_of_grad_by_jvp_with_a_python_float():
    out = mp.jvp(lambda a: a * mp.grad(lambda y: a * y)(1.0), (1.0,), (1.0,))
    _same(out, (1.0, 2.0))
    out = mp.jvp(lambda a: a * mp.grad(lambda y: a * y * y)(3.0), (2.0,), (1.0,))
    _same(out, (24.0, 24.0))  # a·(2ay) = 2a²y: derivative 4ay
