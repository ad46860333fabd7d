"""Third and fourth derivatives through every derivative-table entry, by nesting forward mode.

The table gives each op's first and second derivatives; anything higher comes from running
those derivative expressions on dual numbers, so every function they call (digamma,
polygamma, the Bessel functions of neighbouring orders...) must itself be differentiable. Here,
for every entry, along a direction in all its differentiable inputs:

- f''' by ``jvp(jvp(jvp(f)))`` and f'''' by ``jvp(jvp(hvp))`` against finite differences of
  the next lower derivative (a five-point stencil), at points where the op is smooth.
"""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.rules.derivative_table import TABLE, load_scipy

load_scipy()  # the table's scipy.special section

# Points where every entry is smooth: inside (0, 1) suits the inverse functions (logit, ndtri,
# erfinv, arcsin...), away from 0 for the logs, reciprocals and |x|.
A = np.array([0.35, 0.6, 0.8])
B = np.array([0.45, 0.9, 1.4])
SPECIAL_POINTS = {"arccosh": (np.array([1.3, 1.7, 2.5]),),
                  "remainder": (A, B + 1.0), "fmod": (A, B + 1.0)}
H = 1e-3


def _points(entry):
    return SPECIAL_POINTS.get(entry.name, (A,) if entry.nin == 1 else (A, B))


def _along(entry):
    """(f(t), t0): the entry as a function of one array t along a fixed direction, and t0."""
    xs = _points(entry)
    uf = entry.ufunc
    if entry.nin == 1:
        return uf, xs[0]
    a, b = xs
    if entry.constant:  # an order (or gammainc's shape) stays a constant
        return (lambda t: uf(a, t)), b
    return (lambda t: uf(t, b + 0.7 * (t - a))), a


def _d(f):
    """t -> the elementwise derivative of f at t (f acts elementwise, so one jvp suffices)."""
    return lambda t: mp.jvp(f, (t,), (np.ones_like(t),))[1]


def _fd(f, t):
    return (-f(t + 2 * H) + 8 * f(t + H) - 8 * f(t - H) + f(t - 2 * H)) / (12 * H)


def _close(got, want, what):
    got, want = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    assert np.all(np.isfinite(want)), (what, want)  # the points must be smooth ones
    scale = max(1.0, float(np.max(np.abs(want))))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-7 * scale, err_msg=what)


@pytest.mark.parametrize("name", sorted(TABLE))
def test_third_and_fourth_derivatives_by_nested_forward_mode(name):
    entry = TABLE[name]
    f, t = _along(entry)
    d2 = _d(_d(f))
    d3 = _d(d2)
    with np.errstate(all="ignore"):
        _close(d3(t), _fd(d2, t), f"{name}: jvp(jvp(jvp(f))) vs finite differences of f''")
        # jvp over hvp: the Hessian of Σf is diagonal, so hvp with ones gives f'' elementwise
        hv = lambda s: mp.hvp(lambda u: np.sum(f(u)))(s, np.ones_like(s))  # noqa: E731
        _close(_d(hv)(t), d3(t), f"{name}: jvp(hvp) vs jvp(jvp(jvp(f)))")
        _close(_d(_d(hv))(t), _fd(d3, t), f"{name}: jvp(jvp(hvp)) vs finite differences of f'''")


def test_polygamma_derivatives_of_any_order():
    from mooncake_py.scipy import special
    import scipy.special as sps
    x = np.array([0.7, 1.5, 4.0])
    f = lambda t: special.polygamma(1, t)  # noqa: E731
    np.testing.assert_allclose(_d(_d(_d(f)))(x), sps.polygamma(4, x), rtol=1e-12)
    g = lambda t: sps.gammaln(t)  # noqa: E731
    np.testing.assert_allclose(_d(_d(_d(_d(g))))(x), sps.polygamma(3, x), rtol=1e-12)
