"""The dual layer's short paths against the general ones they stand in for.

- ``np.stack`` and ``scatter_add`` of duals without lanes (``dual/core_rules.py``): the registered
  lane-aware frule, called through ``_run_rule`` as before, gives the same numbers bitwise.
- unary ops on dual scalars whose pullback reuses the forward's derivative
  (``tape/dual_scalars.py``): the pullback recomputing it (``d1=None``) gives the same numbers.
- ``_apply``'s direct wrapping of a fresh real result: the tangent is never an input's tangent
  (a write into the result must not move the input), a view's tangent is the same view.
"""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.dual import core_rules
from mooncake_py.dual.dual_array import DualArray, Tag, _run_rule
from mooncake_py.rules.cotangents import scatter_add
from mooncake_py.mixed import dual_scalars

RNG = np.random.default_rng(7)


def _bitwise(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype
    assert a.tobytes() == b.tobytes()


# --- np.stack ------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, axis", [
    (shape, axis) for shape in [(), (3,), (2, 3)] for axis in [None, 0, -1, 1]
    if axis is None or abs(axis) <= len(shape)])  # (stacking n-d arrays: axes -n-1 .. n)
def test_stack_native_equals_lane_frule(shape, axis):
    ps = [np.float64(v) if shape == () else v
          for v in (RNG.standard_normal(shape) for _ in range(5))]
    ts = tuple(np.float64(v) if shape == () else v
               for v in (RNG.standard_normal(shape) for _ in range(5)))
    prim, tans = ([ps], [ts]) if axis is None else ([ps, axis], [ts, None])
    out, tout = core_rules._stack_native(prim, tans, 0, {})
    ref_out, ref_t = _run_rule(np.stack, core_rules._stack_frule, prim, tans, 0, {})
    _bitwise(out, ref_out)
    _bitwise(tout, ref_t)


def test_stack_native_leaves_other_calls_to_the_frule():
    ps = [np.ones(2), np.zeros(2)]
    # a constant element (no tangent), an axis, lanes: the registered rule, unchanged
    out, t = core_rules._stack_native([ps], [(np.ones(2), None)], 0, {})
    _bitwise(t, np.stack([np.ones(2), np.zeros(2)]))
    out, t = core_rules._stack_native([ps, 1], [(np.ones(2), np.ones(2)), None], 0, {})
    assert out.shape == (2, 2) and t.shape == (2, 2)
    lanes = (np.ones((3, 2)), 2 * np.ones((3, 2)))
    out, t = core_rules._stack_native([ps], [lanes], 3, {})
    assert t.shape == (3, 2, 2)
    _bitwise(t[:, 1], 2 * np.ones((3, 2)))


def test_hvp_of_a_stack_of_scalars_matches_the_hessian():
    x, v = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))

    def f(x):
        y = np.stack([np.sin(np.cos(np.exp(t))) for t in x.ravel()]).reshape(x.shape)
        return np.sum(y * y)

    hv = mp.hvp(f)(x, v)
    H = mp.hessian(f)(x).reshape(12, 12)
    np.testing.assert_allclose(hv.ravel(), H @ v.ravel(), rtol=1e-12, atol=1e-12)
    eps = 1e-6
    fd = (mp.grad(f)(x + eps * v) - mp.grad(f)(x - eps * v)) / (2 * eps)
    np.testing.assert_allclose(hv, fd, rtol=1e-6, atol=1e-6)
    c = mp.prepare_hvp_cache(f, x)
    for _ in range(3):  # records, then replays
        _, _, hv2 = mp.value_and_hvp(c, f, v, x)
        _bitwise(hv2, hv)


# --- scatter_add -----------------------------------------------------------------------------------
@pytest.mark.parametrize("index", [
    (np.array([0, 2, 2, 1, 0]),),                      # repeated positions: add.at
    (np.array([0, 1, 1]), np.array([2, 0, 0])),        # 2-d, repeated
    (1,),                                              # basic: an assignment
    (slice(1, 3),),
])
def test_scatter_add_native_equals_lane_frule(index):
    shape = (4, 3)
    vshape = np.zeros(shape)[index].shape
    values, tv = RNG.standard_normal(vshape), RNG.standard_normal(vshape)
    prim = [shape, index, values]
    tans = [None, None, tv]
    out, t = core_rules._scatter_add_native(prim, tans, 0, {})
    ref_out, ref_t = _run_rule(scatter_add, core_rules._scatter_add_frule, prim, tans, 0, {})
    _bitwise(out, ref_out)
    _bitwise(t, ref_t)


def test_hvp_of_scalar_reads_matches_the_hessian():
    x, v = RNG.standard_normal(6), RNG.standard_normal(6)

    def f(x):
        return np.sum(np.stack([x[i] * x[(i + 1) % 6] for i in range(6)]) ** 2)

    hv = mp.hvp(f)(x, v)
    np.testing.assert_allclose(hv, mp.hessian(f)(x) @ v, rtol=1e-12, atol=1e-12)


# --- unary dual scalars reusing the forward's derivative ------------------------------------------
_REUSING = [op for op in dual_scalars._OPS.values() if op.nin == 1 and op.reusing() is not None]


def test_the_transcendental_ops_reuse():
    names = {op.ufunc.__name__ for op in _REUSING}
    assert {"sin", "cos", "tan", "exp", "log", "tanh", "sqrt", "arctan"} <= names


@pytest.mark.parametrize("op", _REUSING, ids=lambda op: op.ufunc.__name__)
def test_reusing_pullback_equals_recomputing_one(op):
    tag = Tag(0)
    for a in (0.3, 1.7, 2.5):
        x = DualArray(np.float64(a), np.float64(RNG.standard_normal()), tag)
        y, pb = dual_scalars.unary_node(op.ufunc, x)
        assert pb.d1 is not None
        # the forward: the tangent the frule program gives
        _bitwise(y._tangent, dual_scalars._tangent_of(op, (True,), x._value, None, y._value,
                                                      x._tangent, None))
        recomputing = dual_scalars.DualPullback(op, x, None, y, (True,))
        for g in (np.float64(RNG.standard_normal()),
                  DualArray(np.float64(RNG.standard_normal()),
                            np.float64(RNG.standard_normal()), tag)):
            got, = pb(g)
            want, = recomputing(g)
            assert type(got) is type(want)
            if type(got) is DualArray:
                _bitwise(got._value, want._value)
                _bitwise(got._tangent, want._tangent)
            else:
                _bitwise(got, want)


def test_reused_derivative_is_the_programs():
    # the derivative kept by the forward is what the pullback program would compute
    tag = Tag(0)
    op = dual_scalars._OPS[np.sin]
    x = DualArray(np.float64(0.7), np.float64(1.0), tag)
    _, pb = dual_scalars.unary_node(np.sin, x)
    _bitwise(pb.d1, np.cos(np.float64(0.7)))
    assert op.pullbacks_d[0][1] and op.pullbacks_d[1][1]


def test_hvp_of_unary_scalar_loop_matches_finite_differences():
    x, v = RNG.uniform(0.2, 1.5, 5), RNG.standard_normal(5)

    def f(x):
        s = 0.0
        for i in range(5):
            s = s + np.tanh(np.log(x[i])) * np.sin(x[i]) + np.sqrt(np.exp(np.cos(x[i])))
        return s

    hv = mp.hvp(f)(x, v)
    np.testing.assert_allclose(hv, mp.hessian(f)(x) @ v, rtol=1e-12, atol=1e-12)
    eps = 1e-6
    fd = (mp.grad(f)(x + eps * v) - mp.grad(f)(x - eps * v)) / (2 * eps)
    np.testing.assert_allclose(hv, fd, rtol=1e-6, atol=1e-7)


# --- _apply's direct wrapping ----------------------------------------------------------------------
def test_fresh_result_never_shares_an_input_tangent():
    x, v = RNG.standard_normal(4), RNG.standard_normal(4)
    d = mp.dual(x, v)
    for y in (d + np.zeros(4), d * 1.0, np.positive(d), d - 0.0):
        assert type(y) is DualArray
        assert not np.shares_memory(mp.tangent(y), mp.tangent(d))
        _bitwise(mp.tangent(y), v)
        assert mp.tangent(y).flags.writeable
    y = d + np.zeros(4)
    y[0] = 5.0 * d[1]
    _bitwise(mp.tangent(d), v)  # the input's tangent did not move


def test_view_result_keeps_the_view_of_the_tangent():
    x, v = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))
    d = mp.dual(x.copy(), v.copy())
    row = d[1]
    assert np.shares_memory(mp.tangent(row), mp.tangent(d))
    row[2] = 2.0 * d[0, 0]
    assert mp.tangent(d)[1, 2] == 2.0 * v[0, 0]


def test_fortran_ordered_result_gets_a_c_ordered_tangent_when_the_primal_is():
    x, v = RNG.standard_normal((3, 4)), np.asfortranarray(RNG.standard_normal((3, 4)))
    d = DualArray(x, v, Tag(0))
    y = np.sin(d)
    assert mp.primal(y).flags.c_contiguous and mp.tangent(y).flags.c_contiguous
    _bitwise(mp.tangent(y), np.cos(x) * v)


# --- sums over axes and views of duals without lanes ---------------------------------------------
from mooncake_py.dual.core_rules import _sum_frule, _sum_native, _VIEW_NATIVES
from mooncake_py.rules.registry import FRULES


def _layouts(shape):
    a = RNG.standard_normal(shape)
    yield a
    yield np.asfortranarray(a)
    big = RNG.standard_normal(tuple(2 * n for n in shape))
    yield big[tuple(slice(None, None, 2) for _ in shape)]  # strided
    if len(shape) == 2:
        yield RNG.standard_normal(shape[::-1]).T


@pytest.mark.parametrize("kwargs", [
    {"axis": 0}, {"axis": 1}, {"axis": -1}, {"axis": (0,)}, {"axis": (1,)}, {"axis": (0, 1)},
    {"axis": (0, 1), "keepdims": True}, {"axis": 1, "keepdims": True},
    {"axis": None, "keepdims": True},
    {"axis": (1,), "dtype": None, "out": None, "keepdims": False},
])
@pytest.mark.parametrize("shape", [(7, 5), (128, 128), (3, 1)])
def test_axis_sum_native_equals_lane_frule(kwargs, shape):
    for x in _layouts(shape):
        for t in _layouts(shape):
            out, tout = _sum_native([x], [t], 0, dict(kwargs))
            ref_out, ref_t = _run_rule(np.sum, _sum_frule, [x], [t], 0, dict(kwargs))
            _bitwise(out, ref_out)
            _bitwise(tout, ref_t)


def test_axis_sum_native_leaves_other_keywords_to_the_frule():
    x, t = RNG.standard_normal((4, 3)), RNG.standard_normal((4, 3))
    out, tout = _sum_native([x], [t], 0, {"axis": 0, "where": x > 0})
    _bitwise(tout, np.sum(np.where(x > 0, t, 0), axis=0))
    out, tout = _sum_native([x], [t[None]], 1, {"axis": 0})  # lanes
    _bitwise(tout, np.sum(t, axis=0)[None])


@pytest.mark.parametrize("fn, extra", [
    (np.swapaxes, (-1, -2)), (np.swapaxes, (0, 1)), (np.moveaxis, ((-2, -1), (0, 1))),
    (np.moveaxis, (0, -1)), (np.expand_dims, (-1,)), (np.expand_dims, (0,)),
    (np.transpose, ()), (np.transpose, ((1, 0),)), (np.reshape, ((-1,),)),
    (np.reshape, ((2, -1),)),
])
@pytest.mark.parametrize("shape", [(4, 6), (128, 128)])
def test_view_natives_equal_lane_frules(fn, extra, shape):
    native, rule = _VIEW_NATIVES[fn], FRULES[fn]
    for x in _layouts(shape):
        for t in _layouts(shape):
            prim = [x, *extra]
            tans = [t] + [None] * len(extra)
            out, tout = native(prim, tans, 0, {})
            ref_out, ref_t = _run_rule(fn, rule, prim, tans, 0, {})
            _bitwise(out, ref_out)
            _bitwise(tout, ref_t)
            assert np.shares_memory(tout, t) == np.shares_memory(ref_t, t)


def test_reshape_with_an_order_takes_the_frule():
    x = np.asfortranarray(RNG.standard_normal((3, 4)))
    t = RNG.standard_normal((3, 4))  # C-ordered: "A" must follow the primal, not the tangent
    native, rule = _VIEW_NATIVES[np.reshape], FRULES[np.reshape]
    prim, tans = [x, (12,), "A"], [t, None, None]
    out, tout = native(prim, tans, 0, {})
    ref_out, ref_t = _run_rule(np.reshape, rule, prim, tans, 0, {})
    _bitwise(tout, ref_t)
    _bitwise(tout, np.ravel(t, order="F"))


def test_views_of_duals_stay_paired_for_writes():
    x, v = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))
    d = mp.dual(x.copy(), v.copy())
    for view in (np.swapaxes(d, 0, 1), np.transpose(d), np.moveaxis(d, 0, -1),
                 np.expand_dims(d, 0), np.reshape(d, (12,))):
        assert np.shares_memory(mp.tangent(view), mp.tangent(d))
    w = np.swapaxes(d, 0, 1)
    w[1, 2] = 3.0 * d[0, 0]
    assert mp.tangent(d)[2, 1] == 3.0 * v[0, 0]


def test_hvp_through_axis_sums_and_views_matches_the_hessian():
    x, v = RNG.standard_normal((5, 4)), RNG.standard_normal((5, 4))

    def f(x):
        d = x[:, None, :] - x[None, :, :]
        k = np.exp(-0.5 * np.sum(d ** 2, axis=-1))
        return np.sum(np.swapaxes(k, 0, 1) @ np.sin(x)) + np.sum(np.reshape(x, (-1,)) ** 3)

    hv = mp.hvp(f)(x, v)
    H = mp.hessian(f)(x).reshape(20, 20)
    np.testing.assert_allclose(hv.ravel(), H @ v.ravel(), rtol=1e-11, atol=1e-11)
    eps = 1e-6
    fd = (mp.grad(f)(x + eps * v) - mp.grad(f)(x - eps * v)) / (2 * eps)
    np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-6)


# --- unary ops on dual arrays keeping their derivative for the pullback ---------------------------
from mooncake_py.dual import dual_array, elementwise
from mooncake_py.rules.derivative_table import BY_UFUNC
from mooncake_py.rules.elementwise import ew_pullback

_KEEPING = [uf for uf, e in BY_UFUNC.items()
            if e.nin == 1 and elementwise.reusing_programs(e)[0] is not None]


def test_the_transcendental_array_ops_keep_their_derivative():
    names = {uf.__name__ for uf in _KEEPING}
    assert {"sin", "cos", "tan", "exp", "log", "tanh", "sqrt", "arctan", "arcsin"} <= names
    d = mp.dual(RNG.uniform(0.1, 0.9, 5), RNG.standard_normal(5))
    y = np.sin(d)
    assert y._kept is not None and y._kept[1] is d._value
    _bitwise(y._kept[2], np.cos(d._value))
    big = mp.dual(RNG.uniform(0.1, 0.9, elementwise.KERNEL_MIN_SIZE),
                  RNG.standard_normal(elementwise.KERNEL_MIN_SIZE))
    assert np.sin(big)._kept is None  # the fused path computes it inside its kernel


@pytest.mark.parametrize("uf", _KEEPING, ids=lambda u: u.__name__)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_kept_forward_equals_frule_program(uf, dtype):
    e = BY_UFUNC[uf]
    a = _inputs(uf, (3, 4)).astype(dtype)
    ta = RNG.standard_normal((3, 4)).astype(dtype)
    y = mp.dual(a, ta)
    out = uf(y)
    prog = elementwise.program(e, "f", 0, (True,))
    want, = prog.np_fn(a, None, uf(a), None, ta, None, None)
    _bitwise(mp.tangent(out), elementwise._cast(want, np.dtype(dtype)))


def _hvp_both_ways(f, x, v, lanes=False):
    fresh = mp.hessian(f)(x) if lanes else mp.hvp(f)(x, v)
    hook = dual_array.KEPT_PULLBACK[0]
    dual_array.KEPT_PULLBACK[0] = object()  # the pullbacks compute the derivative again
    try:
        general = mp.hessian(f)(x) if lanes else mp.hvp(f)(x, v)
    finally:
        dual_array.KEPT_PULLBACK[0] = hook
    return fresh, general


def _inputs(uf, shape):
    lo = 1.1 if uf is np.arccosh else 0.15  # inside every op's domain
    return RNG.uniform(lo, lo + 0.7, shape)


@pytest.mark.parametrize("uf", _KEEPING, ids=lambda u: u.__name__)
def test_hvp_with_kept_derivatives_is_bitwise_the_general_one(uf):
    x, v = _inputs(uf, (4, 5)), RNG.standard_normal((4, 5))

    def f(x):
        y = uf(x)
        return np.sum(y * y) + np.sum(uf(x[::-1]) * x)  # (a reversed view too)

    got, want = _hvp_both_ways(f, x, v)
    _bitwise(got, want)
    got, want = _hvp_both_ways(f, x, v, lanes=True)  # lanes (Hessian)
    _bitwise(got, want)


def test_hvp_with_kept_derivatives_matches_finite_differences():
    x, v = RNG.uniform(0.2, 1.2, 30), RNG.standard_normal(30)

    def f(x):
        return np.sum(np.sin(np.cos(np.exp(x)))) + np.sum(np.tanh(np.log(x)) * np.sqrt(x))

    hv = mp.hvp(f)(x, v)
    np.testing.assert_allclose(hv, mp.hessian(f)(x) @ v, rtol=1e-12, atol=1e-12)
    eps = 1e-6
    fd = (mp.grad(f)(x + eps * v) - mp.grad(f)(x - eps * v)) / (2 * eps)
    np.testing.assert_allclose(hv, fd, rtol=1e-6, atol=1e-6)
    c = mp.prepare_hvp_cache(f, x)
    for _ in range(3):  # a replayed plan keeps them too
        _bitwise(mp.value_and_hvp(c, f, v, x)[2], hv)


def test_kept_derivative_after_a_write_into_the_input():
    # the sweep restores what was overwritten before sin's pullback reads it: the kept
    # derivative is that of the values sin saw
    x, v = RNG.uniform(0.2, 1.2, 6), RNG.standard_normal(6)

    def f(x):
        z = x * 1.0
        y = np.sin(z)
        z[0] = 3.0 * z[1]
        return np.sum(y * z) + np.sum(np.cos(z))

    got, want = _hvp_both_ways(f, x, v)
    _bitwise(got, want)
    eps = 1e-6
    fd = (mp.grad(f)(x + eps * v) - mp.grad(f)(x - eps * v)) / (2 * eps)
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-6)


def test_pullback_of_another_input_computes_its_own_derivative():
    tag = Tag(0)
    a = DualArray(RNG.uniform(0.1, 0.9, 4), RNG.standard_normal(4), tag)
    b = DualArray(RNG.uniform(0.1, 0.9, 4), RNG.standard_normal(4), tag)
    g = DualArray(RNG.standard_normal(4), RNG.standard_normal(4), tag)
    y = np.sin(a)
    assert y._kept is not None
    r = ew_pullback(BY_UFUNC[np.sin], 0, g, b, y)  # not the input y was made from
    _bitwise(mp.primal(r), mp.primal(g) * np.cos(b._value))
    r = ew_pullback(BY_UFUNC[np.sin], 0, g, a, y)
    _bitwise(mp.primal(r), mp.primal(g) * np.cos(a._value))
    _bitwise(mp.tangent(r), np.cos(a._value) * mp.tangent(g)
             + mp.primal(g) * (-mp.primal(y) * a._tangent))


def test_dual_with_a_kept_derivative_pickles_and_copies():
    import copy
    import pickle
    d = mp.dual(RNG.uniform(0.1, 0.9, 3), RNG.standard_normal(3))
    y = np.sin(d)
    assert y._kept is not None
    for c in (pickle.loads(pickle.dumps(y)), copy.deepcopy(y), copy.copy(y)):
        _bitwise(mp.primal(c), mp.primal(y))
        _bitwise(mp.tangent(c), mp.tangent(y))
        assert c._tag.level == y._tag.level
    assert pickle.loads(pickle.dumps(y))._kept is None
