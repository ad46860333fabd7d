"""The dual layer's direct dispatch (operators and ufunc calls whose operands are this tag's duals
or plain values skip dispatch's search) against the general dispatch, including the cases that
must still take the search: duals of another tag (nested jvp), tracked values, sequences."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.core.dispatch import dispatch
from mooncake_py.dual.dual_array import DualArray, Tag
from mooncake_py.errors import EscapedValueError

rng = np.random.default_rng(3)

OPS = [("+", np.add), ("-", np.subtract), ("*", np.multiply), ("/", np.true_divide),
       ("**", np.power)]


def apply_op(sym, a, b):
    return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a / b,
            "**": lambda: a ** b}[sym]()


def same(r, want):
    assert type(r) is DualArray and type(want) is DualArray
    assert r._tag is want._tag
    np.testing.assert_array_equal(r.primal, want.primal)
    np.testing.assert_array_equal(r.tangent, want.tangent)
    assert r.primal.dtype == want.primal.dtype and r.tangent.dtype == want.tangent.dtype


@pytest.mark.parametrize("sym,uf", OPS)
@pytest.mark.parametrize("other", ["dual", "array", "float", "np64", "int", "row"])
@pytest.mark.parametrize("lanes", [0, 2])
def test_operators_match_general_dispatch(sym, uf, other, lanes):
    tag = Tag(lanes)
    x = rng.uniform(0.5, 2.0, (3, 4))
    tx = rng.standard_normal(((lanes,) if lanes else ()) + x.shape)
    d = DualArray(x, tx, tag)
    o = {"dual": DualArray(rng.uniform(0.5, 2, (3, 4)),
                           rng.standard_normal(((lanes,) if lanes else ()) + (3, 4)), tag),
         "array": rng.uniform(0.5, 2, (3, 4)), "float": 1.7, "np64": np.float64(0.3),
         "int": 2, "row": rng.uniform(0.5, 2, 4)}[other]
    same(apply_op(sym, d, o), dispatch(uf, (d, o), {}))
    same(apply_op(sym, o, d), dispatch(uf, (o, d), {}))
    same(uf(d, o), dispatch(uf, (d, o), {}))
    same(uf(o, d), dispatch(uf, (o, d), {}))
    same(-d, dispatch(np.negative, (d,), {}))
    same(np.exp(d), dispatch(np.exp, (d,), {}))


def test_nested_tags_take_the_search():
    # d/dx d/dy (x * y) = 1: the inner product mixes two tags
    def inner(x):
        return mp.jvp(lambda y: x * y + y * x, (np.float64(2.0),), (np.float64(1.0),))[1]
    _, t = mp.jvp(inner, (np.float64(3.0),), (np.float64(1.0),))
    assert t == 2.0
    f = lambda x: mp.jvp(lambda y: np.sin(x) * y ** 2, (np.float64(1.5),),
                         (np.float64(1.0),))[1]
    np.testing.assert_allclose(mp.jvp(f, (np.float64(0.4),), (np.float64(1.0),))[1],
                               np.cos(0.4) * 2 * 1.5)


def test_tracked_and_sequence_operands_take_the_search():
    x, v = rng.standard_normal(3), rng.standard_normal(3)
    w = rng.standard_normal(3)
    # inside hvp the tape's values are duals: dual (constant direction) op tracked, both orders
    f = lambda x: np.sum(np.sin(x) * w) + np.sum(w * x ** 3)
    want = -np.sin(x) * w * v + 6 * w * x * v
    np.testing.assert_allclose(mp.hvp(f)(x, v), want, rtol=1e-13)
    tag = Tag(0)
    d = DualArray(x, v, tag)
    r = d * [1.0, 2.0, 3.0]
    np.testing.assert_allclose(r.tangent, v * [1.0, 2.0, 3.0])
    r = np.add(d, d, out=None)
    np.testing.assert_allclose(r.tangent, 2 * v)


def test_closed_tag_raises_through_the_direct_paths():
    saved = []
    mp.jvp(lambda x: saved.append(x) or x * 2.0, (np.ones(2),), (np.ones(2),))
    for op in (lambda d: d * 2.0, lambda d: 2.0 + d, lambda d: -d, np.sin,
               lambda d: np.multiply(d, np.ones(2))):
        with pytest.raises(EscapedValueError):
            op(saved[0])


def test_complex_duals_through_operators():
    z, t = np.array([1 + 2j, -0.5j]), np.array([1.0 + 0j, 2.0 - 1j])
    _, ty = mp.jvp(lambda z: z * z + 3.0 * z, (z,), (t,))
    np.testing.assert_allclose(ty, 2 * z * t + 3 * t)
