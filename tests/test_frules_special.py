"""Forward rules of mooncake_py.special (logsumexp with weights, softmax, log_softmax) against
finite differences and their reverse rules (test_rule, modes reverse + forward, k = 1 and 3
lanes) on the input tables of test_rules_special.py; float32; extreme inputs; second order."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.transforms.forward import jvp
from mooncake_py.testing import test_rule

import test_rules_special as S
from test_frules_reductions import table, hvp, fd_hvp, jvp_of_jvp, fd_of_jvp, name

BOTH = ("reverse", "forward")
lse, softmax, log_softmax = mp.special.logsumexp, mp.special.softmax, mp.special.log_softmax


@pytest.mark.parametrize("kw", [c["kw"] for c in table(S.test_logsumexp_rule)], ids=str)
def test_logsumexp(kw):
    test_rule(lse, S.X, modes=BOTH, **kw)


@pytest.mark.parametrize("kw", [c["kw"] for c in table(S.test_logsumexp_rule_with_weights)],
                         ids=str)
def test_logsumexp_with_weights(kw):
    test_rule(lse, S.X, b=S.B, modes=BOTH, **kw)                            # constant weights
    test_rule(lambda a, b: lse(a, b=b, **kw), S.X, S.B, modes=BOTH)         # tangent on b too
    test_rule(lambda a, b: lse(a, kw.get("axis"), b, kw.get("keepdims", False)), S.X, S.B,
              modes=BOTH)
    test_rule(lambda b: lse(S.X, b=b, **kw), S.B, modes=BOTH)              # on b alone


@pytest.mark.parametrize("case", list(table(S.test_logsumexp_broadcast_weights)),
                         ids=lambda c: f"{c['a_shape']}-{c['b_shape']}-{c['axis']}")
def test_logsumexp_broadcast_weights(case):
    rng = np.random.default_rng(8)
    a = rng.standard_normal(case["a_shape"])
    b = rng.uniform(0.2, 2.0, case["b_shape"])
    test_rule(lambda a, b: lse(a, case["axis"], b), a, b, modes=BOTH)


@pytest.mark.parametrize("fn, axis", [(c["fn"], c["axis"]) for c in table(S.test_softmax_rules)],
                         ids=lambda v: name(v))
def test_softmax(fn, axis):
    test_rule(fn, S.X, axis=axis, modes=BOTH)


@pytest.mark.parametrize("fn, x", [(c["fn"], c["x"])
                                   for c in table(S.test_zero_dimensional_and_single_entry)],
                         ids=lambda v: name(v) if callable(v) else repr(v))
def test_zero_dimensional_and_single_entry(fn, x):
    test_rule(fn, x, modes=BOTH)


def test_transposed_input():
    xt = S.X[:, :, 0].T
    test_rule(lse, xt, axis=0, modes=BOTH)
    test_rule(softmax, xt, axis=1, modes=BOTH)
    test_rule(log_softmax, xt, axis=0, modes=BOTH)


# --- closed forms and extreme inputs ------------------------------------------------------------
def test_logsumexp_tangent_is_softmax_weighted():
    x, v = S.X[:, :, 0], S.RNG.standard_normal((3, 4))
    _, dy = jvp(lambda x: lse(x, axis=1), (x,), (v,))
    s = np.exp(x) / np.sum(np.exp(x), axis=1, keepdims=True)
    np.testing.assert_allclose(dy, np.sum(s * v, axis=1), rtol=1e-14)


@pytest.mark.parametrize("f", [lse, lambda x: softmax(x), lambda x: log_softmax(x)],
                         ids=["logsumexp", "softmax", "log_softmax"])
def test_large_and_infinite_inputs_give_finite_tangents(f):
    for x in [np.array([1000.0, 1001.0, 999.0]), np.array([-np.inf, 0.0, np.log(3.0)])]:
        _, dy = jvp(f, (x,), (np.array([0.5, -1.0, 2.0]),))
        fin = np.isfinite(x)
        assert np.all(np.isfinite(np.where(fin, dy, 0.0)))
    _, dy = jvp(lse, (np.array([-np.inf, 0.0, np.log(3.0)]),), (np.array([9.0, 1.0, 2.0]),))
    np.testing.assert_allclose(dy, 0.25 * 1.0 + 0.75 * 2.0, rtol=1e-15)


def test_return_sign_in_forward_mode():
    x, b = S.X[0, :, 0], np.array([1.0, -0.3, 0.5, -0.2])
    (v, sign), (dv, dsign) = jvp(lambda x: lse(x, b=b, return_sign=True), (x,), (np.ones(4),))
    s = np.sum(b * np.exp(x))
    np.testing.assert_allclose(v, np.log(abs(s)), rtol=1e-13)
    assert dsign is None or np.all(dsign == 0)
    np.testing.assert_allclose(dv, 1.0, rtol=1e-13)  # a shift of every a_i shifts log|s| by 1


# --- float32 -------------------------------------------------------------------------------------
@pytest.mark.parametrize("f", [lambda x: lse(x), lambda x: lse(x, axis=0),
                               lambda x: lse(x, axis=1, b=np.float32(2.0) + x * x),
                               lambda x: softmax(x, axis=1), lambda x: log_softmax(x)],
                         ids=["lse", "lse-axis", "lse-b", "softmax", "log_softmax"])
def test_float32_preserved(f):
    x = S.X[:, :, 0].astype(np.float32)
    for lanes, v in [(False, np.ones_like(x)), (True, np.ones((3,) + x.shape, np.float32))]:
        y, dy = jvp(f, (x,), (v,), lanes=lanes)
        assert y.dtype == dy.dtype == np.float32 and np.all(np.isfinite(dy))


def test_float32_inside_the_rules():
    from mooncake_py.rules import FRULES
    x = S.X[:, :, 0].astype(np.float32)
    v = np.ones((2,) + x.shape, np.float32)
    for fn, args, tangents in [(lse, [x, 1, x * x], [v, None, v]), (softmax, [x, 0], [v, None]),
                               (log_softmax, [x], [v])]:
        _, dy = FRULES[fn](args, tangents)
        assert dy.dtype == np.float32


# --- second order ------------------------------------------------------------------------------
@pytest.mark.parametrize("fn, kw", [(c["fn"], c["kw"])
                                    for c in table(S.test_pullback_is_differentiable)],
                         ids=lambda v: name(v) if not isinstance(v, dict) else str(v)[:40])
def test_pullback_forward_over_reverse(fn, kw):
    test_rule(fn, S.X[:, :, 0], modes=("forward_over_reverse",), **kw)


W = np.abs(np.random.default_rng(9).standard_normal((3, 4)))
LABELS = np.array([0, 2, 1])
COMPOSITIONS = {
    "logsumexp": lambda x: lse(x) + np.sum(lse(x, axis=1) ** 2),
    "logsumexp-b": lambda x: np.sum(lse(x, axis=0, b=W)) + lse(np.sin(x), b=x * x + 1.0),
    "softmax-cross-entropy": lambda x: -np.sum(np.log(softmax(x, axis=1))[np.arange(3), LABELS]),
    "softmax": lambda x: np.sum(softmax(x) * W) + np.sum(softmax(x, axis=0) ** 2),
    "log_softmax": lambda x: -np.sum(log_softmax(x, axis=1) * W) + np.sum(log_softmax(x) ** 2),
    "nll": lambda x: -np.sum(log_softmax(x @ W.T, axis=1)[np.arange(3), LABELS]),
}


@pytest.mark.parametrize("f", list(COMPOSITIONS.values()), ids=list(COMPOSITIONS))
def test_hvp(f):
    x = S.X[:, :, 0]
    v = np.random.default_rng(1).standard_normal(x.shape)
    got = hvp(f, x, v)
    np.testing.assert_allclose(got, fd_hvp(f, x, v), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(mp.hvp(f)(x, v), got, rtol=1e-12, atol=1e-12)  # the public API
    V = np.random.default_rng(2).standard_normal((3,) + x.shape)
    H = hvp(f, x, V, lanes=True)
    for l in range(3):
        np.testing.assert_allclose(H[l], hvp(f, x, V[l]), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("f", [
    lambda x: lse(x, axis=1), lambda x: lse(x, axis=0, b=W), lambda x: softmax(x, axis=0),
    lambda x: log_softmax(x)],
    ids=["logsumexp", "logsumexp-b", "softmax", "log_softmax"])
def test_forward_over_forward(f):
    x = S.X[:, :, 0]
    rng = np.random.default_rng(6)
    u, v = rng.standard_normal(x.shape), rng.standard_normal(x.shape)
    got = jvp_of_jvp(f, x, u, v)
    np.testing.assert_allclose(got, fd_of_jvp(f, x, u, v), rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(got, jvp_of_jvp(f, x, v, u), rtol=1e-12, atol=1e-13)
