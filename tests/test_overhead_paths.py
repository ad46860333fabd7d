"""The short paths for scalar-loop code (tape/fastpath.py) and the per-call fast paths of grad:
each must give exactly what the general path gives, and keep every check of the general path
(escape detection, mutation, nesting, complex values, debug mode)."""
import operator

import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.tape import Tape, TrackedArray
from mooncake_py.tape.pullbacks import ItemRead


def _general(fn, *args, **kw):
    """Run ``fn`` with the short paths off: debug mode takes the general path everywhere."""
    with mp.Config(debug_mode=True):
        return fn(*args, **kw)


def loop_mix(x):
    s = 0.0
    for i in range(len(x)):
        s = s + x[i] * x[i] - x[-1 - i] / (2.0 + x[i] * x[i]) + 3 * x[np.int64(i)]
        s = 1.5 - s
        s = s / 2
        s = 0.5 * s + x[i]
    return s


def _close_to_rounding(g, g0):
    """``g`` equal to ``g0`` up to the order of a sum: x[i] read again at the same node is one
    node (fastpath.py), whose cotangents the sweep sums before adding them into x's, where the
    general path adds each read's into x's in turn."""
    np.testing.assert_allclose(g, g0, rtol=1e-14, atol=1e-14 * np.max(np.abs(g0)))


def test_scalar_loop_bitwise_equal_to_general_path():
    x = np.random.default_rng(0).standard_normal(7)
    v, g = mp.value_and_grad(loop_mix)(x)
    v0, g0 = _general(mp.value_and_grad(loop_mix), x)
    assert v == v0
    _close_to_rounding(g, g0)  # (loop_mix reads x[i] four times a step)
    # each element read once: the same operations in the same order, bitwise

    def once(x):
        a, b, c = x[0], x[1], x[2]
        return (a * b - c / (2.0 + a)) * 3 + 0.5 * b - 1 / c
    v, g = mp.value_and_grad(once)(x)
    v0, g0 = _general(mp.value_and_grad(once), x)
    assert v == v0
    np.testing.assert_array_equal(g, g0)


def test_scalar_loop_matches_finite_differences():
    x, h = np.linspace(0.1, 0.9, 5), 1e-6
    fd = [(loop_mix(x + h * e) - loop_mix(x - h * e)) / (2 * h) for e in np.eye(5)]
    np.testing.assert_allclose(mp.grad(loop_mix)(x), fd, rtol=1e-6, atol=1e-8)


def test_fast_nodes_are_recorded():
    with Tape() as tape:
        x = tape.track(np.array([1.0, 2.0, 3.0]))
        y = x[1]
        z = y * x[2]
    assert type(y) is TrackedArray and type(tape._pullbacks[y._node]) is ItemRead
    assert float(z._value) == 6.0
    assert tape.gradient(z, [x])[0].tolist() == [0.0, 3.0, 2.0]


def test_repeated_sweep_gives_same_gradient():
    with Tape() as tape:
        x = tape.track(np.array([1.0, 2.0]))
        s = x[0] * x[1] + x[0]
    a = tape.gradient(s, [x])[0]
    b = tape.gradient(s, [x])[0]
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, [3.0, 1.0])


def test_python_float_and_int_constants():
    g = mp.grad(lambda x: 2 * x[0] + x[1] * 3 - 1 / x[2] + x[0] / 4.0 - 5 - x[1])(
        np.array([1.0, 2.0, 4.0]))
    np.testing.assert_allclose(g, [2.25, 2.0, 1 / 16])


def test_escaped_scalar_raises():
    kept = []

    def f(x):
        kept.append(x)
        kept.append(x[0])
        return x[0] * x[1]
    mp.grad(f)(np.array([1.0, 2.0]))
    with pytest.raises(mp.EscapedValueError):
        kept[0][0]
    with pytest.raises(mp.EscapedValueError):
        kept[1] * 2.0
    with pytest.raises(mp.EscapedValueError):
        3.0 + kept[1]


def test_reads_after_a_write_see_new_contents():
    def f(x):
        y = x.copy()
        s = y[0] * y[1]
        y[0] = 10.0 * x[1]
        return s + y[0] * y[0]
    x = np.array([2.0, 3.0])
    g = mp.grad(f)(x)
    np.testing.assert_allclose(g, [3.0, 2.0 + 200 * 3.0])
    np.testing.assert_array_equal(g, _general(mp.grad(f), x))


def test_hvp_and_jvp_of_scalar_loop():
    def f(x):
        s = 0.0
        for i in range(len(x)):
            s = s + x[i] * x[i] * x[i]
        return s
    x, v = np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.5, -1.0])
    np.testing.assert_allclose(mp.hvp(f)(x, v), 6 * x * v)
    _, t = mp.jvp(mp.grad(f), (x,), (v,))
    np.testing.assert_allclose(t, 6 * x * v)


def test_reverse_over_reverse_still_refused():
    # an outer tracked value reaching an inner sweep (through x[0]'s pullback)
    with pytest.raises(mp.ReverseOverReverseError):
        mp.grad(lambda x: np.sum(mp.grad(lambda y: y[0] * x[0])(np.array([1.0]))))(
            np.array([2.0]))


def test_other_dtypes_take_the_general_path():
    x32 = np.array([1.0, 2.0], dtype=np.float32)
    g = mp.grad(lambda x: x[0] * x[1])(x32)
    assert g.dtype == np.float32
    np.testing.assert_array_equal(g, [2.0, 1.0])
    z = np.array([1.0 + 1.0j, 2.0])
    gz = mp.grad(lambda z: np.real(z[0] * z[1]))(z)
    np.testing.assert_allclose(gz, np.conj([2.0, 1.0 + 1.0j]))


def test_index_errors_unchanged():
    with pytest.raises(IndexError):
        mp.grad(lambda x: x[5])(np.ones(2))


def test_two_dimensional_reads():
    def f(a):
        return a[0][1] * a[1, 0] + a[1][1]
    a = np.arange(1.0, 5.0).reshape(2, 2)
    np.testing.assert_array_equal(mp.grad(f)(a), _general(mp.grad(f), a))
    np.testing.assert_array_equal(mp.grad(f)(a), [[0.0, 3.0], [2.0, 1.0]])


def test_division_by_python_zero_follows_numpy():
    with np.errstate(divide="ignore", invalid="ignore"):
        g = mp.grad(lambda x: x[0] / 0.0 + x[1] / 0)(np.array([1.0, 2.0]))
        g0 = _general(mp.grad(lambda x: x[0] / 0.0 + x[1] / 0), np.array([1.0, 2.0]))
    np.testing.assert_array_equal(g, g0)
    assert np.isinf(g).all()


# --- BLAS threads: medium-sized linear algebra runs on one OpenBLAS thread -------------------
def test_single_threaded_nests_and_restores():
    from mooncake_py.core import blas_threads as bt
    original = [get() for _, get, _ in bt._handles()]
    try:
        for _, _, put in bt._handles():  # (conftest pins one thread: make the limit visible)
            put(2)
        with bt.single_threaded():
            with bt.single_threaded("numpy"):
                assert all(get() == 1 for _, get, _ in bt._handles())
            assert all(get() == 1 for _, get, _ in bt._handles())
        assert all(get() == 2 for _, get, _ in bt._handles())
        with bt.single_threaded("scipy"):  # the other library keeps its threads
            assert all(get() == (1 if name == "scipy" else 2)
                       for name, get, _ in bt._handles())
        assert all(get() == 2 for _, get, _ in bt._handles())
        assert not bt._active
    finally:
        for (_, _, put), n in zip(bt._handles(), original):
            put(n)


def test_single_threaded_restores_after_an_error():
    from mooncake_py.core import blas_threads as bt
    before = [get() for _, get, _ in bt._handles()]
    with pytest.raises(np.linalg.LinAlgError):
        with bt.single_threaded():
            np.linalg.cholesky(-np.eye(40))
    assert [get() for _, get, _ in bt._handles()] == before and not bt._active


def test_small_decides_by_size():
    from mooncake_py.core.blas_threads import small, single_threaded
    one = single_threaded("numpy")
    assert small(np.ones((64, 64)), np.ones(64)) is one
    assert small(np.ones((4, 4))) is not one          # tiny: OpenBLAS stays serial anyway
    assert small(np.ones((64, 64)), np.ones((2000, 64))) is not one   # large: keep threads
    assert small(np.ones(10 ** 6)) is not one         # vectors alone: no matrix call
    with Tape() as tape:
        assert small(tape.track(np.ones((64, 64)))) is one


def test_gp_gradient_and_hvp_with_limited_blas():
    import scipy.linalg
    rng = np.random.default_rng(1)
    x, y = 0.2 * np.arange(64.0), rng.standard_normal(64)

    def f(s):
        K = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2) + s * np.eye(64)
        L = np.linalg.cholesky(K)
        a = mp.linalg.solve_triangular(L, y, lower=True)
        return -0.5 * np.sum(a ** 2) - np.sum(np.log(np.diag(L)))

    def ref(s):
        K = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2) + s * np.eye(64)
        a = scipy.linalg.solve(K, y, assume_a="pos")
        Ki = np.linalg.inv(K)
        return 0.5 * a @ a - 0.5 * np.trace(Ki)
    np.testing.assert_allclose(mp.grad(f)(1.3), ref(1.3), rtol=1e-9)
    h = mp.hvp(f)(1.3, 1.0)
    fd = (ref(1.3 + 1e-5) - ref(1.3 - 1e-5)) / 2e-5
    np.testing.assert_allclose(h, fd, rtol=1e-5)


@pytest.mark.parametrize("name", ["sin", "cos", "tan", "exp", "log", "sqrt", "tanh", "sinh",
                                  "cosh", "arctan", "log1p", "expm1", "square", "negative"])
def test_unary_scalar_short_path_bitwise(name):
    uf = getattr(np, name)

    def f(x):
        s = 0.0
        for i in range(len(x)):
            s = s + uf(x[i]) * x[i]
        return s + (-x[0])
    x = np.array([0.3, 1.7, 0.0, 2.5])
    with np.errstate(all="ignore"):
        v, g = mp.value_and_grad(f)(x)
        v0, g0 = _general(mp.value_and_grad(f), x)
    np.testing.assert_array_equal(v, v0)
    np.testing.assert_array_equal(g, g0)


def test_unary_short_path_kept_for_duals():
    f = lambda x: np.sin(x[0]) * np.exp(x[1])  # noqa: E731
    x, v = np.array([0.3, 0.5]), np.array([1.0, -2.0])
    h = mp.hvp(f)(x, v)
    H = np.array([[-np.sin(0.3) * np.exp(0.5), np.cos(0.3) * np.exp(0.5)],
                  [np.cos(0.3) * np.exp(0.5), np.sin(0.3) * np.exp(0.5)]])
    np.testing.assert_allclose(h, H @ v)


def test_a_rule_registered_later_turns_its_short_path_off():
    from mooncake_py.rules.registry import RRULES
    saved = RRULES[np.multiply]
    calls = []

    def rule(args, kwargs, needs):
        calls.append(1)
        return saved(args, kwargs, needs)
    RRULES[np.multiply] = rule
    try:
        g = mp.grad(lambda x: x[0] * x[1])(np.array([2.0, 3.0]))
    finally:
        RRULES[np.multiply] = saved
    assert calls and g.tolist() == [3.0, 2.0]


@pytest.mark.parametrize("shape", [(5,), (2, 3), (1,)])
def test_sum_short_path_bitwise(shape):
    x = np.random.default_rng(2).standard_normal(shape)
    f = lambda x: np.sum(np.sin(x) * x) * np.sum(x)  # noqa: E731
    v, g = mp.value_and_grad(f)(x)
    v0, g0 = _general(mp.value_and_grad(f), x)
    np.testing.assert_array_equal(v, v0)
    np.testing.assert_array_equal(g, g0)
    assert g.flags.writeable and g.shape == shape


def test_sum_short_path_leaves_other_sums_alone():
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(mp.grad(lambda x: np.sum(np.sum(x, axis=0) ** 2))(x),
                                  2 * np.broadcast_to(x.sum(0), (2, 3)))
    np.testing.assert_array_equal(mp.grad(lambda x: x.sum())(x), np.ones((2, 3)))
    h = mp.hvp(lambda x: np.sum(x ** 3))(np.array([1.0, 2.0]), np.array([1.0, 1.0]))
    np.testing.assert_array_equal(h, [6.0, 12.0])


def loop_inplace(x):
    s = 0.0
    for i in range(len(x)):
        s += x[i]
        s -= 0.5 * x[i] * x[i]
        s *= 1.25
        s /= x[-1]
        t = x[i]
        t += s  # a fresh scalar: rebinding must not touch s
        s = s + t / 3
    return s


def test_inplace_operators_on_scalars_bitwise_and_no_extra_nodes():
    x = np.random.default_rng(4).standard_normal(6) + 2.0
    v, g = mp.value_and_grad(loop_inplace)(x)
    v0, g0 = _general(mp.value_and_grad(loop_inplace), x)
    assert v == v0
    _close_to_rounding(g, g0)  # (x[i] is read four times a step)
    with Tape() as tape:
        loop_inplace(tape.track(x))
    with mp.Config(debug_mode=True):
        with Tape() as tape0:
            loop_inplace(tape0.track(x))
    # the same nodes, but one read node per element read (x[0] ... x[5] and x[-1])
    reads = [f for f in tape._fns if f is operator.getitem]
    assert len(reads) == len(x) + 1
    assert [f for f in tape._fns if f is not operator.getitem] == \
        [f for f in tape0._fns if f is not operator.getitem]


def test_inplace_on_a_tracked_array_still_writes():
    def f(x):
        y = x * 1.0
        y += x[0]
        return np.sum(y * y)
    x = np.array([1.0, 2.0])
    np.testing.assert_array_equal(mp.grad(f)(x), _general(mp.grad(f), x))


def test_scalar_output_seed_is_a_float64_scalar_with_the_same_value():
    # the seed of a float64 scalar output: np.float64(1.0) (a 0-d array before; same value)
    with Tape() as tape:
        x = tape.track(np.float64(2.0))
        y = x + 1.0
    g, = tape.gradient(y, [x])
    assert type(g) is np.float64 and g == 1.0
    with Tape() as tape:
        x = tape.track(np.array([1.0, 2.0]))
        y = np.sum(x)
    g, = tape.gradient(y, [x])
    np.testing.assert_array_equal(g, [1.0, 1.0])
    # an explicit seed is used as given
    g, = tape.gradient(y, [x], seed=np.array(3.0))
    np.testing.assert_array_equal(g, [3.0, 3.0])


def naive_map(x):
    y = np.empty_like(x)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            y[i, j] = np.sin(np.cos(np.exp(x[i, j]))) * x[i, j] - 1.5 / (x[i, j] + 4.0)
    return np.sum(y * y)


def mixed_ages(x):
    y = x.copy()
    a = np.tanh(y[0]) * y[1]        # before any write
    y[0] = a * 3.0                  # a write: later reads of y see it
    b = np.exp(y[0]) + a * y[1]     # a made before the write, y[0] after
    y[1] = b / 2.0
    return np.sin(y[1]) * y[0] - a + np.sum(y)


@pytest.mark.parametrize("fn", [naive_map, mixed_ages])
def test_scalar_short_paths_after_writes_bitwise(fn):
    x = np.random.default_rng(3).standard_normal((3, 4) if fn is naive_map else 3)
    v, g = mp.value_and_grad(fn)(x)
    v0, g0 = _general(mp.value_and_grad(fn), x)
    assert v == v0
    np.testing.assert_array_equal(g, g0)
    h = 1e-6
    e = np.zeros(x.size)
    fd = []
    for k in range(x.size):
        e[:] = 0
        e[k] = h
        d = e.reshape(x.shape)
        fd.append((fn(x + d) - fn(x - d)) / (2 * h))
    np.testing.assert_allclose(g.ravel(), fd, rtol=1e-6, atol=1e-7)
    # and the HVP (general dual path on the mutating tape) still agrees with the fast gradient
    v1 = np.ones_like(x)
    hv = mp.hvp(fn)(x, v1)
    gp, gm = mp.grad(fn)(x + h * v1), mp.grad(fn)(x - h * v1)
    np.testing.assert_allclose(hv, (gp - gm) / (2 * h), rtol=1e-5, atol=1e-6)


def _count_mutating_records(monkeypatch):
    """The functions that reach MutatingTape.record (the general path of a tape with writes),
    appended to the returned list as they are recorded."""
    from mooncake_py.tape import tape as tape_mod
    calls = []
    general = tape_mod.MutatingTape.record

    def counting(self, fn, args, kwargs):
        calls.append(fn)
        return general(self, fn, args, kwargs)
    monkeypatch.setattr(tape_mod.MutatingTape, "record", counting)
    return calls


def test_scalar_ops_after_a_write_skip_the_mutating_record(monkeypatch):
    calls = _count_mutating_records(monkeypatch)
    x = np.random.default_rng(4).standard_normal((2, 2))
    mp.grad(naive_map)(x)
    # reads of x / y and the final sums go the general way; exp/cos/sin and the arithmetic on
    # the scalars made after each write do not
    assert np.exp not in calls and np.sin not in calls and np.multiply in calls


def _three(a, b, c):
    return np.sum(np.sin(a) * b) + c * np.sum(a * a)


@pytest.mark.parametrize("argnums", [(0,), (0, 1), (2, 0), (-1, -3), (0, 1, 2)])
def test_tuple_argnums_fast_path_equals_general_path(argnums):
    rng = np.random.default_rng(4)
    args = (rng.standard_normal(5), rng.standard_normal(5), 0.7)
    got = mp.value_and_grad(_three, argnums=argnums)(*args)
    want = mp.value_and_grad(_three, argnums=list(argnums))(*args)  # a list: general path
    assert type(got[1]) is tuple and len(got[1]) == len(argnums)
    assert got[0] == want[0]
    for g, w in zip(got[1], want[1]):
        assert type(g) is type(w) and np.array_equal(g, w)


def test_tuple_argnums_fast_path_declines_what_it_does_not_handle():
    x = np.arange(3.0)
    # the same position twice: the general path's answer (each occurrence gets the gradient)
    got = mp.grad(lambda a: np.sum(a * a), argnums=(0, 0))(x)
    want = mp.grad(lambda a: np.sum(a * a), argnums=[0, 0])(x)
    assert all(np.array_equal(g, w) for g, w in zip(got, want))
    with pytest.raises(mp.NonDifferentiableInputError):  # an int argument, as before
        mp.grad(lambda a, n: np.sum(a) * n, argnums=(0, 1))(x, 3)
    with pytest.raises(mp.ArgumentError):
        mp.grad(lambda a: np.sum(a), argnums=(0, 1))(x)
    g32 = mp.grad(lambda a, b: np.sum(a * b), argnums=(0, 1))(x.astype(np.float32), x)
    assert g32[0].dtype == np.float32 and g32[1].dtype == np.float64
    with pytest.raises(mp.OutputTypeError):
        mp.grad(lambda a, b: a * b, argnums=(0, 1))(x, x)
    assert np.array_equal(mp.grad(lambda a, b: np.sum(a * b), argnums=(0, 1))(x, x)[0], x)


def rk4_writes(theta, steps=6):
    """RK4-like: scalar writes y[i + 1, k] = ..., reads of an input made before every write,
    and arithmetic on scalars made before the latest write."""
    y = np.zeros_like(theta, shape=(steps + 1, 2))
    y[0, 0], y[0, 1] = 1.0, 0.5
    for i in range(steps):
        u, v = y[i, 0], y[i, 1]
        ku = theta[0] * u - theta[1] * u * v
        kv = theta[2] * u * v - theta[3] * v
        y[i + 1, 0] = u + 0.1 * np.sin(ku)
        y[i + 1, 1] = v + 0.1 * kv - 0.5 * ku   # ku, kv, v older than the last write
    row = y[2]                                  # a view, made stale by the next write
    y[2, 1] = row[0] * theta[1]
    return np.sum(y * y) + row[1] * row[0]      # reads through the refreshed view


def test_scalar_short_paths_on_a_mutating_tape_bitwise_and_recorded_directly(monkeypatch):
    th = np.array([1.1, 0.4, 0.1, 0.4])
    v, g = mp.value_and_grad(rk4_writes)(th)
    v0, g0 = _general(mp.value_and_grad(rk4_writes), th)
    assert v == v0 == rk4_writes(th)
    np.testing.assert_array_equal(g, g0)
    h = 1e-6
    fd = [(rk4_writes(th + h * e) - rk4_writes(th - h * e)) / (2 * h) for e in np.eye(4)]
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)
    calls = _count_mutating_records(monkeypatch)
    mp.grad(rk4_writes)(th)
    # item reads (int and tuple keys, of handles older than the last write) and the scalar
    # arithmetic take the short paths; only the final array ops and the row view go general
    assert np.sin not in calls and np.subtract not in calls
    assert calls.count(operator.getitem) == 1  # (y[2]: a view, not an item)


def test_stale_item_read_on_a_mutating_tape_still_raises():
    def f(x):
        y = x.copy()
        parts = np.split(y, 2)   # a view np.split makes: cannot be brought up to date
        y[0] = 2.0 * y[1]
        return parts[0][0]
    with pytest.raises(mp.MutationError):
        mp.grad(f)(np.array([1.0, 2.0]))


# --- the float64 binary nodes' pullbacks: factors / quotient data, run inline by the sweep ----
_BINOPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b,
           "mul": lambda a, b: a * b, "div": lambda a, b: a / b}
_SPECIAL = [1.5, -0.0, 0.0, np.inf, -np.inf, np.nan, -2.25]
_CONST_KINDS = [np.float64, float, int]


def _bits(c):
    """(type, bytes of the primal, bytes of the tangent) of a cotangent: -0.0 and 0.0 differ."""
    if c is None:
        return None
    if type(c) is mp.DualArray:
        return (type(c), np.asarray(mp.primal(c)).tobytes(), type(mp.primal(c)),
                np.asarray(mp.tangent(c)).tobytes(), type(mp.tangent(c)))
    return type(c), np.asarray(c).tobytes(), getattr(c, "shape", None)


def _binary_cases():
    """(op, a, b, which): a, b values, which 0 both tracked, 1 a only, 2 b only, 3 a op a."""
    for a in _SPECIAL:
        for b in _SPECIAL:
            yield a, b, 0
        for k in _CONST_KINDS:
            for c in (2.0, -0.0, 0.0, np.inf, np.nan, 3, 0):
                if k is int and not (np.isfinite(c) and c == int(c)):
                    continue
                c = k(c)
                yield a, c, 1
                yield c, a, 2
        yield a, a, 3


def _cotangent_kinds():
    from mooncake_py.dual import DualArray, Tag
    tag = Tag()
    for g in (1.25, -0.0, np.nan, np.inf):
        yield np.float64(g)
    yield np.array(0.75)
    yield np.array(-0.0)
    yield DualArray(np.float64(-0.5), np.float64(2.0), tag)
    yield DualArray(np.float64(np.inf), np.float64(-0.0), tag)


def _factories():
    from mooncake_py.tape import fastpath
    return {"add": fastpath._pb_add, "sub": fastpath._pb_sub, "mul": fastpath._pb_mul,
            "div": fastpath._pb_div}


_FACTORIES = _factories()


def _bits_all(cs):
    return [_bits(c) for c in cs]


def _same_as_general(got, want, op, g):
    """Bitwise; for division at a dual cotangent the primals only (the short path's
    ``g * div(1, b)`` multiplies the tangent by the factor, so an inf or -0.0 tangent gives nan
    or -0.0 there, where the rule's dual program, which drops the constant's zero tangent,
    gives 0.0)."""
    for c, c0 in zip(got, want):
        if op == "div" and type(g) is mp.DualArray and c is not None:
            assert _bits(mp.primal(c)) == _bits(mp.primal(c0))
        else:
            assert _bits(c) == _bits(c0), (op, g)


def _node(op, a, b, which, debug):
    """A tape with the node ``a op b`` (operands tracked per ``which``) and the tracked leaves."""
    with mp.Config(debug_mode=debug):
        tape = Tape()
    xs = []
    if which == 3:
        ta = tape.track(np.float64(a))
        xs, out = [ta], _BINOPS[op](ta, ta)
    else:
        ta = tape.track(np.float64(a)) if which in (0, 1) else a
        tb = tape.track(np.float64(b)) if which in (0, 2) else b
        xs = [t for t in (ta, tb) if type(t) is TrackedArray]
        out = _BINOPS[op](ta, tb)
    return tape, xs, out


@pytest.mark.parametrize("op", list(_BINOPS))
def test_float64_binary_pullbacks_bitwise_equal_to_the_general_rules(op):
    from mooncake_py.tape.pullbacks import Pass, Quotient, cotangents
    n = 0
    with np.errstate(all="ignore"):
        for a, b, which in _binary_cases():
            tape, xs, out = _node(op, a, b, which, False)
            tape0, xs0, ref = _node(op, a, b, which, True)  # debug mode: the general rule
            pb = tape._pullbacks[out._node]
            if not (which == 2 and type(a) is np.float64):  # (NumPy's operator: the ufunc path)
                assert type(pb) is {"mul": tuple, "div": Quotient}.get(op, Pass)
            assert _bits(out._value) == _bits(ref._value)
            for g in _cotangent_kinds():
                # the node's cotangents alone (what other walkers of the tape call)
                got = cotangents(pb, g)
                want = tape0._pullbacks[ref._node](g)
                assert len(got) == len(want) == 2
                # bitwise the closures the short paths recorded before (the factories replayed
                # plans still use), and the general rule's results
                fast = not (which == 2 and type(a) is np.float64)
                if fast:
                    w = 0 if which == 3 else which
                    old = _FACTORIES[op](a, a if which == 3 else b, out._value, w)
                    assert _bits_all(got) == _bits_all(old(g)), (op, a, b, which, g)
                _same_as_general(got, want, op, g)
                if op != "mul":  # (callable data)
                    assert _bits_all(pb(g)) == _bits_all(got)
                # and through the sweep (inline, with its accumulation for a op a), against the
                # same sweep calling the old closure
                gs = tape.gradient(out, xs, seed=g)
                if fast:
                    tape_old, xs_old, out_old = _node(op, a, b, which, False)
                    tape_old._pullbacks[out_old._node] = old
                    gs_old = tape_old.gradient(out_old, xs_old, seed=g)
                    assert _bits_all(gs) == _bits_all(gs_old), (op, a, b, which, g)
                _same_as_general(gs, tape0.gradient(ref, xs0, seed=g), op, g)
                n += 1
    assert n > 1000


def test_float64_product_pullbacks_in_a_loop_bitwise_and_not_callable_closures():
    x = np.array([0.3, -0.0, 2.0, np.inf])

    def f(x):
        s = x[0] * x[1]
        for i in range(3):
            s = s * x[i] + 2 * s / x[i + 1] - x[i] / 3.0 + s * s
            s = 1.5 / s - s * 0.5
        return s
    with np.errstate(all="ignore"):
        v, g = mp.value_and_grad(f)(x)
        v0, g0 = _general(mp.value_and_grad(f), x)
        assert _bits(v) == _bits(v0)
        assert g.tobytes() == g0.tobytes()
        # forward-over-reverse runs the same sweep on dual cotangents
        xd = x[:3] + 1.0

        def f3(x):
            return f(np.concatenate([x, [1.0]]))
        hv = mp.hvp(f3)(xd, np.ones(3))
        hv0 = _general(mp.hvp(f3), xd, np.ones(3))
        assert hv.tobytes() == hv0.tobytes()


def test_a_sparse_cotangent_reaching_a_product_node_is_made_dense():
    from mooncake_py.rules.cotangents import IndexedCotangent
    with Tape() as tape:
        a, b = tape.track(np.float64(3.0)), tape.track(np.float64(-2.0))
        y = a * b
        z = a / b
    for out in (y, z):
        g = IndexedCotangent((), (), np.float64(1.5), True)
        got = tape.gradient(out, [a, b], seed=g)
        want = tape.gradient(out, [a, b], seed=g.dense())
        assert [_bits(c) for c in got] == [_bits(c) for c in want]


def test_two_parent_nodes_of_every_kind_pass_their_cotangents_on():
    # a two-output pullback's parents: two nodes, one constant on either side, a sequence
    # operand (a tuple of nodes, one cotangent each) on either side, and no node at all
    tape = Tape()
    x, y, z = (tape.track(np.float64(v)) for v in (1.0, 2.0, 3.0))
    nx, ny, nz = x._node, y._node, z._node
    nodes = [tape._add_node(pb, ps, np.float64(0.0)) for pb, ps in (
        (lambda g: (2 * g, 3 * g), (nx, ny)),
        (lambda g: (5 * g, 7 * g), (None, nz)),
        (lambda g: (11 * g, 13 * g), (nx, None)),
        (lambda g: ((17 * g, 19 * g), 23 * g), ((ny, nz), nx)),
        (lambda g: (29 * g, (31 * g, 37 * g)), (nz, (nx, ny))),
        (lambda g: (41 * g, 43 * g), (None, None)))]
    total = tape._add_node(lambda g: (g,) * len(nodes), tuple(nodes), np.float64(0.0))
    out = TrackedArray(np.float64(0.0), tape, total)
    gx, gy, gz = tape.gradient(out, [x, y, z])
    assert (gx, gy, gz) == (2 + 11 + 23 + 31, 3 + 17 + 37, 7 + 19 + 29)
