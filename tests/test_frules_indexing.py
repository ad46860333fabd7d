"""Forward rules of indexing (mooncake_py/rules/indexing.py): x[key] with every kind of key, np.take,
np.take_along_axis, np.sort, and the scatter_add primitive that gathers' cotangents become; one
direction and k = 3 lanes (the lane axis must stay first even where NumPy moves advanced-index
axes to the front), and second order through gathers (Hessian-vector products by
forward-over-reverse against finite differences of the gradient)."""
import operator

import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.dual import dual, tangent
from mooncake_py.rules.cotangents import scatter_add
from mooncake_py.rules.registry import FRULES, FRULE_LANES
from mooncake_py.testing import test_rule

from test_rules_indexing import KEYS, TAKE, TAKE_ALONG, SORT, index
from test_frules_shape import check_hvp

MODES = ("reverse", "forward", "forward_over_reverse")
rng = np.random.default_rng(3)


def r(*shape):
    return rng.standard_normal(shape)


pytestmark = pytest.mark.usefixtures("debug_mode")  # rule outputs checked on every call


C = pytest.param
E = Ellipsis
x234 = r(2, 3, 4)


@pytest.mark.parametrize("fn", [operator.getitem, np.take, np.take_along_axis, np.sort],
                         ids=lambda f: getattr(f, "__name__", "getitem"))
def test_the_family_frule_is_the_active_one(fn):
    """Registering a second frule silently replaces the first: these must be the family's."""
    assert FRULES[fn].__module__ == "mooncake_py.rules.indexing"
    assert fn in FRULE_LANES


@pytest.mark.parametrize("x, key", KEYS)
def test_getitem(x, key):
    test_rule(index(key), x, modes=MODES)


# Keys whose advanced indices NumPy moves to the front (separated by a slice, an Ellipsis or an
# int), next to ones it leaves in place: with lanes, the lane axis must stay first in both.
MORE_KEYS = [
    C(([0, 1], slice(None), 2), id="list-slice-int-separated"),
    C((slice(None), [0, 2], [1, 3]), id="adjacent-advanced-in-place"),
    C((None, [0, 1], slice(None), [1, 2]), id="newaxis-separated"),
    C(([[0], [1]], E, [1, 2, 3]), id="broadcast-separated-by-ellipsis"),
    C((np.array([[True, False, True], [False, True, True]]), 1), id="2d-mask-int"),
    C((slice(None), np.arange(12).reshape(3, 4) % 3 == 0), id="2d-mask-middle"),
    C((1, slice(None), [True, False, True, False]), id="int-slice-mask-separated"),
    C((slice(1, None), None, [2, 2, 0]), id="slice-newaxis-list"),
    C((E, None, [3, 3]), id="ellipsis-newaxis-list"),
    C((np.array(1), slice(None, None, -1), np.array([0, 3])), id="0d-array-separated"),
]


@pytest.mark.parametrize("key", MORE_KEYS)
def test_getitem_lane_axis_stays_first(key):
    test_rule(index(key), x234, modes=MODES)
    v = r(3, 2, 3, 4)
    y = dual(x234, v, lanes=True)[key]
    np.testing.assert_array_equal(tangent(y), np.stack([u[key] for u in v]))


@pytest.mark.parametrize("x, indices, kwargs", TAKE)
def test_take(x, indices, kwargs):
    test_rule(lambda x: np.take(x, indices, **kwargs), x, modes=MODES)


@pytest.mark.parametrize("x, indices, axis", TAKE_ALONG)
def test_take_along_axis(x, indices, axis):
    test_rule(lambda x: np.take_along_axis(x, indices, axis), x, modes=MODES)


@pytest.mark.parametrize("x, kwargs", SORT)
def test_sort(x, kwargs):
    test_rule(lambda x: np.sort(x, **kwargs), x, modes=MODES)


def test_sort_tangent_follows_the_values():
    x = np.array([3.0, 1.0, 2.0])
    y = np.sort(dual(x, np.array([30.0, 10.0, 20.0])))
    np.testing.assert_array_equal(tangent(y), [10.0, 20.0, 30.0])


def test_sort_ties_forward_and_reverse_use_the_same_permutation():
    """On ties any permutation is a valid derivative, but forward and reverse must pick the same
    one, or <ȳ, J·ẋ> and <Jᵀ·ȳ, ẋ> disagree."""
    x = np.array([2.0, 1.0, 2.0, 1.0, 2.0])
    w = np.arange(1.0, 6.0)
    v = np.array([1.0, -2.0, 3.0, 5.0, 7.0])
    fwd = float(np.sum(tangent(np.sort(dual(x, v))) * w))
    rev = float(np.sum(mp.grad(lambda x: np.sum(np.sort(x) * w))(x) * v))
    assert fwd == rev


# --- scatter_add: the cotangent of gathers (linear in its values) ---------------------------------
SCATTER = [
    C((5,), 2, r(), id="int"),
    C((5,), slice(1, 4), r(3), id="slice"),
    C((5,), slice(None), r(), id="slice-broadcast-scalar"),
    C((5,), np.array([1, 1, 4, 1]), r(4), id="repeats"),
    C((3, 4), (np.array([0, 2, 2]), np.array([1, 3, 3])), r(3), id="pairs-repeats"),
    C((2, 3, 4), (np.array([0, 1, 1]), slice(None), np.array([3, 0, 3])), r(3, 3),
      id="separated-advanced"),
    C((2, 3, 4), (np.array([0, 1, 1]), slice(None), np.array([3, 0, 3])), r(3),
      id="separated-advanced-broadcast-values"),
    C((2, 3, 4), (E, np.array([2, 2])), r(2, 3, 2), id="ellipsis-list"),
    C((3, 4), (x234[0] > 0,), r(int(np.sum(x234[0] > 0))), id="mask"),
    C((3, 4), (E, np.arange(3), np.arange(3) + 1), r(3), id="diagonal"),
]


@pytest.mark.parametrize("shape, key, values", SCATTER)
def test_scatter_add_forward(shape, key, values):
    assert scatter_add in FRULES and scatter_add in FRULE_LANES
    test_rule(lambda v: scatter_add(shape, key, v), values, modes=("forward",))


FLOAT32 = [  # (the gather, its tangent at x along u)
    C(lambda x: x[[0, 0, 2]], lambda x, u: u[[0, 0, 2]], id="getitem-repeats"),
    C(lambda x: x[x > 0], lambda x, u: u[x > 0], id="getitem-mask"),
    C(lambda x: x[::-1][1], lambda x, u: u[1], id="getitem-basic"),
    C(lambda x: np.take(x, [2, 2]), lambda x, u: u[[2, 2]], id="take"),
    C(lambda x: np.take_along_axis(x, np.array([1, 1, 0]), 0), lambda x, u: u[[1, 1, 0]],
      id="take_along_axis"),
    C(np.sort, lambda x, u: u[np.argsort(x)], id="sort"),
]


@pytest.mark.parametrize("fn, linear", FLOAT32)
@pytest.mark.parametrize("lanes", [False, True])
def test_float32_tangents_stay_float32(fn, linear, lanes):
    x = np.array([0.5, -1.5, 2.0], dtype=np.float32)
    v = r(*((3,) if lanes else ()), 3).astype(np.float32)
    y = fn(dual(x, v, lanes=lanes))
    assert tangent(y).dtype == np.float32
    want = np.stack([linear(x, u) for u in v]) if lanes else linear(x, v)
    np.testing.assert_array_equal(tangent(y), want)


# --- second order -----------------------------------------------------------------------------
def scalar_loop(x):
    s = x[0] * 0.0
    for i in range(len(x) - 1):
        s = s + x[i] * x[i + 1]
    return s


w5 = np.linspace(-1.0, 1.5, 5)
SECOND_ORDER = [
    C(scalar_loop, r(6), id="scalar-loop"),
    C(lambda x: sum(x[i % 5] ** 2 * x[(i + 2) % 5] for i in range(7)), r(5), id="scalar-loop-wrapping"),
    C(lambda x: sum(np.sum(x[i:i + 2] ** 3) * x[i] for i in range(4)), r(5), id="slice-loop"),
    C(lambda x: np.sum(x[[0, 0, 2, 2, 2]] ** 3) + np.sum(np.take(x, [1, 1]) ** 2 * x[3]), r(4),
      id="repeated-index-gathers"),
    C(lambda x: np.sum(x[np.array([[1, 1], [1, 4]])] ** 2 * x[:2]), r(5), id="2d-index-repeats"),
    C(lambda x: np.sum(np.sort(x ** 3) * w5), r(5), id="sort"),
    C(lambda x: np.sum(np.sort(x * x[::-1], axis=0) ** 2 * np.arange(6.0).reshape(2, 3)), r(2, 3),
      id="sort-axis0"),
    C(lambda x: np.sum(np.sort(x, axis=None)[-2:] ** 3), r(2, 3), id="sort-axis-None-top2"),
    C(lambda x: np.sum(x[x > 0] ** 3) + np.sum(x[x < 0] * x[0]), r(6), id="masks"),
    C(lambda x: np.sum(x[[0, 1, 1], :, [3, 0, 3]] ** 3 * x[0, :, :3].T), r(2, 3, 4),
      id="separated-advanced"),
    C(lambda x: np.sum(np.take(x, [2, 0, 2], axis=1) ** 2 * np.take_along_axis(
        x, np.array([[1, 1, 0, 0], [2, 2, 2, 0]]), 1)[:, :3]), r(2, 4), id="take-take_along_axis"),
    C(lambda x: x[1, 2] * np.sum(x[..., None, 1] ** 2) + np.sum(x[None, :, ::-1][0] ** 3), r(3, 4),
      id="basic-keys"),
]


@pytest.mark.parametrize("f, x", SECOND_ORDER)
def test_hessian_vector_products(f, x):
    check_hvp(f, x)
