"""Reduction rules against finite differences (test_rule repeats every case on strided copies),
closed forms at kinks and zeros (ties, products with zeros), float32, kwargs and method forms."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.testing import test_rule, check_grads

RNG = np.random.default_rng(7)
X3 = RNG.standard_normal((2, 3, 4))        # distinct values: no ties, no zeros
X2 = RNG.standard_normal((3, 4))
POS = RNG.uniform(0.5, 1.5, (3, 4))        # positive, for products
NAN = X2.copy()
NAN[0, 1] = NAN[2, 3] = np.nan


def gradient(f, x0):
    """The raw cotangent of ``x0`` (no dtype cast by the API), seeded with ones."""
    with mp.Tape() as tape:
        x = tape.track(x0)
        y = f(x)
    gx, = tape.gradient(y, [x])
    return gx


# --- test_rule tables -----------------------------------------------------------------------
AXES = [dict(), dict(axis=0), dict(axis=-1), dict(axis=(0, 2)), dict(axis=1, keepdims=True),
        dict(axis=None, keepdims=True), dict(axis=(2, 0), keepdims=True)]
REDUCERS = [np.sum, np.mean, np.max, np.amax, np.min, np.amin, np.var, np.std,
            np.nansum, np.nanmean, np.nanmax, np.nanmin, np.nanvar, np.nanstd]


@pytest.mark.parametrize("kw", AXES, ids=str)
@pytest.mark.parametrize("fn", REDUCERS, ids=lambda f: f.__name__)
def test_reductions(fn, kw):
    test_rule(fn, X3, **kw)


@pytest.mark.parametrize("kw", AXES, ids=str)
@pytest.mark.parametrize("fn", [np.prod, np.nanprod], ids=lambda f: f.__name__)
def test_prod(fn, kw):
    test_rule(fn, POS[None] * np.array([[[1.0]], [[-1.3]]]), **kw)


@pytest.mark.parametrize("fn", REDUCERS + [np.prod, np.nanprod, np.linalg.norm],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("x", [np.float64(1.3), np.array(-0.7)], ids=["scalar", "0-d"])
def test_zero_dimensional(fn, x):
    test_rule(fn, x)


@pytest.mark.parametrize("fn", [np.sum, np.mean, np.prod, np.max, np.min, np.var, np.std],
                         ids=lambda f: f.__name__)
def test_transposed_input(fn):
    test_rule(fn, (POS * np.sign(X2)).T, axis=0)


@pytest.mark.parametrize("kw", [dict(ddof=1), dict(ddof=2, axis=2), dict(ddof=1, axis=(0, 1)),
                                dict(ddof=1, axis=2, keepdims=True), dict(correction=1, axis=1),
                                dict(ddof=0, axis=-1)], ids=str)
@pytest.mark.parametrize("fn", [np.var, np.std, np.nanvar, np.nanstd], ids=lambda f: f.__name__)
def test_var_std_ddof(fn, kw):
    test_rule(fn, X3, **kw)


@pytest.mark.parametrize("kw", [dict(), dict(axis=0), dict(axis=1)], ids=str)
@pytest.mark.parametrize("fn", [np.nansum, np.nanmean, np.nanmax, np.nanmin, np.nanprod,
                                np.nanvar, np.nanstd, np.nancumsum, np.nancumprod],
                         ids=lambda f: f.__name__)
def test_nan_reductions_skip_nans(fn, kw):
    test_rule(fn, NAN, **kw)
    g = mp.grad(lambda x: np.sum(fn(x, **kw)))(NAN)
    assert np.all(np.isfinite(g)) and g[0, 1] == 0 and g[2, 3] == 0


@pytest.mark.parametrize("kw", [dict(), dict(axis=0), dict(axis=1), dict(axis=-1)], ids=str)
@pytest.mark.parametrize("fn", [np.cumsum, np.cumprod], ids=lambda f: f.__name__)
@pytest.mark.parametrize("x", [X2, X3, np.float64(0.8)], ids=["2d", "3d", "scalar"])
def test_cumulative(fn, kw, x):
    if np.ndim(x) == 0 and kw.get("axis") not in (None, 0, -1):
        return
    test_rule(fn, x, **kw)


# --- kwargs: where, initial, dtype, mean ------------------------------------------------------
MASK = X2 < 0.5


@pytest.mark.parametrize("fn, kw", [
    (np.sum, dict(where=MASK)), (np.sum, dict(where=MASK, axis=0, keepdims=True)),
    (np.sum, dict(initial=2.0, axis=1)),
    (np.mean, dict(where=MASK, axis=1)), (np.mean, dict(where=MASK[0], axis=0)),
    (np.prod, dict(where=MASK, axis=1)), (np.prod, dict(initial=-2.0)),
    (np.max, dict(initial=-10.0, axis=0)), (np.max, dict(where=MASK, initial=-10.0, axis=1)),
    (np.min, dict(where=MASK, initial=10.0)), (np.min, dict(initial=0.0, axis=1)),
    (np.var, dict(where=MASK, axis=1, ddof=1)), (np.std, dict(where=MASK, axis=0)),
    (np.var, dict(axis=0, mean=np.mean(X2, axis=0, keepdims=True) + 0.3)),
    (np.mean, dict(dtype=np.float32, rtol=1e-3)),  # float32 arithmetic: loose FD
    (np.sum, dict(dtype=np.float32, axis=0, rtol=1e-3)),
], ids=lambda v: str(v) if isinstance(v, dict) else v.__name__)
def test_keyword_arguments(fn, kw):
    test_rule(fn, X2, **kw)


def test_max_initial_larger_than_all_entries_gets_no_gradient():
    g = mp.grad(lambda x: np.max(x, initial=10.0))(X2)
    np.testing.assert_array_equal(g, np.zeros_like(X2))


def test_sum_with_dtype_keeps_input_dtype():
    g = gradient(lambda x: np.sum(x, dtype=np.float64), X2.astype(np.float32))
    assert g.dtype == np.float32


# --- ufunc methods ----------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [dict(), dict(axis=1), dict(axis=None), dict(axis=0, keepdims=True)],
                         ids=str)
@pytest.mark.parametrize("method", [np.add.reduce, np.multiply.reduce, np.maximum.reduce,
                                    np.minimum.reduce], ids=lambda m: f"{m.__self__.__name__}")
def test_ufunc_reduce(method, kw):
    test_rule(method, X2, **kw)


@pytest.mark.parametrize("kw", [dict(), dict(axis=1), dict(axis=-1)], ids=str)
@pytest.mark.parametrize("method", [np.add.accumulate, np.multiply.accumulate],
                         ids=lambda m: m.__self__.__name__)
def test_ufunc_accumulate(method, kw):
    test_rule(method, X3, **kw)


def test_ufunc_reduce_defaults_to_axis_0():
    g = mp.grad(lambda x: np.sum(np.maximum.reduce(x) * np.arange(4.0)))(X2)
    np.testing.assert_array_equal(g, (X2 == X2.max(axis=0)) * np.arange(4.0))


# --- ties: equal split, checked exactly ---------------------------------------------------------
TIED = np.array([[3.0, 1.0, 3.0, 3.0],
                 [2.0, 2.0, -1.0, 0.5],
                 [-4.0, 5.0, -4.0, -4.0]])


@pytest.mark.parametrize("fn, kw, expected", [
    (np.max, dict(), (TIED == 5.0) * 1.0),
    (np.max, dict(axis=1), (TIED == TIED.max(axis=1, keepdims=True)) / np.array([[3], [2], [1]])),
    (np.amax, dict(axis=0), (TIED == TIED.max(axis=0)) / np.array([1, 1, 1, 1.0])),
    (np.min, dict(axis=1), (TIED == TIED.min(axis=1, keepdims=True)) / np.array([[1], [1], [3]])),
    (np.amin, dict(), (TIED == -4.0) / 3.0),
    (np.nanmax, dict(axis=1, keepdims=True),
     (TIED == TIED.max(axis=1, keepdims=True)) / np.array([[3], [2], [1]])),
    (np.maximum.reduce, dict(axis=1),
     (TIED == TIED.max(axis=1, keepdims=True)) / np.array([[3], [2], [1]])),
    (np.minimum.reduce, dict(axis=None), (TIED == -4.0) / 3.0),
])
def test_ties_split_equally(fn, kw, expected):
    g = mp.grad(lambda x: np.sum(fn(x, **kw)))(TIED)
    np.testing.assert_array_equal(g, expected)


def test_tie_split_of_method_form():
    x = np.array([1.0, 7.0, 7.0, 7.0, 2.0])
    np.testing.assert_array_equal(mp.grad(lambda x: x.max())(x), [0, 1 / 3, 1 / 3, 1 / 3, 0])


def test_infinity_norm_ties_split():
    x = np.array([-2.0, 1.0, 2.0, 0.5])
    g = mp.grad(lambda x: np.linalg.norm(x, np.inf))(x)
    np.testing.assert_array_equal(g, [-0.5, 0.0, 0.5, 0.0])


def test_matrix_one_norm_tied_columns():
    x = np.array([[1.0, -2.0, 0.5], [-2.0, 1.0, 0.5]])  # columns 0 and 1 both sum to 3
    g = mp.grad(lambda x: np.linalg.norm(x, 1))(x)
    np.testing.assert_array_equal(g, np.sign(x) * np.array([0.5, 0.5, 0.0]))


# --- products with zeros: closed forms -----------------------------------------------------------
@pytest.mark.parametrize("x, expected", [
    ([2.0, 0.0, 3.0, -1.5], [0.0, -9.0, 0.0, 0.0]),
    ([2.0, 0.0, 3.0, 0.0], [0.0, 0.0, 0.0, 0.0]),
    ([0.0, 0.0, 0.0], [0.0, 0.0, 0.0]),
    ([0.0], [1.0]),
    ([4.0, -0.5], [-0.5, 4.0]),
])
def test_prod_with_zeros(x, expected):
    x = np.array(x)
    np.testing.assert_array_equal(mp.grad(np.prod)(x), expected)
    test_rule(np.prod, x)   # a polynomial: finite differences hold at zeros too


def test_prod_with_zeros_along_axis():
    x = np.array([[2.0, 0.0, 3.0], [0.0, 0.0, 5.0], [1.5, 2.0, -1.0]])
    g = mp.grad(lambda x: np.sum(np.prod(x, axis=1) * np.array([1.0, 2.0, 3.0])))(x)
    np.testing.assert_array_equal(g, [[0.0, 6.0, 0.0], [0.0, 0.0, 0.0], [-6.0, -4.5, 9.0]])
    for kw in [dict(axis=0), dict(axis=1, keepdims=True), dict(axis=(0, 1))]:
        test_rule(np.prod, x, **kw)


def test_prod_with_zero_where_and_initial():
    x = np.array([[2.0, 0.0, 3.0], [0.0, 4.0, 5.0]])
    where = np.array([[True, True, False], [False, True, True]])
    g = mp.grad(lambda x: np.sum(np.prod(x, axis=1, where=where, initial=2.0)))(x)
    np.testing.assert_array_equal(g, [[0.0, 4.0, 0.0], [0.0, 10.0, 8.0]])
    test_rule(np.prod, x, axis=1, where=where, initial=2.0)


def test_nanprod_with_a_zero():
    x = np.array([2.0, np.nan, 0.0, 3.0])
    np.testing.assert_array_equal(mp.grad(np.nanprod)(x), [0.0, 0.0, 6.0, 0.0])


@pytest.mark.parametrize("x", [[2.0, 0.0, 3.0, 0.0, 5.0], [0.0, 2.0, -1.0], [1.5, -2.0, 0.0]])
def test_cumprod_with_zeros(x):
    x = np.array(x)
    n = len(x)
    # d Σ_i cumprod(x)_i / d x_k = Σ_{i ≥ k} Π_{j ≤ i, j ≠ k} x_j, written out.
    expected = [sum(np.prod([x[j] for j in range(i + 1) if j != k]) for i in range(k, n))
                for k in range(n)]
    np.testing.assert_allclose(mp.grad(lambda x: np.sum(np.cumprod(x)))(x), expected, rtol=1e-15)
    test_rule(np.cumprod, x)


def test_cumprod_with_zeros_along_axis():
    x = np.array([[1.5, 0.0, 2.0], [0.0, -1.0, 3.0], [2.0, 0.5, -1.0]])
    for kw in [dict(axis=0), dict(axis=1), dict()]:
        test_rule(np.cumprod, x, **kw)


# --- norms ------------------------------------------------------------------------------------
VECTOR_ORDS = [None, 2, 1, np.inf, -np.inf, 3, 0.5, -1, -2.5, 2.0]


@pytest.mark.parametrize("ord", VECTOR_ORDS, ids=str)
def test_vector_norm(ord):
    test_rule(np.linalg.norm, X2[1], ord=ord)


@pytest.mark.parametrize("kw", [dict(axis=0), dict(axis=-1, keepdims=True), dict(axis=1)], ids=str)
@pytest.mark.parametrize("ord", VECTOR_ORDS, ids=str)
def test_vector_norm_along_axis(ord, kw):
    test_rule(np.linalg.norm, X3, ord=ord, **kw)


def test_vector_norm_zero_order_has_zero_derivative():
    y, pb = mp.vjp(lambda x: np.linalg.norm(x, 0), X2[0])
    assert y == 4.0
    g = pb(np.float64(1.0))[0]
    assert g is None or not np.any(g)


def test_norm_of_zero_vector_is_finite():
    np.testing.assert_array_equal(mp.grad(np.linalg.norm)(np.zeros(3)), np.zeros(3))


MATRIX_ORDS = [None, "fro", "nuc", 2, -2, 1, -1, np.inf, -np.inf]


@pytest.mark.parametrize("ord", MATRIX_ORDS, ids=str)
def test_matrix_norm(ord):
    test_rule(np.linalg.norm, X2, ord=ord)


@pytest.mark.parametrize("kw", [dict(axis=(1, 2)), dict(axis=(2, 0), keepdims=True),
                                dict(axis=(-1, -3))], ids=str)
@pytest.mark.parametrize("ord", MATRIX_ORDS, ids=str)
def test_matrix_norm_along_axes(ord, kw):
    test_rule(np.linalg.norm, X3, ord=ord, **kw)


def test_norm_over_all_entries_of_3d():
    test_rule(np.linalg.norm, X3)
    test_rule(np.linalg.norm, X3, keepdims=True)


def test_nuclear_and_spectral_norm_closed_forms():
    u, _, vt = np.linalg.svd(X2, full_matrices=False)
    np.testing.assert_allclose(mp.grad(lambda x: np.linalg.norm(x, "nuc"))(X2), u @ vt,
                               atol=1e-13)
    np.testing.assert_allclose(mp.grad(lambda x: np.linalg.norm(x, 2))(X2),
                               np.outer(u[:, 0], vt[0]), atol=1e-13)


# --- float32 in, float32 out --------------------------------------------------------------------
@pytest.mark.parametrize("f", [
    np.sum, np.mean, np.prod, np.max, np.min, np.var, np.std, np.nansum, np.nanmean, np.nanvar,
    lambda x: np.sum(np.mean(x, axis=0, where=x != x[0, 0])),
    lambda x: np.var(x, axis=1, ddof=1)[0],
    lambda x: np.sum(np.cumsum(x)), lambda x: np.sum(np.cumprod(x, axis=1)),
    np.linalg.norm, lambda x: np.linalg.norm(x, "nuc"), lambda x: np.linalg.norm(x, 2),
    lambda x: np.linalg.norm(x, 1), lambda x: np.linalg.norm(x[0], 3),
    lambda x: np.linalg.norm(x[0], np.inf), lambda x: np.std(x, where=x > 0),
    lambda x: np.prod(np.where(x > 0, x, 0)),
])
def test_float32_preserved(f):
    x = POS.astype(np.float32) * np.sign(X2).astype(np.float32)
    assert f(x).dtype == np.float32
    g = gradient(f, x)
    assert g.dtype == np.float32 and np.all(np.isfinite(g))


# --- TrackedArray method forms --------------------------------------------------------------------
@pytest.mark.parametrize("f", [
    lambda x: x.sum(), lambda x: x.sum(axis=1)[0], lambda x: x.mean(axis=0)[1],
    lambda x: x.max(axis=0)[2], lambda x: x.min(), lambda x: x.prod(axis=1)[0],
    lambda x: x.var(ddof=1), lambda x: x.std(axis=0, ddof=1)[3], lambda x: x.var(),
    lambda x: x.cumsum()[5], lambda x: x.cumprod(axis=1)[1, 2],
    lambda x: x.max(axis=0, keepdims=True)[0, 1],
], ids=["sum", "sum-axis", "mean", "max", "min", "prod", "var-ddof", "std", "var", "cumsum",
        "cumprod", "max-keepdims"])
def test_method_forms(f):
    check_grads(f, X2)


def test_method_var_ddof_closed_form():
    x = X2[0]
    np.testing.assert_allclose(mp.grad(lambda x: x.var(ddof=1))(x),
                               2 * (x - x.mean()) / (len(x) - 1), rtol=1e-13)


def test_positional_axis_argument():
    test_rule(lambda x: np.sum(x, 0), X2)
    test_rule(lambda x: np.max(x, 1), X2)


# --- errors -------------------------------------------------------------------------------------
@pytest.mark.parametrize("f", [lambda x: np.max(x[1:], initial=x[0]),
                               lambda x: np.sum(x[1:], initial=x[0]),
                               lambda x: np.prod(x[1:], None, None, False, x[0])])
def test_tracked_initial_is_refused_clearly(f):
    with pytest.raises(mp.MissingRuleError, match="initial") as e:
        mp.grad(f)(X2[0])
    assert "np.maximum(np.max(x), v)" in str(e.value)


# --- the partials' own derivatives (what second order through duals will use) ---------------------
# The pullbacks are plain np. code, so differentiating them with the tape itself shows whether the
# zero-safe formulas also carry the right derivatives (a product's Hessian is nonzero at zeros).
def _jacobian_of(fn, x0):
    rows = []
    for i in range(x0.size):
        with mp.Tape() as tape:
            x = tape.track(x0)
            out = fn(x)
        seed = np.zeros(out.shape)
        seed.flat[i] = 1.0
        rows.append(tape.gradient(out, [x], seed=seed)[0])
    return np.array(rows)


@pytest.mark.parametrize("x", [[2.0, 0.0, 3.0, -1.5], [2.0, 0.0, 3.0, 0.0], [0.0, 0.0, 0.0, 4.0],
                               [1.5, 2.0, -1.0, 0.5]])
def test_prod_partials_have_the_right_derivatives(x):
    from mooncake_py.rules.reductions import _prod_partials
    x = np.array(x)
    n = len(x)
    hess = np.array([[0.0 if i == j else np.prod([x[k] for k in range(n) if k not in (i, j)])
                      for j in range(n)] for i in range(n)])
    got = _jacobian_of(lambda x: _prod_partials(x, np.prod(x, keepdims=True), (0,), {}), x)
    np.testing.assert_allclose(got, hess, rtol=1e-14)


@pytest.mark.parametrize("x", [[2.0, 0.0, 3.0, 0.0, 5.0], [0.0, 2.0, -1.0, 3.0], [1.5, -2.0, 0.5]])
def test_cumprod_vjp_has_the_right_derivatives(x):
    from mooncake_py.rules.reductions import _cumprod_vjp
    x = np.array(x)
    n = len(x)
    w = np.arange(1.0, n + 1)
    # Hessian of Σ_i w_i cumprod(x)_i: Σ_{i ≥ max(k, l)} w_i Π_{j ≤ i, j ∉ {k, l}} x_j, k ≠ l.
    hess = np.array([[0.0 if k == l else
                      sum(w[i] * np.prod([x[j] for j in range(i + 1) if j not in (k, l)])
                          for i in range(max(k, l), n)) for l in range(n)] for k in range(n)])
    got = _jacobian_of(lambda x: _cumprod_vjp(x, np.cumprod(x), w, 0), x)
    np.testing.assert_allclose(got, hess, rtol=1e-14)


# --- every pullback is differentiable np. code with the right derivatives -----------------------
# Running a rule and its pullback on tracked values and differentiating <v, pullback(w)> gives
# the Hessian-vector product of <w, f(x)>; compare with finite differences of the gradient. This
# is what forward-over-reverse will rely on (a pullback that leaves np. calls, or whose formula is
# only right in value, fails here).
def pullback_hvp(fn, x0, w, v, **kw):
    from mooncake_py.rules import RRULES
    with mp.Tape() as tape:
        x = tape.track(x0)
        _, pb = RRULES[fn]((x,), kw, (True,))
        s = np.sum(pb(w)[0] * v)
    return tape.gradient(s, [x])[0]


def fd_hvp(fn, x0, w, v, **kw):
    grad = mp.grad(lambda x: np.sum(w * fn(x, **kw)))
    h = 1e-5
    return (grad(x0 + h * v) - grad(x0 - h * v)) / (2 * h)


@pytest.mark.parametrize("fn, kw", [
    (np.sum, dict(axis=1)), (np.mean, dict(axis=0)), (np.prod, dict()), (np.prod, dict(axis=1)),
    (np.var, dict(axis=1, ddof=1)), (np.std, dict()), (np.std, dict(axis=0, keepdims=True)),
    (np.max, dict(axis=0)), (np.min, dict()), (np.nanmean, dict(axis=1)), (np.nanvar, dict()),
    (np.nanprod, dict(axis=0)), (np.cumsum, dict(axis=1)), (np.cumprod, dict(axis=0)),
    (np.cumprod, dict()), (np.linalg.norm, dict()), (np.linalg.norm, dict(ord=3, axis=1)),
    (np.linalg.norm, dict(ord=-1.5, axis=0)), (np.linalg.norm, dict(ord=1, axis=1)),
    (np.linalg.norm, dict(ord=np.inf, axis=1)), (np.linalg.norm, dict(ord="fro")),
    (np.linalg.norm, dict(ord=1)), (np.linalg.norm, dict(ord=-np.inf)),
], ids=lambda v: str(v) if isinstance(v, dict) else v.__name__)
def test_pullback_is_differentiable(fn, kw):
    rng = np.random.default_rng(3)
    x = POS * np.sign(X2)
    w = rng.standard_normal(np.shape(fn(x, **kw)))
    v = rng.standard_normal(x.shape)
    np.testing.assert_allclose(pullback_hvp(fn, x, w, v, **kw), fd_hvp(fn, x, w, v, **kw),
                               rtol=1e-6, atol=1e-8)
