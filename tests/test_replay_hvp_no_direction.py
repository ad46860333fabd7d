"""An HVP cache called with no direction for a float argument (``v = (v, None)``; a Python or
NumPy float, a 0-d or a 1-d float array): that argument is still differentiated (its gradient
and its row of H·v come back) but is a plain value among duals. The cache must replay it (as a
tracked plain leaf whose kind is guarded), give what a fresh recording gives, follow a changed
value of that argument, and record again when the direction is given after all (or taken
away)."""
import warnings

import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.replay.source import SourcePlan


def _array_ops(x, a):
    return np.sum(np.sin(x) * a) * a + np.sum(x * x) / (1.0 + a * a)


def _scalar_loop(x, a):
    s = 0.0
    for i in range(x.shape[0]):
        s = s + np.sin(x[i] * a) * x[i] + a * a * x[i]   # plain a among dual scalars
    return s


def _loop_on_constant_first(a, x):
    s = a * np.sum(x)
    for i in range(x.shape[0]):
        s = s * 0.5 + x[i] * a
    return s


def _fresh(f, v, args):
    c = mp.prepare_hvp_cache(f, *args, replay=False)
    return mp.value_and_hvp(c, f, v, *args)


def _assert_same(got, want):
    y, gs, hvs = got
    wy, wgs, whvs = want
    np.testing.assert_allclose(y, wy, rtol=1e-13, atol=0)
    for a, b in zip(gs + hvs, wgs + whvs):
        assert (a is None) == (b is None)
        if a is not None:
            assert np.shape(a) == np.shape(b)
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("compile", [False, True])
@pytest.mark.parametrize("kind", [float, np.float64, lambda a: np.array(a)])
@pytest.mark.parametrize("f", [_array_ops, _scalar_loop])
def test_replays_and_equals_fresh_recording_as_the_plain_value_changes(f, kind, compile):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(12)
    c = mp.prepare_hvp_cache(f, x, kind(0.3), compile=compile)
    values = [0.3, 0.3, 0.7, -1.1]
    for k, a in enumerate(values):
        x = rng.standard_normal(12)
        v = rng.standard_normal(12)
        args = (x, kind(a))
        _assert_same(mp.value_and_hvp(c, f, (v, None), *args), _fresh(f, (v, None), args))
    assert c._replay.replays == len(values) - 1  # (a new value of a is no reason to record)


def test_plain_leaf_first_and_a_scalar_loop_through_generated_source():
    rng = np.random.default_rng(1)
    f = _loop_on_constant_first
    c = mp.prepare_hvp_cache(f, 0.5, rng.standard_normal(20))
    for a in (0.5, 0.9, 1.3):
        args = (a, rng.standard_normal(20))
        v = (None, rng.standard_normal(20))
        _assert_same(mp.value_and_hvp(c, f, v, *args), _fresh(f, v, args))
    assert c._replay.replays == 2
    assert type(c._replay.plan) is not SourcePlan or c._replay.plan.fallbacks == 0


@pytest.mark.filterwarnings("ignore:the prepared hvp cache:RuntimeWarning")  # (flips: gives up)
def test_giving_or_removing_the_direction_records_again_and_stays_right():
    rng = np.random.default_rng(2)
    f = _scalar_loop
    x = rng.standard_normal(12)
    c = mp.prepare_hvp_cache(f, x, 0.3)
    directions = [None, None, 0.5, 0.5, None, np.float64(0.5), None]
    replays = []
    for d in directions:
        v = (rng.standard_normal(12), d)
        args = (rng.standard_normal(12), 0.3)
        _assert_same(mp.value_and_hvp(c, f, v, *args), _fresh(f, v, args))
        replays.append(c._replay.replays)
    # replays only where the kind of a's leaf is the one its plan was recorded with
    assert replays == [0, 1, 1, 2, 2, 2, 2] or c._replay.disabled
    assert replays[:4] == [0, 1, 1, 2]


def test_derivative_cache_with_a_float_leaf_without_tangent_is_unchanged():
    # (plain leaves among duals are an HVP-cache matter: a derivative cache still runs jvp
    # for such a call, without counting failed replays or warning)
    f = lambda p: np.sum(np.sin(p[0]) * p[1])   # noqa: E731
    x = np.linspace(0, 1, 4)
    c = mp.prepare_derivative_cache(f, (x, 0.3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for k in range(4):
            y, t = mp.value_and_derivative(c, f, ((x + k, 0.3), (np.ones(4), None)))
            want = mp.jvp(f, ((x + k, 0.3),), ((np.ones(4), None),))
            np.testing.assert_allclose((y, t), want, rtol=1e-14)
    assert not c._replay.disabled and c._replay.failures == 0


def _exactly(got, want):
    y, gs, hvs = got
    wy, wgs, whvs = want
    assert np.array_equal(y, wy)
    for a, b in zip(gs + hvs, wgs + whvs):
        assert type(a) is type(b) and np.shape(a) == np.shape(b)
        assert np.array_equal(a, b)


def _mixed(x, a):
    # array ops on a (elementwise, so a 1-d a keeps its shape) and scalar steps reading it
    s = np.sum(np.sin(x[:3]) * a) + np.sum(x * x) * np.sum(a * a)
    for i in range(3):
        s = s + np.cos(x[i]) * np.sum(a) * x[i]
    return s


@pytest.mark.parametrize("kind", [float, np.float64, lambda a: np.array(a),
                                  lambda a: np.array([a, 2.0 * a, -a])],
                         ids=["float", "float64", "0-d", "1-d"])
def test_replays_bitwise_like_recording_every_call_and_follows_the_new_value(kind):
    rng = np.random.default_rng(3)
    f = _mixed
    x0 = rng.standard_normal(8)
    c = mp.prepare_hvp_cache(f, x0, kind(0.3))
    ref = mp.prepare_hvp_cache(f, x0, kind(0.3), replay=False)
    hvp = mp.hvp(f, argnums=(0, 1))
    for a in (0.3, 0.3, -0.8, 1.7):
        x, v = rng.standard_normal(8), rng.standard_normal(8)
        args = (x, kind(a))
        got = mp.value_and_hvp(c, f, (v, None), *args)
        _exactly(got, mp.value_and_hvp(ref, f, (v, None), *args))
        # the unprepared API's H·v for the same call (no direction for a: its part is zero)
        want = hvp(x, kind(a), (v, None))
        for h, w in zip(got[2], want):
            np.testing.assert_allclose(h, w, rtol=1e-12, atol=1e-300)
        # and a zero direction there gives the same row: None is no direction, not a new value
        zero = np.zeros(np.shape(args[1])) if np.ndim(args[1]) else 0.0
        np.testing.assert_allclose(got[2][1], hvp(x, kind(a), (v, zero))[1],
                                   rtol=1e-12, atol=1e-300)
        assert np.shape(got[2][1]) == np.shape(args[1])
    assert c._replay.replays == 3 and not c._replay.disabled
    assert ref._replay is None  # (replay=False: every call above was a recording)
