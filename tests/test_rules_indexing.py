"""Reverse rules of indexing (mooncake_py/rules/indexing.py): x[key] in all its forms, np.take,
np.take_along_axis, np.sort; and how the reverse sweep accumulates the sparse cotangents."""
import operator

import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.rules.registry import RRULES
from mooncake_py.rules.cotangents import IndexedCotangent
from mooncake_py.testing import test_rule, check_grads

rng = np.random.default_rng(1)


def r(*shape):
    return rng.standard_normal(shape)


x5, x34, x234 = r(5), r(3, 4), r(2, 3, 4)
a0 = np.array(0.4)
mask34 = x34 > 0
rows3 = np.array([True, False, True])


pytestmark = pytest.mark.usefixtures("debug_mode")  # rule outputs checked on every call


def index(key):
    def getitem(x):
        return x[key]
    return getitem


C = pytest.param
E = Ellipsis

KEYS = [
    # basic indexing
    C(x5, 2, id="int"),
    C(x5, -1, id="negative-int"),
    C(x5, np.int64(3), id="numpy-int"),
    C(x34, (1, -2), id="two-ints-0d-result"),
    C(x34, 1, id="int-row"),
    C(x34, (slice(None), 2), id="int-column"),
    C(x5, slice(1, 4), id="slice"),
    C(x5, slice(None, None, 2), id="slice-step"),
    C(x5, slice(None, None, -1), id="slice-negative-step"),
    C(x5, slice(4, 0, -2), id="slice-negative-step-bounds"),
    C(x5, slice(10, 20), id="slice-empty"),
    C(x234, (E, 1), id="ellipsis-int"),
    C(x234, (0, E), id="int-ellipsis"),
    C(x234, (1, E, slice(None, None, -1)), id="int-ellipsis-slice"),
    C(x234, E, id="ellipsis"),
    C(x34, None, id="newaxis"),
    C(x34, (slice(None), None, 1), id="slice-newaxis-int"),
    C(x234, (None, E, None), id="newaxis-ellipsis-newaxis"),
    C(a0, (), id="0d-empty-tuple"),
    C(a0, E, id="0d-ellipsis"),
    C(a0, None, id="0d-newaxis"),
    # advanced indexing
    C(x5, np.array([0, 2, 4]), id="int-array"),
    C(x5, np.array([1, 1, 3, 1]), id="int-array-repeats"),
    C(x5, np.array([-1, 0, -1]), id="int-array-negative-repeats"),
    C(x5, np.array([[0, 1], [1, 4]]), id="int-array-2d"),
    C(x5, [3, 0, 3], id="list-repeats"),
    C(x5, [], id="empty-list"),
    C(x34, np.array([2, 2, 0]), id="int-array-rows"),
    C(x34, (np.array([0, 2, 2]), np.array([1, 3, 1])), id="int-array-pairs"),
    C(x34, (np.array([[0], [2]]), np.array([1, 1, 3])), id="int-arrays-broadcast"),
    C(x34, mask34, id="bool-mask"),
    C(x34, rows3, id="bool-mask-partial-axes"),
    C(x234, (slice(None), np.array([True, False, True])), id="bool-mask-middle-axis"),
    C(x34, [True, False, True], id="bool-list"),
    C(x5, x5 > 10, id="bool-mask-empty"),
    C(a0, np.array(True), id="0d-bool-mask"),
    C(x34, (slice(None), [0, 2]), id="mixed-slice-list"),
    C(x34, ([0, 1], slice(None), None), id="mixed-list-slice-newaxis"),
    C(x234, ([0, 1, 1], slice(None), [3, 0, 3]), id="mixed-separated-advanced"),
    C(x234, (E, [2, 2]), id="mixed-ellipsis-list"),
    C(x234, (slice(None, None, -1), [0, 0], slice(1, None)), id="mixed-negative-step-repeats"),
    C(x234, (1, [0, 2], None), id="mixed-int-list-newaxis"),
    C(x234, (rows3[:2], slice(None), 0), id="mixed-bool-int"),
]


@pytest.mark.parametrize("x, key", KEYS)
def test_getitem(x, key):
    test_rule(index(key), x)


BASIC = [
    C(2, True, id="int"),
    C(np.int32(-1), True, id="numpy-int"),
    C(slice(None, None, -1), True, id="slice"),
    C((E, None, 0), True, id="ellipsis-newaxis-int"),
    C((), True, id="empty-tuple"),
    C([0, 1], False, id="list"),
    C(np.array([0, 1]), False, id="int-array"),
    C(np.array(1), False, id="0d-int-array"),
    C(mask34, False, id="bool-mask"),
    C((slice(None), [0, 0]), False, id="mixed"),
]


@pytest.mark.parametrize("key, basic", BASIC)
def test_indexed_cotangent_basic_only_without_possible_repeats(key, basic):
    x = x34 if not isinstance(key, tuple) or key != () else a0
    y, pullback = RRULES[operator.getitem]((x, key), {}, (True, False))
    gx, gkey = pullback(np.ones_like(y))
    assert type(gx) is IndexedCotangent and gkey is None
    assert gx.basic is basic
    np.testing.assert_array_equal(gx.dense(), gx.add_into(np.zeros(x.shape)))


def test_repeated_indices_accumulate():
    x = np.arange(1.0, 6.0)
    g = mp.grad(lambda x: np.sum(x[[0, 0, 3, 0]] * np.array([1.0, 2.0, 3.0, 4.0])))(x)
    np.testing.assert_array_equal(g, [7.0, 0.0, 0.0, 3.0, 0.0])
    g = mp.grad(lambda x: np.sum(x[np.array([[1, 1], [1, 4]])] ** 2))(x)
    np.testing.assert_array_equal(g, [0.0, 12.0, 0.0, 0.0, 10.0])


def test_index_buffer_reused_after_the_read():
    """The pullback uses the positions read at the time, even if the caller then reuses the
    index array or list."""
    def f(x):
        idx, lst = np.array([0, 1]), [2, 2]
        y = x[idx] * x[lst]
        idx[:] = 3
        lst[:] = [0, 0]
        return np.sum(y)
    x = np.arange(1.0, 5.0)
    np.testing.assert_array_equal(mp.grad(f)(x), [3.0, 3.0, 3.0, 0.0])


# --- accumulation of sparse cotangents in the reverse sweep ---------------------------------------
ACCUMULATE = [
    C(lambda x: sum(x[i] * x[i] for i in range(4)), id="scalar-loop"),
    C(lambda x: x[0] + x[0] * x[1] + x[0] ** 2, id="same-position-repeatedly"),
    C(lambda x: np.sum(x) + x[1] + np.sum(x[1:3]) + np.sum(x[[0, 0]]), id="dense-then-sparse"),
    C(lambda x: x[2] + np.sum(x * x) + x[2] * 3 + np.sum(x), id="sparse-dense-sparse-dense"),
    C(lambda x: np.sum(x[[1, 1]]) + x[1] + np.sum(x[x > 0] ** 2), id="advanced-then-basic"),
    C(lambda x: np.sum((2 * x)[::2]) + (2 * x)[1], id="sparse-into-intermediate"),
    C(lambda x: (lambda y: y[0] + y[1] * y[0] + np.sum(y))(np.sin(x)), id="intermediate-mixed"),
    C(lambda x: np.sum(x[None, :] * x[:, None]) + x[3], id="newaxis-outer"),
    C(lambda x: x[0] * np.sum(np.split(x, 2)[1]) + x[3], id="split-and-index"),
]


@pytest.mark.parametrize("f", ACCUMULATE)
def test_sweep_accumulation(f):
    check_grads(f, np.array([0.5, -1.2, 2.0, 0.3]))


@pytest.mark.parametrize("f", ACCUMULATE)
def test_sweep_accumulation_float32(f):
    x = np.array([0.5, -1.2, 2.0, 0.3], dtype=np.float32)
    g = mp.grad(f)(x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, mp.grad(f)(x.astype(np.float64)), rtol=1e-5)


def test_sweep_accumulation_with_float64_contributions_into_float32():
    w = np.array([1.0, 2.0, 3.0, 4.0])   # float64: promotes the products
    def f(x):
        return x[0] * w[0] + np.sum(x[[1, 1]] * w[:2]) + np.sum(x * w) + x[2] * w[3]
    x = np.ones(4, dtype=np.float32)
    g = mp.grad(f)(x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, [2.0, 5.0, 7.0, 4.0])


def test_gradient_of_an_indexed_intermediate_and_the_input():
    with mp.Tape() as tape:
        x = tape.track(np.arange(3.0))
        y = x * 2
        z = y[0] + y[0] + y[2] + x[1]
    gx, gy = tape.gradient(z, [x, y])
    np.testing.assert_array_equal(gy, [2.0, 0.0, 1.0])
    np.testing.assert_array_equal(gx, [4.0, 1.0, 2.0])
    assert type(gx) is np.ndarray and type(gy) is np.ndarray


def test_0d_indexing_with_empty_tuple():
    g = mp.grad(lambda x: x[()] * x[()] + x[...])(np.array(3.0))
    assert np.shape(g) == () and g == 7.0


# --- take / take_along_axis / sort ---------------------------------------------------------------
TAKE = [
    C(x34, [0, 0, 2], {"axis": 1}, id="axis-repeats"),
    C(x34, [[0, -1], [2, 2]], {}, id="flat-2d-indices"),
    C(x34, 5, {}, id="flat-scalar"),
    C(x34, -1, {"axis": 0}, id="scalar-negative-axis0"),
    C(x234, np.array([1, 0, 1]), {"axis": -1}, id="negative-axis"),
    C(x34, [5, -1, 9], {"axis": 1, "mode": "wrap"}, id="mode-wrap"),
    C(x34, [-3, 7, 1, 1], {"axis": 1, "mode": "clip"}, id="mode-clip"),
    C(x5, [], {}, id="empty"),
    C(a0, 0, {}, id="0d"),
    C(a0, [0, 0, 0], {}, id="0d-repeats"),
]


@pytest.mark.parametrize("x, indices, kwargs", TAKE)
def test_take(x, indices, kwargs):
    test_rule(lambda x: np.take(x, indices, **kwargs), x)


def test_take_scalar_loop_matches_indexing():
    x = np.arange(1.0, 4.0)
    g = mp.grad(lambda x: sum(np.take(x, i % 3) * np.take(x, 0) for i in range(5)))(x)
    # d/dx of x0*(x0 + x1 + x2 + x0 + x1)
    np.testing.assert_allclose(g, [4 * x[0] + 2 * x[1] + x[2], 2 * x[0], x[0]])


TAKE_ALONG = [
    C(x34, np.argsort(x34, axis=1), 1, id="argsort-axis1"),
    C(x34, np.array([[0, 0, 2, 1], [1, 1, 1, 1]]), 0, id="repeats-axis0"),
    C(x34, np.array([[2], [0], [0]]), -1, id="one-per-row"),
    C(x34, np.array([[2, 2, 1, 0]]), 0, id="broadcast-rows"),
    C(x34, np.array([[-1, 0], [1, -2], [3, 3]]), 1, id="negative-indices"),
    C(x234, np.zeros((2, 1, 4), dtype=int), 1, id="3d"),
    C(x34, np.array([11, 0, 0, 5]), None, id="axis-None"),
]


@pytest.mark.parametrize("x, indices, axis", TAKE_ALONG)
def test_take_along_axis(x, indices, axis):
    test_rule(lambda x: np.take_along_axis(x, indices, axis), x)


SORT = [
    C(x5, {}, id="1d"),
    C(x34, {}, id="last-axis"),
    C(x34, {"axis": 0}, id="axis0"),
    C(x234, {"axis": 1}, id="middle-axis"),
    C(x234, {"axis": -3}, id="negative-axis"),
    C(x34, {"axis": None}, id="axis-None"),
    C(x34.T, {"kind": "stable"}, id="transposed-stable"),
    C(a0, {"axis": None}, id="0d"),
]


@pytest.mark.parametrize("x, kwargs", SORT)
def test_sort(x, kwargs):
    test_rule(lambda x: np.sort(x, **kwargs), x)


def test_sort_with_ties_routes_each_cotangent_to_one_element():
    x = np.array([2.0, 1.0, 2.0, 0.0])
    g = mp.grad(lambda x: np.sum(np.sort(x) * np.array([1.0, 10.0, 100.0, 1000.0])))(x)
    assert sorted(g.tolist()) == [1.0, 10.0, 100.0, 1000.0]
    assert g[3] == 1.0 and g[1] == 10.0


@pytest.mark.parametrize("fn", [
    C(lambda x: x[[0, 0, 1]], id="getitem-repeats"),
    C(lambda x: x[x > 0], id="getitem-mask"),
    C(lambda x: x[::-1][1], id="getitem-basic"),
    C(lambda x: np.take(x, [2, 2]), id="take"),
    C(lambda x: np.take_along_axis(x, np.array([1, 1, 0]), 0), id="take_along_axis"),
    C(lambda x: np.sort(x), id="sort"),
])
def test_float32_stays_float32(fn):
    x = np.array([0.5, -1.5, 2.0], dtype=np.float32)
    w = rng.standard_normal(np.shape(fn(x))).astype(np.float32)
    g = mp.grad(lambda x: np.sum(fn(x) * w))(x)
    assert g.dtype == np.float32
    check_grads(lambda x: np.sum(fn(x) * w), x)
