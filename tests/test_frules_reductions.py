"""Forward rules of the reductions against finite differences and against their reverse rules
(test_rule, modes reverse + forward: one direction and k = 3 lanes, strided copies too), on the
input tables of test_rules_reductions.py; exact tie and zero cases; float32; and second order
(Hessian-vector products by forward-over-reverse) against finite differences of the gradient."""
import itertools
import warnings

import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.dual import dual, tangent
from mooncake_py.transforms.forward import jvp
from mooncake_py.rules import FRULES
from mooncake_py.testing import test_rule

import test_rules_reductions as R

BOTH = ("reverse", "forward")


def table(test_fn):
    """The cases of ``test_fn``'s stacked ``@pytest.mark.parametrize`` tables, as dicts of
    argument values (their cartesian product, as pytest runs them): the reverse-rule tests'
    inputs, reused rather than copied."""
    tables = []
    for mark in getattr(test_fn, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        names = [n.strip() for n in mark.args[0].split(",")]
        tables.append([dict(zip(names, (row,) if len(names) == 1 else row))
                       for row in mark.args[1]])
    assert tables, f"{test_fn.__name__} has no parametrize table"
    for combo in itertools.product(*tables):
        yield {k: v for d in combo for k, v in d.items()}


def name(v):
    if callable(v) and hasattr(v, "__self__") and isinstance(v.__self__, np.ufunc):
        return f"{v.__self__.__name__}.{v.__name__}"
    if isinstance(v, np.ndarray):
        return f"array{v.shape}"
    return getattr(v, "__name__", None) or str(v)


def ident(fn, args, kw):
    return "-".join([name(fn)] + [name(a) for a in args]
                    + [f"{k}={name(v)}" for k, v in kw.items()])


def cases():
    """(fn, args, kwargs) of every reverse-rule table of test_rules_reductions.py."""
    out = []
    for c in table(R.test_reductions):
        out.append((c["fn"], (R.X3,), c["kw"]))
    for c in table(R.test_prod):
        out.append((c["fn"], (R.POS[None] * np.array([[[1.0]], [[-1.3]]]),), c["kw"]))
    for c in table(R.test_zero_dimensional):
        out.append((c["fn"], (c["x"],), {}))
    for c in table(R.test_transposed_input):
        out.append((c["fn"], ((R.POS * np.sign(R.X2)).T,), dict(axis=0)))
    for c in table(R.test_var_std_ddof):
        out.append((c["fn"], (R.X3,), c["kw"]))
    for c in table(R.test_nan_reductions_skip_nans):
        out.append((c["fn"], (R.NAN,), c["kw"]))
    for c in table(R.test_cumulative):
        if np.ndim(c["x"]) == 0 and c["kw"].get("axis") not in (None, 0, -1):
            continue
        out.append((c["fn"], (c["x"],), c["kw"]))
    for c in table(R.test_keyword_arguments):
        out.append((c["fn"], (R.X2,), c["kw"]))
    for c in table(R.test_ufunc_reduce):
        out.append((c["method"], (R.X2,), c["kw"]))
    for c in table(R.test_ufunc_accumulate):
        out.append((c["method"], (R.X3,), c["kw"]))
    for c in table(R.test_prod_with_zeros):
        out.append((np.prod, (np.array(c["x"]),), {}))
    for c in table(R.test_cumprod_with_zeros):
        out.append((np.cumprod, (np.array(c["x"]),), {}))
    for c in table(R.test_vector_norm):
        out.append((np.linalg.norm, (R.X2[1],), dict(ord=c["ord"])))
    for c in table(R.test_vector_norm_along_axis):
        out.append((np.linalg.norm, (R.X3,), dict(ord=c["ord"], **c["kw"])))
    for c in table(R.test_matrix_norm):
        out.append((np.linalg.norm, (R.X2,), dict(ord=c["ord"])))
    for c in table(R.test_matrix_norm_along_axes):
        out.append((np.linalg.norm, (R.X3,), dict(ord=c["ord"], **c["kw"])))
    out += [(np.linalg.norm, (R.X3,), {}), (np.linalg.norm, (R.X3,), dict(keepdims=True))]
    return out


CASES = cases()


@pytest.mark.parametrize("fn, args, kw", CASES, ids=[ident(*c) for c in CASES])
def test_frule(fn, args, kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices of the nan* cases
        test_rule(fn, *args, modes=BOTH, **kw)


# --- zeros in products: the frule is a polynomial's exact derivative ------------------------------
# Inputs with one, two and three zeros per slice, along every axis (finite differences hold for a
# polynomial at zeros too, and test_rule checks frule/rrule consistency there).
ZEROS = np.array([[2.0, 0.0, 3.0, -1.5], [0.0, 0.0, 5.0, 2.0], [1.5, 0.0, -1.0, 0.0]])


PRODUCTS = [np.prod, np.nanprod, np.multiply.reduce]
SCANS = [np.cumprod, np.nancumprod, np.multiply.accumulate]


@pytest.mark.parametrize("fn, kw", [(f, kw) for f in PRODUCTS for kw in
                                    [dict(), dict(axis=0), dict(axis=1, keepdims=True)]]
                         + [(f, kw) for f in SCANS for kw in [dict(), dict(axis=0), dict(axis=-1)]],
                         ids=lambda v: name(v) if not isinstance(v, dict) else str(v))
def test_products_with_zeros(fn, kw):
    test_rule(fn, ZEROS, modes=BOTH, **kw)


@pytest.mark.parametrize("x", [[2.0, 0.0, 3.0, -1.5], [0.0, 2.0, 0.0, 4.0], [0.0, 0.0, 0.0, 1.0]])
def test_prod_tangent_closed_form(x):
    x, v = np.array(x), np.array([0.5, -1.0, 2.0, 0.25])
    expected = sum(v[i] * np.prod(np.delete(x, i)) for i in range(4))
    _, dy = jvp(np.prod, (x,), (v,))
    assert dy == expected
    _, dc = jvp(np.cumprod, (x,), (v,))
    expected = [sum(v[i] * np.prod(np.delete(x[:n + 1], i)) for i in range(n + 1))
                for n in range(4)]
    np.testing.assert_allclose(dc, expected, rtol=1e-15, atol=0)


def test_nanprod_with_a_zero():
    x, v = np.array([2.0, np.nan, 0.0, 3.0]), np.array([1.0, 7.0, 1.0, 1.0])
    assert jvp(np.nanprod, (x,), (v,))[1] == 6.0
    np.testing.assert_array_equal(jvp(np.nancumprod, (x,), (v,))[1], [1.0, 1.0, 2.0, 6.0])


# --- ties: the tangent is the average over the tied entries, as the pullback splits equally -------
@pytest.mark.parametrize("fn, kw", [(c["fn"], c["kw"]) for c in table(R.test_ties_split_equally)],
                         ids=lambda v: name(v) if not isinstance(v, dict) else str(v))
def test_ties_average_the_tangents(fn, kw):
    x = R.TIED
    v = np.random.default_rng(4).standard_normal((3,) + x.shape)
    hit = x == fn(x, **dict(kw, keepdims=True))
    axis, keep = kw.get("axis"), kw.get("keepdims", False)
    weights = R.gradient(lambda t: np.sum(fn(t, **kw)), x)   # the pullback's 1/count per tie
    np.testing.assert_array_equal(weights, hit / np.sum(hit, axis=axis, keepdims=True))
    _, dys = jvp(lambda t: fn(t, **kw), (x,), (v,), lanes=True)
    for l in range(3):
        _, dy = jvp(lambda t: fn(t, **kw), (x,), (v[l],))
        average = np.sum(v[l] * hit, axis=axis, keepdims=keep) / np.sum(hit, axis=axis,
                                                                        keepdims=keep)
        np.testing.assert_allclose(dy, average, rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(dys[l], dy, rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(np.sum(dy), np.sum(v[l] * weights), rtol=1e-14)  # = <Jᵀ1, v>


def test_infinity_norm_and_matrix_norm_ties():
    x, v = np.array([-2.0, 1.0, 2.0, 0.5]), np.array([1.0, 5.0, 3.0, 7.0])
    assert jvp(lambda x: np.linalg.norm(x, np.inf), (x,), (v,))[1] == (-1.0 + 3.0) / 2
    m = np.array([[1.0, -2.0, 0.5], [-2.0, 1.0, 0.5]])  # columns 0 and 1 both sum to 3
    w = np.arange(6.0).reshape(2, 3)
    _, dy = jvp(lambda x: np.linalg.norm(x, 1), (m,), (w,))
    assert dy == np.sum(np.sign(m) * w * np.array([0.5, 0.5, 0.0]))


def test_max_initial_larger_than_all_entries_has_zero_tangent():
    _, dy = jvp(lambda x: np.max(x, initial=10.0), (R.X2,), (np.ones_like(R.X2),))
    assert dy == 0.0


def test_zero_order_norm_carries_no_tangent():
    y, dy = jvp(lambda x: np.linalg.norm(x, 0), (R.X2[0],), (np.ones(4),))
    assert y == 4.0 and not np.any(dy)


# --- float32 stays float32, inside the rule too ---------------------------------------------------
X32 = (R.POS * np.sign(R.X2)).astype(np.float32)


@pytest.mark.parametrize("fn, kw", [
    (np.sum, dict(axis=0)), (np.mean, dict()), (np.mean, dict(where=R.MASK, axis=1)),
    (np.nanmean, dict(axis=0)), (np.prod, dict(axis=1)), (np.prod, dict()),
    (np.max, dict(axis=1)), (np.nanmin, dict()), (np.var, dict(ddof=1)),
    (np.std, dict(axis=0, where=R.MASK)), (np.nanstd, dict()), (np.cumsum, dict(axis=1)),
    (np.nancumsum, dict()), (np.cumprod, dict()), (np.cumprod, dict(axis=0)),
    (np.linalg.norm, dict()), (np.linalg.norm, dict(ord="nuc")), (np.linalg.norm, dict(ord=2)),
    (np.linalg.norm, dict(ord=1)), (np.linalg.norm, dict(ord=3, axis=1)),
    (np.linalg.norm, dict(ord=-np.inf, axis=0)),
], ids=lambda v: name(v) if not isinstance(v, dict) else str({k: name(u) for k, u in v.items()}))
def test_float32_preserved(fn, kw):
    v = np.random.default_rng(0).standard_normal((3,) + X32.shape).astype(np.float32)
    y, dy = FRULES[fn]([X32], [v], **kw)   # the raw rule: no cast by the forward layer
    assert y.dtype == np.float32 and dy.dtype == np.float32 and dy.shape == (3,) + np.shape(y)
    y, dy = jvp(lambda x: fn(x, **kw), (X32,), (v[0],))
    assert y.dtype == dy.dtype == np.float32 and np.all(np.isfinite(dy))


def test_float32_products_with_zeros():
    x = ZEROS.astype(np.float32)
    v = np.ones((2,) + x.shape, np.float32)
    for fn in (np.prod, np.cumprod):
        assert FRULES[fn]([x], [v], axis=1)[1].dtype == np.float32


# --- method forms, positional parameters, refusals ------------------------------------------------
@pytest.mark.parametrize("f", [
    lambda x: x.sum(axis=1), lambda x: x.mean(0), lambda x: x.max(axis=0, keepdims=True),
    lambda x: x.min(), lambda x: x.prod(axis=1), lambda x: x.var(ddof=1), lambda x: x.std(0),
    lambda x: x.cumsum(), lambda x: x.cumprod(axis=1), lambda x: np.sum(x, 0),
    lambda x: np.max(x, 1), lambda x: np.add.reduce(x, 1), lambda x: np.maximum.reduce(x, None),
    lambda x: np.multiply.accumulate(x, 1), lambda x: np.var(x, 1, None, None, 1),
], ids=["sum", "mean", "max", "min", "prod", "var", "std", "cumsum", "cumprod", "sum-positional",
        "max-positional", "add.reduce", "maximum.reduce", "multiply.accumulate", "var-positional"])
def test_method_and_positional_forms(f):
    test_rule(f, R.X2, modes=BOTH)


@pytest.mark.parametrize("f", [lambda x: np.max(x[1:], initial=x[0]),
                               lambda x: np.sum(x[1:], initial=x[0]),
                               lambda x: np.prod(x[1:], initial=x[0])])
def test_tangent_on_initial_is_refused_clearly(f):
    with pytest.raises(mp.MissingRuleError, match="initial") as e:
        jvp(f, (R.X2[0],), (np.ones(4),))
    assert "only the array argument carries a tangent" in str(e.value)


# --- second order: each pullback differentiated on dual numbers -----------------------------------
@pytest.mark.parametrize("fn, kw", [(c["fn"], c["kw"])
                                    for c in table(R.test_pullback_is_differentiable)],
                         ids=lambda v: name(v) if not isinstance(v, dict) else str(v))
def test_pullback_forward_over_reverse(fn, kw):
    test_rule(fn, R.POS * np.sign(R.X2), modes=("forward_over_reverse",), **kw)


# --- second order: Hessian-vector products of compositions ---------------------------------------
def hvp(f, x, v, lanes=False):
    """H·v by forward-over-reverse: the reverse sweep of ``f`` run on a dual ``(x, v)``."""
    d = dual(x, v, lanes=lanes)
    with mp.Tape() as tape:        # created after the dual: the tape is the inner level
        xt = tape.track(d)
        y = f(xt)
    g, = tape.gradient(y, [xt])
    return tangent(g)


def fd_hvp(f, x, v, h=1e-5):
    grad = mp.grad(f)
    return (grad(x + h * v) - grad(x - h * v)) / (2 * h)


W = np.random.default_rng(2).standard_normal((3, 4))
X = R.POS * np.sign(R.X2)
XZ = X.copy()
XZ[0, 1] = XZ[2, 2] = XZ[2, 3] = 0.0    # one zero in row 0, two in row 2; columns too

COMPOSITIONS = {
    "sum": lambda x: np.sum(np.sin(x)) ** 2 + np.sum(np.sum(x * x, axis=1) ** 2),
    "mean": lambda x: np.mean(np.mean(x, axis=0) ** 3) + np.nanmean(x * x, axis=1)[0] ** 2,
    "prod": lambda x: np.prod(x) + np.sum(np.prod(x, axis=1) * np.arange(1.0, 4.0)),
    "prod-columns": lambda x: np.sum(np.prod(x, axis=0, keepdims=True) ** 2),
    "max": lambda x: np.sum(np.max(x * x, axis=1) ** 2) + np.min(x) * np.sum(x),
    "var": lambda x: np.var(x) * np.sum(np.var(x, axis=1, ddof=1)),
    "std": lambda x: np.sum(np.std(x, axis=0)) ** 2 + np.nanstd(x) * np.sum(x),
    "cumsum": lambda x: np.sum(np.cumsum(x, axis=1) ** 2) + np.sum(np.cumsum(x * x) * W.ravel()),
    "cumprod": lambda x: np.sum(np.cumprod(x, axis=0) * W) + np.sum(np.cumprod(x) * W.ravel()),
    "norm": lambda x: np.linalg.norm(x) ** 3 + np.sum(np.linalg.norm(x, 3, axis=1)),
    "norm-1-fro": lambda x: np.linalg.norm(x * x, 1) + np.linalg.norm(x, "fro") ** 2,
    "norm-inf": lambda x: np.linalg.norm(np.sin(x), np.inf)
    * np.sum(np.linalg.norm(x * x + 1.0, -1.5, axis=0)),   # (|x|^p is not smooth at 0 for p < 1)
}
SVD_NORMS = {
    "norm-nuc": lambda x: np.linalg.norm(x, "nuc") * np.sum(x),
    "norm-2": lambda x: np.linalg.norm(x, 2) ** 2,
    "norm--2": lambda x: np.linalg.norm(x, -2),
}


@pytest.mark.parametrize("f", list(COMPOSITIONS.values()) + list(SVD_NORMS.values()),
                         ids=list(COMPOSITIONS) + list(SVD_NORMS))
@pytest.mark.parametrize("x", [X, XZ], ids=["x", "with-zeros"])
def test_hvp(f, x):
    v = np.random.default_rng(1).standard_normal(x.shape)
    got = hvp(f, x, v)
    np.testing.assert_allclose(got, fd_hvp(f, x, v), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(mp.hvp(f)(x, v), got, rtol=1e-12, atol=1e-12)  # the public API


@pytest.mark.parametrize("f", [COMPOSITIONS[k] for k in ("sum", "prod", "max", "var", "cumprod",
                                                           "norm")],
                         ids=["sum", "prod", "max", "var", "cumprod", "norm"])
def test_hvp_with_lanes(f):
    V = np.random.default_rng(3).standard_normal((3,) + XZ.shape)
    H = hvp(f, XZ, V, lanes=True)
    for l in range(3):
        np.testing.assert_allclose(H[l], hvp(f, XZ, V[l]), rtol=1e-12, atol=1e-12)


# --- forward over forward: the tangent formulas carry the right derivatives themselves ------------
# (a jvp nested in a jvp differentiates the frule's own output; the zero-safe product formulas
# keep the terms that are zero in value but not in derivative)
def jvp_of_jvp(f, x, u, v):
    return jvp(lambda x: jvp(f, (x,), (v,))[1], (x,), (u,))[1]


def fd_of_jvp(f, x, u, v, h=1e-5):
    return (jvp(f, (x + h * u,), (v,))[1] - jvp(f, (x - h * u,), (v,))[1]) / (2 * h)


@pytest.mark.parametrize("f, x", [
    (lambda x: np.prod(x, axis=1), ZEROS), (lambda x: np.prod(x, axis=0), ZEROS),
    (np.prod, ZEROS), (lambda x: np.cumprod(x, axis=1), ZEROS),
    (lambda x: np.cumprod(x, axis=0), ZEROS), (np.cumprod, ZEROS),
    (lambda x: np.nancumprod(x, axis=1), R.NAN), (lambda x: np.mean(x * x, axis=0), X),
    (lambda x: np.var(x, axis=1, ddof=1), X), (lambda x: np.std(x, axis=0), X),
    (lambda x: np.max(x * x, axis=1), X), (lambda x: np.linalg.norm(x, 3, axis=0), X),
    (lambda x: np.linalg.norm(x), X), (lambda x: np.linalg.norm(x, 1), X),
], ids=["prod-1", "prod-0", "prod", "cumprod-1", "cumprod-0", "cumprod", "nancumprod", "mean",
        "var", "std", "max", "norm-3", "norm", "norm-1"])
def test_forward_over_forward(f, x):
    rng = np.random.default_rng(6)
    u, v = rng.standard_normal(x.shape), rng.standard_normal(x.shape)
    got = jvp_of_jvp(f, x, u, v)
    np.testing.assert_allclose(got, fd_of_jvp(f, x, u, v), rtol=1e-7, atol=1e-6)
    np.testing.assert_allclose(got, jvp_of_jvp(f, x, v, u), rtol=1e-12, atol=1e-13)  # symmetric
