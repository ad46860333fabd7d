"""The dual-scalar short paths (tape/dual_scalars.py): HVPs of scalar loops must equal the general
path bitwise (debug mode takes the general path everywhere) and finite differences of the
gradient, and every check of the general path must stay."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.mixed.dual_scalars import DualPullback
from mooncake_py.tape import Tape, TrackedArray
from mooncake_py.tape import tape as tape_module
from mooncake_py.tape.pullbacks import ItemRead


def _general(fn, *args, **kw):
    """``fn`` with the short paths off: debug mode takes the general path for every op, and
    the sweep adds dual contributions through the dual dispatch."""
    saved = tape_module._scalar_add, tape_module._item_write
    tape_module._scalar_add = tape_module._item_write = None
    try:
        with mp.Config(debug_mode=True):
            return fn(*args, **kw)
    finally:
        tape_module._scalar_add, tape_module._item_write = saved


def loop_arith(x):
    s = 0.0
    for i in range(len(x)):
        s += x[i] * x[i] - x[-1 - i] / (2.0 + x[i] * x[i]) + 3 * x[np.int64(i)]
        s = 1.5 - s
        s = s / 2
        s = 0.5 * s + x[i] - 2 / x[i]
        s -= x[i] * 0.25
        s *= 1.01
    return s


def loop_unary(x):
    s = 0.0
    for i in range(len(x)):
        a = x[i]
        s = s + np.sin(a) * np.cos(a) + np.exp(a) / 10 - np.tanh(a) + np.square(a)
        s = s + np.log(a * a + 1.0) + np.sqrt(a * a + 2.0) + np.arctan(a) - np.sinh(a) / 5
        s = s + np.cosh(a) / 7 + np.log1p(a * a) + np.expm1(a) / 3 + np.tan(a / 4) - (-a)
        s = s - np.negative(a * a)
        s = s + np.sin(a - x[0] * 0.5) * np.cos(-a) + np.exp(2.0 - a) * np.exp(-(a * a))
    return s


def loop_power_block(x):  # benchmarks' large_single_block: one node used 400 times
    y, a = x[0], x[1]
    for _ in range(40):
        y = y * a
    return y + x[2]


def _sum_sin(x):
    s = 0.0
    for i in range(len(x)):
        s += np.sin(x[i])
    return s


def _sum(x):
    s = 0.0
    for i in range(len(x)):
        s += x[i]
    return s


CASES = [loop_arith, loop_unary, loop_power_block, _sum_sin, _sum]


def _point(n, seed):
    rng = np.random.default_rng(seed)
    return 0.5 + rng.random(n), rng.standard_normal(n)


@pytest.mark.parametrize("f", CASES, ids=lambda f: f.__name__)
def test_hvp_bitwise_equal_to_general_path(f):
    x, v = _point(6, 1)
    # loop_arith and loop_unary read x[i] again at the same node: one node (the short paths
    # reuse it), whose cotangents the sweep sums before adding them into x's, where the general
    # path adds each read's in turn; equal up to that order of the sum, bitwise elsewhere
    same = np.testing.assert_array_equal if f in (loop_power_block, _sum_sin, _sum) else \
        _close_to_rounding
    hv = mp.hvp(f)(x, v)
    hv0 = _general(mp.hvp(f), x, v)
    same(hv, hv0)
    y, g, hv1 = mp.value_and_hvp(mp.prepare_hvp_cache(f, x, replay=False), f, v, x)
    y0, g0, _ = _general(mp.value_and_hvp, mp.prepare_hvp_cache(f, x, replay=False), f, v, x)
    assert y == y0
    same(g, g0)
    same(hv1, hv0)


def _close_to_rounding(a, b):
    np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-14 * np.max(np.abs(b)))


@pytest.mark.parametrize("f", CASES, ids=lambda f: f.__name__)
def test_hvp_matches_finite_differences_of_gradient(f):
    x, v = _point(5, 2)
    h = 1e-6
    fd = (mp.grad(f)(x + h * v) - mp.grad(f)(x - h * v)) / (2 * h)
    np.testing.assert_allclose(mp.hvp(f)(x, v), fd, rtol=1e-5, atol=1e-6)


def test_special_values_bitwise():
    # zero tangents take the programs' select(...) branches; a zero and an infinite primal,
    # and a division by a Python 0, give the general path's infinities and NaNs
    def f(x):
        s = x[0] / x[1] + np.log(x[1]) + np.sqrt(x[2]) + x[3] / 0 + np.arctan(x[0])
        return s * x[0]
    x = np.array([0.0, 2.0, 0.0, 1.0])
    for v in (np.zeros(4), np.array([1.0, 0.0, 0.0, 1.0]), np.ones(4)):
        with np.errstate(all="ignore"):
            hv = mp.hvp(f)(x, v)
            hv0 = _general(mp.hvp(f), x, v)
        np.testing.assert_array_equal(hv, hv0)


def test_nodes_recorded_by_the_short_path():
    d = mp.dual(np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 0.0]))
    with Tape() as tape:
        x = tape.track(d)
        a = x[0]
        b = a * x[1]
        c = np.sin(b)
    assert type(tape._pullbacks[a._node]) is ItemRead
    # a binary op's node holds the generated subclass for its operands (both duals here), a
    # unary op's the one generated for its ufunc
    assert type(tape._pullbacks[b._node]).__bases__ == (DualPullback,)
    assert type(tape._pullbacks[c._node]).__bases__ == (DualPullback,)
    assert type(c) is TrackedArray and type(c._value) is mp.DualArray
    g, = tape.gradient(c, [x])
    assert np.allclose(mp.primal(g), [2 * np.cos(2.0), np.cos(2.0), 0.0])


def test_hessian_with_lanes_and_jvp_of_grad_agree():
    x, v = _point(4, 3)
    H = mp.hessian(loop_unary)(x)
    np.testing.assert_allclose(H @ v, mp.hvp(loop_unary)(x, v), rtol=1e-12, atol=1e-12)
    _, jv = mp.jvp(mp.grad(loop_arith), (x,), (v,))
    np.testing.assert_array_equal(jv, mp.hvp(loop_arith)(x, v))


def test_escaped_dual_scalar_raises_and_next_call_works():
    kept = []

    def f(x):
        kept.append(x[0])
        return x[0] * x[1]
    x, v = np.array([1.0, 2.0]), np.array([1.0, 1.0])
    mp.hvp(f)(x, v)
    with pytest.raises(mp.EscapedValueError):
        kept[0] * 2.0
    with pytest.raises(mp.EscapedValueError):
        np.sin(kept[0])
    np.testing.assert_array_equal(mp.hvp(f)(x, v), [1.0, 1.0])


def test_reverse_over_reverse_still_refused():
    x, v = np.array([1.0, 2.0]), np.array([1.0, 0.0])
    with pytest.raises(mp.ReverseOverReverseError):
        mp.grad(lambda y: mp.hvp(lambda z: z[0] * z[1])(y, v)[0])(x)


def test_a_rule_registered_later_turns_the_dual_short_path_off():
    import mooncake_py.rules.registry as reg
    from mooncake_py.tape import fastpath
    calls = []
    saved = reg.RRULES[np.tanh]

    def rule(args, kwargs, needs):
        calls.append(1)
        return saved(args, kwargs, needs)
    reg.RRULES[np.tanh] = rule
    try:
        x, v = np.array([0.3, 0.4]), np.array([1.0, 2.0])
        mp.hvp(lambda z: np.tanh(z[0]) * z[1])(x, v)
        assert calls
    finally:
        reg.RRULES[np.tanh] = saved
    assert fastpath._BUILTIN[np.tanh] is saved


def test_tape_that_starts_writing_keeps_dual_nodes_correct():
    def f(x):
        s = x[0] * x[1]
        y = np.zeros_like(x)
        y[0] = s
        y[1] = np.sin(x[1])
        return np.sum(y * y)
    x, v = np.array([0.7, 1.3]), np.array([0.2, -1.0])
    np.testing.assert_array_equal(mp.hvp(f)(x, v), _general(mp.hvp(f), x, v))


def test_float32_and_mixed_tags_take_the_general_path():
    x32 = np.array([1.0, 2.0], dtype=np.float32)
    hv = mp.hvp(lambda z: z[0] * z[1] * np.sin(z[0]))(x32, np.ones(2, np.float32))
    assert hv.dtype == np.float32
    # a jvp nested in an hvp: two tags meet in one product
    x, v = np.array([0.5, 1.5]), np.array([1.0, -1.0])

    def inner(z):
        _, t = mp.jvp(lambda w: w[0] * w[1], (z,), (np.array([1.0, 0.0]),))
        return t * z[0]
    np.testing.assert_allclose(mp.hvp(inner)(x, v), _general(mp.hvp(inner), x, v), rtol=0,
                               atol=0)


def test_value_level_nodes_match_the_recorded_ones():
    from mooncake_py.dual import DualArray, Tag
    from mooncake_py.mixed.dual_scalars import binary_node, unary_node
    tag = Tag()
    a = DualArray(np.float64(0.7), np.float64(-1.5), tag)
    b = DualArray(np.float64(1.9), np.float64(0.25), tag)
    g = DualArray(np.float64(1.1), np.float64(0.5), tag)
    for uf, args in [(np.multiply, (a, b)), (np.true_divide, (a, 3)), (np.subtract, (2.0, b)),
                     (np.add, (a, b)), (np.sin, (a,)), (np.log, (b,))]:
        made = binary_node(uf, *args) if len(args) == 2 else unary_node(uf, args[0])
        assert made is not None
        y, pb = made
        y0 = _general(uf, *args)
        assert (mp.primal(y), mp.tangent(y)) == (mp.primal(y0), mp.tangent(y0))
        with Tape() as tape:
            tracked = [tape.track(v) if type(v) is mp.DualArray else v for v in args]
            with mp.Config(debug_mode=True):
                out = uf(*tracked)
            want = tape._pullbacks[out._node](g)
        got = pb(g)
        assert len(got) == len(want)
        for c, c0 in zip(got, want):
            assert (c is None) == (c0 is None)
            if c is not None:
                assert (mp.primal(c), mp.tangent(c)) == (mp.primal(c0), mp.tangent(c0))
    assert binary_node(np.multiply, 2.0, 3.0) is None  # no dual: not this path's
    assert binary_node(np.power, a, b) is None
    assert unary_node(np.sin, np.float64(1.0)) is None
    assert binary_node(np.multiply, a, mp.dual(np.float64(1.0), np.float64(1.0))) is None  # 2 tags


def test_hvp_of_a_loop_writing_scalars_bitwise_and_recorded_directly():
    from test_overhead_paths import rk4_writes
    th, v = np.array([1.1, 0.4, 0.1, 0.4]), np.array([1.0, -0.5, 0.25, 2.0])
    hv = mp.hvp(rk4_writes)(th, v)
    np.testing.assert_array_equal(hv, _general(mp.hvp(rk4_writes), th, v))
    h = 1e-6
    fd = (mp.grad(rk4_writes)(th + h * v) - mp.grad(rk4_writes)(th - h * v)) / (2 * h)
    np.testing.assert_allclose(hv, fd, rtol=1e-6, atol=1e-8)
    # the scalar reads and arithmetic after the first write are dual-scalar nodes
    tape = []
    orig = tape_module.MutatingTape.record

    def spy(self, fn, args, kwargs):
        tape.append(fn)
        return orig(self, fn, args, kwargs)
    tape_module.MutatingTape.record = spy
    try:
        mp.hvp(rk4_writes)(th, v)
    finally:
        tape_module.MutatingTape.record = orig
    assert np.sin not in tape and np.subtract not in tape


def test_dual_item_writes_swap_floats_and_equal_the_general_write(monkeypatch):
    from test_overhead_paths import rk4_writes
    th, v = np.array([1.1, 0.4, 0.1, 0.4]), np.array([1.0, -0.5, 0.25, 2.0])
    made = []
    hook = tape_module._item_write

    def spy(*a):
        r = hook(*a)
        made.append(type(r).__name__)
        return r
    monkeypatch.setattr(tape_module, "_item_write", spy)
    hv = mp.hvp(rk4_writes)(th, v)
    # y[0, 0], y[0, 1], the 12 step writes and y[2, 1] (through y, not the row view)
    assert made.count("_DualItemWrite") == 15
    monkeypatch.setattr(tape_module, "_item_write", None)
    np.testing.assert_array_equal(hv, mp.hvp(rk4_writes)(th, v))


# --- the generated per-op methods, pullbacks and sums ----------------------------------------
_OPERATORS = {np.add: lambda a, b: a + b, np.subtract: lambda a, b: a - b,
              np.multiply: lambda a, b: a * b, np.true_divide: lambda a, b: a / b}
_VALUES = [(0.7, -1.5), (1.9, 0.0), (0.0, 0.25), (-3.0, 2.0)]
_CONSTANTS = [2.0, 3, np.float64(-0.5), 0, 0.0]


def _pair(v):
    return (mp.primal(v), mp.tangent(v)) if type(v) is mp.DualArray else (v, None)


def _same(c, c0):
    assert (c is None) == (c0 is None)
    if c is not None:
        assert type(c) is type(c0)
        p, t = _pair(c)
        p0, t0 = _pair(c0)
        assert np.array_equal(p, p0, equal_nan=True) and type(p) is type(p0)
        assert (t is None and t0 is None) or (np.array_equal(t, t0, equal_nan=True) and
                                              type(t) is type(t0))


def _operand_pairs(tag):
    from mooncake_py.dual import DualArray
    duals = [DualArray(np.float64(p), np.float64(t), tag) for p, t in _VALUES]
    for a in duals:
        for b in duals:
            yield a, b
        for c in _CONSTANTS:
            yield a, c
            yield c, a


@pytest.mark.parametrize("uf", list(_OPERATORS), ids=lambda u: u.__name__)
def test_generated_binary_nodes_equal_the_general_rule_bitwise(uf):
    from mooncake_py.dual import DualArray, Tag
    from mooncake_py.mixed import dual_scalars
    tag = Tag()
    cotangents = [np.float64(1.25), np.float64(0.0), DualArray(np.float64(-0.5), np.float64(2.0),
                                                               tag),
                  DualArray(np.float64(1.0), np.float64(0.0), tag), np.array(0.75)]
    with np.errstate(all="ignore"):
        for a, b in _operand_pairs(tag):
            with Tape() as tape:
                ta, tb = (tape.track(v) if type(v) is DualArray else v for v in (a, b))
                out = _OPERATORS[uf](ta, tb)  # the generated method (reflected for a constant a)
            with mp.Config(debug_mode=True), Tape() as tape0:  # the general rule
                ref = _OPERATORS[uf](*(tape0.track(v) if type(v) is DualArray else v
                                       for v in (a, b)))
            assert not isinstance(tape0._pullbacks[ref._node], dual_scalars.DualPullback)
            pb = tape._pullbacks[out._node]
            if type(a) is np.float64:  # NumPy's scalar operator runs first: the ufunc path
                continue
            assert type(pb).__bases__ == (dual_scalars.DualPullback,), (uf, a, b)
            assert tape._fns[out._node] is uf
            _same(out._value, ref._value)
            assert tape._parents[out._node] == tuple(
                v._node if type(v) is TrackedArray else None for v in (ta, tb))
            for g in cotangents:
                got = pb(g)
                want = tape0._pullbacks[ref._node](g)
                # and the class it specialises, on the same node
                plain = dual_scalars.DualPullback.__call__(pb, g)
                assert len(got) == len(want) == len(plain) == 2
                for c, c0, c1 in zip(got, want, plain):
                    _same(c, c0)
                    _same(c, c1)


def test_generated_dual_sum_equals_the_general_one():
    from mooncake_py.dual import DualArray, Tag
    from mooncake_py.mixed import dual_scalars
    tag, other = Tag(), Tag()
    xs = [DualArray(np.float64(p), np.float64(t), tag) for p, t in _VALUES]
    plain = [np.float64(2.5), np.float64(-0.0)]
    for cur in xs + plain:
        for g in xs + plain:
            if type(cur) is not DualArray and type(g) is not DualArray:
                assert dual_scalars.add(cur, g) is None
                continue
            r = dual_scalars.add(cur, g)
            _same(r, dual_scalars._add_general(cur, g))
            _same(r, _general(np.add, cur, g))
    assert dual_scalars.add is not dual_scalars._add_general  # (the generated one is installed)
    assert dual_scalars.add(xs[0], DualArray(np.float64(1.0), np.float64(1.0), other)) is None
    assert dual_scalars.add(xs[0], np.array(1.0)) is None
    assert dual_scalars.add(xs[0], 1.0) is None  # (a Python float is not a cotangent here)


def test_mixed_python_numbers_in_a_loop_bitwise():
    def f(x):
        s = 0
        for i in range(len(x)):
            a = x[i]
            s = s + 2 * a - a / 3 + 1.5 * a * a - (4 - a) / (a + 1) + np.float64(0.5) / a
            s = 7 / s + s * 2 - 3.25
        return s
    x, v = _point(5, 4)
    np.testing.assert_array_equal(mp.hvp(f)(x, v), _general(mp.hvp(f), x, v))


def test_hvp_inside_jvp_and_jvp_of_grad_of_grad():
    x, v = _point(4, 5)
    u = np.array([0.5, -1.0, 0.25, 2.0])
    hv, d = mp.jvp(lambda z: mp.hvp(loop_arith)(z, v), (x,), (u,))
    # (under jvp the reads are duals of duals, which the short paths leave to the general
    # path: no read is reused there, so the order of the sums differs from a plain hvp's)
    _close_to_rounding(hv, mp.hvp(loop_arith)(x, v))
    h = 1e-5
    fd = (mp.hvp(loop_arith)(x + h * u, v) - mp.hvp(loop_arith)(x - h * u, v)) / (2 * h)
    np.testing.assert_allclose(d, fd, rtol=1e-5, atol=1e-7)
    with pytest.raises(mp.ReverseOverReverseError):
        mp.jvp(mp.grad(mp.grad(lambda z: z[0] * z[1])), (x,), (u,))


def test_a_rule_registered_for_multiply_turns_the_generated_path_off():
    import mooncake_py.rules.registry as reg
    calls = []
    saved = reg.RRULES[np.multiply]

    def rule(args, kwargs, needs):
        calls.append(1)
        return saved(args, kwargs, needs)
    x, v = _point(4, 6)
    want = mp.hvp(loop_arith)(x, v)
    reg.RRULES[np.multiply] = rule
    try:
        got = mp.hvp(loop_arith)(x, v)
        assert len(calls) >= 6 * len(x)  # every product of the loop went through the rule
    finally:
        reg.RRULES[np.multiply] = saved
    np.testing.assert_array_equal(got, want)


def test_debug_mode_records_no_generated_node():
    from mooncake_py.mixed import dual_scalars
    d = mp.dual(np.array([1.0, 2.0]), np.array([1.0, 0.0]))
    with mp.Config(debug_mode=True), Tape() as tape:
        x = tape.track(d)
        y = x[0] * x[1] + 2.0 * x[0] - x[1] / 3
    assert not any(isinstance(pb, dual_scalars.DualPullback) for pb in tape._pullbacks)
    assert type(y._value) is mp.DualArray


def test_item_read_through_a_stale_view_of_duals_is_viewed_again():
    def f(x):
        y = x * 1.0
        w = y[1:]  # a view of y
        y[1] = x[0] * x[2]  # the write makes w stale: its next read views y again
        s = w[0] * x[1]
        y[2] = s
        return w[1] * w[0] + s
    x, v = np.array([0.5, 1.5, -2.0]), np.array([1.0, -1.0, 0.5])
    hv = mp.hvp(f)(x, v)
    np.testing.assert_array_equal(hv, _general(mp.hvp(f), x, v))
    h = 1e-6
    fd = (mp.grad(f)(x + h * v) - mp.grad(f)(x - h * v)) / (2 * h)
    np.testing.assert_allclose(hv, fd, rtol=1e-6, atol=1e-8)


# --- the generated unary methods and pullbacks ------------------------------------------------
def _unary_ufuncs():
    from mooncake_py.mixed import dual_scalars
    return [uf for uf, op in dual_scalars._OPS.items() if op.nin == 1]


_UNARY_VALUES = [(0.7, -1.5), (1.9, 0.0), (0.0, 0.25), (-3.0, 2.0), (-0.0, 1.0), (1e300, 1.0),
                 (np.inf, 1.0), (-np.inf, 0.5), (np.nan, 1.0), (0.5, np.nan), (2.0, np.inf),
                 (800.0, 1.0)]


def test_every_table_unary_op_has_a_generated_method_and_pullback():
    from mooncake_py.mixed import dual_scalars
    ufs = _unary_ufuncs()
    assert {np.sin, np.cos, np.exp, np.log, np.tanh, np.sqrt, np.negative} <= set(ufs)
    for uf in ufs:
        assert dual_scalars._UNARY_METHODS[uf].__name__ == "method", uf


@pytest.mark.parametrize("uf", _unary_ufuncs(), ids=lambda u: u.__name__)
def test_generated_unary_nodes_equal_the_general_rule_bitwise(uf):
    from mooncake_py.dual import DualArray, Tag
    from mooncake_py.mixed import dual_scalars
    tag = Tag()
    cotangents = [np.float64(1.25), np.float64(0.0), np.float64(np.nan), np.float64(-np.inf),
                  DualArray(np.float64(-0.5), np.float64(2.0), tag),
                  DualArray(np.float64(1.0), np.float64(0.0), tag),
                  DualArray(np.float64(np.inf), np.float64(np.nan), tag), np.array(0.75)]
    generated = 0
    with np.errstate(all="ignore"):
        for p, t in _UNARY_VALUES:
            a = DualArray(np.float64(p), np.float64(t), tag)
            with Tape() as tape:
                ta = tape.track(a)
                out = -ta if uf is np.negative else uf(ta)
                out2 = dual_scalars._unary_general(ta, uf)  # the program calls, same tape
            with mp.Config(debug_mode=True), Tape() as tape0:  # the general rule
                ref = uf(tape0.track(a))
            assert not isinstance(tape0._pullbacks[ref._node], dual_scalars.DualPullback)
            if type(out._value) is not DualArray:  # (a non-float64 result: general path)
                continue
            pb = tape._pullbacks[out._node]
            # (a tangent the program leaves as a Python number, as select(ta == 0, 0, ...)
            # gives, is cast by the program-call path: the node is then that path's)
            assert type(pb).__bases__ == (dual_scalars.DualPullback,) or \
                type(pb) is dual_scalars.DualPullback and t == 0, (uf, p, t)
            generated += type(pb) is not dual_scalars.DualPullback
            assert type(tape._pullbacks[out2._node]) is dual_scalars.DualPullback
            assert tape._fns[out._node] is uf and tape._parents[out._node] == (ta._node,)
            _same(out._value, ref._value)
            _same(out._value, out2._value)
            for g in cotangents:
                got = pb(g)
                want = tape0._pullbacks[ref._node](g)
                plain = tape._pullbacks[out2._node](g)  # the class it specialises
                assert len(got) == len(want) == len(plain) == 1
                _same(got[0], want[0])
                _same(got[0], plain[0])
    assert generated >= len(_UNARY_VALUES) - 2


def test_unary_loop_with_special_values_bitwise():
    def f(x):
        s = 0.0
        for i in range(len(x)):
            a = x[i]
            s = s + np.sqrt(a) + np.log(a) - np.exp(a) + np.tanh(-a) * np.cosh(a)
        return s
    x = np.array([0.0, -1.0, np.inf, 710.0, 2.0, np.nan])
    v = np.array([1.0, 2.0, 0.5, 1.0, np.inf, 1.0])
    with np.errstate(all="ignore"):
        got = mp.hvp(f)(x, v)
        want = _general(mp.hvp(f), x, v)
    np.testing.assert_array_equal(got, want)


def test_a_rule_registered_for_sin_turns_the_generated_unary_path_off():
    import mooncake_py.rules.registry as reg
    from mooncake_py.mixed import dual_scalars
    calls = []
    saved = reg.RRULES[np.sin]

    def rule(args, kwargs, needs):
        calls.append(1)
        return saved(args, kwargs, needs)
    x, v = _point(4, 7)
    want = mp.hvp(_sum_sin)(x, v)
    reg.RRULES[np.sin] = rule
    try:
        got = mp.hvp(_sum_sin)(x, v)
        assert len(calls) == len(x)  # every sin went through the rule
        with Tape() as tape:
            y = np.sin(tape.track(mp.dual(np.float64(0.5), np.float64(1.0))))
        assert not isinstance(tape._pullbacks[y._node], dual_scalars.DualPullback)
    finally:
        reg.RRULES[np.sin] = saved
    np.testing.assert_array_equal(got, want)


def test_debug_mode_records_no_generated_unary_node():
    from mooncake_py.mixed import dual_scalars
    d = mp.dual(np.array([1.0, 2.0]), np.array([1.0, 0.0]))
    with mp.Config(debug_mode=True), Tape() as tape:
        x = tape.track(d)
        y = np.sin(x[0]) + np.exp(-x[1]) - np.sqrt(x[1])
    assert not any(isinstance(pb, dual_scalars.DualPullback) for pb in tape._pullbacks)
    assert type(y._value) is mp.DualArray


def loop_constant_operands(x):
    # every op has one constant operand, on either side (`0.5 * a`: parents (None, a); `a / 3`:
    # (a, None)), each node with a constant on its left used again after it (so the sweep
    # reaches it with a cotangent already there to add to), and every item read once: the
    # general path adds the same numbers in the same order, bitwise equal
    a, b, c = x[0], x[1], x[2]
    for _ in range(25):
        a = 0.5 * a + a / 3 + b * 0.1
        b = 2 - b + b * 0.25 + c / 5
        w = 2 + b * b
        b = 1 / w + w / 7 - 0.5
        c = 1.5 - c * 0.5 + 0.25 * a
        c = 3 * c / 4 + (a - 0.75) + c * 0.125
    return a * b + c


def test_constant_operand_nodes_bitwise_and_without_the_general_accumulation(monkeypatch):
    x, v = _point(3, 7)
    f = loop_constant_operands
    with Tape() as tape:
        f(TrackedArray(x, tape, 0))
    n = len(tape._parents)  # (a call records its input at node 0: the output is node n)
    kinds = {(p is None, q is None) for ps in tape._parents if len(ps) == 2 for p, q in [ps]}
    assert {(True, False), (False, True)} <= kinds  # (both sides constant somewhere)
    np.testing.assert_array_equal(mp.grad(f)(x), _general(mp.grad(f), x))
    np.testing.assert_array_equal(mp.hvp(f)(x, v), _general(mp.hvp(f), x, v))
    # a node with a constant operand passes its one cotangent on inline, as a node of two
    # tracked ones does: none of them reaches the general accumulation (whose result for dual
    # and float64 scalars is the same: the comparison above), only the output's seed and the
    # reads' sum into the input do
    calls = []
    general = tape_module._accumulate

    def counted(cts, owned, p, g):
        calls.append(p)
        return general(cts, owned, p, g)
    monkeypatch.setattr(tape_module, "_accumulate", counted)
    hv = mp.hvp(f)(x, v)
    g = mp.grad(f)(x)
    assert calls and set(calls) <= {0, n}
    monkeypatch.undo()
    np.testing.assert_array_equal(hv, _general(mp.hvp(f), x, v))
    np.testing.assert_array_equal(g, _general(mp.grad(f), x))


def test_constant_operand_loop_matches_finite_differences():
    x, v = _point(3, 8)
    f, h = loop_constant_operands, 1e-6
    fd = np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(3)])
    np.testing.assert_allclose(mp.grad(f)(x), fd, rtol=1e-6, atol=1e-8)
    fd2 = (mp.grad(f)(x + h * v) - mp.grad(f)(x - h * v)) / (2 * h)
    np.testing.assert_allclose(mp.hvp(f)(x, v), fd2, rtol=1e-5, atol=1e-6)
