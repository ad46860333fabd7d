"""DualArray and the forward dispatch: wrapping, tags and nesting, lanes, the rule conventions,
errors, the provisional core rules, and second order by composition (a tape over duals)."""
import operator

import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.config import Config
from mooncake_py.core.dispatch import WRAPPER_TYPES
from mooncake_py.dual import DualArray, dual, primal, tangent, elementwise as ew
from mooncake_py.dual import core_rules, kernels_cpu, lean
from mooncake_py.dual.seeding import seed
from mooncake_py.errors import MissingRuleError, MutationError, NonDifferentiableInputError, RuleError, TangentError, TrackingLostError
from mooncake_py.transforms.forward import jvp
from mooncake_py.rules import lanes as L
from mooncake_py.rules.cotangents import scatter_add
from mooncake_py.rules.registry import FRULES, FRULE_LANES, frule, primitive
from mooncake_py.core.array_ops import astype
from mooncake_py.tape import Tape
from mooncake_py.testing import test_rule

ALL = ("reverse", "forward", "forward_over_reverse")


# --- the wrapper ------------------------------------------------------------------------------
def test_dual_is_a_wrapper_and_ops_return_duals():
    d = dual(np.array([0.5, 1.0]), np.array([1.0, 2.0]))
    assert DualArray in WRAPPER_TYPES and isinstance(d._mc_level(), int)
    y = 2.0 * d + d ** 2 - np.exp(d) / 3.0
    assert type(y) is DualArray
    np.testing.assert_allclose(tangent(y), (2 + 2 * primal(d) - np.exp(primal(d)) / 3) *
                               np.array([1.0, 2.0]), rtol=1e-14)
    assert type(d > 0.7) is np.ndarray and (d > 0.7).tolist() == [False, True]
    assert d.shape == (2,) and d.dtype == np.float64 and len(d) == 2
    assert type(np.ones_like(d)) is DualArray and type(np.argmax(d)) is not DualArray


def test_constants_and_other_values_give_plain_results():
    d = dual(np.ones(3), np.ones(3))
    z = np.zeros_like(d)  # a buffer dual values can be written into: zero tangent
    assert type(z) is DualArray and not np.any(tangent(z))
    assert type(mp.stop_gradient(d) * 2.0) is np.ndarray


@pytest.mark.parametrize("convert", [np.asarray, float, lambda d: d.item(), lambda d: d.tolist()])
def test_conversion_to_plain_numbers_is_refused(convert):
    d = dual(np.array(1.5), np.array(1.0))
    with pytest.raises(TrackingLostError, match="dual value"):
        convert(d)


def test_writes_and_out_arguments_write_in_place():
    d = dual(np.ones(3), np.ones(3))
    d[0] = 2.0
    np.testing.assert_array_equal(primal(d), [2.0, 1.0, 1.0])
    np.testing.assert_array_equal(tangent(d), [0.0, 1.0, 1.0])
    with pytest.raises(TrackingLostError, match="plain NumPy array"):
        np.sin(d, out=np.empty(3))


def test_missing_rule_names_function_mode_and_decorator():
    @primitive
    def mystery(x):
        return np.asarray(x) * 2  # a body forward mode cannot trace
    with pytest.raises(MissingRuleError) as e:
        mystery(dual(np.ones(2), np.ones(2)))
    msg = str(e.value)
    assert "forward-mode rule (frule)" in msg and "mystery" in msg
    assert "@mp.frule(" in msg and "lanes=True" in msg and "zero_derivative" in msg
    assert "through its body" in msg and isinstance(e.value.__cause__, TrackingLostError)
    with pytest.raises(MissingRuleError, match="frule"):  # not a primitive: nothing to trace
        np.unwrap(dual(np.ones(2), np.ones(2)))


def test_primitive_without_frule_is_differentiated_through_its_body():
    @primitive
    def softplus(x):
        return np.log1p(np.exp(x))

    @mp.rrule(softplus)
    def _(x):
        return softplus(x), lambda g: (g / (1 + np.exp(-x)),)
    x = np.linspace(-2, 2, 5)
    _, d = jvp(softplus, (x,), (np.ones(5),))
    np.testing.assert_allclose(d, 1 / (1 + np.exp(-x)), rtol=1e-14)


# --- tags, nesting --------------------------------------------------------------------------------
def test_nested_jvp_has_no_perturbation_confusion():
    # d/dx [x * d/dy (x + y)] = d/dx [x] = 1; confusing the tags would give 2.
    def inner(x):
        return x * jvp(lambda y: x + y, (1.0,), (1.0,))[1]
    assert jvp(inner, (2.0,), (1.0,))[1] == 1.0

    # d/dx [x * d/dy (x * y)] = d/dx [x * x] = 2x
    def inner2(x):
        return x * jvp(lambda y: x * y, (3.0,), (1.0,))[1]
    assert jvp(inner2, (2.0,), (1.0,))[1] == 4.0


def test_second_derivative_by_forward_over_forward():
    def df(x):
        return jvp(lambda z: np.sin(z) * z, (x,), (np.ones_like(x),))[1]
    x = np.linspace(-1, 1, 5)
    _, d2 = jvp(df, (x,), (np.ones(5),))
    np.testing.assert_allclose(d2, 2 * np.cos(x) - x * np.sin(x), rtol=1e-13)


def test_like_shares_a_tag():
    a = dual(np.ones(2), np.array([1.0, 0.0]))
    b = dual(np.full(2, 3.0), np.array([0.0, 1.0]), like=a)
    np.testing.assert_array_equal(tangent(a * b), [3.0, 1.0])
    c = dual(np.full(2, 3.0), np.array([0.0, 1.0]))  # its own tag: nested, not shared
    assert type(a * c) is DualArray and type(primal(a * c)) is DualArray


# --- lanes and the rule conventions ---------------------------------------------------------
def test_lanes_equal_one_direction_at_a_time():
    rng = np.random.default_rng(0)
    x, V = rng.uniform(0.5, 2, (4, 3)), rng.standard_normal((5, 4, 3))
    w = rng.standard_normal(3)

    def f(x):
        return np.sum(np.tanh(x * w) ** 2, axis=0) / np.log(x[0] + 2.0)
    _, lanes = jvp(f, (x,), (V,), lanes=True)
    for l in range(5):
        np.testing.assert_allclose(lanes[l], jvp(f, (x,), (V[l],))[1], rtol=1e-13)


def _cube_primitive():
    @primitive
    def cube(x):
        return x ** 3
    return cube


@pytest.mark.parametrize("lane_aware", [False, True])
@pytest.mark.parametrize("k", [0, 3])
def test_single_direction_and_lane_aware_rules(lane_aware, k):
    cube, seen = _cube_primitive(), []

    @frule(cube, lanes=lane_aware)
    def _(primals, tangents):
        (x,), (dx,) = primals, tangents
        seen.append(np.shape(dx))
        return cube(x), 3 * x ** 2 * dx
    assert (cube in FRULE_LANES) == lane_aware
    x = np.array([1.0, 2.0])
    v = np.ones((k, 2)) if k else np.ones(2)
    y, dy = jvp(cube, (x,), (v,), lanes=bool(k))
    np.testing.assert_allclose(dy, np.broadcast_to(3 * x ** 2, v.shape))
    if lane_aware:  # always one call, always a lane axis
        assert seen == [(k or 1, 2)]
    else:  # one call per lane, never a lane axis
        assert seen == [(2,)] * (k or 1)


def test_debug_mode_catches_a_wrongly_shaped_tangent():
    cube = _cube_primitive()

    @frule(cube)
    def _(primals, tangents):
        return cube(primals[0]), np.sum(tangents[0])
    with Config(debug_mode=True):
        with pytest.raises(RuleError, match="tangent of shape"):
            cube(dual(np.ones(3), np.ones(3)))


def test_keyword_dual_is_moved_to_its_positional_slot():
    x, lo = dual(np.linspace(-2, 2, 5), np.ones(5)), None
    lo = dual(np.float64(-1.0), np.float64(5.0), like=x)
    y = np.clip(x, a_min=lo, a_max=1.0)
    np.testing.assert_array_equal(tangent(y), [5.0, 1.0, 1.0, 1.0, 0.0])


def test_tangent_of_plain_values():
    assert tangent(np.ones(2)).tolist() == [0.0, 0.0] and tangent(np.arange(2)) is None
    assert primal(3.0) == 3.0


@pytest.mark.parametrize("make,err", [
    (lambda: dual(np.ones(3), np.ones(4)), TangentError),
    (lambda: dual(np.ones(3), np.ones((2, 3))), TangentError),
    (lambda: dual(np.ones(3, dtype=np.float32), np.ones(3)), TangentError),
    (lambda: dual(np.ones(3), np.ones(3, dtype=int)), TangentError),
    (lambda: dual(np.arange(3), np.ones(3)), NonDifferentiableInputError),
    (lambda: dual(np.ones(3), np.ones(3), lanes=True), TangentError),
    (lambda: dual(np.ones(3), np.float64(1.0), lanes=True), TangentError),
])
def test_bad_tangents_are_refused(make, err):
    with pytest.raises(err):
        make()


# --- lane helpers -------------------------------------------------------------------------------
@pytest.mark.parametrize("key", [
    1, (slice(1, 3), 0), (Ellipsis, 1), (None, 0), np.array([2, 0, 2]),
    (np.array([0, 1]), slice(None), np.array([1, 0])),          # non-adjacent advanced indices
    (0, slice(None), np.array([1, 0])),                         # int + array: advanced too
    (Ellipsis, np.array([1, 1])), np.ones((3, 4, 2), bool) * [True, False],
    (slice(None), np.array([[0, 1], [2, 3]]))])
def test_lane_getitem_equals_indexing_each_lane(key):
    t = np.random.default_rng(0).standard_normal((3, 3, 4, 2))
    got = L.lane_getitem(t, key, 3)
    np.testing.assert_array_equal(got, np.stack([t[l][key] for l in range(3)]))


@pytest.mark.parametrize("sa,sb", [((4,), (4,)), ((3, 4), (4,)), ((4,), (4, 5)), ((3, 4), (4, 5)),
                                   ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)), ((4,), (2, 4, 5)),
                                   ((2, 3, 4), (4,))])
@pytest.mark.parametrize("first", [True, False])
def test_lane_matmul_equals_matmul_of_each_lane(sa, sb, first):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    t = rng.standard_normal((3,) + (sa if first else sb))
    got = L.lane_matmul(t, b, True) if first else L.lane_matmul(a, t, False)
    want = np.stack([t[l] @ b if first else a @ t[l] for l in range(3)])
    np.testing.assert_allclose(got, want, rtol=1e-13)


def test_shift_axis_and_align():
    assert L.shift_axis(None, 3) == (1, 2, 3) and L.shift_axis(-1, 3) == 3
    assert L.shift_axis((0, -2), 3) == (1, 2)
    assert L.align(np.ones((2, 5)), 3).shape == (2, 1, 1, 5)


# --- the sweep's core rules (forward, reverse and forward-over-reverse) ------------------
X = np.linspace(-1.3, 1.7, 12).reshape(3, 4)


@pytest.mark.parametrize("fn,args,kw", [
    (scatter_add, ((3, 4), (1, slice(None)), np.arange(4.0)), {}),
    (scatter_add, ((5,), np.array([0, 2, 0]), np.array([1.0, 2.0, 3.0])), {}),
    (scatter_add, ((3, 4), (Ellipsis, np.array([1, 1])), np.ones((3, 2))), {}),
    (astype, (X, np.float32), {}),
    (np.where, (X > 0, X, -2.0 * X[0]), {}),
    (np.where, (X > 0, 1.5, X), {}),
    (np.clip, (X, -0.5, 0.9), {}),
    (np.clip, (X, np.full(4, -0.4), None), {}),
])
def test_core_rules(fn, args, kw):
    def f(*a):
        return fn(*a, **kw)
    f.__name__ = getattr(fn, "__name__", "fn")
    # scatter_add is the sweep's own primitive: it needs no reverse rule
    modes = ("forward",) if fn is scatter_add else ALL
    test_rule(f, *args, modes=modes, rtol=1e-4 if fn is astype else None,
              atol=1e-4 if fn is astype else None)


def test_each_forward_rule_is_registered_once_in_its_family_file():
    # the sweep's own helpers live in dual/core_rules.py; every other frule beside its rrule
    for fn in (scatter_add, astype, np.where, np.clip):
        assert FRULES[fn].__module__ == core_rules.__name__
    for fn, family in [(operator.getitem, "indexing"), (np.sum, "reductions"),
                       (np.matmul, "linear_algebra"), (np.reshape, "shape")]:
        assert FRULES[fn].__module__ == f"mooncake_py.rules.{family}"


# --- second order by composition: a tape over duals -----------------------------------------------
def hvp(f, x, v, lanes=False):
    d = dual(x, v, lanes=lanes)
    tape = Tape()
    xt = tape.track(d)
    y = f(xt)
    g, = tape.gradient(y, [xt])
    return primal(g), tangent(g)


def _f_sin(x):
    return np.sum(np.sin(x) * x ** 2)


def _h_sin(x):
    return np.diag(-np.sin(x) * x ** 2 + 4 * x * np.cos(x) + 2 * np.sin(x))


W = np.random.default_rng(3).standard_normal((4, 6))


def _f_mlp(x):
    return np.sum(np.tanh(W @ x))


def _h_mlp(x):
    t = np.tanh(W @ x)
    return W.T @ np.diag(-2 * t * (1 - t * t)) @ W


def _f_loop(x):
    s = 0.0
    for i in range(len(x)):
        s = s + x[i] * x[i]
    return s


def _h_loop(x):
    return 2 * np.eye(len(x))


def _f_quad(x):  # matmul both sides, reshape and transpose inside
    A = np.reshape(x, (2, 3))
    return np.sum((A.T @ A) ** 2)


def _h_quad(x):
    h, e = np.zeros((6, 6)), 1e-5
    for j in range(6):
        d = np.zeros(6)
        d[j] = e
        h[:, j] = (mp.grad(_f_quad)(x + d) - mp.grad(_f_quad)(x - d)) / (2 * e)
    return h


@pytest.mark.parametrize("f,H", [(_f_sin, _h_sin), (_f_mlp, _h_mlp), (_f_loop, _h_loop),
                                 (_f_quad, _h_quad)], ids=["sin_x2", "tanh_Wx", "loop", "quad"])
@pytest.mark.parametrize("fused", [False, True])
def test_hessian_vector_products_by_composition(monkeypatch, f, H, fused):
    monkeypatch.setattr(ew, "KERNEL_MIN_SIZE", 0 if fused else 10 ** 9)
    rng = np.random.default_rng(4)
    x, v = rng.uniform(-1, 1, 6), rng.standard_normal(6)
    g, hv = hvp(f, x, v)
    np.testing.assert_allclose(g, mp.grad(f)(x), rtol=1e-12)
    rtol = 1e-6 if f is _f_quad else 1e-12
    np.testing.assert_allclose(hv, H(x) @ v, rtol=rtol, atol=1e-12 if rtol < 1e-6 else 1e-6)
    V = rng.standard_normal((3, 6))
    _, HV = hvp(f, x, V, lanes=True)
    np.testing.assert_allclose(HV, V @ H(x).T, rtol=rtol, atol=1e-12 if rtol < 1e-6 else 1e-6)


def test_hvp_by_composition_keeps_float32():
    x = np.linspace(-1, 1, 5, dtype=np.float32)
    g, hv = hvp(_f_sin, x, np.ones(5, dtype=np.float32))
    assert g.dtype == hv.dtype == np.float32
    np.testing.assert_allclose(hv, _h_sin(x.astype(float)) @ np.ones(5), rtol=1e-5)


def test_jvp_of_grad_is_an_hvp():
    x, v = np.linspace(-1, 1, 6), np.arange(6.0)
    g, hv = jvp(mp.grad(_f_mlp), (x,), (v,))
    np.testing.assert_allclose(g, mp.grad(_f_mlp)(x), rtol=1e-13)
    np.testing.assert_allclose(hv, _h_mlp(x) @ v, rtol=1e-12)


def test_reverse_over_forward_composes_too():
    # grad of a directional derivative: a tape outside, a dual inside
    x, v = np.linspace(-1, 1, 6), np.arange(6.0)
    g = mp.grad(lambda x: jvp(_f_mlp, (x,), (v,))[1])(x)
    np.testing.assert_allclose(g, _h_mlp(x) @ v, rtol=1e-12)


def test_fused_pullback_accepts_a_broadcast_cotangent(monkeypatch):
    # the first pullback after a sum gets a zero-stride view of the seed: passed as a number
    monkeypatch.setattr(ew, "KERNEL_MIN_SIZE", 0)
    x, v = np.linspace(-1, 1, 50), np.ones(50)
    g, hv = hvp(lambda x: np.sum(np.tanh(x)), x, v)
    t = np.tanh(x)
    np.testing.assert_allclose(hv, -2 * t * (1 - t * t), rtol=1e-13)
    assert any("tanh_pullback0_01_float64_sg" in k.__name__
               for k in kernels_cpu.loaded_kernels().values())


@pytest.mark.parametrize("lanes", [False, True])
def test_tangent_of_the_smaller_operand_is_widened_to_the_output(lanes):
    # c - s with c a (3, 4) constant and s a (1, 1) dual: the tangent has the output's shape
    x = np.arange(3.0)
    v = np.stack([x, 2 * x]) if lanes else x
    _, dy = mp.jvp(lambda x: np.ones((3, 4)) - np.sum(x, keepdims=True), (x,), (v,), lanes=lanes)
    want = -np.sum(v, axis=-1)[..., None, None] * np.ones((3, 4))
    assert dy.shape == want.shape
    np.testing.assert_array_equal(dy, want)


# --- seeding plain real arrays: the short path equals the general one --------------------------
@pytest.mark.parametrize("borrow", [False, True])
@pytest.mark.parametrize("lanes", [0, 3])
def test_seed_plain_arrays_like_nested_ones(borrow, lanes):
    rng = np.random.default_rng(0)
    x = [rng.standard_normal((4, 3)).astype(dt) for dt in (np.float64, np.float32)]
    v = [rng.standard_normal(((lanes,) if lanes else ()) + a.shape).astype(a.dtype) for a in x]
    tag, flat = seed(print, tuple(x), tuple(v), bool(lanes), borrow=borrow)
    _, nested = seed(print, ((x[0],), (x[1],)), ((v[0],), (v[1],)), bool(lanes),
                        borrow=borrow)
    for d, (d2,), a, t in zip(flat, nested, x, v):
        assert type(d) is mp.DualArray and d._tag is tag and d._value is a
        np.testing.assert_array_equal(d._tangent, d2._tangent)
        assert d._tangent.flags.writeable == d2._tangent.flags.writeable == (not borrow)
        assert np.shares_memory(d._tangent, t) == borrow  # a copy unless lent
    with pytest.raises(mp.TangentError):  # a direction of another dtype is still refused
        seed(print, (x[0],), (v[0].astype(np.float32),), bool(lanes))
    with pytest.raises(mp.TangentError):  # ... and one of another shape
        seed(print, (x[0],), (v[0][..., :2],), bool(lanes))
    with pytest.raises(mp.NonDifferentiableInputError):
        seed(print, (np.arange(3),), (np.ones(3),), False)


@pytest.mark.parametrize("axes", [(-1, -2), (0, 2), (1, 1)])
def test_swapaxes_short_path_is_the_frules_view(axes, monkeypatch):
    rng = np.random.default_rng(1)
    d = dual(rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 4)))
    y = np.swapaxes(d, *axes)
    with monkeypatch.context() as m:  # the dispatch to the registered rule
        m.setattr(lean, "_SWAPAXES_NATIVE", [object()])
        y2 = np.swapaxes(d, *axes)
    for a, b in ((primal(y), primal(y2)), (tangent(y), tangent(y2))):
        np.testing.assert_array_equal(a, b)
        assert a.strides == b.strides and np.shares_memory(a, b)
    assert np.shares_memory(tangent(y), tangent(d))
    with pytest.raises(np.exceptions.AxisError):
        np.swapaxes(d, 0, 3)
