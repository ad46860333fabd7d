"""Rules and composites for NumPy functions (differences, convolution,
interpolation, sorting, construction, ufunc methods, rollaxis), checked with test_rule in every
mode (reverse, forward with lanes, forward-over-reverse), plus conventions at special points."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.errors import TrackingLostError, MutationError
from mooncake_py.testing import test_rule

rng = np.random.default_rng(7)


def r(*shape):
    return rng.standard_normal(shape)


x5, x6, x3, y3, y4 = r(5), r(6), r(3), r(3), r(4)
x34, x43, x234 = r(3, 4), r(4, 3), r(2, 3, 4)
x34_T = r(4, 3).T                     # non-contiguous
x8_step = r(16)[::2]                  # non-contiguous with a step
pos5 = np.array([0.1, 0.4, 0.5, 1.1, 2.0])
cum6 = np.cumsum(np.abs(r(6)) + 0.2)  # strictly increasing sample points


def pieces(fn):
    """``fn`` with its tuple of outputs returned as a dict (test_rule takes any pytree)."""
    def wrapped(*args, **kwargs):
        return dict(enumerate(fn(*args, **kwargs)))
    wrapped.__name__ = getattr(fn, "__name__", "pieces")
    return wrapped


def method(ufunc, name):
    def call(*args, **kwargs):
        return getattr(ufunc, name)(*args, **kwargs)
    call.__name__ = f"{ufunc.__name__}.{name}"
    return call


C = pytest.param

CASES = [
    # np.diff / np.ediff1d
    C(np.diff, (x6,), {}, id="diff"),
    C(np.diff, (x34,), {"n": 2, "axis": 0}, id="diff-n2-axis0"),
    C(np.diff, (x34_T, 1, -1), {}, id="diff-positional-noncontig"),
    C(np.diff, (x34,), {"n": 0}, id="diff-n0"),
    C(np.diff, (x6,), {"prepend": 0.5, "append": [1.0, 2.0]}, id="diff-prepend-append-const"),
    C(np.diff, (x34,), {"axis": 0, "prepend": y4[None]}, id="diff-prepend-array"),
    C(lambda x, p: np.diff(x, prepend=p, append=p), (x6, np.float64(0.3)), {},
      id="diff-tracked-prepend"),
    C(np.ediff1d, (x34,), {"to_begin": -1.0, "to_end": [2.0, 3.0]}, id="ediff1d"),
    # np.gradient
    C(np.gradient, (x6,), {}, id="gradient"),
    C(np.gradient, (x6, 0.3), {"edge_order": 2}, id="gradient-h-edge2"),
    C(np.gradient, (x6, cum6), {}, id="gradient-coordinates"),
    C(np.gradient, (x6, cum6), {"edge_order": 2}, id="gradient-coordinates-edge2"),
    C(lambda f, h: np.gradient(f, h, edge_order=2), (x6, cum6), {},
      id="gradient-tracked-coordinates"),
    C(lambda f, h: np.gradient(f, h, edge_order=2), (x6, np.arange(6.0)), {},
      id="gradient-tracked-even-coordinates"),
    C(pieces(np.gradient), (x34,), {}, id="gradient-all-axes"),
    C(pieces(np.gradient), (x34_T, 0.5, np.arange(4.0) ** 1.5), {}, id="gradient-2d-mixed"),
    C(np.gradient, (x234,), {"axis": -1, "edge_order": 2}, id="gradient-axis"),
    C(pieces(np.gradient), (x234, 2.0), {"axis": (0, 2)}, id="gradient-axes-tuple"),
    # np.trapezoid
    C(np.trapezoid, (x6,), {}, id="trapezoid"),
    C(np.trapezoid, (x34,), {"dx": 0.1, "axis": 0}, id="trapezoid-dx-axis"),
    C(np.trapezoid, (x34, cum6[:4]), {}, id="trapezoid-x"),
    C(np.trapezoid, (x34_T,), {"x": x34 ** 2, "axis": -1}, id="trapezoid-x-2d"),
    C(lambda y, x, dx: np.trapezoid(y, dx=dx) + np.trapezoid(y, x), (x5, pos5, 0.2), {},
      id="trapezoid-tracked-x-dx"),
    # np.cross
    C(np.cross, (x3, y3), {}, id="cross"),
    C(np.cross, (x43[:, :3], y3), {}, id="cross-broadcast"),
    C(np.cross, (x34, x34[::-1]), {"axisa": 0, "axisb": 0, "axisc": 0}, id="cross-axes"),
    C(np.cross, (x234[:, :, :3], x234[:, :, 1:]), {"axis": -1}, id="cross-axis"),
    # np.convolve / np.correlate
    C(np.convolve, (x6, y3), {}, id="convolve-full"),
    C(np.convolve, (x3, x6, "same"), {}, id="convolve-same-short-first"),
    C(np.convolve, (x8_step, y4), {"mode": "same"}, id="convolve-same-even"),
    C(np.convolve, (x6, y4), {"mode": "valid"}, id="convolve-valid"),
    C(np.convolve, (y4, x6), {"mode": "valid"}, id="convolve-valid-swapped"),
    C(np.correlate, (x6, y3), {}, id="correlate-valid"),
    C(np.correlate, (x6, y4, "full"), {}, id="correlate-full"),
    C(np.correlate, (y4, x6), {"mode": "same"}, id="correlate-same-short-first"),
    C(np.correlate, (x5, y3), {"mode": "same"}, id="correlate-same"),
    C(lambda a: np.convolve(a, [1.0, -2.0, 1.0], "same"), (x6,), {}, id="convolve-constant"),
    # np.interp
    C(np.interp, (np.linspace(-0.5, 3.0, 9), pos5, x5), {}, id="interp"),
    C(np.interp, (np.array([0.3, 1.5, 2.5]), cum6, x6), {"left": -1.0, "right": 2.0},
      id="interp-left-right"),
    C(np.interp, (r(2, 3) * 3, cum6, x6), {}, id="interp-2d-x"),
    C(np.interp, (r(8) * 4, pos5, x5), {"period": 2.5}, id="interp-period"),
    C(np.interp, (np.float64(0.45), pos5, x5), {}, id="interp-scalar"),
    # np.polyval
    C(np.polyval, (x3, x5), {}, id="polyval"),
    C(np.polyval, (x5, x34), {}, id="polyval-2d-x"),
    C(np.polyval, ([1.0, -2.0, 0.5], x8_step), {}, id="polyval-constant-p"),
    C(np.polyval, (x34[:, :1], y4), {}, id="polyval-column-p"),
    # polynomial arithmetic
    C(np.polyadd, (x3, y4), {}, id="polyadd"),
    C(np.polysub, (x5, y3), {}, id="polysub"),
    C(np.polysub, (x3, 2.0), {}, id="polysub-scalar"),
    C(np.polymul, (x3, y4), {}, id="polymul"),
    C(np.polyder, (x5,), {}, id="polyder"),
    C(np.polyder, (x5, 3), {}, id="polyder-m3"),
    C(np.polyint, (x3,), {}, id="polyint"),
    C(np.polyint, (x3, 2, [1.0, -2.0]), {}, id="polyint-m2-k"),
    C(np.polyint, (x3, 2, 0.5), {}, id="polyint-scalar-k"),
    # np.sinc (at 0 too)
    C(np.sinc, (np.array([-1.3, -0.5, 0.0, 0.2, 1e-3, 2.5]),), {}, id="sinc"),
    C(np.sinc, (x34_T,), {}, id="sinc-2d"),
    # ufunc.outer
    C(method(np.multiply, "outer"), (x3, y4), {}, id="multiply.outer"),
    C(method(np.add, "outer"), (x34, y3), {}, id="add.outer-2d"),
    C(method(np.subtract, "outer"), (x5, 0.3), {}, id="subtract.outer-scalar"),
    C(method(np.divide, "outer"), (x3, pos5), {}, id="divide.outer"),
    C(method(np.power, "outer"), (pos5, y3), {}, id="power.outer"),
    C(np.outer, (x3, x34), {}, id="outer-flattens"),
    # np.logaddexp.reduce / logaddexp2.reduce
    C(method(np.logaddexp, "reduce"), (x6,), {}, id="logaddexp.reduce"),
    C(method(np.logaddexp, "reduce"), (x234,), {"axis": 1, "keepdims": True},
      id="logaddexp.reduce-keepdims"),
    C(method(np.logaddexp, "reduce"), (x234,), {"axis": None}, id="logaddexp.reduce-all"),
    C(method(np.logaddexp, "reduce"), (x34_T, (0, 1)), {}, id="logaddexp.reduce-tuple"),
    C(method(np.logaddexp2, "reduce"), (x34,), {"axis": -1}, id="logaddexp2.reduce"),
    C(method(np.logaddexp, "reduce"), (x6,), {"initial": 0.5}, id="logaddexp.reduce-initial"),
    # np.partition / np.unique / np.sort and argsort gathers
    C(np.partition, (x6, 2), {}, id="partition"),
    C(np.partition, (x34_T, (0, 2)), {"axis": 0}, id="partition-kth-tuple"),
    C(np.partition, (x34, 5), {"axis": None}, id="partition-flat"),
    # (finite differences need distinct values: a tie is broken by any perturbation)
    C(np.unique, (x6,), {}, id="unique"),
    C(pieces(np.unique), (x34_T,), {"axis": 1, "return_counts": True, "return_inverse": True},
      id="unique-axis-counts"),
    C(np.sort, (x34_T,), {"axis": 0}, id="sort"),
    C(lambda x: np.take_along_axis(x, np.argsort(x, axis=0), axis=0), (x34,), {},
      id="take_along_axis-argsort"),
    C(np.unique_values, (x34,), {}, id="unique_values"),
    C(pieces(np.unique_all), (x6,), {}, id="unique_all"),
    C(pieces(np.unique_counts), (x34_T,), {}, id="unique_counts"),
    C(pieces(np.unique_inverse), (x6,), {}, id="unique_inverse"),
    # np.cov / np.corrcoef
    C(np.cov, (x34,), {}, id="cov"),
    C(np.cov, (x34_T,), {"rowvar": False, "bias": True}, id="cov-rowvar-bias"),
    C(np.cov, (x34, y4), {}, id="cov-y"),
    C(np.cov, (x5,), {"ddof": 0}, id="cov-1d"),
    C(np.cov, (x34,), {"fweights": [1, 2, 1, 3], "aweights": [0.5, 1.0, 2.0, 1.0]},
      id="cov-weights"),
    C(np.cov, (x34,), {"aweights": [0.5, 1.0, 2.0, 1.0], "ddof": 0}, id="cov-aweights-ddof0"),
    C(np.corrcoef, (x34,), {}, id="corrcoef"),
    C(np.corrcoef, (x5, pos5), {}, id="corrcoef-y"),
    C(np.corrcoef, (x5,), {}, id="corrcoef-single"),
    # construction
    C(np.linspace, (0.3, 2.0), {"num": 7}, id="linspace"),
    C(np.linspace, (x3, y3, 5), {"endpoint": False}, id="linspace-arrays-no-endpoint"),
    C(np.linspace, (x3, 1.5), {"num": 4, "axis": -1}, id="linspace-axis"),
    C(pieces(np.linspace), (0.1, x3), {"num": 4, "retstep": True}, id="linspace-retstep"),
    C(np.linspace, (0.1, 0.8, 1), {}, id="linspace-num1"),
    C(pieces(np.meshgrid), (x3, y4), {}, id="meshgrid"),
    C(pieces(np.meshgrid), (x3, y4, x5), {"indexing": "ij"}, id="meshgrid-ij-3d"),
    C(pieces(np.meshgrid), (x3, x8_step), {"sparse": True, "copy": False},
      id="meshgrid-sparse"),
    C(np.vander, (x5,), {}, id="vander"),
    C(np.vander, (np.array([0.0, 1.5, -2.0]), 4), {"increasing": True}, id="vander-at-zero"),
    C(np.select, ([x6 > 0.5, x6 < -0.5], [x6 ** 2, np.sin(x6)]), {}, id="select"),
    C(lambda x, d: np.select([x > 0], [x], d), (x34, y4), {}, id="select-tracked-default"),
    C(np.piecewise, (x6, [x6 < 0, x6 > 1], [np.sin, np.cos, lambda v: v ** 3]), {},
      id="piecewise-otherwise"),
    C(np.piecewise, (x34, [x34 > 0], [lambda v, a: a * v, 0.5], 2.0), {}, id="piecewise-const"),
    C(np.piecewise, (np.float64(0.3), [True, False], [np.exp, np.log]), {}, id="piecewise-0d"),
    # (infinities replaced by ±finfo.max would overflow the finite differences' products)
    C(np.nan_to_num, (np.array([1.0, np.nan, -0.5, 2.0]),), {}, id="nan_to_num"),
    C(np.nan_to_num, (np.array([np.nan, 0.5, np.inf]),),
      {"nan": 1.0, "posinf": 9.0, "neginf": -9.0}, id="nan_to_num-keywords"),
    C(lambda w: np.bincount(np.array([0, 2, 2, 5, 0, 1]), weights=w), (x6,), {},
      id="bincount"),
    C(np.bincount, (np.array([1, 1, 0]), x3, 6), {}, id="bincount-minlength"),
    C(np.append, (x34, y4[None]), {"axis": 0}, id="append-axis"),
    C(np.append, (x3, 2.0), {}, id="append-flat"),
    # axis functions
    C(np.rollaxis, (x234, 2), {}, id="rollaxis"),
    C(np.rollaxis, (x234, 0, 3), {}, id="rollaxis-start-end"),
    C(np.rollaxis, (x234, -1, -2), {}, id="rollaxis-negative"),
    C(np.matrix_transpose, (x234,), {}, id="matrix_transpose"),
    C(np.moveaxis, (x234, (0, 2), (1, 0)), {}, id="moveaxis"),
    C(np.swapaxes, (x234, 0, -1), {}, id="swapaxes"),
    C(np.flip, (x234,), {"axis": (0, 2)}, id="flip"),
    C(np.roll, (x34, 2), {"axis": 1}, id="roll"),
    C(np.cumsum, (x34,), {"axis": 0}, id="cumsum"),
    C(np.cumulative_sum, (x6,), {}, id="cumulative_sum"),
    C(np.cumulative_sum, (x34_T,), {"axis": 0, "include_initial": True},
      id="cumulative_sum-initial"),
    C(np.cumulative_prod, (x34 + 2,), {"axis": -1, "include_initial": True},
      id="cumulative_prod"),
    C(np.cumprod, (x34 + 2,), {"axis": 1}, id="cumprod"),
]


@pytest.mark.parametrize("fn, args, kwargs", CASES)
def test_rule_table(fn, args, kwargs, debug_mode):
    test_rule(fn, *args, **kwargs)


def test_sinc_derivatives_at_zero_are_the_limits():
    # sinc'(0) = 0 and sinc''(0) = -π²/3: not the 0/0 of the closed forms
    g = mp.grad(lambda x: np.sum(np.sinc(x)))(np.zeros(2))
    h = mp.hessian(lambda x: np.sinc(x[0]))(np.zeros(1))
    assert np.array_equal(g, [0.0, 0.0])
    assert np.isclose(h[0, 0], -np.pi ** 2 / 3, rtol=1e-12)


def test_sinc_third_derivative_by_jvp_of_hvp():
    x0 = np.array([0.0, 0.7])
    _, third = mp.jvp(lambda x: mp.hvp(lambda z: np.sum(np.sinc(z)))(x, np.ones(2)),
                      (x0,), (np.ones(2),))
    u = np.pi * 0.7
    f3 = (-np.cos(u) - 3 * ((-np.sin(u) - 2 * (np.cos(u) - np.sin(u) / u) / u) / u)) / u
    assert np.allclose(third, [0.0, np.pi ** 3 * f3], rtol=1e-9, atol=1e-12)


def test_sinc_float32_stays_float32():
    x = np.array([0.0, 0.3], dtype=np.float32)
    assert mp.grad(lambda x: np.sum(np.sinc(x)))(x).dtype == np.float32


def test_nan_to_num_derivative_is_zero_where_replaced():
    x = np.array([np.nan, 2.0, np.inf])
    g = mp.grad(lambda x: np.sum(3 * np.nan_to_num(x, posinf=7.0)))(x)
    assert np.array_equal(g, [0.0, 3.0, 0.0])


def test_unique_derivative_goes_to_first_occurrence():
    x = np.array([2.0, -1.0, 2.0, 0.5])
    g = mp.grad(lambda x: np.sum(np.unique(x) * np.array([1.0, 10.0, 100.0])))(x)
    assert np.array_equal(g, [100.0, 1.0, 0.0, 10.0])


def test_unique_constant_outputs_are_numpys():
    x = np.array([3.0, 1.0, 3.0])
    with mp.Tape() as tape:
        t = tape.track(x)
        vals, index, inverse, counts = np.unique(t, return_index=True, return_inverse=True,
                                                 return_counts=True)
    want = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    for got, w in zip((index, inverse, counts), want[1:]):
        assert np.array_equal(got, w)


def test_interp_derivative_in_x_is_the_segment_slope_and_zero_outside():
    xp, fp = np.array([0.0, 1.0, 3.0]), np.array([0.0, 2.0, 3.0])
    g = mp.grad(lambda x: np.sum(np.interp(x, xp, fp)))(np.array([-1.0, 0.5, 2.0, 4.0]))
    assert np.array_equal(g, [0.0, 2.0, 0.5, 0.0])


def test_interp_derivative_in_xp():
    x, fp = np.array([0.2, 1.7]), np.array([1.0, -1.0, 4.0, 0.5])
    test_rule(lambda xp: np.interp(x, xp, fp), np.array([0.0, 0.5, 1.5, 2.0]))


def test_full_and_index_tricks_raise_named_errors():
    x = np.array([1.0, 2.0])
    for f, says in ((lambda x: np.full(3, x[0]), "np.full_like"),
                    (lambda x: np.r_[x, x], "np.concatenate"),
                    (lambda x: np.c_[x, x], "np.column_stack")):
        with pytest.raises(TrackingLostError, match=says):
            mp.grad(lambda x: np.sum(f(x)))(x)
        with pytest.raises(TrackingLostError, match=says):
            mp.jvp(f, (x,), (x,))
    # the differentiable spellings
    g = mp.grad(lambda x: np.sum(np.full_like(x, x[0], shape=(3,))))(x)
    assert np.array_equal(g, [3.0, 0.0])


def test_logaddexp_reduce_out_is_refused():
    with pytest.raises(MutationError):
        mp.grad(lambda x: np.logaddexp.reduce(x, out=np.empty(())))(np.ones(3))


def test_logaddexp_reduce_hessian_is_softmax_curvature():
    x = np.array([0.3, -1.0, 2.0])
    p = np.exp(x) / np.sum(np.exp(x))
    h = mp.hessian(lambda x: np.logaddexp.reduce(x))(x)
    assert np.allclose(h, np.diag(p) - np.outer(p, p), rtol=1e-12, atol=1e-14)


def test_partition_kth_value_gets_the_derivative():
    x = np.array([3.0, 1.0, 4.0, 1.5, 5.0])
    g = mp.grad(lambda x: np.partition(x, 2)[2])(x)
    assert np.array_equal(g, [1.0, 0.0, 0.0, 0.0, 0.0])


@pytest.mark.parametrize("f", [
    lambda x: np.gradient(x, np.arange(6.0) ** 1.2, edge_order=2),
    lambda x: np.select([x > 1], [x], 0),
    lambda x: np.convolve(x, np.ones(3, np.float32), "same"),
    lambda x: np.logaddexp2.reduce(x),
    lambda x: np.linspace(x[0], x[1], 4),
    lambda x: np.polyval(x[:3], x),
    lambda x: np.cross(x[:3], x[3:]),
    lambda x: np.trapezoid(x, dx=np.float32(0.5)),
], ids=["gradient", "select", "convolve", "logaddexp2.reduce", "linspace", "polyval", "cross",
        "trapezoid"])
def test_float32_stays_float32(f):
    x = np.linspace(0.1, 2.0, 6, dtype=np.float32)
    want = f(x).dtype
    y, ydot = mp.jvp(f, (x,), (x,))
    assert want == np.float32 and y.dtype == want and ydot.dtype == want
    assert mp.grad(lambda x: np.sum(f(x)))(x).dtype == np.float32


def test_vander_derivative_at_zero_is_finite():
    g = mp.grad(lambda x: np.sum(np.vander(x, 4)))(np.zeros(2))
    h = mp.hessian(lambda x: np.sum(np.vander(x, 4)))(np.zeros(2))
    assert np.array_equal(g, [1.0, 1.0]) and np.array_equal(h, 2 * np.eye(2))
