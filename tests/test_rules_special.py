"""mooncake_py.special (logsumexp, softmax, log_softmax): values against scipy, rules against
finite differences, closed forms, extreme inputs, float32, and return_sign."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.testing import test_rule, check_grads

ss = pytest.importorskip("scipy.special")

RNG = np.random.default_rng(11)
X = RNG.standard_normal((3, 4, 2))
B = RNG.uniform(0.2, 2.0, (3, 4, 2))
lse, softmax, log_softmax = mp.special.logsumexp, mp.special.softmax, mp.special.log_softmax

AXES = [dict(), dict(axis=0), dict(axis=-1), dict(axis=(0, 2)), dict(axis=1, keepdims=True),
        dict(axis=None, keepdims=True), dict(axis=(2, 1), keepdims=True)]


def test_exports():
    from mooncake_py.rules import special
    assert special.__all__[:3] == ["logsumexp", "softmax", "log_softmax"]
    assert mp.special.logsumexp is special.logsumexp


# --- values match scipy ----------------------------------------------------------------------
@pytest.mark.parametrize("kw", AXES, ids=str)
def test_logsumexp_matches_scipy(kw):
    for args in [(X,), (X, B)]:
        kws = dict(kw, b=args[1]) if len(args) == 2 else kw
        ours, theirs = lse(X, **kws), ss.logsumexp(X, **kws)
        assert np.shape(ours) == np.shape(theirs)
        np.testing.assert_allclose(ours, theirs, rtol=1e-14)


@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2)], ids=str)
@pytest.mark.parametrize("ours, theirs", [(softmax, "softmax"), (log_softmax, "log_softmax")],
                         ids=["softmax", "log_softmax"])
def test_softmax_matches_scipy(ours, theirs, axis):
    np.testing.assert_allclose(ours(X, axis=axis), getattr(ss, theirs)(X, axis=axis), rtol=1e-14)


@pytest.mark.parametrize("a", [np.array([0.0, -40.0]), np.array([1000.0, 1000.0, 999.0]),
                               np.array([-np.inf, -np.inf]), np.array([np.inf, 1.0]),
                               np.array([-np.inf, 2.0]), np.array([-1000.0, -1001.0]),
                               np.float64(2.5), np.array(-3.0)], ids=repr)
def test_logsumexp_extreme_values_match_scipy(a):
    np.testing.assert_array_equal(np.shape(lse(a)), np.shape(ss.logsumexp(a)))
    np.testing.assert_allclose(lse(a), ss.logsumexp(a), rtol=1e-15, atol=0)


def test_logsumexp_return_sign_on_plain_arrays_matches_scipy():
    a, b = np.array([1.0, 2.0, 0.5]), np.array([-3.0, 0.2, 1.0])
    for kw in [dict(b=b), dict()]:
        (v, s), (v2, s2) = lse(a, return_sign=True, **kw), ss.logsumexp(a, return_sign=True, **kw)
        np.testing.assert_allclose(v, v2, rtol=1e-14)
        assert s == s2


# --- rules against finite differences ---------------------------------------------------------
@pytest.mark.parametrize("kw", AXES, ids=str)
def test_logsumexp_rule(kw):
    test_rule(lse, X, **kw)


@pytest.mark.parametrize("kw", AXES, ids=str)
def test_logsumexp_rule_with_weights(kw):
    test_rule(lse, X, b=B, **kw)                                        # constant weights
    test_rule(lambda a, b: lse(a, b=b, **kw), X, B)                     # tracked keyword b
    test_rule(lambda a, b: lse(a, kw.get("axis"), b, kw.get("keepdims", False)), X, B)


@pytest.mark.parametrize("a_shape, b_shape, axis", [((3, 4), (4,), 1), ((3, 1), (3, 4), 1),
                                                    ((4,), (3, 4), None), ((3, 4), (), 0)])
def test_logsumexp_broadcast_weights(a_shape, b_shape, axis):
    a = RNG.standard_normal(a_shape)
    b = RNG.uniform(0.2, 2.0, b_shape)
    np.testing.assert_allclose(lse(a, axis, b), ss.logsumexp(a, axis, b), rtol=1e-14)
    test_rule(lambda a, b: lse(a, axis, b), a, b)


@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2), (2, 0, 1)], ids=str)
@pytest.mark.parametrize("fn", [softmax, log_softmax], ids=["softmax", "log_softmax"])
def test_softmax_rules(fn, axis):
    test_rule(fn, X, axis=axis)


@pytest.mark.parametrize("fn", [lse, softmax, log_softmax], ids=lambda f: f.__name__)
@pytest.mark.parametrize("x", [np.float64(0.4), np.array(-1.2), np.array([0.3])], ids=repr)
def test_zero_dimensional_and_single_entry(fn, x):
    test_rule(fn, x)


def test_transposed_input():
    xt = X[:, :, 0].T
    test_rule(lse, xt, axis=0)
    test_rule(softmax, xt, axis=1)
    test_rule(log_softmax, xt, axis=0)


# --- closed forms -----------------------------------------------------------------------------
def test_logsumexp_gradient_is_softmax():
    x = X[:, :, 0]
    g = mp.grad(lambda x: np.sum(lse(x, axis=1) * np.array([1.0, 2.0, 3.0])))(x)
    np.testing.assert_allclose(g, ss.softmax(x, axis=1) * np.array([[1.0], [2.0], [3.0]]),
                               rtol=1e-14)


def test_logsumexp_weight_gradient():
    a, b = X[:, 0, 0], B[:, 0, 0]
    ga, gb = mp.grad(lambda a, b: lse(a, b=b), argnums=(0, 1))(a, b)
    np.testing.assert_allclose(gb, np.exp(a) / np.sum(b * np.exp(a)), rtol=1e-14)
    np.testing.assert_allclose(ga, b * np.exp(a) / np.sum(b * np.exp(a)), rtol=1e-14)


def test_softmax_jacobian_closed_form():
    x = X[:, 0, 0]
    s = ss.softmax(x)
    for i in range(3):
        g = mp.grad(lambda x: softmax(x)[i])(x)
        np.testing.assert_allclose(g, s[i] * ((np.arange(3) == i) - s), rtol=1e-13, atol=1e-16)


def test_log_softmax_gradient_closed_form():
    x, w = X[0, :, 0], np.array([1.0, -2.0, 0.5, 3.0])
    g = mp.grad(lambda x: np.sum(w * log_softmax(x)))(x)
    np.testing.assert_allclose(g, w - ss.softmax(x) * np.sum(w), rtol=1e-13)


def test_large_inputs_do_not_overflow():
    x = np.array([1000.0, 1001.0, 999.0])
    for f in [lse, lambda x: np.sum(softmax(x) * np.arange(3.0)),
              lambda x: np.sum(log_softmax(x) * np.arange(3.0))]:
        g = mp.grad(f)(x)
        assert np.all(np.isfinite(g))
    np.testing.assert_allclose(mp.grad(lse)(x), ss.softmax(x), rtol=1e-14)


def test_minus_infinity_entries_get_zero_gradient():
    x = np.array([-np.inf, 0.0, np.log(3.0)])
    np.testing.assert_allclose(mp.grad(lse)(x), [0.0, 0.25, 0.75], rtol=1e-15)


def test_in_a_larger_function():
    W = RNG.standard_normal((4, 3))
    labels = np.array([0, 2, 1])

    def nll(W, x):
        logits = x @ W
        return -np.sum(log_softmax(logits, axis=1)[np.arange(3), labels])
    check_grads(nll, W, X[:, :, 0])
    check_grads(lambda W, x: np.sum(lse(x @ W, axis=1)) - np.sum(softmax(x @ W, axis=0)[0]),
                W, X[:, :, 0])


# --- dtypes -----------------------------------------------------------------------------------
@pytest.mark.parametrize("f", [lse, lambda x: lse(x, axis=0)[1], lambda x: lse(x, b=x * x),
                               lambda x: softmax(x, axis=1)[0, 1],
                               lambda x: log_softmax(x)[2, 0]])
def test_float32_preserved(f):
    x0 = X[:, :, 0].astype(np.float32)
    assert f(x0).dtype == np.float32
    with mp.Tape() as tape:
        x = tape.track(x0)
        y = f(x)
    g, = tape.gradient(y, [x])
    assert y._value.dtype == np.float32 and g.dtype == np.float32


def test_float32_values_match_scipy():
    x = X.astype(np.float32)
    for ours, theirs in [(lse, ss.logsumexp), (softmax, ss.softmax), (log_softmax, ss.log_softmax)]:
        a, b = ours(x, axis=1), theirs(x, axis=1)
        assert a.dtype == b.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-6)


# --- errors -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [dict(), dict(axis=1), dict(axis=0, keepdims=True)], ids=str)
def test_return_sign_differentiates_log_abs_with_negative_weights(kw):
    w = np.where(np.arange(4) % 2 == 0, 1.0, -0.4)  # mixed signs: the sums stay away from 0
    xs = X[:, :, 0]

    def f(x, b):
        v, sign = lse(x, b=b, return_sign=True, **kw)
        return v * sign  # the sign is a constant factor
    test_rule(f, xs, w)
    v, sign = lse(xs, b=w, return_sign=True, **kw)
    v2, s2 = ss.logsumexp(xs, b=w, return_sign=True, **kw)
    np.testing.assert_allclose(v, v2, rtol=1e-13)
    np.testing.assert_array_equal(sign, s2)
    np.testing.assert_allclose(mp.grad(lse)(X[0, :, 0]), ss.softmax(X[0, :, 0]), rtol=1e-14)


def test_scipy_function_on_tracked_value_points_to_mp_special():
    with pytest.raises(mp.TrackingLostError, match="mooncake_py.special"):
        mp.grad(lambda x: ss.logsumexp(x))(X[0, :, 0])


# --- every pullback is differentiable np. code with the right derivatives -----------------------
# <v, pullback(w)> differentiated on the tape is the Hessian-vector product of <w, f(x)>: what
# forward-over-reverse relies on. Finite differences of the gradient are the reference.
@pytest.mark.parametrize("fn, kw", [
    (lse, dict()), (lse, dict(axis=1)), (lse, dict(axis=0, keepdims=True)),
    (lse, dict(b=B[:, :, 0], axis=1)), (softmax, dict(axis=0)), (softmax, dict()),
    (log_softmax, dict(axis=1)), (log_softmax, dict()),
], ids=lambda v: str(v)[:40] if isinstance(v, dict) else v.__name__)
def test_pullback_is_differentiable(fn, kw):
    from mooncake_py.rules import RRULES
    rng = np.random.default_rng(5)
    x0 = X[:, :, 0]
    w = rng.standard_normal(np.shape(fn(x0, **kw)))
    v = rng.standard_normal(x0.shape)
    with mp.Tape() as tape:
        x = tape.track(x0)
        _, pb = RRULES[fn]((x,), kw, (True,))
        s = np.sum(pb(w)[0] * v)
    got = tape.gradient(s, [x])[0]
    grad = mp.grad(lambda x: np.sum(w * fn(x, **kw)))
    h = 1e-5
    np.testing.assert_allclose(got, (grad(x0 + h * v) - grad(x0 - h * v)) / (2 * h),
                               rtol=1e-6, atol=1e-8)
