"""Property tests: random compositions of ops, every mode against every other and against finite
differences.

A program is a random expression over a vector ``x`` of length N: elementwise unary and binary
ops (including powers with integer exponents, at points that include exact zeros), reductions
broadcast back, a matrix product, fancy and reversed indexing, and (in the complex variant)
complex intermediates with real results. For each drawn program and point:

- ``grad`` matches central finite differences of ``f``;
- ``jvp`` along a random ``v`` equals ``grad · v``;
- ``hvp`` equals central finite differences of ``grad`` along ``v``, and ``jvp(grad)``;
- the fused numba kernels give what the NumPy composition gives;
- at kinks, ties and zero vectors (abs, maximum, clip, where, norm...), where no finite
  difference applies, forward and reverse mode agree entry by entry, to second order.
"""
import warnings

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st, HealthCheck  # noqa: E402

import mooncake_py as mp  # noqa: E402
from mooncake_py.dual import elementwise as ew

N = 3
A = np.array([[0.5, -1.0, 0.25], [0.0, 0.75, -0.5], [1.0, 0.2, 0.3]])
PERM = np.array([2, 0, 1, 0])  # repeated index: cotangents must accumulate

# name -> function of one (N,)-vector, smooth everywhere (kinks are tested in test_conventions)
UNARY = {
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "exp(-v*v)": lambda v: np.exp(-v * v),
    "log1p(v*v)": lambda v: np.log1p(v * v),
    "sqrt(v*v+1)": lambda v: np.sqrt(v * v + 1.0),
    "v**0": lambda v: v ** 0,
    "v**1": lambda v: v ** 1,
    "v**2": lambda v: v ** 2,
    "v**3": lambda v: v ** 3,
    "v**[0,1,2]": lambda v: v ** np.arange(N),
    "float_power(v,2)": lambda v: np.float_power(v, 2.0),
    "square": np.square,
    "-v": np.negative,
    "A@v": lambda v: A @ v,
    "v[::-1]": lambda v: v[::-1],
    "sum": lambda v: np.sum(v) * np.ones(N),
    "prod": lambda v: np.prod(v) * np.ones(N),
    "mean(v[perm])": lambda v: np.mean(v[PERM]) + 0 * v,
    "cumsum": np.cumsum,
    "v[1]": lambda v: v[1] * np.ones(N),
}
BINARY = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/(1+b*b)": lambda a, b: a / (1.0 + b * b),
    "a*b**2": lambda a, b: a * b ** 2,
    "hypot(a,b+2)": lambda a, b: np.hypot(a, np.sqrt(b * b + 4.0)),
    "stack": lambda a, b: np.stack([a, b])[1] * np.stack([a, b])[0],
}
# complex intermediates, real results, smooth for real input
COMPLEX = {
    "|v(1+2j)+3|": lambda v: np.abs(v * (1 + 2j) + 3),
    "Re(e^iv(2-j))": lambda v: np.real(np.exp(1j * v) * (2 - 1j)),
    "|v+j|^2": lambda v: np.abs(v + 1j) ** 2,
    "angle(v+2j)": lambda v: np.angle(v + 2j),
    "Im((v+j)^2)": lambda v: np.imag((v + 1j) ** 2),
}


def programs(unary, depth=3):
    """A strategy of (description, function of x) built from ``unary`` and BINARY."""
    leaf = st.just(("x", lambda x: x))

    def extend(children):
        u = st.tuples(st.sampled_from(sorted(unary)), children).map(
            lambda t: (f"{t[0]}({t[1][0]})", lambda x, f=unary[t[0]], g=t[1][1]: f(g(x))))
        b = st.tuples(st.sampled_from(sorted(BINARY)), children, children).map(
            lambda t: (f"({t[1][0]} {t[0]} {t[2][0]})",
                       lambda x, f=BINARY[t[0]], g=t[1][1], h=t[2][1]: f(g(x), h(x))))
        return st.one_of(u, u, b)
    return st.recursive(leaf, extend, max_leaves=depth + 2)


# points with exact zeros (zero bases of the powers) and moderate values
# Exact zeros, else |x| >= 1e-3: np.prod's rules divide the product by the entries, which
# overflows (1/5e-324) or loses the product to underflow (1e-238²) for tiny entries.
points = st.lists(st.one_of(st.just(0.0), st.floats(1e-3, 1.5), st.floats(-1.5, -1e-3)),
                  min_size=N, max_size=N).map(np.array)
directions = st.lists(st.floats(-1, 1, allow_nan=False), min_size=N, max_size=N).map(np.array)


def _objective(prog):
    _, g = prog
    return lambda x: np.sum(g(x) * np.array([1.0, -0.5, 0.25]))  # weights: no symmetric luck


def _fd(fn, x, v, h=1e-6):
    return (fn(x + h * v) - fn(x - h * v)) / (2 * h)


def _close(got, want, what, prog, scale):
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6 * scale,
                               err_msg=f"{what} of {prog[0]}")


def _check(prog, x, v):
    f = _objective(prog)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        y = f(x)
        hypothesis.assume(np.isfinite(y) and abs(y) < 1e4)
        # only the finite differences decide what is out of range: a nan or inf from a mode
        # where the function is smooth is a failure, never filtered out
        fd = np.array([_fd(f, x, e) for e in np.eye(N)])
        hypothesis.assume(np.all(np.isfinite(fd)) and np.max(np.abs(fd)) < 1e4)
        scale = 1.0 + np.max(np.abs(fd))
        g = mp.grad(f)(x)
        _close(g, fd, "grad vs finite differences", prog, scale)
        _, t = mp.jvp(f, (x,), (v,))
        _close(t, g @ v, "jvp vs grad·v", prog, scale)
        hv = mp.hvp(f)(x, v)
        fdh = _fd(mp.grad(f), x, v, h=1e-5)
        hscale = 1.0 + np.max(np.abs(fdh))
        hypothesis.assume(hscale < 1e4)
        np.testing.assert_allclose(hv, fdh, rtol=1e-4, atol=1e-5 * hscale,
                                   err_msg=f"hvp vs finite differences of grad of {prog[0]}")
        _, jg = mp.jvp(mp.grad(f), (x,), (v,))
        np.testing.assert_allclose(jg, hv, rtol=1e-12, atol=1e-12 * hscale,
                                   err_msg=f"jvp(grad) vs hvp of {prog[0]}")


SETTINGS = dict(max_examples=100, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])


@settings(**SETTINGS)
@given(programs(UNARY), points, directions)
def test_real_compositions_agree_in_every_mode(prog, x, v):
    _check(prog, x, v)


@settings(**SETTINGS)
@given(programs({**UNARY, **COMPLEX}), points, directions)
def test_compositions_with_complex_intermediates(prog, x, v):
    _check(prog, x, v)


@settings(**dict(SETTINGS, max_examples=25))
@given(programs(UNARY, depth=2), points, directions)
def test_fused_kernels_agree_with_the_numpy_composition(prog, x, v):
    f = _objective(prog)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        plain = mp.hvp(f)(x, v), mp.jvp(f, (x,), (v,))[1]
        old = ew.KERNEL_MIN_SIZE
        ew.KERNEL_MIN_SIZE = 0  # every elementwise frule through the generated numba loops
        try:
            fused = mp.hvp(f)(x, v), mp.jvp(f, (x,), (v,))[1]
        finally:
            ew.KERNEL_MIN_SIZE = old
    for a, b in zip(plain, fused):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12 * (1 + np.max(np.abs(a))),
                                   err_msg=prog[0])


# kinks, ties and zero vectors: no finite-difference oracle there, but the modes must agree
KINKY = {
    **UNARY,
    "abs": np.abs,
    "max(v,v[::-1])": lambda v: np.maximum(v, v[::-1]),
    "min(v,0)": lambda v: np.minimum(v, 0.0),
    "clip": lambda v: np.clip(v, -0.5, 0.5),
    "where": lambda v: np.where(v > 0, v, 2 * v),
    "norm": lambda v: np.linalg.norm(v) * np.ones(N),
    "hypot(v,v[::-1])": lambda v: np.hypot(v, v[::-1]),
    "max": lambda v: np.max(v) * np.ones(N),
}
kink_points = st.lists(st.sampled_from([0.0, 0.25, 0.5, -0.5, 1.0, -1.0]),
                       min_size=N, max_size=N).map(np.array)


@settings(**dict(SETTINGS, max_examples=80))
@given(programs(KINKY, depth=4), kink_points)
def test_forward_and_reverse_agree_at_kinks_and_ties(prog, x):
    f = _objective(prog)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        g = mp.grad(f)(x)
        j = np.array([mp.jvp(f, (x,), (e,))[1] for e in np.eye(N)])
        np.testing.assert_allclose(j, g, rtol=1e-12, atol=1e-12, err_msg=prog[0])
        H = mp.hessian(f)(x)
        J = np.array([mp.jvp(mp.grad(f), (x,), (e,))[1] for e in np.eye(N)])
        np.testing.assert_allclose(J, H, rtol=1e-12, atol=1e-12, err_msg=prog[0])
