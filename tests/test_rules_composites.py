"""Functions differentiated by composition (median, average, ptp, quantile, percentile)."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.testing import test_rule

rng = np.random.default_rng(11)
X = rng.standard_normal((4, 5))
KWARGS = [{}, {"axis": 0}, {"axis": 1}, {"axis": -1, "keepdims": True}, {"keepdims": True}]


@pytest.mark.parametrize("kw", KWARGS, ids=str)
@pytest.mark.parametrize("fn", [np.median, np.ptp, np.average], ids=lambda f: f.__name__)
def test_reductions_by_composition(fn, kw):
    test_rule(fn, X, **kw)          # odd count along axis 0 and 1... and the flattened 20
    test_rule(fn, X[:, :4], **kw)   # even counts: median averages the middle two


@pytest.mark.parametrize("call,shape", [
    (lambda x, w: np.average(x, weights=w), (4, 5)),
    (lambda x, w: np.average(x, 1, w), (5,)),
    (lambda x, w: np.average(x, 0, w, keepdims=True), (4,)),
    (lambda x, w: np.average(x, 1, w, returned=True), (5,)),
])
def test_weighted_average_in_values_and_weights(call, shape):
    test_rule(call, X, rng.uniform(1, 2, shape))


def test_median_closed_form_and_second_order():
    x = np.array([3.0, 1.0, 2.0, 5.0])  # median = (2 + 3) / 2
    np.testing.assert_array_equal(mp.grad(np.median)(x), [0.5, 0.0, 0.5, 0.0])
    np.testing.assert_array_equal(mp.hvp(lambda x: np.median(x) ** 2)(x, np.ones(4)),
                                  [1.0, 0.0, 1.0, 0.0])


def test_several_axes_are_refused_clearly():
    with pytest.raises(mp.MissingRuleError, match="one axis at a time"):
        mp.grad(lambda x: np.sum(np.median(x, axis=(0, 1))))(X)


@pytest.mark.parametrize("kw", KWARGS + [{"axis": 0, "keepdims": True}], ids=str)
@pytest.mark.parametrize("q", [0.3, [0.1, 0.5, 0.9], 0.0, 1.0, [[0.25], [0.75]]], ids=str)
def test_quantile_and_percentile(q, kw):
    test_rule(lambda x: np.quantile(x, q, **kw), X)
    test_rule(lambda x: np.percentile(x, np.multiply(q, 100), **kw), X)


def test_quantile_refuses_other_methods_and_tracked_q():
    with pytest.raises(mp.MissingRuleError, match="method='linear'"):
        mp.grad(lambda x: np.quantile(x, 0.5, method="nearest"))(X[0])
    with pytest.raises(mp.MissingRuleError, match="respect to q"):
        mp.grad(lambda q: np.quantile(X[0], q))(0.5)


def test_multi_dot_and_pinv():
    A, B, C = rng.standard_normal((3, 4)), rng.standard_normal((4, 5)), rng.standard_normal((5, 2))
    test_rule(lambda a, b, c: np.linalg.multi_dot([a, b, c]), A, B, C)
    test_rule(lambda a, b: np.linalg.multi_dot([a[0], b]), A, B)
    for shape in [(4, 3), (3, 5), (2, 3, 3)]:
        test_rule(np.linalg.pinv, rng.standard_normal(shape))


@pytest.mark.parametrize("build,shapes", [
    (lambda a, b, c, d: np.block([[a, b], [c, d]]), [(2, 2), (2, 3), (1, 2), (1, 3)]),
    (lambda a, b: np.block([a, b]), [(3,), (2,)]),
    (lambda a, b: np.block([[a], [b]]), [(3,), (3,)]),
    (lambda a, b: np.block([[[a]], [[b]]]), [(2, 2), (2, 2)]),   # nested three deep
])
def test_block(build, shapes):
    test_rule(build, *[rng.standard_normal(s) for s in shapes])


def test_wrappers_nested_deeply_in_a_function_without_rules_raise_cleanly(monkeypatch):
    # np.block's dispatcher finds tracked values at any depth; dispatch must too (without its
    # composite, dispatch used to call np.block again and recurse forever).
    from mooncake_py.rules.registry import COMPOSITES
    monkeypatch.delitem(COMPOSITES, np.block)
    with pytest.raises(mp.MissingRuleError, match="numpy.block"):
        mp.grad(lambda x: np.sum(np.block([[x, x]])))(np.ones(2))
