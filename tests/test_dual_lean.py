"""The lean path of dual elementwise ops (``dual/lean.py``) against the general dispatch.

Each case runs the same computation twice: once as the library does it, once with the lean
path switched off (``LEAN_OPS``, ``LEAN_FUNCTIONS``, the getitem short path and the pullback
primitive's dispatch hook back to the general ones), and
requires the two results to be the same bitwise: value, tangent, types, dtypes, layout,
writeability, the derivative kept for the pullback, and which input buffers the tangent shares.
Small arrays take the NumPy programs, large ones (``KERNEL_MIN_SIZE`` set to 0) the numba
kernels; calls the lean path does not take (lanes, keywords, integer arrays, other tags, debug
mode, a replaced frule) must still give today's results.
"""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.dual import dual_array, elementwise as ew, lean
from mooncake_py.dual.dual_array import DualArray, Tag
from mooncake_py.rules import elementwise as rew
from mooncake_py.rules.broadcasting import unbroadcast
from mooncake_py.rules.derivative_table import TABLE
from mooncake_py.rules.registry import FRULES

RNG = np.random.default_rng(11)


@pytest.fixture(params=["numpy", "kernels"])
def sizes(request, monkeypatch):
    """Both execution paths of the table ops: NumPy programs and fused numba kernels."""
    monkeypatch.setattr(ew, "KERNEL_MIN_SIZE", 10 ** 9 if request.param == "numpy" else 0)
    return request.param


def _general(fn):
    """``fn()`` with the lean path switched off."""
    saved = (list(dual_array.LEAN_OPS), list(dual_array.KEPT_PULLBACK),
             list(dual_array.LEAN_FUNCTIONS), list(dual_array._GETITEM_RULE))
    dual_array.LEAN_OPS[:] = [dual_array._no_lean, dual_array._no_lean]
    dual_array.KEPT_PULLBACK[1] = ew._kept_pullback  # (the general dispatch's own short path)
    dual_array.LEAN_FUNCTIONS[:] = [dual_array._no_lean]
    dual_array._GETITEM_RULE[:] = [object()]
    try:
        return fn()
    finally:
        dual_array.LEAN_OPS[:] = saved[0]
        dual_array.KEPT_PULLBACK[:] = saved[1]
        dual_array.LEAN_FUNCTIONS[:] = saved[2]
        dual_array._GETITEM_RULE[:] = saved[3]


def _same_array(x, y):
    assert type(x) is type(y), (type(x), type(y))
    if type(x) is DualArray:  # (a dual of an outer tag inside one of an inner tag)
        _same(x, y)
    elif isinstance(x, (np.ndarray, np.generic)):
        assert x.dtype == y.dtype and np.shape(x) == np.shape(y)
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()
        if type(x) is np.ndarray:
            assert x.flags.writeable == y.flags.writeable
            assert x.flags.c_contiguous == y.flags.c_contiguous
            assert (x.base is None) == (y.base is None)
            assert x.strides == y.strides
    else:
        assert x == y


def _same(x, y, inputs_x=(), inputs_y=()):
    """Bitwise the same result, sharing memory with the corresponding inputs alike."""
    assert type(x) is type(y), (type(x), type(y))
    if type(x) is not DualArray:
        _same_array(x, y)
        return
    _same_array(x._value, y._value)
    _same_array(x._tangent, y._tangent)
    assert (x._kept is None) == (y._kept is None)
    if x._kept is not None:
        _same_array(x._kept[2], y._kept[2])
        assert x._kept[0] is x._value and y._kept[0] is y._value
    for u, v in zip(inputs_x, inputs_y):
        for part in ("_value", "_tangent"):
            pu, pv = getattr(u, part, u), getattr(v, part, v)
            if type(pu) is np.ndarray:
                assert (np.shares_memory(getattr(x, part), pu)
                        == np.shares_memory(getattr(y, part), pv))


def _dual(shape, tag, dtype=np.float64, layout="C"):
    if shape == "scalar":
        return DualArray(dtype(RNG.uniform(0.5, 1.5)), dtype(RNG.standard_normal()), tag)
    if shape == "scalar, 0-d tangent":  # (as an HVP seeds a float argument)
        return DualArray(dtype(RNG.uniform(0.5, 1.5)), np.array(RNG.standard_normal(), dtype), tag)
    if shape == "0-d, scalar tangent":
        return DualArray(np.array(RNG.uniform(0.5, 1.5), dtype), dtype(RNG.standard_normal()), tag)
    p = RNG.uniform(0.5, 1.5, shape).astype(dtype)
    t = RNG.standard_normal(shape).astype(dtype)
    if layout == "F":
        p, t = np.asfortranarray(p), np.asfortranarray(t)
    elif layout == "strided":
        p = np.repeat(p, 2, axis=-1)[..., ::2]
        t = np.repeat(t, 2, axis=-1)[..., ::2]
    elif layout == "mixed":  # primal C-ordered, tangent F-ordered
        t = np.asfortranarray(t)
    return DualArray(p, t, tag)


def _copy(x):
    if type(x) is DualArray:
        return DualArray(_copy(x._value), _copy(x._tangent), x._tag)
    if type(x) is np.ndarray:
        c = x.copy(order="K")
        if not x.flags.c_contiguous and not x.flags.f_contiguous:
            c = np.repeat(x, 2, axis=-1)[..., ::2]  # keep the strides
        return c
    return x


def _check(make):
    """Build the operands with ``make()`` once, run the op on them and on copies under the
    general path, compare."""
    fn, args = make()
    args_general = tuple(_copy(a) for a in args)
    got = fn(*args)
    want = _general(lambda: fn(*args_general))
    _same(got, want, args, args_general)
    return got


BINARY = [np.add, np.subtract, np.multiply, np.true_divide, np.power, np.maximum,
          np.arctan2, np.logaddexp, np.hypot]
OPERATORS = {np.add: lambda a, b: a + b, np.subtract: lambda a, b: a - b,
             np.multiply: lambda a, b: a * b, np.true_divide: lambda a, b: a / b,
             np.power: lambda a, b: a ** b}


@pytest.mark.parametrize("uf", BINARY)
@pytest.mark.parametrize("shapes", [((3,), (3,)), ((40, 30), (40, 30)), ((4, 1), (1, 5)),
                                    ((2, 3), (3,)), ((), ()), ("scalar", "scalar"),
                                    ((3,), "scalar"), ((), (4,)),
                                    ("scalar, 0-d tangent", (40, 30)),
                                    ((3,), "0-d, scalar tangent"),
                                    ("scalar, 0-d tangent", "0-d, scalar tangent")])
def test_binary_dual_dual(uf, shapes, sizes):
    tag = Tag(0)

    def make():
        return uf, (_dual(shapes[0], tag), _dual(shapes[1], tag))
    _check(make)
    if uf in OPERATORS:
        _check(lambda: (OPERATORS[uf], (_dual(shapes[0], tag), _dual(shapes[1], tag))))


PLAIN = {"float": lambda s: 0.75, "int": lambda s: 2, "half": lambda s: 0.5, "three": lambda s: 3,
         "np.float64": lambda s: np.float64(1.25), "np.float32": lambda s: np.float32(1.25),
         "np.int64": lambda s: np.int64(2), "0-d": lambda s: np.array(1.5),
         "array": lambda s: RNG.uniform(0.5, 1.5, s),
         "int array": lambda s: np.arange(1, 1 + int(np.prod(s))).reshape(s),
         "float32 array": lambda s: RNG.uniform(0.5, 1.5, s).astype(np.float32),
         "column": lambda s: RNG.uniform(0.5, 1.5, s[:-1] + (1,)),
         "eye": lambda s: np.eye(s[-1]) + 0.5}


@pytest.mark.parametrize("uf", BINARY)
@pytest.mark.parametrize("plain", list(PLAIN))
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_binary_dual_plain(uf, plain, side, dtype, sizes):
    tag = Tag(0)

    def make():
        d = _dual((6, 6), tag, dtype)
        c = PLAIN[plain]((6, 6))
        args = (d, c) if side == "left" else (c, d)
        return (OPERATORS.get(uf, uf) if type(c) is not np.ndarray else uf), args
    _check(make)


@pytest.mark.parametrize("uf", [np.add, np.multiply, np.power, np.subtract])
@pytest.mark.parametrize("layout", ["F", "strided", "mixed"])
def test_non_contiguous(uf, layout, sizes):
    tag = Tag(0)
    _check(lambda: (uf, (_dual((5, 6), tag, layout=layout), _dual((5, 6), tag))))
    _check(lambda: (uf, (_dual((5, 6), tag, layout=layout), 2.0)))
    _check(lambda: (uf, (3.0, _dual((5, 6), tag, layout=layout))))


@pytest.mark.parametrize("name", ["exp", "sin", "log", "tanh", "sqrt", "negative", "square",
                                  "arctan", "log1p", "absolute", "cos", "reciprocal"])
@pytest.mark.parametrize("shape", [(3,), (20, 30), (), "scalar", "scalar, 0-d tangent",
                                   "0-d, scalar tangent"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_unary(name, shape, dtype, sizes):
    tag = Tag(0)
    uf = TABLE[name].ufunc
    got = _check(lambda: (uf, (_dual(shape, tag, dtype),)))
    if name == "negative":
        _check(lambda: (lambda d: -d, (_dual(shape, tag, dtype),)))
    if shape == (3,) and sizes == "numpy" and name in ("exp", "sin", "log", "tanh"):
        assert got._kept is not None  # the pullback's derivative, as the general path keeps it


@pytest.mark.parametrize("layout", ["F", "strided", "mixed"])
def test_unary_non_contiguous(layout, sizes):
    tag = Tag(0)
    _check(lambda: (np.exp, (_dual((5, 6), tag, layout=layout),)))
    _check(lambda: (np.sin, (_dual((5, 6), tag, layout=layout),)))


@pytest.mark.parametrize("key", [0, -1, slice(1, 3), (slice(None), None), (None, slice(None)),
                                 (1, 2), (Ellipsis, 0), Ellipsis, (), (0, Ellipsis),
                                 (slice(None, None, 2), 1), (None, 0, None)])
@pytest.mark.parametrize("shape", [(4, 5), (6,), ()])
@pytest.mark.parametrize("layout", ["C", "F", "strided"])
def test_getitem(key, shape, layout):
    tag = Tag(0)

    def make():
        d = _dual(shape, tag, layout=layout if shape else "C")
        return (lambda x: x[key]), (d,)
    try:
        got = _general(lambda: make()[0](make()[1][0]))
    except IndexError:
        with pytest.raises(IndexError):
            make()[0](make()[1][0])
        return
    assert type(got) is DualArray
    _check(make)


def test_getitem_other_keys_and_writes():
    tag = Tag(0)
    d = _dual((4, 5), tag)
    for key in ([0, 2], np.array([1, 3]), d._value > 1.0, (np.int64(1), slice(None)), True):
        _same(d[key], _general(lambda: d[key]))
    v = d[1:3]
    v[0] = DualArray(np.zeros(5), np.full(5, 7.0), tag)  # a view's write shows in both
    np.testing.assert_array_equal(d._tangent[1], np.full(5, 7.0))
    np.testing.assert_array_equal(d._value[1], np.zeros(5))


def test_views_and_writes_stay_separate():
    """A result's tangent never aliases an input's (a write into the result must not move the
    input), as the general path guarantees: ``x + c`` returns the input's tangent from the
    program and must be copied."""
    tag = Tag(0)
    x = _dual((4,), tag)
    before = x._tangent.copy()
    y = x + 1.0
    assert not np.shares_memory(y._tangent, x._tangent)
    y[0] = DualArray(np.float64(0.0), np.float64(9.0), tag)
    np.testing.assert_array_equal(x._tangent, before)
    xv = x[1:3]  # a view of a dual is a view of its tangent: a write shows in both
    z = xv * 2.0
    assert not np.shares_memory(z._tangent, x._tangent)


def _spy_lean(monkeypatch):
    """Record the lean path's calls (and whether it took them)."""
    calls = []
    un, bi = dual_array.LEAN_OPS

    def spy(f):
        def g(*a):
            r = f(*a)
            calls.append(r is not None)
            return r
        return g
    monkeypatch.setattr(dual_array, "LEAN_OPS", [spy(un), spy(bi)])
    return calls


def test_lanes_take_the_general_path(monkeypatch):
    x, v = RNG.standard_normal(5), RNG.standard_normal((3, 5))
    calls = _spy_lean(monkeypatch)
    d = mp.dual(x, v, lanes=True)
    y = np.exp(d) * d + 2.0 * d ** 2 - d
    assert calls == []
    np.testing.assert_allclose(mp.tangent(y), v * (np.exp(x) + np.exp(x) * x + 4 * x - 1),
                               rtol=1e-12)
    d1 = mp.dual(x, v[0])
    np.exp(d1) * d1
    assert calls == [True, True]


def test_lanes_hvp_as_today():
    """With lanes the pullbacks still reuse the forward's derivative (the dispatch's own short
    path): bitwise what the general dispatch gives."""
    x, V = RNG.uniform(0.5, 1.5, 6), RNG.standard_normal((3, 6))

    def f(x):
        return np.sum(np.sin(x) * np.exp(x) + np.log(x) ** 2)
    got = mp.hvp(f, lanes=True)(x, V)
    want = _general(lambda: mp.hvp(f, lanes=True)(x, V))
    _same_array(got, want)
    h = mp.hessian(f)(x)
    np.testing.assert_allclose(got, V @ h, rtol=1e-10, atol=1e-12)


def test_integer_array_operands_as_today():
    tag = Tag(0)
    d = _dual((4,), tag)
    ints = np.arange(1, 5)
    assert lean.binary(tag, np.multiply, d, ints) is None  # (the general path's promotion)
    _same(d * ints, _general(lambda: d * ints))
    _same(d ** ints, _general(lambda: d ** ints))
    with pytest.raises(mp.NonDifferentiableInputError):
        mp.dual(np.arange(3), np.ones(3))


def test_other_tags_and_plain_leaves():
    outer, inner = Tag(0), Tag(0)
    a = DualArray(RNG.standard_normal(4), RNG.standard_normal(4), outer)
    b = DualArray(RNG.standard_normal(4), RNG.standard_normal(4), inner)
    assert lean.binary(inner, np.multiply, b, b) is not None
    nested = DualArray(a, DualArray(np.ones(4), np.zeros(4), outer), inner)
    want = _general(lambda: nested * b)
    _same(nested * b, want)
    plain = RNG.standard_normal(4)
    _same(b * plain + plain, _general(lambda: b * plain + plain))


def test_debug_mode_and_replaced_rules_take_the_general_path(monkeypatch):
    tag = Tag(0)
    d = _dual((3,), tag)
    with mp.Config(debug_mode=True):
        assert lean.binary(tag, np.multiply, d, d) is None
        assert lean.unary(tag, np.exp, d) is None
        _same(d * d, _general(lambda: d * d))
    calls = []
    orig = FRULES[np.multiply]

    def spy(primals, tangents, **kw):
        calls.append(1)
        return orig(primals, tangents, **kw)
    monkeypatch.setitem(FRULES, np.multiply, spy)
    d * d
    assert calls  # the user's rule, not the lean path's copy of the table's


def test_errors_then_next_call_works():
    x = np.array([0.5, 1.5])
    escaped = []

    def f(x):
        escaped.append(x * 2.0)
        return np.sum(np.exp(x))
    mp.jvp(f, (x,), (np.ones(2),))
    with pytest.raises(mp.errors.EscapedValueError):
        escaped[0] * escaped[0]
    y, t = mp.jvp(lambda x: np.sum(np.exp(x) * x), (x,), (np.ones(2),))
    np.testing.assert_allclose(t, np.sum(np.exp(x) * x + np.exp(x)))
    tag = Tag(0)
    d = _dual((3,), tag)
    with pytest.raises(ValueError):
        d * _dual((4,), tag)  # NumPy's own broadcasting error
    _same(d * d, _general(lambda: d * d))


# --- the pullbacks of a forward-over-reverse sweep ---------------------------------------------
@pytest.mark.parametrize("name, k", [("exp", 0), ("sin", 0), ("log", 0), ("tanh", 0),
                                     ("power", 0), ("multiply", 0), ("multiply", 1),
                                     ("divide", 0), ("divide", 1), ("arctan2", 1),
                                     ("maximum", 0)])
@pytest.mark.parametrize("shape", [(3,), (30, 20)])
@pytest.mark.parametrize("kind", ["dual inputs", "plain second", "kept", "plain cotangent"])
def test_pullback(name, k, shape, kind, sizes):
    entry = TABLE[name]
    part = rew._partial(entry, k)
    tag = Tag(0)
    if entry.nin == 1:
        def make():
            a = _dual(shape, tag)
            y = entry.ufunc(a) if kind == "kept" else \
                DualArray(entry.ufunc(a._value), RNG.standard_normal(shape), tag)
            g = RNG.standard_normal(shape) if kind == "plain cotangent" else _dual(shape, tag)
            return part, (g, a, y)
    else:
        def make():
            a = _dual(shape, tag)
            b = 2 if name == "power" else (_dual(shape, tag) if kind != "plain second"
                                           else RNG.uniform(0.5, 1.5, shape))
            y = entry.ufunc(a, b)
            g = RNG.standard_normal(shape) if kind == "plain cotangent" else _dual(shape, tag)
            return part, (g, a, b, y)
    _check(make)


def test_pullback_plain_cotangent_and_float32(sizes):
    tag = Tag(0)
    part = rew._partial(TABLE["exp"], 0)
    _check(lambda: (part, (RNG.standard_normal(5), _dual((5,), tag), _dual((5,), tag))))
    _check(lambda: (part, (_dual((5,), tag, np.float32), _dual((5,), tag, np.float32),
                           _dual((5,), tag, np.float32))))
    mul = rew._partial(TABLE["multiply"], 0)  # (the pullback of s * eye in gp_lml)
    _check(lambda: (mul, (_dual((6, 6), tag), _dual("scalar, 0-d tangent", tag), np.eye(6),
                          _dual((6, 6), tag))))
    pw = rew._partial(TABLE["power"], 0)
    _check(lambda: (pw, (_dual("scalar", tag), _dual("scalar", tag), 2.0, _dual("scalar", tag))))


@pytest.mark.parametrize("gshape, shape", [((4, 5), (4, 1)), ((4, 5), (1, 5)), ((4, 5), (5,)),
                                           ((4, 5), ()), ((4, 5), (1, 1)), ((2, 3, 4), (3, 1)),
                                           ((3,), (1,))])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_unbroadcast(gshape, shape, dtype):
    tag = Tag(0)
    _check(lambda: (lambda g: unbroadcast(g, shape), (_dual(gshape, tag, dtype),)))
    _check(lambda: (lambda g: unbroadcast(g, shape), (_dual(gshape, tag, dtype, "F"),)))


@pytest.mark.parametrize("call", [
    lambda d: np.sum(d), lambda d: np.sum(d, axis=0), lambda d: np.sum(d, axis=(0, 1)),
    lambda d: np.sum(d, axis=-1, keepdims=True), lambda d: np.sum(d, axis=None, dtype=None),
    lambda d: np.sum(d, axis=1, dtype=np.float32), lambda d: np.sum(d, 0),
    lambda d: np.reshape(d, (-1,)), lambda d: np.reshape(d, 20), lambda d: np.reshape(d, (5, 4)),
    lambda d: np.reshape(d, np.array([2, 10])), lambda d: np.reshape(d, (20,), order="F"),
    lambda d: np.reshape(np.sum(d), ()), lambda d: np.reshape(np.sum(d), (1, 1))])
@pytest.mark.parametrize("layout", ["C", "F", "strided", "mixed"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sum_and_reshape(call, layout, dtype):
    tag = Tag(0)
    _check(lambda: (call, (_dual((4, 5), tag, dtype, layout),)))


# --- whole second-order calls ---------------------------------------------------------------------
def _gp(x, y, s):
    d = x[:, None] - x[None, :]
    K = np.exp(-0.5 * d ** 2) + s * np.eye(len(x))
    return np.sum(K @ y) + np.sum(np.log(np.diag(K))) + np.sum(np.tanh(K) / (1.0 + K))


def _mlp(W2, W1, Y, X):
    h = np.maximum(W1 @ X, 0.0)
    r = Y - W2 @ h
    return np.sum(r ** 2)


@pytest.mark.parametrize("n", [4, 100])
def test_hvp_equals_general_and_finite_differences(n, monkeypatch):
    x, y = RNG.standard_normal(n), RNG.standard_normal(n)
    s = np.array(0.3)
    v = (RNG.standard_normal(n), RNG.standard_normal(n), np.array(0.7))
    f = _gp
    monkeypatch.setattr(ew, "KERNEL_MIN_SIZE", 1000)
    got = mp.hvp(f, argnums=(0, 1, 2))(x, y, s, v)
    want = _general(lambda: mp.hvp(f, argnums=(0, 1, 2))(x, y, s, v))
    for g, w in zip(got, want):
        _same_array(np.asarray(g), np.asarray(w))
    g = mp.grad(f, argnums=(0, 1, 2))
    eps = 1e-6
    gp = g(x + eps * v[0], y + eps * v[1], s + eps * v[2])
    gm = g(x - eps * v[0], y - eps * v[1], s - eps * v[2])
    for h, a, b in zip(got, gp, gm):
        np.testing.assert_allclose(h, (a - b) / (2 * eps), rtol=1e-5, atol=1e-6)


def test_prepared_hvp_replay_equals_fresh_recording():
    W2, W1 = RNG.standard_normal((3, 8)), RNG.standard_normal((8, 5))
    Y, X = RNG.standard_normal((3, 7)), RNG.standard_normal((5, 7))
    v = (RNG.standard_normal(W2.shape), RNG.standard_normal(W1.shape))
    def f(a, b):
        return _mlp(a, b, Y, X)
    cache = mp.prepare_hvp_cache(f, W2, W1)
    for _ in range(3):
        y, g, hv = mp.value_and_hvp(cache, f, v, W2, W1)
    fresh = mp.hvp(f, argnums=(0, 1))(W2, W1, v)
    general = _general(lambda: mp.hvp(f, argnums=(0, 1))(W2, W1, v))
    for h, f, w in zip(hv, fresh, general):
        _same_array(np.asarray(h), np.asarray(f))
        _same_array(np.asarray(f), np.asarray(w))
