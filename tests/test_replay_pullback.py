"""Replay of prepared pullback caches (PullbackReplayer in mooncake_py/replay/plans.py): a replayed
call must give exactly what a fresh ``mp.vjp`` gives, for any output structure and cotangent
seed, and every guard must send a changed function back to recording."""
import pickle
import warnings

import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.errors import PreparedCacheSpecError, TangentError
from benchmarks.namespaces import numpy_namespace
from benchmarks.suite import CASES
from mooncake_py.replay import plans as replay_module


def _close(a, b):
    la, ta = mp.ravel_pytree(a)[0], type(a)
    lb = mp.ravel_pytree(b)[0]
    assert ta is type(b)
    np.testing.assert_allclose(la, lb, rtol=1e-12, atol=1e-300)


def _check(cache, f, ybar, *args):
    """value_and_pullback at ``args`` equals a fresh vjp (value and every cotangent)."""
    y, cots = mp.value_and_pullback(cache, f, ybar, *args)
    y0, pb = mp.vjp(f, *args)
    cots0 = pb(ybar)
    assert mp.ravel_pytree(y)[0].shape == mp.ravel_pytree(y0)[0].shape
    _close(y, y0)
    assert len(cots) == len(cots0)
    for c, c0 in zip(cots, cots0):
        if c0 is None:
            assert c is None
        else:
            _close(c, c0)
    return y, cots


def _vector(x):
    return np.sin(x) * np.exp(x[::-1])


def _tuple(x, w):
    h = np.tanh(x @ w)
    return h, np.sum(h ** 2), x  # an input returned as it is


def _dict(x):
    return {"s": np.cumsum(x), "n": np.linalg.norm(x), "k": 3, "c": np.ones(2)}


def _broadcast(x, b):
    return np.log1p(np.exp(x[:, None] * b[None, :])) + b


FUNCTIONS = [
    (_vector, lambda r: (r.standard_normal(4),), lambda r: r.standard_normal(4)),
    (_tuple, lambda r: (r.standard_normal((3, 2)), r.standard_normal(2)),
     lambda r: (r.standard_normal(3), r.standard_normal(), r.standard_normal((3, 2)))),
    (_dict, lambda r: (r.standard_normal(5),),
     lambda r: {"s": r.standard_normal(5), "n": 2.0, "k": 0.0, "c": np.ones(2)}),
    (_broadcast, lambda r: (r.standard_normal(3), r.standard_normal(4)),
     lambda r: r.standard_normal((3, 4))),
]


@pytest.mark.parametrize("f, make_args, make_seed", FUNCTIONS,
                         ids=lambda v: getattr(v, "__name__", ""))
def test_replay_equals_fresh_vjp(f, make_args, make_seed):
    r = np.random.default_rng(1)
    cache = mp.prepare_pullback_cache(f, *make_args(r))
    for _ in range(4):  # new arguments and a new seed at every call
        _check(cache, f, make_seed(r), *make_args(r))
    assert cache._replay.replays == 3


@pytest.mark.parametrize("name", list(CASES))
def test_suite_cases_replay(name):
    case = CASES[name]
    f = case.bind(numpy_namespace())
    inputs = [case.make_inputs(np.random.default_rng(seed)) for seed in range(3)]
    cache = mp.prepare_pullback_cache(f, *inputs[0])
    for k, args in enumerate(inputs):
        _check(cache, f, 0.5 + k, *args)
    assert cache._replay.replays == 2


def _branchy(x):
    if np.sum(x) > 0:
        return x ** 2
    return np.sin(x)


def test_branch_flip_rerecords_and_gives_up_with_one_warning():
    cache = mp.prepare_pullback_cache(_branchy, np.ones(2))
    seed = np.array([1.0, -2.0])
    _check(cache, _branchy, seed, np.ones(2))
    _check(cache, _branchy, seed, -np.ones(2))  # flips: recorded again
    _check(cache, _branchy, seed, -2 * np.ones(2))  # replays the new plan
    assert cache._replay.replays == 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(8):
            _check(cache, _branchy, seed, np.ones(2) * (-1) ** k)
    assert len([w for w in caught if "stopped replaying" in str(w.message)]) == 1
    assert cache._replay.disabled


def test_constant_arguments_are_guarded():
    f = lambda x, c, n: x[n] * c  # noqa: E731
    x = np.arange(1.0, 5.0)
    cache = mp.prepare_pullback_cache(f, x, np.array([1, 2, 3, 4]), 1)
    seed = np.ones(4)
    _check(cache, f, seed, x, np.array([1, 2, 3, 4]), 1)
    _check(cache, f, seed, x * 2, np.array([1, 2, 3, 4]), 1)
    _check(cache, f, seed, x, np.array([1, 2, 3, 5]), 1)  # a new constant: recorded
    assert cache._replay.replays == 1
    cache2 = mp.prepare_pullback_cache(lambda x, k: x[:k] * 2.0, x, 2)
    g = cache2.spec.f
    _check(cache2, g, np.ones(2), x, 2)
    _check(cache2, g, np.ones(2), x + 1, 2)
    assert cache2._replay.replays == 1


def test_plan_runs_without_user_code_and_replay_false_records():
    calls = []

    def f(x):
        calls.append(1)
        return np.tanh(x) * x
    cache = mp.prepare_pullback_cache(f, np.zeros(3))
    calls.clear()
    for k in range(4):
        _check(cache, f, np.full(3, k + 1.0), np.full(3, 0.1 * k))
    assert len(calls) == 1 + 4  # one recording; the other calls are the fresh vjps
    off = mp.prepare_pullback_cache(f, np.zeros(3), replay=False)
    assert off._replay is None
    _check(off, f, np.ones(3), np.ones(3))


def test_pickling_keeps_the_replay_flag():
    c = mp.prepare_pullback_cache(_vector, np.zeros(4))
    _check(c, _vector, np.ones(4), np.ones(4))
    back = pickle.loads(pickle.dumps(c))
    assert back._replay is not None and back._replay.plan is None
    for k in range(3):
        _check(back, _vector, np.ones(4) * k, np.full(4, 0.5 * k))
    assert back._replay.replays == 2
    off = pickle.loads(pickle.dumps(mp.prepare_pullback_cache(_vector, np.zeros(4), replay=False)))
    assert off._replay is None
    _check(off, _vector, np.ones(4), np.ones(4))


def test_errors_are_raised_and_the_next_call_works():
    cache = mp.prepare_pullback_cache(_vector, np.zeros(4))
    x = np.linspace(0, 1, 4)
    _check(cache, _vector, np.ones(4), x)
    _check(cache, _vector, np.ones(4), x + 1)
    with pytest.raises(PreparedCacheSpecError):
        mp.value_and_pullback(cache, _vector, np.ones(3), x)
    with pytest.raises(PreparedCacheSpecError):
        mp.value_and_pullback(cache, _vector, np.ones(4), np.zeros(5))
    with pytest.raises(TangentError):  # a complex seed for a real output, as mp.vjp says
        mp.value_and_pullback(cache, _vector, np.ones(4) * 1j, x)
    _check(cache, _vector, np.ones(4), x + 2)
    assert cache._replay.replays == 2 and not cache._replay.disabled


def test_failing_op_during_replay_records_again():
    f = lambda A: np.linalg.solve(A, np.ones(2))  # noqa: E731
    A = np.eye(2) * 2
    cache = mp.prepare_pullback_cache(f, A)
    _check(cache, f, np.ones(2), A)
    for _ in range(4):  # singular: the replay fails, so does the recording: not counted
        with pytest.raises(np.linalg.LinAlgError):
            mp.value_and_pullback(cache, f, np.ones(2), np.zeros((2, 2)))
    _check(cache, f, np.ones(2), A + 1)
    assert cache._replay.replays == 1 and not cache._replay.disabled
    g = lambda A: np.sum(np.linalg.solve(A, np.ones(2)))  # noqa: E731  (the gradient replay)
    gc = mp.prepare_gradient_cache(g, A)
    mp.value_and_gradient(gc, g, A)
    for _ in range(4):
        with pytest.raises(np.linalg.LinAlgError):
            mp.value_and_gradient(gc, g, np.zeros((2, 2)))
    y, (gA,) = mp.value_and_gradient(gc, g, A + 1)
    np.testing.assert_allclose(gA, mp.grad(g)(A + 1), rtol=1e-14)
    assert gc._replay.replays == 1 and not gc._replay.disabled


def test_writes_into_a_buffer_f_allocated_replay():
    def f(x):
        y = np.zeros_like(x)
        y[1:] = x[:-1] * x[1:]
        return y
    cache = mp.prepare_pullback_cache(f, np.ones(3))
    for k in range(3):
        _check(cache, f, np.arange(3.0), np.arange(3.0) + k)
    assert cache._replay.replays == 2


def test_plain_outputs_are_fresh_copies():
    f = lambda x: (np.sum(x), np.array([1.0, 2.0]), x > 0)  # noqa: E731
    cache = mp.prepare_pullback_cache(f, np.ones(2))
    x = np.array([1.0, -1.0])
    seed = (1.0, np.zeros(2), np.zeros(2))
    _check(cache, f, seed, x)
    y, _ = _check(cache, f, seed, x * 2)
    y[1][0] = 99.0  # the caller may write into what it gets
    y2, _ = _check(cache, f, seed, x * 3)
    assert y2[1][0] == 1.0 and y2[2].tolist() == [True, False]
    assert cache._replay.replays == 2


def test_unplannable_functions_stop_planning_silently():
    def f(x):
        y = x * 0.0  # (an op's result: writes into it are not planned)
        for i in range(3):
            y[i] = np.sin(x[i])
        return np.sum(y)
    x = np.array([0.1, 0.2, 0.3])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: nothing failed
        gc = mp.prepare_gradient_cache(f, x)
        pc = mp.prepare_pullback_cache(f, x)
        for k in range(5):
            y, (g,) = mp.value_and_gradient(gc, f, x * k)
            np.testing.assert_allclose(g, np.cos(x * k), rtol=1e-14)
            _check(pc, f, 2.0, x * k)
    for r in (gc._replay, pc._replay):
        assert r.disabled and r.replays == 0 and r.unplanned == replay_module.MAX_FAILURES
