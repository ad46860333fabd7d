"""mooncake_py.scipy.special: the re-exported ufuncs, polygamma and multigammaln, the inputs
that have no derivative (orders, gammainc's shape), float32, and messages that name scipy's
functions by their real module.

Every table entry is checked against finite differences (reverse, forward with lanes,
forward-over-reverse, broadcasting) by tests/test_kernels.py, and to fourth order by
tests/test_higher_order.py; here are the functions outside the table and what is special."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.scipy import special
from mooncake_py.testing import test_rule
from mooncake_py.rules.derivative_table import TABLE, SCIPY_UFUNCS, load_scipy

sps = pytest.importorskip("scipy.special")
load_scipy()

RNG = np.random.default_rng(5)
X = RNG.uniform(0.5, 3.0, (3, 4))
MODES = ("reverse", "forward", "forward_over_reverse")


def test_the_module_is_mp_special_and_reexports_scipy_s_ufuncs():
    assert mp.special is special
    for name in SCIPY_UFUNCS:
        assert getattr(special, name) is getattr(sps, name), name
        assert getattr(sps, name) in {e.ufunc for e in TABLE.values()}, name
    assert {"logsumexp", "softmax", "log_softmax", "polygamma", "multigammaln"} <= \
        set(special.__all__)
    with pytest.raises(AttributeError):
        special.not_a_function  # noqa: B018


# --- polygamma ----------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_polygamma_rules(n):
    np.testing.assert_allclose(special.polygamma(n, X), sps.polygamma(n, X), rtol=1e-15)
    test_rule(lambda x: special.polygamma(n, x), X, modes=MODES)


def test_polygamma_broadcasts_an_order_array():
    n = np.array([[0], [1], [2]])  # an integer array: a constant
    test_rule(special.polygamma, n, X[0], modes=MODES)
    y = mp.jvp(lambda x: special.polygamma(n, x), (X[0],), (np.ones(4),))[1]
    np.testing.assert_allclose(y, sps.polygamma(n + 1, X[0]), rtol=1e-13)


def test_polygamma_order_has_no_derivative():
    for mode in (mp.grad, lambda f: (lambda n: mp.jvp(f, (n,), (1.0,)))):
        with pytest.raises(mp.MissingRuleError, match="polygamma.*'n'"):
            mode(lambda n: special.polygamma(n, 2.0))(1.0)


# --- multigammaln ----------------------------------------------------------------------------
@pytest.mark.parametrize("d", [1, 2, 4])
def test_multigammaln_rules(d):
    a = X + 2.0
    np.testing.assert_allclose(special.multigammaln(a, d), sps.multigammaln(a, d), rtol=1e-14)
    test_rule(lambda x: special.multigammaln(x, d), a, modes=MODES)


def test_multigammaln_checks_its_domain_as_scipy_does():
    with pytest.raises(ValueError, match="0.5 \\* \\(d-1\\)"):
        mp.grad(lambda a: special.multigammaln(a, 4))(1.0)
    with pytest.raises(ValueError):
        sps.multigammaln(1.0, 4)


# --- inputs without a derivative ----------------------------------------------------------------
@pytest.mark.parametrize("name, param", [("gammainc", "a"), ("gammaincc", "a"), ("iv", "v"),
                                         ("kv", "v"), ("jv", "v")])
def test_constant_inputs_raise_naming_the_function_and_parameter(name, param):
    uf = getattr(special, name)
    msg = f"scipy.special.{name} has no derivative with respect to its argument '{param}'"
    with pytest.raises(mp.MissingRuleError, match=msg):
        mp.grad(lambda a: np.sum(uf(a, X)))(np.array(1.5))
    with pytest.raises(mp.MissingRuleError, match=msg):
        mp.jvp(lambda a: uf(a, X), (np.array(1.5),), (np.array(1.0),))
    with pytest.raises(mp.MissingRuleError, match=msg):
        mp.hvp(lambda a: np.sum(uf(a, X)))(np.array(1.5), np.array(1.0))
    # with the order constant, the other input differentiates, broadcasting included
    test_rule(lambda x: uf(np.array([[1.5], [2.0], [0.5]]), x), X[0], modes=MODES)


def test_integer_orders_and_gammainc_closed_forms():
    x = np.array([0.5, 1.0, 2.5])
    g = mp.grad(lambda t: np.sum(special.gammainc(2, t)))(x)  # P(2, x) = 1 - (1 + x)e^-x
    np.testing.assert_allclose(g, x * np.exp(-x), rtol=1e-13)
    g = mp.grad(lambda t: np.sum(special.kv(0, t)))(x)
    np.testing.assert_allclose(g, -sps.k1(x), rtol=1e-13)
    g = mp.grad(lambda t: np.sum(special.iv(1, t)))(x)
    np.testing.assert_allclose(g, 0.5 * (sps.i0(x) + sps.iv(2, x)), rtol=1e-13)


# --- values, closed forms, float32 -----------------------------------------------------------
CLOSED_FORMS = [  # (function, x, its derivative at x)
    ("erfinv", np.array([-0.5, 0.1, 0.9]),
     lambda x: np.sqrt(np.pi) / 2 * np.exp(sps.erfinv(x) ** 2)),
    ("ndtri", np.array([0.01, 0.5, 0.9]),
     lambda x: np.sqrt(2 * np.pi) * np.exp(sps.ndtri(x) ** 2 / 2)),
    ("log_expit", np.array([-800.0, 0.0, 40.0]), lambda x: sps.expit(-x)),
    ("i0e", np.array([-3.0, 0.5, 700.0]), lambda x: sps.i1e(x) - np.sign(x) * sps.i0e(x)),
    ("j1", np.array([0.0, 1.0, 30.0]), lambda x: 0.5 * (sps.j0(x) - sps.jv(2, x))),
    ("entr", np.array([0.1, 1.0, 5.0]), lambda x: -np.log(x) - 1),
    ("loggamma", np.array([0.1, 1.0, 50.0]), sps.digamma),
    ("rgamma", np.array([0.5, 1.0, 4.0]), lambda x: -sps.rgamma(x) * sps.digamma(x)),
]


@pytest.mark.parametrize("name, x, d", CLOSED_FORMS, ids=[c[0] for c in CLOSED_FORMS])
def test_derivatives_match_closed_forms_including_extreme_inputs(name, x, d):
    with np.errstate(all="ignore"):
        g = mp.grad(lambda t: np.sum(getattr(special, name)(t)))(x)
        want = d(x)
    np.testing.assert_allclose(g, want, rtol=1e-12)


@pytest.mark.parametrize("name", ["erfinv", "j0", "i1e", "log_expit", "betaln", "xlog1py"])
def test_float32_stays_float32(name):
    uf = getattr(special, name)
    x = np.array([0.25, 0.5], dtype=np.float32)
    f = (lambda t: np.sum(uf(t))) if uf.nin == 1 else (lambda t: np.sum(uf(t, t + 1)))
    g = mp.grad(f)(x)
    h = mp.hvp(f)(x, np.ones(2, dtype=np.float32))
    assert g.dtype == np.float32 and h.dtype == np.float32, (g.dtype, h.dtype)
    np.testing.assert_allclose(g, mp.grad(f)(x.astype(np.float64)), rtol=1e-5)


def test_logsumexp_with_weights_and_keepdims():
    b = RNG.uniform(0.2, 2.0, (3, 4))
    for kw in (dict(axis=1), dict(axis=0, keepdims=True), dict()):
        test_rule(lambda a, w: special.logsumexp(a, b=w, **kw), X, b[0], modes=MODES)
        np.testing.assert_allclose(special.logsumexp(X, b=b[0], **kw),
                                   sps.logsumexp(X, b=b[0], **kw), rtol=1e-14)


# --- messages name the real module ----------------------------------------------------------------
def test_missing_rule_messages_name_scipy_special():
    x = np.array([0.5, 1.5])
    with pytest.raises(mp.MissingRuleError) as info:
        mp.grad(lambda t: np.sum(sps.erfcx(t)))(x)
    msg = str(info.value)
    assert "scipy.special.erfcx" in msg and "@mp.rrule(scipy.special.erfcx)" in msg
    assert "numpy.erfcx" not in msg and "np.erfcx" not in msg
    with pytest.raises(mp.MissingRuleError) as info:
        mp.jvp(sps.erfcx, (x,), (np.ones(2),))
    msg = str(info.value)
    assert "@mp.frule(scipy.special.erfcx)" in msg and "np.erfcx" not in msg
    from mooncake_py.rules.registry import fn_name
    assert fn_name(np.sin) == "numpy.sin" and fn_name(sps.betaln) == "scipy.special.betaln"
    assert fn_name((np.add, "reduce")) == "numpy.add.reduce"


# --- GPU: entries CUDA cannot spell take the composition path ----------------------------
def test_only_entries_cuda_can_spell_get_gpu_kernels():
    from mooncake_py.dual import codegen
    assert all(codegen.has_cuda(TABLE[n]) for n in ("tanh", "erf", "psi", "gammaln", "ndtr",
                                                    "log_ndtr", "xlogy", "expit", "j0", "j1",
                                                    "y0", "y1"))
    assert not any(codegen.has_cuda(TABLE[n]) for n in ("jv", "iv", "erfinv", "betaln",
                                                        "gammainc", "i0e"))


def test_kernel_less_entries_run_their_composition_on_a_device():
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu"))
    import fake_device  # host arrays posing as a device module; they refuse NumPy arrays
    xp = fake_device.module()
    xh, vh = np.array([0.5, 1.5, 2.5]), np.array([1.0, -0.5, 2.0])

    def f(t):
        return np.sum(special.j0(t) * special.i1e(t) + special.iv(1.5, t) * special.erfinv(t / 3)
                      + special.log_expit(t) * special.y1(t))
    got = mp.hvp(f)(xp.asarray(xh), xp.asarray(vh))
    assert type(got) is xp.ndarray
    np.testing.assert_allclose(got.get(), mp.hvp(f)(xh, vh), rtol=1e-14)
