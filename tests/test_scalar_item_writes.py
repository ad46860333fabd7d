"""The short path of a scalar item write ``y[i, k] = s`` (tape/fastpath.py ``_fast_setitem``):
one element of a float64 buffer (a dual buffer in an HVP) written with a float64 scalar. It
must record exactly the node the general write (``Tape.write``) records, so that gradients and
HVPs are bitwise those of the general path, and leave every other write to the general path."""
import numpy as np
import pytest

import mooncake_py as mp
from benchmarks.rk4 import make_rk4
from mooncake_py.tape import Tape, TrackedArray, fastpath
from mooncake_py.tape import tape as tape_mod

TH = np.array([1.1, 0.4, 0.1, 0.4])
V = np.array([1.0, -0.5, 0.25, 2.0])


@pytest.fixture
def general_writes(monkeypatch):
    """A function that runs its argument with every write going through Tape.write."""
    def run(fn, *args):
        with monkeypatch.context() as m:
            m.setattr(TrackedArray, "__setitem__", fastpath._general_setitem)
            return fn(*args)
    return run


@pytest.fixture
def count_writes(monkeypatch):
    """The keys that reach Tape.write (the general write), appended as they arrive."""
    keys = []
    general = tape_mod.Tape.write

    def counting(self, h, key, value):
        keys.append(key)
        return general(self, h, key, value)
    monkeypatch.setattr(tape_mod.Tape, "write", counting)
    return keys


def _same(a, b):
    """Bitwise equality of two results (values, gradients, tuples of them)."""
    if type(a) is tuple:
        assert type(b) is tuple and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
        return
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes(), (a, b)


def _check(f, x, general_writes, v=None, fd=True):
    """Gradient and HVP of ``f`` at ``x``: bitwise those of the general write (and of debug
    mode, where every short path is off), and close to central differences."""
    got = mp.value_and_grad(f)(x.copy())
    _same(got, general_writes(mp.value_and_grad(f), x.copy()))
    with mp.Config(debug_mode=True):  # (no short path, and no reuse of repeated reads, whose
        dbg = mp.value_and_grad(f)(x.copy())  # cotangents are then summed in another order)
    np.testing.assert_allclose(got[0], dbg[0], rtol=0, atol=0)
    np.testing.assert_allclose(got[1], dbg[1], rtol=1e-14, atol=1e-300)
    v = np.linspace(0.5, -1.0, x.size).reshape(x.shape) if v is None else v
    hv = mp.hvp(f)(x.copy(), v)
    _same(hv, general_writes(mp.hvp(f), x.copy(), v))
    if fd:
        h = 1e-6
        g = np.array([(f(x + h * e) - f(x - h * e)) / (2 * h)
                      for e in np.eye(x.size).reshape((x.size,) + x.shape)]).reshape(x.shape)
        np.testing.assert_allclose(got[1], g, rtol=1e-6, atol=1e-8)
        gp, gm = mp.grad(f)(x + h * v), mp.grad(f)(x - h * v)
        np.testing.assert_allclose(hv, (gp - gm) / (2 * h), rtol=1e-5, atol=1e-7)
    return got, hv


# --- RK4: the loop the short path is for ----------------------------------------------------------
def test_rk4_gradient_and_hvp_bitwise_against_the_general_write(general_writes, count_writes):
    f = make_rk4(30)
    _check(f, TH, general_writes, V)
    del count_writes[:]
    mp.value_and_grad(f)(TH)
    mp.hvp(f)(TH, V)
    assert count_writes == []  # every write, float64 and dual, took the short path
    general_writes(mp.grad(f), TH)
    assert len(count_writes) == 2 * 31  # (and the forced general path is the general one)


def test_rk4_prepared_caches_unchanged():
    # recording tapes log each write as a plan step through the general write
    f = make_rk4(12)
    c = mp.prepare_gradient_cache(f, TH)
    val, (grad,) = mp.value_and_gradient(c, f, TH)
    want = mp.value_and_grad(f)(TH)
    np.testing.assert_allclose(val, want[0], rtol=1e-12)
    np.testing.assert_allclose(grad, want[1], rtol=1e-12, atol=1e-12)
    ch = mp.prepare_hvp_cache(f, TH)
    np.testing.assert_allclose(mp.value_and_hvp(ch, f, V, TH)[-1], mp.hvp(f)(TH, V),
                               rtol=1e-12, atol=1e-12)


def _record(write_general, monkeypatch):
    """The write nodes and bookkeeping of a small recording, on a tape made by hand."""
    with monkeypatch.context() as m:
        if write_general:
            m.setattr(TrackedArray, "__setitem__", fastpath._general_setitem)
        tape = Tape()
        x = tape.track(np.array([1.5, -2.0]))
        y = np.zeros_like(x, shape=(3, 2))
        y[0, 0] = 2.0  # a Python float
        y[0, 1] = np.float64(3.0)  # a plain NumPy scalar
        y[1, 0] = x[0] * x[1]  # a tracked scalar
        y[np.int64(2), -1] = 4  # a Python int, NumPy int and negative keys
        y[1, 0] = y[1, 0] * x[0]  # the element again: its saved old value is not zero
        y[-1] = x[1]  # an int key of fewer axes than y: a row (the general write)
    nodes = [(type(tape._pullbacks[n]).__name__,
              {k: getattr(tape._pullbacks[n], k) for k in tape_mod._Write.__slots__},
              tape._parents[n]) for n in tape._writes]
    return (type(tape).__name__, nodes, list(tape._writes), list(tape._splits),
            tape._max_write, sorted(tape._last_write.values()), y._node, y._value.copy())


def test_write_nodes_are_the_general_writes(monkeypatch):
    fast, general = _record(False, monkeypatch), _record(True, monkeypatch)
    assert repr(fast) == repr(general)
    assert fast[0] == "MutatingTape" and len(fast[1]) == 6
    kinds = [type(n[1]["saved"]) for n in fast[1]]
    assert kinds[:5] == [np.float64] * 5 and kinds[5] is np.ndarray
    assert fast[1][4][1]["saved"] == 1.5 * -2.0


# --- the cases around it ----------------------------------------------------------------------------
def _repeated(x):
    y = np.zeros_like(x, shape=(4,))
    y[1] = x[0] * x[1]
    y[1] = y[1] * x[2] + x[0]  # the same element, read and written again
    y[1] = np.sin(y[1])
    y[0] = y[1] * y[1]
    y[np.int32(1)] = x[1] - y[0]
    return np.sum(y * x)


def _write_then_read(x):
    y = np.zeros_like(x, shape=(2, 2))
    s = 0.0
    for i in range(4):
        y[i % 2, i // 2] = x[i] * (s + 1.0)
        s = s + y[i % 2, i // 2] * x[(i + 1) % 4]  # the element just written
    return s + np.sum(y)


def _negative_and_numpy_keys(x):
    y = np.zeros_like(x, shape=(4, 3))
    y[-1, -1] = x[0]
    y[np.int64(-2), np.intp(0)] = x[1] * x[2]
    y[(np.int32(0), 1)] = x[3] / x[0]
    y[np.uint8(1), np.int16(2)] = x[2] * x[2]  # other integer types: the general write
    y[-4, np.int64(2)] = y[-1, 2] + y[1, 2]
    return np.sum(y * y) + y[0, 2]


def _into_views(x):
    y = np.zeros_like(x, shape=(3, 4))
    row = y[1]
    row[2] = x[0] * x[1]  # through an indexed view: moves y too
    y.T[3, 0] = x[2]  # through a rearranged view
    flat = y.reshape(-1)
    flat[5] = flat[6] * x[3]  # a write, then a read of y's element through its parent
    y[2, 1] = row[2] + y[1, 1]
    return np.sum(y * y) + row[1] * x[0]


def _array_reads_between_writes(x):
    # y * y reads the whole buffer between writes: the sweep must restore each element's old
    # value (the saved one, not zero: the buffer starts as x) before that pullback runs
    y = x.copy()
    s = 0.0
    for i in range(2 * len(x)):
        y[i % len(x)] = y[(i - 1) % len(x)] * x[i % len(x)] + 0.5
        s = s + np.sum(y * y) * x[i % 3]
    return s


def _zero_d(x):
    y = np.zeros_like(x, shape=())
    y[()] = x[0] * x[1]  # the empty tuple: the one element of a 0-d buffer
    z = y * x[2]
    y[()] = y[()] + x[3]
    y[...] = y * y  # (Ellipsis: the general write)
    return z + y


def _one_d(x):
    y = x.copy()  # an argument's copy: a buffer of its own
    for i in range(len(x)):
        y[i] = y[i - 1] * x[i]
    return np.sum(y)


@pytest.mark.parametrize("f", [_repeated, _write_then_read, _negative_and_numpy_keys,
                               _into_views, _zero_d, _one_d, _array_reads_between_writes])
def test_writes_bitwise_and_against_differences(f, general_writes):
    _check(f, np.array([0.7, -1.3, 0.4, 1.9]), general_writes)


def test_views_and_partial_keys_take_the_general_write(count_writes):
    mp.grad(_into_views)(np.array([0.7, -1.3, 0.4, 1.9]))
    assert count_writes == [2, (3, 0), 5]  # the three writes through views

    def rows(x):
        y = np.zeros_like(x, shape=(2, 4))
        y[1] = x  # a key of fewer axes
        y[0, 1] = x[2]
        return np.sum(y * y)
    del count_writes[:]
    mp.grad(rows)(np.ones(4))
    assert count_writes == [1]


def test_out_of_range_key_raises_numpys_error_and_the_tape_goes_on(general_writes):
    def f(x):
        y = np.zeros_like(x, shape=(2, 2))
        y[0, 0] = x[0] * x[1]
        for key in ((2, 0), (0, -3), 5, (0, 0, 0)):
            with pytest.raises(IndexError) as err:
                y[key] = x[1]
            with pytest.raises(IndexError) as plain:
                np.zeros((2, 2))[key] = 1.0
            assert str(err.value) == str(plain.value)
        y[1, 1] = y[0, 0] * x[0]
        return np.sum(y * y)
    _check(f, np.array([0.5, 1.5]), general_writes)


def test_float32_buffers_take_the_general_write(general_writes, count_writes):
    def f(x):
        y = np.zeros_like(x, shape=(3,))
        for i in range(3):
            y[i] = x[i] * x[i - 1]
        return np.sum(y)
    x32 = np.array([0.5, 1.5, -2.0], dtype=np.float32)
    got = mp.value_and_grad(f)(x32)
    assert count_writes == [0, 1, 2]
    assert got[1].dtype == np.float32
    _same(got, general_writes(mp.value_and_grad(f), x32))

    def g(x):  # float64 values into a float32 buffer
        y = np.zeros_like(x, shape=(2,), dtype=np.float32)
        y[0] = x[0] * x[1]
        return np.sum(y * y) + x[0]
    del count_writes[:]
    x = np.array([0.3, 1.7])
    got = mp.value_and_grad(g)(x)
    assert count_writes == [0]
    _same(got, general_writes(mp.value_and_grad(g), x))


def test_int_buffers_behave_as_numpy_does(general_writes):
    def into_int(x):
        y = np.zeros(3, dtype=np.int64, like=x)  # a plain int array: not tracked
        y[0] = x[0] * 2.6  # truncated, as NumPy does (int() of a tracked value: derivative 0)
        y[1] = -x[1]
        return x[0] * y[0] + x[1] * y[1]
    x = np.array([1.0, 1.5])
    got = mp.value_and_grad(into_int)(x)
    _same(got, general_writes(mp.value_and_grad(into_int), x))
    _same(got, (np.float64(2.0 - 1.5), np.array([2.0, -1.0])))

    def int_values(x):  # Python ints into a float64 buffer: stored as NumPy stores them
        y = np.zeros_like(x, shape=(3,))
        y[0], y[1], y[2] = 3, -7, x[0]
        return np.sum(y * x)
    _check(int_values, np.array([0.5, 2.0, -1.0]), general_writes)

    def big_int(x):  # (rounded to float64 on the way in)
        y = np.zeros_like(x, shape=(2,))
        y[0], y[1] = -(2 ** 60) - 1, x[1] * x[0]
        return np.sum(y * x)
    _check(big_int, np.array([0.5, 2.0]), general_writes, fd=False)
    assert mp.value_and_grad(big_int)(np.ones(2))[0] == np.float64(-(2 ** 60)) + 1.0


def test_debug_mode_and_other_tapes_take_the_general_write(count_writes):
    f = make_rk4(3)
    with mp.Config(debug_mode=True):
        mp.grad(f)(TH)
    assert len(count_writes) == 8

    del count_writes[:]
    t1, t2 = Tape(), Tape()
    a = t1.track(np.array([0.6, -1.1]))
    y = np.zeros_like(t2.track(np.ones(2)), shape=(2,))
    y[0] = 1.5
    for tape_write in (lambda: y.__setitem__(1, a[0]),
                       lambda: fastpath._general_setitem(y, 1, a[0])):
        with pytest.raises((mp.TrackingLostError, ValueError, TypeError)) as err:
            tape_write()  # a value of another tape: the general write, and its error
        assert "tracked value" in str(err.value) or "tracked value" in str(err.value.__cause__)
    assert len(count_writes) == 2 and y._value.tolist() == [1.5, 0.0]


def test_write_into_a_stale_handle_still_raises():
    def f(x):
        y = x.copy()
        parts = np.split(y, 2)  # views np.split makes: cannot be brought up to date
        y[0] = 2.0 * y[1]
        parts[0][1] = x[0]
        return np.sum(y)
    with pytest.raises(mp.MutationError):
        mp.grad(f)(np.array([1.0, 2.0, 3.0, 4.0]))


def test_escaped_buffer_write_raises():
    kept = []

    def f(x):
        y = np.zeros_like(x, shape=(2,))
        y[0] = x[0]
        kept.append(y)
        return np.sum(y)
    mp.grad(f)(np.ones(2))
    with pytest.raises(mp.EscapedValueError):
        kept[0][1] = 1.0


def test_sweeping_twice_restores_the_same_buffer():
    tape = Tape()
    x = tape.track(np.array([0.5, 1.25]))
    y = np.zeros_like(x, shape=(4,))
    for i in range(4):
        y[i] = x[i % 2] * (y[i - 1] + 1.0)
    out = np.sum(y * y)
    final = y._value.copy()
    g1 = tape.gradient(out, [x])[0]
    assert np.array_equal(y._value, final)
    g2 = tape.gradient(out, [x])[0]
    _same(g1, g2)
    assert np.array_equal(y._value, final)


def test_stale_item_reads_still_raise_on_float64_and_dual_buffers():
    def f(x):
        y = x.copy()
        parts = np.split(y, 2)  # views np.split makes: cannot be brought up to date
        y[0] = 2.0 * y[1]
        return parts[0][0] * x[1]  # an item read of a stale handle
    x = np.array([1.0, 2.0, 3.0, 4.0])
    with pytest.raises(mp.MutationError):
        mp.grad(f)(x)
    with pytest.raises(mp.MutationError):
        mp.hvp(f)(x, np.ones(4))
