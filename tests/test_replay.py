"""Replay of prepared gradient caches (mooncake_py/replay/plans.py): a replayed call must give
exactly what a fresh recording gives, and every guard must send a changed function back to
recording."""
import pickle
import warnings

import numpy as np
import pytest

import mooncake_py as mp
from benchmarks.namespaces import numpy_namespace
from benchmarks.suite import CASES
from mooncake_py.replay import plans as replay


def _fresh(f, args, nums):
    return mp.value_and_grad(f, argnums=nums)(*args)


def _check_same(got, want):
    (y, gs), (y0, gs0) = got, want
    np.testing.assert_allclose(y, y0, rtol=1e-13, atol=0)
    for g, g0 in zip([g for g in gs if g is not None], gs0):
        for a, b in zip(mp.ravel_pytree(g)[0:1], mp.ravel_pytree(g0)[0:1]):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-300)


def _calls(cache, f, inputs):
    """value_and_gradient at each input in turn, each checked against a fresh recording."""
    nums = cache.spec.float_args
    for args in inputs:
        got = mp.value_and_gradient(cache, f, *args)
        _check_same(got, _fresh(f, args, nums))


@pytest.mark.parametrize("name", list(CASES))
def test_suite_case_replay_equals_fresh_recording(name):
    case = CASES[name]
    f = case.bind(numpy_namespace())
    inputs = [case.make_inputs(np.random.default_rng(seed)) for seed in range(3)]
    perturbed = []
    for k, args in enumerate(inputs):  # new values at every call, same shapes
        perturbed.append(tuple(a * (1 + 0.01 * k) if i in case.argnums and
                               np.asarray(a).dtype.kind == "f" else a
                               for i, a in enumerate(args)))
    cache = mp.prepare_gradient_cache(f, *perturbed[0])
    _calls(cache, f, perturbed)
    assert cache._replay.replays >= 1, "expected this case to replay"  # (writes too)


def _writer(x):
    y = x.copy()
    y[0] = y[1] * y[2]
    y[1:] += np.sin(x[:-1])
    return np.sum(y * y)


def _buffer(x):
    out = np.zeros_like(x, shape=(3,))
    for i in range(3):
        out[i] = x[i] ** 2
    return np.sum(out)


@pytest.mark.parametrize("f", [_writer, _buffer])
def test_mutation_programs_equal_fresh_recording(f):
    xs = [np.array([1.0, 2.0, 3.0]) * k for k in (1.0, 1.5, -0.5)]
    cache = mp.prepare_gradient_cache(f, xs[0])
    _calls(cache, f, [(x,) for x in xs])
    assert cache._replay.replays == 2  # (writes into x.copy() / zeros_like are plan steps)


def _branchy(x):
    if np.sum(x) > 0:
        return np.sum(x ** 2)
    return np.sum(np.sin(x))


def test_branch_flip_rerecords():
    pos, neg = np.array([1.0, 2.0]), np.array([-1.0, -3.0])
    cache = mp.prepare_gradient_cache(_branchy, pos)
    r = cache._replay
    _calls(cache, _branchy, [(pos,), (pos * 2,)])
    assert r.replays == 1
    _calls(cache, _branchy, [(neg,)])  # guard fails: recorded afresh
    assert r.replays == 1 and r.failures == 1
    _calls(cache, _branchy, [(neg * 2,)])  # the new plan replays
    assert r.replays == 2 and r.failures == 0


def test_bool_and_int_of_traced_values_are_guarded():
    def f(x):
        s = x[0] * x[1]
        if s:                       # bool() of a tracked scalar
            s = s + x[int(x[2])]    # int() of a tracked scalar as an index
        return s
    inputs = [(np.array([1.0, 2.0, 0.0]),), (np.array([1.0, 3.0, 0.0]),),
              (np.array([1.0, 3.0, 1.0]),), (np.array([0.0, 3.0, 1.0]),)]
    cache = mp.prepare_gradient_cache(f, *inputs[0])
    _calls(cache, f, inputs)
    assert cache._replay.replays == 1  # only the second call keeps every guard


def test_constant_arguments_are_guarded():
    def f(x, idx):
        return np.sum(x[idx] ** 3)
    x = np.array([1.0, 2.0, 3.0])
    cache = mp.prepare_gradient_cache(f, x, np.array([0, 2]))
    _calls(cache, f, [(x, np.array([0, 2])), (x + 1, np.array([0, 2])),
                      (x, np.array([1, 1]))])
    assert cache._replay.replays == 1


def test_failing_guards_fall_back_with_one_warning():
    cache = mp.prepare_gradient_cache(_branchy, np.ones(2))
    xs = [np.ones(2) * (-1) ** k for k in range(12)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _calls(cache, _branchy, [(x,) for x in xs])
    msgs = [w for w in caught if "stopped replaying" in str(w.message)]
    assert len(msgs) == 1 and cache._replay.disabled


def test_replay_false_records_every_call():
    f = lambda x: np.sum(np.exp(x))  # noqa: E731
    cache = mp.prepare_gradient_cache(f, np.zeros(2), replay=False)
    _calls(cache, f, [(np.zeros(2),), (np.ones(2),)])
    assert cache._replay is None
    back = pickle.loads(pickle.dumps(mp.prepare_gradient_cache(np.sum, np.zeros(2))))
    assert back._replay is not None
    _calls(back, np.sum, [(np.ones(2),), (np.zeros(2),)])


def test_unsupported_recordings_are_not_replayed():
    cases = [lambda x: np.sum(np.median(x)),                       # a composite
             lambda x: np.sum(x * (1 + 1j)).real,                  # complex values
             lambda x: np.sum(mp.stop_gradient(x) * x)]            # plain copy of x: guard
    for f in cases:
        cache = mp.prepare_gradient_cache(f, np.array([1.0, 2.0, 4.0]))
        _calls(cache, f, [(np.array([1.0, 2.0, 4.0]),), (np.array([3.0, 2.0, 1.0]),)])
        assert cache._replay.replays == 0


def test_plan_runs_without_user_code():
    calls = []

    def f(x):
        calls.append(1)
        return np.sum(np.tanh(x) * x)
    cache = mp.prepare_gradient_cache(f, np.zeros(3))
    for k in range(4):
        mp.value_and_gradient(cache, f, np.full(3, 0.1 * k))
    assert len(calls) == 1 and cache._replay.replays == 3


def test_max_failures_constant():
    assert replay.MAX_FAILURES >= 2


def test_complex_intermediates_keep_their_checks():
    f = lambda x: np.real(np.sum(np.exp(1j * x)))  # noqa: E731
    x = np.array([0.1, 0.2])
    cache = mp.prepare_gradient_cache(f, x)
    _calls(cache, f, [(x,), (x * 2,)])
    assert cache._replay.replays == 0
    np.testing.assert_allclose(mp.value_and_gradient(cache, f, x)[1][0], -np.sin(x))


def test_debug_mode_records():
    f = lambda x: np.sum(x ** 3)  # noqa: E731
    cache = mp.prepare_gradient_cache(f, np.ones(2))
    _calls(cache, f, [(np.ones(2),)])
    with mp.Config(debug_mode=True):
        _calls(cache, f, [(np.full(2, k),) for k in (2.0, 4.0, 5.0, 6.0)])
    # debug mode records every call, and also replays it to compare (StaleReplayError)
    assert cache._replay.replays == 4 and not cache._replay.disabled
    _calls(cache, f, [(np.full(2, 3.0),)])
    assert cache._replay.replays == 5


def test_function_writing_into_a_constant_argument_is_not_replayed():
    def f(x, c):
        c += 1
        return np.sum(x[c] ** 2)
    x = np.arange(1.0, 6.0)
    cache = mp.prepare_gradient_cache(f, x, np.array([0]))
    for _ in range(3):
        c, c0 = np.array([0]), np.array([0])
        got = mp.value_and_gradient(cache, f, x, c)
        want = _fresh(f, (x, c0), cache.spec.float_args)
        _check_same(got, want)
        assert c.tolist() == c0.tolist() == [1]
    assert cache._replay.replays == 0


def test_caught_errors_leave_the_call_unplanned():
    def f(x):
        K = np.outer(x, x) + np.diag(x)
        try:
            return np.sum(np.linalg.cholesky(K))
        except np.linalg.LinAlgError:
            return np.sum(K * K)
    bad, good = np.array([-1.0, 1.0]), np.array([1.0, 2.0])
    cache = mp.prepare_gradient_cache(f, bad)
    _calls(cache, f, [(bad,), (good,), (good * 2,)])
    assert cache._replay.replays == 1  # the third call replays the second's (successful) plan


def test_object_arguments_are_not_planned():
    def f(x, rng):
        return np.sum(x * rng.standard_normal(3))
    x = np.ones(3)
    cache = mp.prepare_gradient_cache(f, x, np.random.default_rng(0))
    rng, rng0 = np.random.default_rng(5), np.random.default_rng(5)
    for _ in range(3):
        got = mp.value_and_gradient(cache, f, x, rng)
        _check_same(got, _fresh(f, (x, rng0), cache.spec.float_args))
    assert cache._replay.replays == 0
