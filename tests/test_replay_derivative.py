"""Replay of prepared derivative caches (mooncake_py/replay/forward.py): a replayed call must
give what a fresh ``mp.jvp`` gives (with and without lanes), and every guard must send a
changed function back to recording."""
import pickle
import warnings

import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.errors import PreparedCacheSpecError, TangentError
from benchmarks.namespaces import numpy_namespace
from benchmarks.suite import CASES


def _close(a, b):
    la, lb = mp.ravel_pytree(a)[0], mp.ravel_pytree(b)[0]
    assert type(a) is type(b) and la.shape == lb.shape
    np.testing.assert_allclose(la, lb, rtol=1e-12, atol=1e-300)


def _check(cache, f, tangents, *args):
    """value_and_derivative equals a fresh jvp (``tangents``: one per argument)."""
    y, dy = mp.value_and_derivative(cache, f, tangents if len(args) > 1 else tangents[0], *args)
    y0, dy0 = mp.jvp(f, args, tangents, lanes=bool(cache.lanes))
    _close(y, y0)
    _close(dy, dy0)
    return y, dy


def _tangents(args, rng, lanes=0, skip=()):
    out = []
    for i, a in enumerate(args):
        if i in skip or np.asarray(a).dtype.kind != "f":
            out.append(None)
            continue
        shape = ((lanes,) if lanes else ()) + np.shape(a)
        out.append(rng.standard_normal(shape) if shape else float(rng.standard_normal()))
    return tuple(out)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("lanes", [0, 3])
def test_suite_cases_replay_equals_fresh_jvp(name, lanes):
    case = CASES[name]
    f = case.bind(numpy_namespace())
    rng = np.random.default_rng(0)
    base = case.make_inputs(np.random.default_rng(0))
    inputs = [tuple(a * (1 + 0.01 * k) if i in case.argnums else a for i, a in enumerate(base))
              for k in range(3)]  # new values of the differentiated arguments only
    skip = [i for i in range(len(base)) if i not in case.argnums]
    cache = mp.prepare_derivative_cache(f, *inputs[0], lanes=lanes or None)
    for args in inputs:
        _check(cache, f, _tangents(args, rng, lanes, skip), *args)
    if case.mutates:
        assert cache._replay.plan is None and cache._replay.replays == 0
    else:  # (the preparation's plan has a tangent on every float argument)
        assert cache._replay.replays == (2 if skip else 3) and not cache._replay.disabled


def _vector(x, w):
    h = np.tanh(x @ w)
    return h, np.sum(h ** 2), x


def _seq(x):  # a sequence argument mixing traced values and constants
    return np.stack([x[0] * x[1], x[1], np.float64(2.0)]) + np.concatenate([x, x[:1]])


def _branchy(x):
    if np.sum(x) > 0:
        return x ** 2
    return np.sin(x)


@pytest.mark.parametrize("f, args", [
    (_vector, (np.arange(6.0).reshape(3, 2) / 7, np.array([0.3, -0.2]))),
    (_seq, (np.array([0.5, 1.5]),)),
    (lambda x: {"s": np.cumsum(x), "m": np.max(x), "k": np.argmax(x), "c": 2.0}, (np.ones(4),)),
    (lambda x, c: x * c + np.float64(1.0), (2.5, np.array([1.0, 2.0]))),
    (lambda x: x[np.array([2, 0])] @ np.ones(2) + np.linalg.det(np.outer(x, x) + np.eye(3)),
     (np.array([0.1, 0.2, 0.3]),)),
], ids=["tuple-output", "sequence", "dict", "float-argument", "indexing-linalg"])
def test_functions_replay_equals_fresh_jvp(f, args):
    rng = np.random.default_rng(2)
    for lanes in (0, 2):
        cache = mp.prepare_derivative_cache(f, *args, lanes=lanes or None)
        for k in range(3):
            new = tuple(a * (1 + 0.1 * k) if np.asarray(a).dtype.kind == "f" else a for a in args)
            _check(cache, f, _tangents(new, rng, lanes), *new)
        assert cache._replay.replays == 3


def test_branch_flip_rerecords_and_gives_up_with_one_warning():
    cache = mp.prepare_derivative_cache(_branchy, np.ones(2))
    t = (np.array([1.0, -2.0]),)
    _check(cache, _branchy, t, np.ones(2))
    _check(cache, _branchy, t, -np.ones(2))  # flips: recorded again, the new plan serves it
    _check(cache, _branchy, t, -2 * np.ones(2))
    assert cache._replay.replays == 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(8):
            _check(cache, _branchy, t, np.ones(2) * (-1) ** k)
    assert len([w for w in caught if "stopped replaying" in str(w.message)]) == 1
    assert cache._replay.disabled


def test_constant_arguments_and_missing_tangents_are_guarded():
    f = lambda x, c: x[c] * 2.0  # noqa: E731
    x = np.arange(1.0, 5.0)
    cache = mp.prepare_derivative_cache(f, x, np.array([0, 1]))
    t = np.ones(4)
    _check(cache, f, (t, None), x, np.array([0, 1]))
    _check(cache, f, (t, None), x, np.array([2, 3]))  # a new constant: recorded again
    _check(cache, f, (t, None), x + 1, np.array([2, 3]))
    assert cache._replay.replays == 2
    g = lambda x, w: np.sin(x) * w  # noqa: E731
    c2 = mp.prepare_derivative_cache(g, x, 2.0)
    _check(c2, g, (t, 1.0), x, 2.0)
    _check(c2, g, (t, None), x, 2.0)  # w is a constant now: recorded with it as one
    _check(c2, g, (t, None), x, 3.0)
    _check(c2, g, (None, 1.0), x, 3.0)
    _check(c2, g, (t, 0.5), x, 3.0)
    assert c2._replay.replays >= 1


def test_plan_runs_without_user_code():
    calls = []

    def f(x):
        calls.append(1)
        return np.tanh(x) * x
    cache = mp.prepare_derivative_cache(f, np.zeros(3))
    assert len(calls) == 1
    for k in range(4):
        mp.value_and_derivative(cache, f, np.ones(3), np.full(3, 0.1 * k))
    assert len(calls) == 1 and cache._replay.replays == 4


def test_recording_never_writes_into_the_callers_arrays():
    def f(x, c):
        c += 1
        y = x.copy()
        y[0] = y[1] * c[0]
        return y
    x, c = np.array([1.0, 2.0]), np.array([3])
    cache = mp.prepare_derivative_cache(f, x, c)
    assert c.tolist() == [4]  # f ran once
    for k in range(3):
        c0 = c.copy()
        got = mp.value_and_derivative(cache, f, (np.ones(2), None), x, c)
        want = mp.jvp(f, (x, c0), (np.ones(2), None))
        _close(got, want)
        assert c.tolist() == c0.tolist() == [5 + k] and x.tolist() == [1.0, 2.0]
    assert cache._replay.replays == 0 and cache._replay.disabled  # writes: not planned


def _exp2(x):
    return np.exp(x) * 2.0


def test_replay_false_pickling_and_debug_mode():
    f = _exp2
    off = mp.prepare_derivative_cache(f, np.zeros(2), replay=False)
    assert off._replay is None
    _check(off, f, (np.ones(2),), np.ones(2))
    back = pickle.loads(pickle.dumps(mp.prepare_derivative_cache(f, np.zeros(2), lanes=2)))
    assert back._replay is not None and back.lanes == 2
    for k in range(3):
        _check(back, f, (np.ones((2, 2)) * k,), np.full(2, 0.5 * k))
    assert back._replay.replays == 2
    assert pickle.loads(pickle.dumps(off))._replay is None
    on = mp.prepare_derivative_cache(f, np.zeros(2))
    with mp.Config(debug_mode=True):
        _check(on, f, (np.ones(2),), np.ones(2))
    assert on._replay.replays == 1  # (replayed to be compared with the debug recording)


def test_errors_are_raised_and_the_next_call_works():
    cache = mp.prepare_derivative_cache(np.sin, np.zeros(3))
    x = np.linspace(0, 1, 3)
    _check(cache, np.sin, (np.ones(3),), x)
    with pytest.raises(PreparedCacheSpecError):
        mp.value_and_derivative(cache, np.sin, np.ones(4), np.zeros(4))
    with pytest.raises(TangentError):
        mp.value_and_derivative(cache, np.sin, np.ones(4), x)
    with pytest.raises(PreparedCacheSpecError):
        mp.value_and_derivative(cache, np.cos, np.ones(3), x)
    _check(cache, np.sin, (np.ones(3),), x + 1)
    assert cache._replay.replays == 2 and not cache._replay.disabled


def test_float32_replays_and_unsupported_recordings_use_jvp():
    f = lambda x: np.sum(np.sin(x))  # noqa: E731
    c32 = mp.prepare_derivative_cache(f, np.ones(2, np.float32))
    _, dy = _check(c32, f, (np.ones(2, np.float32),), np.ones(2, np.float32))
    assert c32._replay.replays == 1 and np.asarray(dy).dtype == np.float32
    g = lambda x: np.median(x) * x  # noqa: E731  (a composition of other ops)
    cg = mp.prepare_derivative_cache(g, np.arange(3.0))
    for k in range(4):
        _check(cg, g, (np.ones(3),), np.arange(3.0) + k)
    assert cg._replay.replays == 0 and cg._replay.disabled


def test_errors_raised_by_f_keep_the_plan():
    f = lambda A: np.linalg.solve(A, np.ones(2))  # noqa: E731
    A = np.eye(2) * 2
    cache = mp.prepare_derivative_cache(f, A)
    for _ in range(4):  # singular: f raises (as jvp does); the cache is not given up
        with pytest.raises(np.linalg.LinAlgError):
            mp.value_and_derivative(cache, f, np.ones((2, 2)), np.zeros((2, 2)))
    _check(cache, f, (np.ones((2, 2)),), A + 1)
    assert cache._replay.replays >= 1 and not cache._replay.disabled
