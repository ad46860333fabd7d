"""Replay of plans that write into arrays (tape/replay_writes.py): a prepared cache of a
function that writes into a buffer it allocated must replay, and every replay must give
exactly (bitwise) what a fresh recording gives: gradient, pullback, HVP and Hessian caches.
Writes a plan does not represent keep the function recorded every call, and stay correct."""
import pickle
import warnings

import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.errors import MutationError
from mooncake_py.replay import plans as replay_module
from mooncake_py.replay.writes import _VIEW_WRITE, _WRITE


def _equal(a, b):
    """Same structure, same bits (NaNs in the same places)."""
    fa, fb = mp.ravel_pytree(a)[0], mp.ravel_pytree(b)[0]
    assert fa.shape == fb.shape
    np.testing.assert_array_equal(fa, fb)


def _inputs(shape, n=3):
    return [np.random.default_rng(k).standard_normal(shape) for k in range(n)]


# --- functions that write --------------------------------------------------------------------
def naive_map(x):
    y = np.empty_like(x)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            y[i, j] = np.sin(np.cos(np.exp(x[i, j])))
    return np.sum(y)


def cumsum_writes(x):
    out = np.empty_like(x)
    out[0] = x[0]
    for i in range(1, x.shape[0]):
        out[i] = out[i - 1] + x[i]  # reads the element written one step before
    return np.sum(out * out)


def overwrite_twice(x):
    y = np.zeros_like(x)
    y[1] = x[0] * x[1]
    s = y[1] * x[2]                  # read of the first value
    y[1] = np.sin(y[1]) + x[3]       # the same element again, from its old value
    return s + np.sum(y * x)


def slice_writes(x):
    y = np.ones_like(x)
    y[1:3] = x[:2] * 2.0             # a slice
    y[...] = y * x                   # all of it (read of the written buffer)
    y[-1] = 3.0                      # a constant
    y += np.cos(x)                   # += on the buffer
    return np.sum(y ** 2)


def view_writes(x):
    y = np.zeros_like(x)             # 3 x 4
    row = y[1]                       # a view of y
    y[1, 0] = x[0, 0] ** 2           # written through y: row is stale now (re-viewed on read)
    t = np.sum(row * x[1])
    row[2] = x[1, 2] * x[0, 1]       # written through the view: y moves too
    y.reshape(-1)[5] = np.exp(x[2, 3])  # through a reshape of all of y
    y[2][1] = x[2, 1] - 1.0          # y[i][j] = v
    return t + np.sum(np.sin(y) * x)


def shift_writes(x):
    y = np.ones_like(x)
    y[1:] = x[:-1] * x[1:]
    y[1:] = y[:-1]                   # the value is a view of the buffer written
    y[0] = y[2] * 2.0
    return np.sum(np.exp(y) * x)


def overwrite_read(x):
    y = np.zeros_like(x)
    y[0] = x[0]
    y[1] = x[1] * x[0]
    t = y[1] * x[2]                  # a read of the element overwritten next
    y[1] = np.sin(x[3])
    y[2] = x[2]
    return np.sum(y * y * x) + t * t


def returns_buffer(x):
    y = np.full_like(x, 0.5)
    for i in range(x.shape[0]):
        y[i] = y[i - 1] * x[i]
    return y, np.sum(y)


def copy_writes(x):
    y = x.copy()
    y[0] = y[1] * y[2]
    y[1:] += np.sin(x[:-1])          # through the view y[1:], then back into y
    return np.sum(y * y)


CASES = [naive_map, cumsum_writes, overwrite_twice, slice_writes, view_writes, copy_writes,
         shift_writes, overwrite_read]
SHAPES = {naive_map: (4, 5), cumsum_writes: (6,), overwrite_twice: (4,), slice_writes: (5,),
          view_writes: (3, 4), copy_writes: (4,), shift_writes: (5,),
          overwrite_read: (4,)}


def _close(a, b):
    """Equal to rounding: the prepared caches' default replay may run generated code
    (source_replay.py), which may order a sum's terms differently."""
    fa, fb = mp.ravel_pytree(a)[0], mp.ravel_pytree(b)[0]
    assert fa.shape == fb.shape
    np.testing.assert_allclose(fa, fb, rtol=1e-14, atol=1e-15)


# A fresh (unprepared) call records x[0] read twice at one node as one read node, whose
# cotangents it sums before adding them into x's; a plan replays each read as its own step, as
# the general path does: equal up to that order of the sum.
_REPEATS_READS = (overwrite_read,)


@pytest.mark.parametrize("f", CASES)
def test_gradient_replay_equals_fresh(f):
    xs = _inputs(SHAPES[f])
    r = replay_module.Replayer()  # the Python replay of the plan: bitwise
    cache = mp.prepare_gradient_cache(f, xs[0])
    same = _close if f in _REPEATS_READS else _equal
    for x in xs + xs:  # (a second round: calling again gives the same answer)
        want = mp.value_and_grad(f)(x)
        same(r.call(f, (x,), (0,)), want)
        _close(mp.value_and_gradient(cache, f, x), want)
    assert r.replays >= 5 and cache._replay.replays >= 4
    assert any(st[0] == _WRITE for st in r.plan.steps)


@pytest.mark.parametrize("f", CASES)
def test_hvp_replay_equals_fresh(f):
    xs = _inputs(SHAPES[f])
    cache = mp.prepare_hvp_cache(f, xs[0])
    py = mp.prepare_hvp_cache(f, xs[0])
    py._replay = replay_module.Replayer(dual=True, kind="hvp")  # the Python replay: bitwise
    fresh = mp.prepare_hvp_cache(f, xs[0], replay=False)
    for k, x in enumerate(xs + xs):
        v = np.random.default_rng(10 + k).standard_normal(x.shape)
        x0, v0 = x.copy(), v.copy()
        want = mp.value_and_hvp(fresh, f, v, x)
        (_close if f in _REPEATS_READS else _equal)(mp.value_and_hvp(py, f, v, x), want)
        _close(mp.value_and_hvp(cache, f, v, x), want)
        _equal((x, v), (x0, v0))  # the writes never reach the caller's arrays
    assert cache._replay.replays >= 4 and py._replay.replays >= 4


@pytest.mark.parametrize("f", [naive_map, cumsum_writes, view_writes])
def test_hessian_replay_equals_fresh(f):
    xs = _inputs(SHAPES[f])
    cache = mp.prepare_hessian_cache(f, xs[0])
    fresh = mp.prepare_hessian_cache(f, xs[0], chunk_size=cache.chunk_size, replay=False)
    for x in xs:
        got = mp.value_gradient_and_hessian(cache, f, x)
        _equal(got, mp.value_gradient_and_hessian(fresh, f, x))
        np.testing.assert_allclose(got[2], mp.hessian(f)(x), rtol=1e-12, atol=1e-12)
    assert sum(r.replays for r in cache._replay.values()) >= 2


def test_pullback_replay_returns_the_buffer():
    xs = _inputs((5,))
    cache = mp.prepare_pullback_cache(returns_buffer, xs[0])
    for k, x in enumerate(xs + xs):
        ybar = (np.arange(5.0) + k, 2.0)
        y, cots = mp.value_and_pullback(cache, returns_buffer, ybar, x)
        y0, pb = mp.vjp(returns_buffer, x)
        _equal((y, cots), (y0, pb(ybar)))
    assert cache._replay.replays >= 4
    first = mp.value_and_pullback(cache, returns_buffer, ybar, xs[0])[0][0]
    second = mp.value_and_pullback(cache, returns_buffer, ybar, xs[1])[0][0]
    assert first is not second  # each replay allocates its buffer afresh, as f does


def _returns_views(x):
    y = np.zeros_like(x)
    y[::2] = np.sin(x[::2])
    return y[1:], y                  # a view of the buffer, and the buffer


def test_pullback_replay_returns_views_of_the_buffer():
    cache = mp.prepare_pullback_cache(_returns_views, np.ones(5))
    for k, x in enumerate(_inputs((5,)) * 2):
        ybar = (np.arange(4.0) - k, np.ones(5) * k)
        got = mp.value_and_pullback(cache, _returns_views, ybar, x)
        y0, pb = mp.vjp(_returns_views, x)
        _equal(got, (y0, pb(ybar)))
    assert cache._replay.replays >= 4


def test_plan_holds_view_writes():
    cache = mp.prepare_gradient_cache(view_writes, np.ones((3, 4)))
    mp.value_and_gradient(cache, view_writes, np.ones((3, 4)))
    kinds = [st[0] for st in cache._replay.plan.steps]
    assert kinds.count(_WRITE) == 4 and kinds.count(_VIEW_WRITE) == 3


@pytest.mark.parametrize("f", CASES)
def test_gradient_matches_finite_differences(f):
    x = np.random.default_rng(5).standard_normal(SHAPES[f])
    r = replay_module.Replayer()
    r.call(f, (x,), (0,))
    g = r.call(f, (x,), (0,))[1][0]
    eps = 1e-6
    fd = [(f(x + eps * e) - f(x - eps * e)) / (2 * eps)
          for e in np.eye(x.size).reshape((x.size,) + x.shape)]
    np.testing.assert_allclose(g, np.reshape(fd, x.shape), rtol=1e-6, atol=1e-8)
    assert r.replays == 1


def _which(x):
    y = np.zeros_like(x)
    k = 0 if x[0] > 0 else 1          # the written element depends on a traced value
    y[k] = np.sin(x[2]) * x[1]
    y[2] = x[int(x[1] > 0)] ** 2
    return np.sum(y * y)


def test_branch_that_moves_the_write_rerecords():
    x = np.array([1.0, 2.0, 0.5])
    cache = mp.prepare_gradient_cache(_which, x)
    hcache = mp.prepare_hvp_cache(_which, x)
    fresh = mp.prepare_hvp_cache(_which, x, replay=False)
    v = np.array([0.3, -1.0, 2.0])
    for s in ([1, 1, 1], [1, 1, 1], [-1, 1, 1], [-1, 1, 1], [1, -1, 1]):
        xs = x * np.array(s, float)
        _equal(mp.value_and_gradient(cache, _which, xs), mp.value_and_grad(_which)(xs))
        _equal(mp.value_and_hvp(hcache, _which, v, xs), mp.value_and_hvp(fresh, _which, v, xs))
    r = cache._replay
    assert r.replays == 2 and not r.disabled  # each flip re-recorded (and made a new plan)


def _into_constant(x, buf):
    buf[0] += 1                       # f changes its constant (integer) argument
    y = np.empty_like(x)
    y[0] = x[0] * buf[0]
    y[1] = x[1]
    return np.sum(y)


def test_write_into_a_constant_argument_is_not_planned():
    c = mp.prepare_gradient_cache(_into_constant, np.ones(2), np.zeros(1, np.int64))
    for k in range(3):
        buf, buf0 = np.full(1, k), np.full(1, k)
        got = mp.value_and_gradient(c, _into_constant, np.ones(2) * k, buf)
        _equal(got, mp.value_and_grad(_into_constant)(np.ones(2) * k, buf0))
        np.testing.assert_array_equal(buf, buf0)  # both wrote once
    assert c._replay.plan is None and c._replay.replays == 0


def _into_input(x):
    x[0] = x[1] * 2.0                 # into the caller's own array
    return np.sum(x * x)


def _fancy(x):
    y = np.zeros_like(x)
    y[[0, 2]] = x[:2] * 3.0           # an index array
    return np.sum(y * x)


def _into_op_output(x):
    y = x * 1.0                       # an op's result, not an allocation the plan knows
    y[0] = np.sin(x[1])
    return np.sum(y * y)


@pytest.mark.parametrize("f", [_into_input, _fancy, _into_op_output])
def test_writes_a_plan_does_not_represent_are_recorded(f):
    cache = mp.prepare_gradient_cache(f, np.ones(3))
    for k in range(4):
        x = np.arange(3.0) + k
        _equal(mp.value_and_gradient(cache, f, x.copy()), mp.value_and_grad(f)(x.copy()))
    assert cache._replay.plan is None and cache._replay.replays == 0


def _split_write(x):
    y = np.zeros_like(x)
    a, b = np.split(y, 2)             # views not made by indexing: a write makes y stale
    a[0] = x[0]
    return np.sum(y * x)


def test_mutation_errors_are_unchanged():
    x = np.ones(4)
    with pytest.raises(MutationError) as fresh:
        mp.grad(_split_write)(x)
    cache = mp.prepare_gradient_cache(_split_write, x)
    for _ in range(2):
        with pytest.raises(MutationError) as cached:
            mp.value_and_gradient(cache, _split_write, x)
        assert str(cached.value) == str(fresh.value)
    # after the error the cache serves a function it can replay
    good = mp.prepare_gradient_cache(naive_map, np.ones((2, 2)))
    for _ in range(2):
        _equal(mp.value_and_gradient(good, naive_map, np.ones((2, 2))),
               mp.value_and_grad(naive_map)(np.ones((2, 2))))


def _raises_on_negative(x):
    y = np.empty_like(x)
    y[0] = x[0] * 2.0
    if y[0] < 0:
        raise ValueError("negative")
    y[1] = x[1]
    return np.sum(y)


def test_an_error_between_writes_leaves_the_cache_working():
    cache = mp.prepare_gradient_cache(_raises_on_negative, np.ones(2))
    mp.value_and_gradient(cache, _raises_on_negative, np.ones(2))
    with pytest.raises(ValueError, match="negative"):
        mp.value_and_gradient(cache, _raises_on_negative, -np.ones(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for k in range(3):
            x = np.array([1.0, 2.0]) + k
            _equal(mp.value_and_gradient(cache, _raises_on_negative, x),
                   mp.value_and_grad(_raises_on_negative)(x))
    assert cache._replay.replays >= 3


def test_compiled_caches_with_writes():
    xs = _inputs((3, 3))
    g = mp.prepare_gradient_cache(naive_map, xs[0], compile=True)
    h = mp.prepare_hvp_cache(naive_map, xs[0], compile=True)
    fresh = mp.prepare_hvp_cache(naive_map, xs[0], replay=False)
    v = np.ones((3, 3))
    for x in xs:
        _equal(mp.value_and_gradient(g, naive_map, x), mp.value_and_grad(naive_map)(x))
        got, want = mp.value_and_hvp(h, naive_map, v, x), mp.value_and_hvp(fresh, naive_map, v, x)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-300)


def test_pickled_cache_replans():
    x = np.ones((2, 3))
    c = mp.prepare_gradient_cache(naive_map, x)
    mp.value_and_gradient(c, naive_map, x)
    back = pickle.loads(pickle.dumps(c))
    for _ in range(2):
        _equal(mp.value_and_gradient(back, naive_map, x * 2), mp.value_and_grad(naive_map)(x * 2))
    assert back._replay.replays == 1


def test_plan_tape_switches_class_on_first_write():
    tape = replay_module.PlanTape()
    x = tape.track(np.ones(2))
    y = np.zeros_like(x)
    y[0] = x[1]
    assert type(tape) is replay_module.PlanMutatingTape and tape.plan_broken is None
    y[[1]] = x[0]
    assert tape.plan_broken == "a write with an index array"


def like_buffer(x):
    y = np.zeros(x.shape[0] + 1, like=x)   # a like= constructor: a _LIKE step
    z = np.asarray(np.ones(2), like=x)     # (its argument may come back: never written into)
    for i in range(x.shape[0]):
        y[i + 1] = y[i] + np.sin(x[i]) * z[i % 2]
    return np.sum(y * y)


def test_like_constructed_buffers_replay():
    xs = _inputs((4,))
    g = mp.prepare_gradient_cache(like_buffer, xs[0])
    h = mp.prepare_hvp_cache(like_buffer, xs[0])
    fresh = mp.prepare_hvp_cache(like_buffer, xs[0], replay=False)
    for k, x in enumerate(xs):
        _equal(mp.value_and_gradient(g, like_buffer, x), mp.value_and_grad(like_buffer)(x))
        v = np.full(4, 0.5 + k)
        _equal(mp.value_and_hvp(h, like_buffer, v, x), mp.value_and_hvp(fresh, like_buffer, v, x))
    assert g._replay.replays == 2 and h._replay.replays == 2
    assert any(st[0] == replay_module._LIKE for st in g._replay.plan.steps)


def _into_asarray(x):
    y = np.asarray(np.zeros(2), like=x)    # may be its argument: not a buffer a plan writes
    y[0] = x[0]
    return np.sum(y)


def test_write_into_asarray_like_is_not_planned():
    c = mp.prepare_gradient_cache(_into_asarray, np.ones(2))
    for k in range(3):
        _equal(mp.value_and_gradient(c, _into_asarray, np.ones(2) * k),
               mp.value_and_grad(_into_asarray)(np.ones(2) * k))
    assert c._replay.replays == 0


def _complex_after_write(x):
    y = np.zeros_like(x)
    y[0] = x[0] * x[1]
    z = y * (1 + 2j)                       # complex values: not planned
    return np.sum(np.abs(z) ** 2)


def test_complex_after_a_write_is_recorded():
    c = mp.prepare_gradient_cache(_complex_after_write, np.ones(2))
    for k in range(3):
        x = np.array([1.0, 2.0]) + k
        _equal(mp.value_and_gradient(c, _complex_after_write, x),
               mp.value_and_grad(_complex_after_write)(x))
    assert c._replay.replays == 0




@pytest.mark.parametrize("f", [cumsum_writes, overwrite_twice, overwrite_read])
def test_dual_cotangent_split_equals_the_general_write_pullback(f, monkeypatch):
    # both end in products with the buffer: the cotangents reaching their writes are duals,
    # which the write pullback splits by replay_writes.split_dual_item; the general path (and
    # finite differences of the gradient) must agree
    from mooncake_py.tape import tape as tape_module
    x, v = _inputs(SHAPES[f], 2)
    short = mp.hvp(f)(x, v)
    monkeypatch.setattr(tape_module, "_split_item", None)
    _equal(short, mp.hvp(f)(x, v))
    eps = 1e-6
    fd = (mp.grad(f)(x + eps * v) - mp.grad(f)(x - eps * v)) / (2 * eps)
    np.testing.assert_allclose(short, fd, rtol=1e-6, atol=1e-8)


def test_derivative_cache_of_a_writing_function_records_and_is_right():
    # (forward replay does not represent writes: such a function is recorded every call)
    xs = _inputs(SHAPES[view_writes])
    c = mp.prepare_derivative_cache(view_writes, xs[0])
    for k, x in enumerate(xs):
        dx = np.full(x.shape, 0.5 + k)
        _equal(mp.value_and_derivative(c, view_writes, dx, x), mp.jvp(view_writes, (x,), (dx,)))
    assert c._replay.replays == 0
