"""The short paths of a prepared call (plain-array arguments): the quick argument check of
CacheSpec must raise exactly what the full check raises, and the plain-array leaf split, the
gradient conversion and the np.sum plan step must give what a fresh recording gives."""
import pickle

import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.errors import PreparedCacheSpecError
from mooncake_py.replay import plans as replay


def _f(x, w, c):
    return np.sum(np.tanh(x * w)) + float(c[0])


def _message(cache, f, args):
    with pytest.raises(PreparedCacheSpecError) as e:
        mp.value_and_gradient(cache, f, *args)
    return str(e.value)


BAD = [
    ("shape", (np.ones(4), 2.0, np.array([1]))),
    ("dtype", (np.ones(3, np.float32), 2.0, np.array([1]))),
    ("int-dtype", (np.ones(3), 2.0, np.array([1.0]))),
    ("list", ([1.0, 2.0, 3.0], 2.0, np.array([1]))),
    ("numpy-scalar", (np.ones(3), np.float64(2.0), np.array([1]))),
    ("matrix", "matrix"),  # (made inside the test: np.matrix warns when made)
    ("count", (np.ones(3), 2.0)),
]


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # (np.matrix)
@pytest.mark.parametrize("what, args", BAD, ids=[b[0] for b in BAD])
def test_quick_check_raises_what_the_full_check_raises(what, args):
    if args == "matrix":
        args = (np.asmatrix(np.ones(3)), 2.0, np.array([1]))
    x0 = (np.ones(3), 2.0, np.array([1]))
    quick = mp.prepare_gradient_cache(_f, *x0)
    full = mp.prepare_gradient_cache(_f, *x0)
    assert quick.spec._quick is not None
    full.spec._quick = None  # the general check only
    assert _message(quick, _f, args) == _message(full, _f, args)
    y, (gx, gw, gc) = mp.value_and_gradient(quick, _f, *x0)  # the next call works
    y0, (gx0, gw0) = mp.value_and_grad(_f, argnums=(0, 1))(*x0)
    assert y == y0 and np.array_equal(gx, gx0) and gw == gw0 and gc is None


def test_quick_check_names_a_different_function():
    c = mp.prepare_gradient_cache(np.sum, np.ones(2))
    with pytest.raises(PreparedCacheSpecError, match="different function"):
        mp.value_and_gradient(c, np.prod, np.ones(2))
    with pytest.raises(PreparedCacheSpecError, match="argument 0"):
        mp.value_and_pullback(mp.prepare_pullback_cache(np.sin, np.ones(2)), np.sin, np.ones(2),
                              np.ones(3))


def test_containers_take_the_full_check():
    f = lambda p: np.sum(p["w"] ** 2)  # noqa: E731
    c = mp.prepare_gradient_cache(f, {"w": np.ones(2)})
    assert c.spec._quick is None
    with pytest.raises(PreparedCacheSpecError, match="shape"):
        mp.value_and_gradient(c, f, {"w": np.ones(3)})
    assert mp.value_and_gradient(c, f, {"w": np.ones(2)})[1][0]["w"].tolist() == [2.0, 2.0]


def test_caches_pickled_without_the_quick_spec_still_check():
    c = mp.prepare_gradient_cache(np.sum, np.ones(2))
    del c.spec.__dict__["_quick"]  # as a cache pickled before the quick check existed
    back = pickle.loads(pickle.dumps(c))
    with pytest.raises(PreparedCacheSpecError):
        mp.value_and_gradient(back, np.sum, np.ones(3))
    assert mp.value_and_gradient(back, np.sum, np.ones(2))[0] == 2.0


@pytest.mark.parametrize("f, x", [
    (np.sum, np.arange(5.0)),
    (lambda x: np.sum(x) * np.sum(x * x), np.arange(6.0).reshape(2, 3)),
    (lambda x: np.sum(np.sum(x, axis=0)), np.ones((3, 2))),  # (an axis: the general step)
    (lambda x: np.sum(x[0]) + np.sum(x), np.arange(1.0, 4.0)),  # (a float64 scalar's sum)
], ids=["sum", "sum-2d", "axis", "scalar-sum"])
def test_sum_steps_equal_a_fresh_recording(f, x):
    c = mp.prepare_gradient_cache(f, x)
    for k in range(3):
        y, (g,) = mp.value_and_gradient(c, f, x * (k - 1.5))
        y0, g0 = mp.value_and_grad(f)(x * (k - 1.5))
        np.testing.assert_allclose(y, y0, rtol=1e-14)
        np.testing.assert_allclose(g, g0, rtol=1e-14)
        assert g.flags.writeable and g.base is None
        g += 100.0  # the caller owns its gradient: the next call is not affected
    assert c._replay.replays == 2


def test_sum_step_sees_a_rule_registered_after_recording(monkeypatch):
    from mooncake_py.rules.registry import RRULES
    c = mp.prepare_gradient_cache(np.sum, np.ones(3))
    mp.value_and_gradient(c, np.sum, np.ones(3))
    assert any(st[0] == replay._SUM for st in c._replay.plan.steps)
    builtin = RRULES[np.sum]
    seen = []

    def rule(args, kw, needs):
        seen.append(1)
        return builtin(args, kw, needs)
    monkeypatch.setitem(RRULES, np.sum, rule)
    y, (g,) = mp.value_and_gradient(c, np.sum, np.ones(3))
    assert seen and y == 3.0 and g.tolist() == [1.0, 1.0, 1.0]


def test_plain_array_split_matches_the_general_split():
    x, c, z = np.ones(2), np.array([1, 2]), np.ones(2, np.float32)
    for args, nums in [((x, c), (0,)), ((x, x), (0, 1)), ((c, x), (1,)), ((z, x), (0, 1)),
                       ((x, (x, c)), (0, 1)), ((x, 2.0), (0, 1))]:
        got = replay._split_leaves(args, nums)
        # the general path, reached by a container around each argument
        want = replay._split_leaves(tuple([a] for a in args), nums)
        assert (got[0] is None) == (want[0] is None)
        if got[0] is not None:
            assert [id(a) for a in got[0]] == [id(a) for a in want[0]]
        assert [id(a) for a in got[1]] == [id(a) for a in want[1]]


def test_gradient_dtypes_and_constants_through_the_short_paths():
    f = lambda x, k, s: np.sum(x[k] * s)  # noqa: E731
    c = mp.prepare_gradient_cache(f, np.ones(4), np.array([0, 2]), 3.0)
    for k in range(3):
        x = np.arange(4.0) + k
        y, (gx, gk, gs) = mp.value_and_gradient(c, f, x, np.array([0, 2]), 3.0)
        y0, (gx0, gs0) = mp.value_and_grad(f, argnums=(0, 2))(x, np.array([0, 2]), 3.0)
        assert y == y0 and np.array_equal(gx, gx0) and gk is None
        assert type(gs) is type(gs0) and gs == gs0
    assert c._replay.replays == 2
    y, (gx, _, _) = mp.value_and_gradient(c, f, np.ones(4), np.array([1, 3]), 3.0)  # a guard
    assert gx.tolist() == [0.0, 3.0, 0.0, 3.0] and c._replay.replays == 2
