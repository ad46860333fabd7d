"""Reverse rules of shape manipulation (mooncake_py/rules/shape.py), checked against finite
differences with test_rule, plus gradients through the ndarray-method forms."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.testing import test_rule, check_grads

rng = np.random.default_rng(0)


def r(*shape):
    return rng.standard_normal(shape)


s0 = np.float64(0.7)   # a NumPy scalar
a0 = np.array(-1.3)    # a 0-d array
x3, x5, x6, x7 = r(3), r(5), r(6), r(7)
x21, x24, x14, x32, x34, x35 = r(2, 1), r(2, 4), r(1, 4), r(3, 2), r(3, 4), r(3, 5)
x64, x234, x1312 = r(6, 4), r(2, 3, 4), r(1, 3, 1, 2)
x234_T = r(4, 3, 2).T      # a transposed (non-contiguous) input
x36_sliced = r(3, 8)[:, ::2][:, 1:]  # a sliced input with a step


@pytest.fixture(autouse=True)
def debug_mode():
    """Every rule's cotangents are also checked for structure, shape and dtype."""
    with mp.Config(debug_mode=True):
        yield


def pieces(fn):
    """``fn`` with its list/tuple of outputs returned as a dict (test_rule takes any pytree)."""
    def wrapped(*args, **kwargs):
        return dict(enumerate(fn(*args, **kwargs)))
    wrapped.__name__ = fn.__name__
    return wrapped


C = pytest.param

CASES = [
    # reshape
    C(np.reshape, (x34, (4, 3)), {}, id="reshape"),
    C(np.reshape, (x34, (-1,)), {}, id="reshape-minus1"),
    C(np.reshape, (x34, (2, -1)), {"order": "F"}, id="reshape-F"),
    C(np.reshape, (x234_T, (6, 4)), {}, id="reshape-transposed-input"),
    C(np.reshape, (x34,), {"shape": (2, 2, 3)}, id="reshape-shape-kw"),
    C(np.reshape, (s0, (1, 1)), {}, id="reshape-0d"),
    C(np.reshape, (r(1), ()), {}, id="reshape-to-0d"),
    # ravel
    C(np.ravel, (x34,), {}, id="ravel"),
    C(np.ravel, (x234,), {"order": "F"}, id="ravel-F"),
    C(np.ravel, (x36_sliced,), {}, id="ravel-sliced"),
    C(np.ravel, (a0,), {}, id="ravel-0d"),
    # transpose and friends
    C(np.transpose, (x234,), {}, id="transpose"),
    C(np.transpose, (x234, (2, 0, 1)), {}, id="transpose-axes"),
    C(np.transpose, (x234, (-1, 0, -2)), {}, id="transpose-negative-axes"),
    C(np.transpose, (x234_T,), {"axes": (1, 2, 0)}, id="transpose-axes-kw"),
    C(np.transpose, (a0,), {}, id="transpose-0d"),
    C(np.transpose, (a0, ()), {}, id="transpose-0d-empty-axes"),
    C(np.swapaxes, (x234, 0, 2), {}, id="swapaxes"),
    C(np.swapaxes, (x234, -1, 0), {}, id="swapaxes-negative"),
    C(np.moveaxis, (x234, 0, -1), {}, id="moveaxis"),
    C(np.moveaxis, (x234, (0, 1), (2, 0)), {}, id="moveaxis-tuples"),
    C(np.moveaxis, (x234, -1, 1), {}, id="moveaxis-negative"),
    # expand_dims / squeeze
    C(np.expand_dims, (x34, 0), {}, id="expand_dims"),
    C(np.expand_dims, (x34, -1), {}, id="expand_dims-negative"),
    C(np.expand_dims, (x34, (0, 3)), {}, id="expand_dims-tuple"),
    C(np.expand_dims, (s0, 0), {}, id="expand_dims-0d"),
    C(np.squeeze, (x1312,), {}, id="squeeze"),
    C(np.squeeze, (x1312, 0), {}, id="squeeze-axis"),
    C(np.squeeze, (x1312, (0, 2)), {}, id="squeeze-tuple"),
    C(np.squeeze, (x1312,), {"axis": -2}, id="squeeze-negative"),
    C(np.squeeze, (a0,), {}, id="squeeze-0d"),
    C(np.squeeze, (r(1, 1),), {}, id="squeeze-to-0d"),
    # broadcasting
    C(np.broadcast_to, (x3, (2, 3)), {}, id="broadcast_to"),
    C(np.broadcast_to, (r(1, 3), (4, 2, 3)), {}, id="broadcast_to-size1-axes"),
    C(np.broadcast_to, (x21, (2, 5)), {}, id="broadcast_to-column"),
    C(np.broadcast_to, (s0, (2, 2)), {}, id="broadcast_to-0d"),
    C(np.broadcast_to, (x3, (3,)), {}, id="broadcast_to-same"),
    C(np.broadcast_arrays, (x3, x21), {}, id="broadcast_arrays"),
    C(np.broadcast_arrays, (x34, s0), {}, id="broadcast_arrays-0d"),
    # atleast_nd, one array or several
    C(np.atleast_1d, (s0,), {}, id="atleast_1d-0d"),
    C(np.atleast_1d, (x34,), {}, id="atleast_1d-2d"),
    C(pieces(np.atleast_1d), (s0, x3, x34), {}, id="atleast_1d-several"),
    C(np.atleast_2d, (s0,), {}, id="atleast_2d-0d"),
    C(np.atleast_2d, (x3,), {}, id="atleast_2d-1d"),
    C(pieces(np.atleast_2d), (a0, x3, x234), {}, id="atleast_2d-several"),
    C(np.atleast_3d, (s0,), {}, id="atleast_3d-0d"),
    C(np.atleast_3d, (x3,), {}, id="atleast_3d-1d"),
    C(np.atleast_3d, (x34,), {}, id="atleast_3d-2d"),
    C(pieces(np.atleast_3d), (s0, x3, x34, x234), {}, id="atleast_3d-several"),
    # joining
    C(np.concatenate, ([x34, x24],), {}, id="concatenate"),
    C(np.concatenate, ((x34, x35),), {"axis": 1}, id="concatenate-axis1-tuple"),
    C(np.concatenate, ([x34, x34, x24],), {"axis": -2}, id="concatenate-negative-axis"),
    C(np.concatenate, ([x34, x3, x234],), {"axis": None}, id="concatenate-axis-None"),
    C(np.concatenate, ([x234_T, x234_T],), {"axis": 2}, id="concatenate-transposed"),
    C(np.concatenate, ([x3],), {}, id="concatenate-one"),
    C(np.stack, ([x34, x34],), {}, id="stack"),
    C(np.stack, ([x34, x34, x34],), {"axis": 1}, id="stack-axis1"),
    C(np.stack, ((x34, x34),), {"axis": -1}, id="stack-negative-axis"),
    C(np.stack, ([s0, a0],), {}, id="stack-0d"),
    C(np.hstack, ([x3, x5],), {}, id="hstack-1d"),
    C(np.hstack, ([x34, x32],), {}, id="hstack-2d"),
    C(np.hstack, ([s0, x3, a0],), {}, id="hstack-0d"),
    C(np.vstack, ([x3, x3],), {}, id="vstack-1d"),
    C(np.vstack, ([x34, x24, r(4)],), {}, id="vstack-mixed"),
    C(np.vstack, ([s0, a0],), {}, id="vstack-0d"),
    C(np.dstack, ([x34, x34],), {}, id="dstack-2d"),
    C(np.dstack, ([x3, x3],), {}, id="dstack-1d"),
    C(np.dstack, ([x234, x234[..., :1]],), {}, id="dstack-3d"),
    C(np.column_stack, ([x3, x3],), {}, id="column_stack-1d"),
    C(np.column_stack, ([x3, x32, x3],), {}, id="column_stack-mixed"),
    C(np.append, (x3, x5), {}, id="append"),
    C(np.append, (x34, x24), {"axis": 0}, id="append-axis"),
    C(np.append, (x34, s0), {}, id="append-scalar"),
    # splitting (several outputs)
    C(np.split, (x6, 3), {}, id="split-sections"),
    C(pieces(np.split), (x34, [1, 3]), {"axis": 1}, id="split-indices"),
    C(pieces(np.split), (x34, [-1]), {"axis": -1}, id="split-negative-index"),
    C(pieces(np.split), (x6, [4, 2]), {}, id="split-decreasing-indices"),
    C(pieces(np.split), (x6, [1, 10]), {}, id="split-index-past-end"),
    C(pieces(np.split), (x64, [2, 2, 5]), {"axis": 0}, id="split-empty-piece"),
    C(pieces(np.array_split), (x7, 3), {}, id="array_split"),
    C(pieces(np.array_split), (x34, 5, 1), {}, id="array_split-more-sections-than-items"),
    C(pieces(np.array_split), (x34, [2]), {"axis": 1}, id="array_split-indices"),
    C(pieces(np.hsplit), (x34, [1]), {}, id="hsplit"),
    C(np.hsplit, (x6, 2), {}, id="hsplit-1d"),
    C(np.vsplit, (x64, 3), {}, id="vsplit"),
    C(pieces(np.dsplit), (x234, [3]), {}, id="dsplit"),
    C(np.unstack, (x34,), {}, id="unstack"),
    C(np.unstack, (x234,), {"axis": -1}, id="unstack-axis"),
    # copies
    C(np.tile, (x3, 2), {}, id="tile"),
    C(np.tile, (x3, (2, 2)), {}, id="tile-more-reps"),
    C(np.tile, (x34, (2, 1, 3)), {}, id="tile-3-reps"),
    C(np.tile, (x234, 2), {}, id="tile-fewer-reps"),
    C(np.tile, (x34, (0, 2)), {}, id="tile-zero-rep"),
    C(np.tile, (s0, 3), {}, id="tile-0d"),
    C(np.repeat, (x3, 2), {}, id="repeat"),
    C(np.repeat, (x34, 2), {"axis": 1}, id="repeat-axis"),
    C(np.repeat, (x34, [1, 0, 3]), {"axis": 0}, id="repeat-per-element"),
    C(np.repeat, (x34, [2, 0, 1, 1], -1), {}, id="repeat-per-element-negative-axis"),
    C(np.repeat, (x34, 3), {}, id="repeat-axis-None"),
    C(np.repeat, (x3, [1, 2, 3]), {}, id="repeat-per-element-axis-None"),
    C(np.repeat, (x34, [2]), {"axis": 1}, id="repeat-length1-list"),
    C(np.repeat, (s0, 3), {}, id="repeat-0d"),
    C(np.copy, (x34,), {}, id="copy"),
    C(np.copy, (s0,), {}, id="copy-0d"),
    C(np.real, (x34,), {}, id="real"),
    C(np.conj, (x34,), {}, id="conj"),
    C(np.conjugate, (s0,), {}, id="conjugate-0d"),
    # flips and rolls
    C(np.flip, (x34,), {}, id="flip"),
    C(np.flip, (x34, 0), {}, id="flip-axis"),
    C(np.flip, (x234, (0, 2)), {}, id="flip-tuple"),
    C(np.flip, (x234,), {"axis": -1}, id="flip-negative"),
    C(np.fliplr, (x34,), {}, id="fliplr"),
    C(np.flipud, (x3,), {}, id="flipud"),
    C(np.rot90, (x34,), {}, id="rot90"),
    C(np.rot90, (x34, 3), {}, id="rot90-k3"),
    C(np.rot90, (x234, -1, (1, 2)), {}, id="rot90-axes"),
    C(np.roll, (x5, 2), {}, id="roll"),
    C(np.roll, (x34, 5), {}, id="roll-axis-None"),
    C(np.roll, (x34, -1, 1), {}, id="roll-axis"),
    C(np.roll, (x34, (1, 2), (0, 1)), {}, id="roll-tuple"),
    C(np.roll, (x34, (1, 1), (0, 0)), {}, id="roll-repeated-axis"),
    C(np.roll, (x34, 1), {"axis": -1}, id="roll-negative-axis"),
    # diagonals and triangles
    C(np.diag, (x3,), {}, id="diag-1d"),
    C(np.diag, (x3, 1), {}, id="diag-1d-k"),
    C(np.diag, (x3,), {"k": -2}, id="diag-1d-negative-k"),
    C(np.diag, (x34,), {}, id="diag-2d"),
    C(np.diag, (x34, 1), {}, id="diag-2d-k"),
    C(np.diag, (x34, -2), {}, id="diag-2d-negative-k"),
    C(np.diag, (r(5, 3), 1), {}, id="diag-2d-tall"),
    C(np.diag, (x34, 5), {}, id="diag-2d-empty"),
    C(np.diagonal, (x34,), {}, id="diagonal"),
    C(np.diagonal, (x34, 1), {}, id="diagonal-offset"),
    C(np.diagonal, (x234, 0, 1, 2), {}, id="diagonal-axes"),
    C(np.diagonal, (x234, -1, 2, 0), {}, id="diagonal-reversed-axes"),
    C(np.diagonal, (x234,), {"offset": 1, "axis1": -1, "axis2": -2}, id="diagonal-negative-axes"),
    C(np.triu, (x34,), {}, id="triu"),
    C(np.triu, (x34, 1), {}, id="triu-k"),
    C(np.triu, (x234,), {"k": -1}, id="triu-batched"),
    C(np.triu, (x3,), {}, id="triu-1d"),
    C(np.tril, (x34,), {}, id="tril"),
    C(np.tril, (x34, -1), {}, id="tril-k"),
    C(np.tril, (x234_T, 2), {}, id="tril-batched"),
    C(np.tril, (x3, 1), {}, id="tril-1d"),
    # padding
    C(np.pad, (x34, 1), {}, id="pad"),
    C(np.pad, (x34, ((1, 0), (2, 3))), {}, id="pad-per-axis"),
    C(np.pad, (x34, (1, 2)), {}, id="pad-pair"),
    C(np.pad, (x3, 2), {"constant_values": 5.0}, id="pad-constant-values"),
    C(np.pad, (x34, 1, "constant"), {"constant_values": ((1.0, 2.0), (3.0, 4.0))},
      id="pad-constant-value-pairs"),
    C(np.pad, (x34, {1: (1, 2)}), {}, id="pad-dict"),
    C(np.pad, (x234, [[0, 1], [2, 0], [1, 1]]), {}, id="pad-3d"),
    C(np.pad, (a0, 2), {}, id="pad-0d"),
]


@pytest.mark.parametrize("fn, args, kwargs", CASES)
def test_rule_table(fn, args, kwargs):
    test_rule(fn, *args, **kwargs)


def test_split_pieces_without_cotangent_get_zeros():
    def f(x):
        a, b, c = np.split(x, [2, 4])
        return np.sum(a ** 2) + 3 * np.sum(c)
    x = np.arange(6.0)
    np.testing.assert_allclose(mp.grad(f)(x), [0.0, 2.0, 0.0, 0.0, 3.0, 3.0])


def test_concatenate_with_constants_and_sequence_array():
    w = np.arange(4.0)
    g = mp.grad(lambda x: np.sum(np.concatenate([x, np.ones(2)]) * w))(np.ones(2))
    np.testing.assert_allclose(g, [0.0, 1.0])
    # A single 2-D array passed as the sequence: its rows are the pieces.
    check_grads(lambda x: np.sum(np.concatenate(x) * np.arange(6.0)), r(2, 3))
    check_grads(lambda x: np.sum(np.stack(x, axis=1) ** 2), r(2, 3))
    check_grads(lambda x: np.sum(np.hstack(x) ** 3), r(3, 2))


def test_concatenate_out_argument_refused():
    with pytest.raises(mp.MutationError):
        mp.grad(lambda x: np.sum(np.concatenate([x, x], 0, np.empty(4))))(np.ones(2))


def test_concatenate_mixed_float32_float64_cotangents_keep_input_dtype():
    def f(x):
        y = np.concatenate([x, np.ones(2)])   # promoted to float64
        return np.sum(y * y)
    g = mp.grad(f)(np.ones(3, dtype=np.float32))
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, 2.0)


@pytest.mark.parametrize("layout", ["C", "F", "transposed", "reversed", "permuted-sliced"])
@pytest.mark.parametrize("order", ["C", "F", "A", "K"])
def test_ravel_and_reshape_orders_follow_the_input_layout(layout, order):
    base = r(2, 3, 4)
    a = {"C": base, "F": np.asfortranarray(base), "transposed": base.T,
         "reversed": base[:, ::-1],
         "permuted-sliced": base.transpose(1, 0, 2)[::-1, :, ::2]}[layout]
    # test_rule cannot check these: its perturbed inputs are C-ordered whatever a's layout is.
    for f in [lambda x: np.ravel(x, order), lambda x: x.flatten(order)] + (
            [lambda x: np.reshape(x, (-1, 2), order=order)] if order != "K" else []):
        y, pullback = mp.vjp(f, a)
        np.testing.assert_array_equal(y, f(a))
        gbar = r(*y.shape)
        ga, = pullback(gbar)
        # <ḡ, f(d)> = <ga, d> for a direction d laid out in memory like a.
        d = np.empty_like(a)
        d[...] = r(*a.shape)
        np.testing.assert_allclose(np.sum(gbar * f(d)), np.sum(ga * d), rtol=1e-12)


def test_pad_other_modes_raise_missing_rule():
    for mode in ["median", "maximum", "mean"]:  # (edge, reflect, symmetric, wrap: gathers;
        # linear_ramp and reflect_type='odd': composites)
        with pytest.raises(mp.MissingRuleError, match=f"mode='{mode}'"):
            mp.grad(lambda x: np.sum(np.pad(x, 1, mode=mode)))(np.ones(3))


def test_pad_empty_mode_gradient():
    g = mp.grad(lambda x: np.sum(np.pad(x, (1, 2), mode="empty")[1:4] * np.arange(3.0)))(np.ones(3))
    np.testing.assert_array_equal(g, [0.0, 1.0, 2.0])


def test_astype_casts_back():
    x = np.array([1.0, 2.0], dtype=np.float32)
    g = mp.grad(lambda x: np.sum(x.astype(np.float64) ** 2))(x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, 2 * x)
    g = mp.grad(lambda x: np.sum(x.astype(np.float32) * 3))(np.ones(2))
    assert g.dtype == np.float64
    np.testing.assert_allclose(g, 3.0)
    # An integer cast carries no derivative.
    assert type(mp.grad(lambda x: np.sum(x * 2) + 0 * np.sum(x.astype(int)))(np.ones(2))) \
        is np.ndarray


METHODS = [
    C(lambda x: np.sum(x.T * np.arange(6.0).reshape(3, 2)), id="T"),
    C(lambda x: np.sum(x.reshape(3, 2) ** 3), id="reshape-ints"),
    C(lambda x: np.sum(x.reshape((6,)) * np.arange(6.0)), id="reshape-tuple"),
    C(lambda x: np.sum(x.reshape(-1) * np.arange(6.0)), id="reshape-minus1"),
    C(lambda x: np.sum(x.reshape(3, 2, order="F") * np.arange(6.0).reshape(3, 2)), id="reshape-F"),
    C(lambda x: np.sum(x.transpose(1, 0) * np.arange(6.0).reshape(3, 2)), id="transpose-ints"),
    C(lambda x: np.sum(x.transpose((1, 0)) ** 3), id="transpose-tuple"),
    C(lambda x: np.sum(x.transpose() * np.arange(6.0).reshape(3, 2)), id="transpose-none"),
    C(lambda x: np.sum(x.flatten() * np.arange(6.0)), id="flatten"),
    C(lambda x: np.sum(x.flatten("F") * np.arange(6.0)), id="flatten-F"),
    C(lambda x: np.sum(x.ravel() * np.arange(6.0)), id="ravel"),
    C(lambda x: np.sum(x[None].squeeze() * np.arange(6.0).reshape(2, 3)), id="squeeze"),
    C(lambda x: np.sum(x[:, None].squeeze(1) ** 3), id="squeeze-axis"),
    C(lambda x: np.sum(x.swapaxes(0, 1) * np.arange(6.0).reshape(3, 2)), id="swapaxes"),
    C(lambda x: np.sum(x.mT * np.arange(6.0).reshape(3, 2)), id="mT"),
    C(lambda x: np.sum(x.copy() ** 2), id="copy"),
    C(lambda x: np.sum(x.conj() * x.real), id="conj-real"),
]


@pytest.mark.parametrize("f", METHODS)
def test_method_forms(f):
    check_grads(f, r(2, 3))


def test_like_constructors_are_constant_buffers():
    def f(x):
        z, o, e, c = np.zeros_like(x), np.ones_like(x), np.empty_like(x), np.full_like(x, 3.0)
        assert all(type(v) is mp.TrackedArray for v in (z, o, e, c))
        e[...] = 1.0
        return np.sum(x * x * (z + o + e + c))
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(mp.grad(f)(x), 2 * x * 5.0)


def test_imag_of_real_input_is_a_constant():
    def f(x):
        assert type(np.imag(x)) is np.ndarray
        return np.sum(x * (1.0 + np.imag(x)))
    np.testing.assert_array_equal(mp.grad(f)(np.ones(3)), np.ones(3))


def test_sequence_of_tracked_values_passed_by_keyword():
    check_grads(lambda x: np.sum(np.stack(arrays=[x, 2 * x]) ** 2), r(3))


def test_shape_queries_are_plain():
    def f(x):
        assert np.shape(x) == (2, 3) and np.ndim(x) == 2 and np.size(x) == 6
        return np.sum(x)
    np.testing.assert_array_equal(mp.grad(f)(np.ones((2, 3))), np.ones((2, 3)))


FLOAT32 = [
    C(lambda x: np.reshape(x, (3, 2)), id="reshape"),
    C(lambda x: np.transpose(x, (-1, 0)), id="transpose"),
    C(lambda x: np.concatenate([x, x], axis=None), id="concatenate"),
    C(lambda x: np.stack([x, 2 * x]), id="stack"),
    C(lambda x: np.vstack([x, x[0]]), id="vstack"),
    C(lambda x: np.concatenate(np.split(x, [1], axis=1)[::-1], axis=1), id="split"),
    C(lambda x: np.tile(x, (2, 1)), id="tile"),
    C(lambda x: np.repeat(x, [1, 2, 0], axis=1), id="repeat-per-element"),
    C(lambda x: np.roll(np.flip(x), 1), id="roll-flip"),
    C(lambda x: np.diag(np.diag(x, 1)), id="diag"),
    C(lambda x: np.triu(x) + np.tril(x, -1), id="triu-tril"),
    C(lambda x: np.pad(x, 1), id="pad"),
    C(lambda x: np.broadcast_to(x[:1], (4, 3)), id="broadcast_to"),
    C(lambda x: np.atleast_3d(x), id="atleast_3d"),
    C(lambda x: np.squeeze(np.expand_dims(x, 0)), id="squeeze-expand"),
]


@pytest.mark.parametrize("fn", FLOAT32)
def test_float32_gradients_stay_float32(fn):
    x = rng.standard_normal((2, 3)).astype(np.float32)
    w_shape = np.shape(fn(x))
    w = rng.standard_normal(w_shape).astype(np.float32)
    g = mp.grad(lambda x: np.sum(fn(x) * w))(x)
    assert g.dtype == np.float32
    check_grads(lambda x: np.sum(fn(x) * w), x)
