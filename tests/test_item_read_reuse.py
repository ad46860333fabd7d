"""An element read again from an array at the same tape node (``theta[0]`` in every step of a
loop) is the first read's node (tape/fastpath.py, mixed/dual_scalars.py): only while the array
is unchanged, and only where the short paths would have recorded the read.

Gradients then differ from the general path's in the last bits where reads repeat: the reused
read's cotangents are summed before they are added into the array's, where the general path
(one node per read) adds each into the array's in turn. Those comparisons are to 1e-14
relative; primal values are compared bitwise, as they must be the same numbers."""
import operator

import numpy as np
import pytest

import mooncake_py as mp
from benchmarks.rk4 import make_rk4
from mooncake_py.tape import Tape, TrackedArray
from mooncake_py.tape.pullbacks import ItemRead


def _general(fn, *args):
    """``fn(*args)`` with the short paths off (debug mode takes the general path)."""
    with mp.Config(debug_mode=True):
        return fn(*args)


def _close(a, b):
    """Equal up to the order of a sum of the cotangents of a repeated read (module docstring)."""
    np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-14 * np.max(np.abs(b)))


def _fd_grad(f, x, h=1e-6):
    return np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(len(x))])


def _reads(tape):
    return [k for k, fn in enumerate(tape._fns) if fn is operator.getitem]


def test_repeated_reads_share_one_node():
    with Tape() as tape:
        x = tape.track(np.array([1.0, 2.0, 3.0]))
        a, b, c = x[0], x[np.int64(0)], x[np.intp(0)]
        d = x[1]
        y = a * b + c * d + x[1]
    assert a._node == b._node == c._node != d._node
    assert type(tape._pullbacks[a._node]) is ItemRead
    assert len(_reads(tape)) == 2
    np.testing.assert_array_equal(tape.gradient(y, [x])[0], [2 * 1.0 + 2.0, 1.0 + 1.0, 0.0])
    # a negative index of the same element is another key: a node of its own, same value
    with Tape() as tape:
        x = tape.track(np.array([1.0, 2.0]))
        e, f = x[1], x[-1]
    assert e._node != f._node and e._value == f._value


def test_two_dimensional_keys():
    with Tape() as tape:
        a = tape.track(np.arange(1.0, 7.0).reshape(2, 3))
        p, q, r = a[1, 2], a[(1, 2)], a[np.int64(1), 2]
        s = a[1, 1]
        y = p * q * r + s
    assert p._node == q._node == r._node != s._node
    g = tape.gradient(y, [a])[0]
    np.testing.assert_array_equal(g, [[0.0, 0.0, 0.0], [0.0, 1.0, 3 * 6.0 ** 2]])


def test_a_direct_write_makes_the_next_read_a_new_node():
    with Tape() as tape:
        x = tape.track(np.array([1.0, 2.0]))
        y = x * 1.0
        a = y[0]
        y[0] = a * 3.0
        b = y[0]
        c = y[0]
        z = a * b * c
    assert a._node != b._node == c._node
    assert float(a._value) == 1.0 and float(b._value) == 3.0
    # z = x0 · (3 x0)²
    np.testing.assert_array_equal(tape.gradient(z, [x])[0], [27.0, 0.0])


def f_writes(x):
    """Reads again after every kind of write into y: direct, through a view of a row, into all
    of it (y[...] = ...), and through a row view that went stale (written through y)."""
    y = np.zeros_like(x, shape=(2, 2))
    y[0, 0], y[1, 1] = x[0], x[1]
    s = y[0, 0] * y[0, 0] + y[1, 1] * x[2]
    row = y[0]
    row[0] = s * x[2]                   # through a view: y[0, 0] changes
    t = y[0, 0] * y[0, 0] + row[0]
    other = y[1]
    u = other[1] * other[1]
    y[1, 1] = t + u                     # directly: `other` is now stale, viewed again
    w = other[1] * y[1, 1] + y[1, 1]
    y[...] = y * x[0] + 0.5             # all of it
    v = y[0, 0] * y[1, 1] + y[0, 1] * y[0, 1] + y[0, 0]
    return s + t + u + w + v + x[0] * x[0]


def test_writes_between_reads_give_the_new_values():
    x = np.array([0.7, -1.3, 0.4])
    value, g = mp.value_and_grad(f_writes)(x)
    assert value == f_writes(x)  # the NumPy primal: every read saw what NumPy reads
    v0, g0 = _general(mp.value_and_grad(f_writes), x)
    assert value == v0
    _close(g, g0)
    np.testing.assert_allclose(g, _fd_grad(f_writes, x), rtol=1e-6)
    c = mp.prepare_gradient_cache(f_writes, x, replay=False)
    v1, (g1,) = mp.value_and_gradient(c, f_writes, x)
    assert v1 == value
    _close(g1, g)
    c = mp.prepare_gradient_cache(f_writes, x)
    v2, (g2,) = mp.value_and_gradient(c, f_writes, x)
    assert v2 == value
    _close(g2, g)


def test_write_through_a_view_moves_the_read_of_its_parent():
    with Tape() as tape:
        x = tape.track(np.array([2.0, 5.0]))
        y = np.zeros_like(x, shape=(2, 2))
        y[0, 0] = x[0]
        a = y[0, 0]
        row = y[0]
        row[0] = x[1]
        b = y[0, 0]
        z = a * b
    assert a._node != b._node and float(b._value) == 5.0
    np.testing.assert_array_equal(tape.gradient(z, [x])[0], [5.0, 2.0])


def test_a_write_the_tape_cannot_follow_still_raises():
    def f(x):
        y = x * 1.0
        a = y[0]
        left, _ = np.split(y, 2)  # pieces are not views the tape follows
        left[0] = a * 2.0
        return y[0]
    with pytest.raises(mp.MutationError):
        mp.grad(f)(np.array([1.0, 2.0]))


@pytest.mark.parametrize("steps", [1, 6])
def test_rk4_reads_theta_once(steps):
    f = make_rk4(steps)
    th = np.array([1.1, 0.4, 0.1, 0.4])
    with Tape() as tape:
        f(tape.track(th))
    # theta[0..3] once for the whole loop; y[i, 0] and y[i, 1] once a step (y moves each write)
    assert len(_reads(tape)) == 4 + 2 * steps
    with mp.Config(debug_mode=True), Tape() as tape0:
        f(tape0.track(th))
    assert len(_reads(tape0)) == 4 * 4 * steps + 2 * steps  # (lv: 4 reads, 4 calls a step)


def test_rk4_gradient_and_hvp():
    f = make_rk4(25)
    th, v = np.array([1.1, 0.4, 0.1, 0.4]), np.array([1.0, -0.5, 0.25, 2.0])
    value, g = mp.value_and_grad(f)(th)
    v0, g0 = _general(mp.value_and_grad(f), th)
    assert value == v0 == f(th)
    _close(g, g0)
    np.testing.assert_allclose(g, _fd_grad(f, th), rtol=1e-6)
    _, (g1,) = mp.value_and_gradient(mp.prepare_gradient_cache(f, th, replay=False), f, th)
    _close(g1, g0)
    hv = mp.hvp(f)(th, v)
    _close(hv, _general(mp.hvp(f), th, v))
    h = 1e-6
    np.testing.assert_allclose(hv, (mp.grad(f)(th + h * v) - mp.grad(f)(th - h * v)) / (2 * h),
                               rtol=1e-5)
    _, t = mp.jvp(mp.grad(f), (th,), (v,))
    _close(t, hv)
    _, g2, hv2 = mp.value_and_hvp(mp.prepare_hvp_cache(f, th, replay=False), f, v, th)
    _close(g2, g0)
    _close(hv2, hv)


def test_dual_reads_share_one_node_and_see_writes():
    d = mp.dual(np.array([1.0, 2.0]), np.array([0.5, -1.0]))
    with Tape() as tape:
        x = tape.track(d)
        a, b = x[0], x[0]
        y = x * 1.0
        c = y[1]
        y[1] = a * b
        e, e2 = y[1], y[1]
    assert a._node == b._node and a._value is b._value
    assert e._node == e2._node != c._node
    assert float(mp.primal(e._value)) == 1.0 and float(mp.tangent(e._value)) == 1.0


def test_dual_writes_between_reads():
    x, v = np.array([0.7, -1.3, 0.4]), np.array([0.3, 1.0, -2.0])
    hv = mp.hvp(f_writes)(x, v)
    _close(hv, _general(mp.hvp(f_writes), x, v))
    _, t = mp.jvp(mp.grad(f_writes), (x,), (v,))
    _close(t, hv)
    h = 1e-6
    fd = (mp.grad(f_writes)(x + h * v) - mp.grad(f_writes)(x - h * v)) / (2 * h)
    np.testing.assert_allclose(hv, fd, rtol=1e-5)


def test_debug_mode_reads_are_separate_nodes():
    with mp.Config(debug_mode=True), Tape() as tape:
        x = tape.track(np.array([1.0, 2.0]))
        a, b = x[0], x[0]
    assert a._node != b._node


def test_a_rule_registered_for_getitem_sees_every_read():
    from mooncake_py.rules.registry import RRULES
    saved = RRULES[operator.getitem]
    calls = []

    def rule(args, kwargs, needs):
        calls.append(args[1])
        return saved(args, kwargs, needs)
    x = np.array([2.0, 3.0])
    with Tape() as tape:
        t = tape.track(x)
        t[0]  # read before the rule: the short path's node
        RRULES[operator.getitem] = rule
        try:
            a, b = t[0], t[0]
        finally:
            RRULES[operator.getitem] = saved
        y = a * b
    assert calls == [0, 0] and a._node != b._node
    np.testing.assert_array_equal(tape.gradient(y, [t])[0], [4.0, 0.0])


def test_closed_tape_still_refuses_a_read():
    kept = []

    def f(x):
        kept.append(x)
        return x[0] * x[0]
    mp.grad(f)(np.array([1.0, 2.0]))
    with pytest.raises(mp.EscapedValueError):
        kept[0][0]


def test_outer_handle_read_under_an_inner_tape():
    with Tape() as outer:
        x = outer.track(np.array([2.0, 3.0]))
        a = x[0]
        with Tape() as inner:
            y = inner.track(np.array([5.0]))
            b = x[0]  # the outer tape's read
            c, c2 = y[0], y[0]
            z = c * c2
        assert b._tape is outer and b._node == a._node
        assert c._tape is inner and c._node == c2._node
        np.testing.assert_array_equal(inner.gradient(z, [y])[0], [10.0])
        w = a * b
    np.testing.assert_array_equal(outer.gradient(w, [x])[0], [4.0, 0.0])


def test_reverse_over_reverse_still_refused():
    def f(x):
        a = x[0]  # the read the inner function repeats
        return np.sum(mp.grad(lambda y: y[0] * x[0])(np.array([1.0]))) * a
    with pytest.raises(mp.ReverseOverReverseError):
        mp.grad(f)(np.array([2.0]))


def test_read_values_are_fresh_handles():
    # the reused read is a new TrackedArray on the same node: rebinding one (t += ...) leaves
    # the other, and the next read, as they were
    with Tape() as tape:
        x = tape.track(np.array([1.0, 2.0]))
        a = x[0]
        t = x[0]
        t += 5.0
        b = x[0]
    assert type(a) is TrackedArray and a is not b
    assert float(a._value) == float(b._value) == 1.0 and a._node == b._node
    assert float(t._value) == 6.0 and t._node != a._node


def test_reads_that_never_repeat_turn_the_memo_off_and_stay_right():
    from mooncake_py.tape.tape import READ_MISSES
    n = READ_MISSES + 8

    def f(x):
        s = 0.0
        for i in range(n):  # each element once: the memo stops after READ_MISSES of them
            s = s + x[i] * 0.5
        for i in range(n):  # read again: new nodes, as without the memo
            s = s + x[i] * x[i]
        return s
    x = np.linspace(0.5, 1.5, n)
    with Tape() as tape:
        f(tape.track(x))
    assert tape._reads is None and len(_reads(tape)) == 3 * n  # (no read shared)
    value, g = mp.value_and_grad(f)(x)
    assert value == f(x)
    np.testing.assert_array_equal(g, _general(mp.grad(f), x))
    hv = mp.hvp(f)(x, x)
    np.testing.assert_array_equal(hv, _general(mp.hvp(f), x, x))
    # a repeated read resets the count: reads interleaved with repeats keep the memo on
    with Tape() as tape:
        t = tape.track(x)
        for i in range(n):
            t[i] * t[0]
    assert tape._reads is not None and len(_reads(tape)) == n
