"""Forward rules of shape manipulation (mooncake_py/rules/shape.py): every case of the reverse-rule
table checked in forward mode too (frule vs finite differences, frule/rrule consistency, one
direction and k = 3 lanes), plus second order (Hessian-vector products by forward-over-reverse
against finite differences of the gradient) through compositions of these ops."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.dual import dual, primal, tangent
from mooncake_py.rules.registry import FRULES, FRULE_LANES
from mooncake_py.rules.shape import _pad_ruled
from mooncake_py.core.array_ops import astype
from mooncake_py.tape import Tape
from mooncake_py.testing import test_rule

from test_rules_shape import CASES

MODES = ("reverse", "forward", "forward_over_reverse")
rng = np.random.default_rng(2)


def r(*shape):
    return rng.standard_normal(shape)


pytestmark = pytest.mark.usefixtures("debug_mode")  # rule outputs checked on every call


C = pytest.param


@pytest.mark.parametrize("fn, args, kwargs", CASES)
def test_rule_table_forward(fn, args, kwargs):
    test_rule(fn, *args, modes=MODES, **kwargs)


FAMILY = [np.reshape, np.ravel, np.squeeze, np.expand_dims, np.broadcast_to, np.broadcast_arrays,
          np.atleast_1d, np.atleast_2d, np.atleast_3d, np.transpose, np.swapaxes, np.moveaxis,
          np.flip, np.fliplr, np.flipud, np.rot90, np.roll, np.concatenate, np.stack, np.hstack,
          np.vstack, np.dstack, np.column_stack, np.append, np.split, np.array_split, np.hsplit,
          np.vsplit, np.dsplit, np.unstack, np.tile, np.repeat, np.diag, np.diagonal, np.triu,
          np.tril, _pad_ruled, np.copy]  # (np.pad: a composite over _pad_ruled's rules)


@pytest.mark.parametrize("fn", FAMILY, ids=lambda f: f.__name__)
def test_the_family_frule_is_the_active_one(fn):
    """Registering a second frule silently replaces the first: these must be the family's."""
    assert FRULES[fn].__module__ == "mooncake_py.rules.shape"
    assert fn in FRULE_LANES


def test_astype_has_a_lane_aware_frule():
    assert astype in FRULES and astype in FRULE_LANES
    test_rule(lambda x: astype(x, np.float64), r(2, 3).astype(np.float32), modes=MODES)
    y = astype(dual(np.ones(2), np.ones((3, 2)), lanes=True), np.float32)
    assert tangent(y).dtype == np.float32 and tangent(y).shape == (3, 2)


# --- arguments that carry no tangent, and sequences given as one array ----------------------------
c3, c34 = np.linspace(-1, 1, 3), np.linspace(0, 1, 12).reshape(3, 4)
PARTIAL = [
    C(lambda x: np.concatenate([x, c34, x]), r(3, 4), id="concatenate-constant-middle"),
    C(lambda x: np.concatenate([c3, x, np.arange(2)], axis=None), r(2, 2), id="concatenate-None-ints"),
    C(lambda x: np.stack([c34, x], axis=-1), r(3, 4), id="stack-constant-first"),
    C(lambda x: np.hstack([1.5, x, c3]), r(2), id="hstack-scalar-constant"),
    C(lambda x: np.vstack([c3, x]), r(2, 3), id="vstack-constant"),
    C(lambda x: np.dstack([x, c34]), r(3, 4), id="dstack-constant"),
    C(lambda x: np.column_stack([c3, x]), r(3, 2), id="column_stack-constant"),
    C(lambda x: np.append(c34, x, axis=1), r(3, 2), id="append-constant-arr"),
    C(lambda x: np.append(x, c3), r(2, 2), id="append-constant-values"),
    C(lambda x: np.broadcast_arrays(c34, x)[1], r(4), id="broadcast_arrays-constant"),
    C(lambda x: np.atleast_2d(c3, x)[1], np.float64(0.3), id="atleast_2d-constant"),
    C(lambda x: np.concatenate(x), r(2, 3), id="concatenate-one-array"),
    C(lambda x: np.concatenate(x, axis=None), r(2, 3, 2), id="concatenate-one-array-None"),
    C(lambda x: np.stack(x, axis=1), r(2, 3), id="stack-one-array"),
    C(lambda x: np.hstack(x), r(3, 2), id="hstack-one-array"),
    C(lambda x: np.vstack(x), r(3, 2), id="vstack-one-array"),
    C(lambda x: np.dstack(x), r(2, 3, 2), id="dstack-one-array"),
    C(lambda x: np.column_stack(x), r(2, 3), id="column_stack-one-array"),
    C(lambda x: np.pad(x, ((1, 0), (0, 2)), constant_values=7.0), r(2, 2), id="pad-constant-7"),
    C(lambda x: np.pad(x, 2, "empty")[2:4], r(2), id="pad-empty"),
]


@pytest.mark.parametrize("f, x", PARTIAL)
def test_sequences_with_constants(f, x):
    test_rule(f, x, modes=MODES)


@pytest.mark.parametrize("layout", ["C", "F", "transposed", "reversed", "permuted-sliced"])
@pytest.mark.parametrize("order", ["C", "F", "A", "K"])
@pytest.mark.parametrize("lanes", [False, True])
def test_ravel_and_reshape_orders_follow_the_primal_layout(layout, order, lanes):
    """Orders 'A' and 'K' read the primal's memory layout; the tangent's layout is irrelevant.
    (test_rule cannot check this: its perturbed inputs are C-ordered whatever the layout.)"""
    def laid_out(base):
        return {"C": base, "F": np.asfortranarray(base), "transposed": base.T,
                "reversed": base[:, ::-1],
                "permuted-sliced": base.transpose(1, 0, 2)[::-1, :, ::2]}[layout]
    a = laid_out(r(2, 3, 8))
    vs = [laid_out(r(2, 3, 8)) for _ in range(3 if lanes else 1)]
    fns = [lambda x: np.ravel(x, order), lambda x: x.flatten(order)]
    if order != "K":
        fns.append(lambda x: np.reshape(x, (-1, 2), order=order))
    for f in fns:
        # the tangent is a C-ordered copy: only the primal's layout may decide the reading order
        v = np.stack(vs) if lanes else np.ascontiguousarray(vs[0])
        y = f(dual(a, v, lanes=lanes))
        want = np.stack([f(u) for u in vs]) if lanes else f(vs[0])
        np.testing.assert_array_equal(primal(y), f(a))
        np.testing.assert_array_equal(tangent(y), want)


@pytest.mark.parametrize("mode", ["minimum", "maximum"])  # (linear_ramp: a composite now)
def test_pad_other_modes_raise_missing_rule_in_forward_mode(mode):
    with pytest.raises(mp.MissingRuleError, match=f"forward-mode rule for np.pad with mode='{mode}'"):
        np.pad(dual(np.ones(3), np.ones(3)), 1, mode=mode)


FLOAT32 = [
    C(lambda x: np.reshape(x, (3, 2), order="F"), id="reshape"),
    C(lambda x: np.concatenate([x, np.zeros((1, 3), np.float32)]), id="concatenate-constant"),
    C(lambda x: np.stack(np.split(x, 3, axis=1)), id="split-stack"),
    C(lambda x: np.diag(np.diag(x, 1), -1), id="diag"),
    C(lambda x: np.tile(np.triu(x), (2, 1)), id="tile-triu"),
    C(lambda x: np.pad(np.roll(x, 1), 1), id="pad-roll"),
    C(lambda x: np.broadcast_to(x[:1], (4, 3)), id="broadcast_to"),
]


@pytest.mark.parametrize("fn", FLOAT32)
@pytest.mark.parametrize("lanes", [False, True])
def test_float32_tangents_stay_float32(fn, lanes):
    x = r(2, 3).astype(np.float32)
    v = r(*((3,) if lanes else ()), 2, 3).astype(np.float32)
    y = fn(dual(x, v, lanes=lanes))
    assert primal(y).dtype == np.float32 and tangent(y).dtype == np.float32
    want = np.stack([fn(u) for u in v]) if lanes else fn(v)
    np.testing.assert_allclose(tangent(y), want.astype(np.float32), rtol=1e-6)


def test_mixed_precision_join_tangent_follows_the_output_dtype():
    y = np.concatenate([dual(np.ones(2, np.float32), np.ones(2, np.float32)), np.zeros(1)])
    assert primal(y).dtype == np.float64 and tangent(y).dtype == np.float64
    np.testing.assert_array_equal(tangent(y), [1.0, 1.0, 0.0])


# --- reverse over forward: the frules run on tracked tangents --------------------------------------
REVERSE_OVER_FORWARD = [
    C(lambda x: np.concatenate([c34, x], axis=None), r(2, 3), id="concatenate-constant"),
    C(lambda x: np.hstack([x, c3]), r(2), id="hstack-constant"),
    C(lambda x: np.diag(x, -1), r(3), id="diag-1d"),
    C(lambda x: np.triu(x, 1), r(4), id="triu-1d"),
    C(lambda x: np.reshape(x, (4, 2), order="F"), r(2, 4), id="reshape-F"),
    C(lambda x: np.split(x, [1, 3], axis=1)[1], r(2, 4), id="split"),
    C(lambda x: np.pad(np.roll(x, 1, 0), 1), r(2, 2), id="pad-roll"),
    C(lambda x: x[[0, 1, 1], :, [2, 0, 2]], r(2, 3, 4), id="getitem-separated-advanced"),
    C(lambda x: np.sort(x, axis=None), r(2, 3), id="sort"),
]


@pytest.mark.parametrize("f, x", REVERSE_OVER_FORWARD)
@pytest.mark.parametrize("lanes", [False, True])
def test_reverse_over_forward(f, x, lanes):
    """A tape created before the dual records the frule's tangent computation: the gradient of
    <w, J·v> with respect to v must be the pullback Jᵀ·w."""
    v = r(*((3,) if lanes else ()), *np.shape(x))
    w = r(*((3,) if lanes else ()), *np.shape(f(x)))
    tape = Tape()
    vt = tape.track(v)
    gv, = tape.gradient(np.sum(tangent(f(dual(x, vt, lanes=lanes))) * w), [vt])
    _, pullback = mp.vjp(f, x)
    want = np.stack([pullback(u)[0] for u in w]) if lanes else pullback(w)[0]
    np.testing.assert_allclose(gv, want, rtol=1e-12, atol=1e-14)


# --- second order: Hessian-vector products by forward-over-reverse -------------------------------
def hvp(f, x, v, lanes=False):
    """H·v by forward-over-reverse: the reverse sweep runs on duals (k directions with lanes)."""
    d = dual(x, v, lanes=lanes)
    tape = Tape()  # created after the dual: the tape is the inner level
    xt = tape.track(d)
    g, = tape.gradient(f(xt), [xt])
    return tangent(g)


def check_hvp(f, x, k=3, seed=0):
    """H·v for one direction and for k directions in lanes against central differences of the
    gradient (several steps, the best one)."""
    gen = np.random.default_rng(seed)
    grad = mp.grad(f)
    vs = gen.standard_normal((k,) + np.shape(x))

    def fd(v):
        ests = [(grad(x + h * v) - grad(x - h * v)) / (2 * h) for h in (1e-3, 1e-4, 1e-5)]
        return ests

    def close(got, v):
        scale = 1 + np.max(np.abs(got))
        return min(np.max(np.abs(got - e)) for e in fd(v)) <= 1e-6 * scale

    one = hvp(f, x, vs[0])
    assert np.shape(one) == np.shape(x)
    assert close(one, vs[0]), (one, fd(vs[0]))
    many = hvp(f, x, vs, lanes=True)
    assert np.shape(many) == (k,) + np.shape(x)
    for i in range(k):
        assert close(many[i], vs[i]), (i, many[i], fd(vs[i]))


w6 = np.linspace(-1.0, 2.0, 6)
SECOND_ORDER = [
    C(lambda x: np.sum(np.concatenate([x, x ** 2]) ** 2), r(5), id="concatenate"),
    C(lambda x: np.sum(np.concatenate([x, x ** 2], axis=None) ** 3), r(2, 3), id="concatenate-None"),
    C(lambda A: np.sum(np.diag(np.triu(A)) ** 2) + np.sum(np.tril(A, -1) * A ** 2), r(4, 4),
      id="diag-triu-tril"),
    C(lambda x: np.sum(np.diag(x ** 2, 1) * np.diag(x, 1)) + np.sum(np.diag(x, -2) ** 3), r(4),
      id="diag-1d-offsets"),
    C(lambda A: np.sum(np.diagonal(A * A[::-1], 1, 0, 2) ** 3), r(3, 2, 3), id="diagonal-3d"),
    C(lambda x: np.sum(np.transpose(np.reshape(x, (2, 3))) ** 3 * w6.reshape(3, 2)), r(6),
      id="reshape-transpose"),
    C(lambda x: np.sum(np.ravel(np.reshape(x, (3, 2), order="F") ** 2, order="F") * w6), r(6),
      id="reshape-ravel-F"),
    C(lambda x: np.sum(np.stack(np.split(x ** 2, 3)) * np.stack(np.array_split(x, 3), 1).T),
      r(6), id="split-stack"),
    C(lambda x: sum(np.sum(p ** 3) * i for i, p in enumerate(np.unstack(x, axis=1))), r(2, 3),
      id="unstack"),
    C(lambda x: np.sum(np.tile(x, 2) * np.repeat(x, 2) ** 2), r(3), id="tile-repeat"),
    C(lambda x: np.sum(np.repeat(x, [1, 3, 0], axis=1) ** 3), r(2, 3), id="repeat-per-element"),
    C(lambda x: np.sum(np.pad(x, 1) ** 2 * np.roll(np.flip(np.pad(x, 1)), 1)), r(4), id="pad-roll-flip"),
    C(lambda x: np.sum(np.rot90(x, 1, (1, 2)) ** 2 * np.moveaxis(np.swapaxes(x, 0, 2), 2, 0)),
      r(2, 3, 3), id="rot90-moveaxis-swapaxes"),
    C(lambda x: np.sum(np.broadcast_to(x[None], (3, 4)) ** 3 * np.squeeze(np.expand_dims(x, 0))),
      r(4), id="broadcast_to-squeeze-expand_dims"),
    C(lambda x: np.sum(np.hstack([x, x ** 2]) ** 2) + np.sum(np.vstack([x, x]) ** 3)
      + np.sum(np.dstack([x, x * x]) * np.column_stack([x, x])[None]), r(3), id="hstack-vstack-dstack"),
    C(lambda x: np.sum(np.append(x, x ** 2) ** 2) + np.sum(np.fliplr(x[None]) * np.flipud(x) ** 2),
      r(4), id="append-fliplr-flipud"),
    C(lambda x: (lambda a, b: np.sum((a * b) ** 2))(*np.broadcast_arrays(x[:, None], x ** 2))
      + np.sum(np.atleast_2d(x) ** 3), r(3), id="broadcast_arrays-atleast_2d"),
    C(lambda x: np.sum(np.copy(x) ** 3) + np.sum(np.real(x) * x), r(3), id="copy-real"),
    C(lambda x: np.sum(np.hsplit(x, [1])[1] ** 3) + np.sum(np.vsplit(x, 2)[0] * x[:1]), r(2, 4),
      id="hsplit-vsplit"),
]


@pytest.mark.parametrize("f, x", SECOND_ORDER)
def test_hessian_vector_products(f, x):
    check_hvp(f, x)
