"""The short paths of the gradient pullbacks and the dual matmul (BLAS calls).

Each short path is compared with the general path it stands for: the derivative table's
formula (bitwise), the matrix product it replaces (tight tolerance), finite differences and
frule/rrule consistency (mooncake_py.testing.test_rule).
"""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.rules import elementwise, linear_algebra as la
from mooncake_py.rules.derivative_table import TABLE
from mooncake_py.testing import test_rule as check_rule

RNG = np.random.default_rng(7)


def _table_pullback(entry, k, g, *xs):
    """ew_pullback's general formula: ``g * d`` with the table's derivative, in y's dtype."""
    d = entry.np_d1[k](*xs)
    if getattr(d, "dtype", None) is not None and d.dtype != xs[-1].dtype:
        d = d.astype(xs[-1].dtype)
    return g * d


# --- ew_pullback short forms ----------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", ["maximum", "minimum"])
@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_extremum_short_form_is_the_table_formula(name, dtype):
    entry = TABLE[name]
    a = RNG.standard_normal((6, 5)).astype(dtype)
    b = RNG.standard_normal(5).astype(dtype)
    a[0, :] = b  # ties along a whole row
    a[1, 2] = np.nan
    a = a[:, ::1]
    y = entry.ufunc(a, b)
    g = RNG.standard_normal((6, 5)).astype(dtype)
    g[2, 3] = np.inf
    for k in (0, 1):
        got = elementwise.ew_pullback(entry, k, g, a, b, y)
        want = _table_pullback(entry, k, g, a, b, y)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        assert np.array_equal(np.signbit(got), np.signbit(want))


def test_extremum_short_form_without_ties_and_on_strided_inputs():
    entry = TABLE["maximum"]
    a = RNG.standard_normal((8, 12))[:, ::3]  # non-contiguous
    y = np.maximum(a, 0.0)
    g = np.asfortranarray(RNG.standard_normal((8, 4)))
    got = elementwise.ew_pullback(entry, 0, g, a, 0.0, y)
    np.testing.assert_array_equal(got, _table_pullback(entry, 0, g, a, 0.0, y))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("b", [2, 2.0, 3, 0.5])
def test_power_short_form_is_the_table_formula(b, dtype):
    entry = TABLE["power"]
    a = RNG.standard_normal((4, 7)).astype(dtype)
    a = np.abs(a) if b == 0.5 else a
    y = a ** b
    for g in (RNG.standard_normal((4, 7)).astype(dtype),
              RNG.standard_normal((3, 4, 7)).astype(dtype)):  # g broadcast over a
        got = elementwise.ew_pullback(entry, 0, g, a, b, y)
        want = _table_pullback(entry, 0, g, a, b, y)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_relu_gradient_keeps_the_tie_convention():
    # 0.5 at ties (README "Conventions"): x = 0 exactly
    x = np.array([[-1.0, 0.0, 2.0], [0.0, 3.0, -0.5]])
    g = mp.grad(lambda x: np.sum(np.maximum(x, 0.0) * np.arange(1.0, 4.0)))(x)
    np.testing.assert_array_equal(g, [[0.0, 1.0, 3.0], [0.5, 2.0, 0.0]])
    g = mp.grad(lambda x: np.sum(np.minimum(0.0, x)))(x)
    np.testing.assert_array_equal(g, [[1.0, 0.5, 0.0], [0.5, 0.0, 1.0]])


@pytest.mark.parametrize("fn", [np.maximum, np.minimum])
def test_extremum_rules(fn):
    check_rule(fn, RNG.standard_normal((4, 3)), RNG.standard_normal(3))
    check_rule(lambda a: fn(a, 0.1), RNG.standard_normal((5, 4)))


def test_square_rules():
    check_rule(lambda a: a ** 2, RNG.standard_normal((5, 4)))
    check_rule(lambda a: np.power(a, 2.0), RNG.standard_normal(6))


def test_hvp_through_relu_and_square():
    # forward-over-reverse runs the table's fused dual pullbacks, not the short forms
    W, X = RNG.standard_normal((6, 5)), RNG.standard_normal((5, 4))
    f = lambda W: np.sum((np.maximum(W @ X, 0.0) - 1.0) ** 2)
    v = RNG.standard_normal(W.shape)
    h = 1e-6
    fd = (mp.grad(f)(W + h * v) - mp.grad(f)(W - h * v)) / (2 * h)
    np.testing.assert_allclose(mp.hvp(f)(W, v), fd, rtol=1e-6, atol=1e-7)


# --- the cotangent of a scalar factor: one dot product ----------------------------------------
def _scalar_factor_grads(s, m, swap):
    """(short path's, general path's) cotangent of the scalar ``s`` in ``s * m`` (``m * s`` if
    ``swap``) under the upstream cotangent cos(s m)."""
    rule = elementwise.RRULES[np.multiply]
    args = [m, s] if swap else [s, m]
    needs = (False, True) if swap else (True, False)
    _, pb = rule(args, {}, needs)
    g = np.cos(s * m)
    got = pb(g)[1 if swap else 0]
    want = elementwise.unbroadcast(g * m, np.shape(s))
    return got, want


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("s", [np.float64(0.7), np.array(0.7), 0.7])
def test_scalar_factor_cotangent_is_the_summed_product(s, swap):
    m = RNG.standard_normal((40, 30))
    got, want = _scalar_factor_grads(s, m, swap)
    assert type(got) is type(want) and np.shape(got) == ()
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=0)


def test_scalar_factor_cotangent_leaves_other_operands_to_the_general_path():
    # float32, broadcast operands and a non-scalar factor keep g * m summed by unbroadcast
    assert elementwise._scalar_factor_cotangent(np.ones((9, 9)), np.ones((9, 9)), ()) is not None
    assert elementwise._scalar_factor_cotangent(np.ones((9, 9), np.float32),
                                                np.ones((9, 9), np.float32), ()) is None
    assert elementwise._scalar_factor_cotangent(np.ones((9, 9)), np.ones((1, 9)), ()) is None
    assert elementwise._scalar_factor_cotangent(np.ones((9, 9)), np.ones((9, 9)), (1,)) is None
    assert elementwise._scalar_factor_cotangent(np.ones(3), np.ones(3), ()) is None  # (small)
    m32 = RNG.standard_normal((20, 20)).astype(np.float32)
    got, want = _scalar_factor_grads(np.float32(0.5), m32, False)
    assert got.dtype == np.float32 and got == want  # (the general path, bitwise)


def test_scalar_factor_gradient_hvp_and_prepared_cache():
    m = RNG.standard_normal((30, 30))

    def f(s):
        return np.sum(np.sin(s * m) + s * np.eye(30))

    s = np.float64(0.3)
    want = np.sum(np.cos(s * m) * m) + 30.0
    np.testing.assert_allclose(mp.grad(f)(s), want, rtol=1e-13)
    cache = mp.prepare_gradient_cache(f, s)
    _, g = mp.value_and_gradient(cache, f, s)
    np.testing.assert_allclose(g, want, rtol=1e-13)
    # the HVP's reverse sweep runs on duals: the general path, against the analytic value
    h = mp.hvp(f)(s, np.float64(1.0))
    np.testing.assert_allclose(h, -np.sum(np.sin(s * m) * m * m), rtol=1e-12)
    check_rule(np.multiply, np.float64(0.4), RNG.standard_normal((12, 10)))


# --- matmul ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_matrix_product_gradient(dtype):
    a = RNG.standard_normal((5, 3)).astype(dtype)
    b = RNG.standard_normal((3, 4)).astype(dtype)
    w = RNG.standard_normal((5, 4)).astype(dtype)
    ga, gb = mp.grad(lambda a, b: np.sum((a @ b) * w), argnums=(0, 1))(a, b)
    assert ga.dtype == dtype and gb.dtype == dtype
    np.testing.assert_array_equal(ga, w @ b.T)
    np.testing.assert_array_equal(gb, a.T @ w)
    assert ga.flags.writeable and gb.flags.writeable


@pytest.mark.parametrize("sa, sb", [((4, 3), (3, 5)), ((3,), (3, 5)), ((4, 3), (3,)),
                                    ((2, 4, 3), (3, 5)), ((4, 3), (2, 3, 5)), ((3,), (3,))])
def test_matmul_rules(sa, sb):
    check_rule(np.matmul, RNG.standard_normal(sa), RNG.standard_normal(sb))


# --- the dual matmul: the tangent's sum in place ------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("sa, sb", [((4, 3), (3, 5)), ((3,), (3, 5)), ((4, 3), (3,)),
                                    ((2, 4, 3), (3, 5)), ((1, 4, 3), (2, 3, 5))])
def test_dual_matmul_tangent(sa, sb, dtype):
    a, da = (RNG.standard_normal(sa).astype(dtype) for _ in range(2))
    b, db = (RNG.standard_normal(sb).astype(dtype) for _ in range(2))
    da0, db0 = da.copy(), db.copy()
    y, t = mp.jvp(np.matmul, (a, b), (da, db))
    assert t.dtype == dtype and t.shape == y.shape
    tol = 1e-5 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(t, da @ b + a @ db, rtol=tol, atol=tol)
    np.testing.assert_array_equal(da, da0)  # the directions are not written
    np.testing.assert_array_equal(db, db0)


def test_dual_matmul_with_lanes():
    a, b = RNG.standard_normal((4, 3)), RNG.standard_normal((3, 5))
    f = lambda a: np.sum(np.sin(a @ b))
    H = mp.hessian(f, chunk_size=4)(a)  # several lanes per sweep
    cols = [mp.hvp(f)(a, e.reshape(a.shape)) for e in np.eye(a.size)]
    np.testing.assert_allclose(H.reshape(a.size, a.size), np.array(cols).reshape(a.size, -1).T,
                               rtol=1e-12, atol=1e-12)


def test_dual_matmul_one_tangent_only():
    a, b, db = (RNG.standard_normal(s) for s in [(4, 3), (3, 5), (3, 5)])
    y, t = mp.jvp(lambda b: a @ b, (b,), (db,))
    np.testing.assert_array_equal(t, a @ db)


# --- Cholesky pullback: Lᵀ Ḡ by trmm --------------------------------------------------------------
def _spd(n, dtype, rng=RNG):
    m = rng.standard_normal((n, n))
    return (m @ m.T + n * np.eye(n)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_pullback_matches_the_matrix_product_path(upper, dtype, monkeypatch):
    a = _spd(40, dtype)
    w = RNG.standard_normal((40, 40)).astype(dtype)
    f = lambda a: np.sum(np.linalg.cholesky(a, upper=upper) * w)
    g = mp.grad(f)(a)
    monkeypatch.setattr(la, "_lower_transposed_times", lambda L, g: None)
    ref = mp.grad(f)(a)
    assert g.dtype == dtype
    tol = 2e-5 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(g, ref, rtol=tol, atol=tol * np.abs(ref).max())
    # the cotangent of the triangle read (the lower one; the upper for upper=True)
    np.testing.assert_array_equal(np.tril(g, -1) if upper else np.triu(g, 1), 0)


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_triangle_times(dtype, order):
    n = 20
    a = np.asarray(RNG.standard_normal((n, n)), dtype=dtype, order=order)
    x = RNG.standard_normal((n, 3)).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-13
    for lower in (True, False):
        t = np.tril(a) if lower else np.triu(a)
        for trans in (0, 1, 2):
            got = la._triangle_times(a, x, lower, trans)
            assert got.dtype == dtype and got.shape == (n, 3)
            np.testing.assert_allclose(got, (t.T if trans else t) @ x, rtol=tol, atol=tol)
    np.testing.assert_allclose(la._lower_transposed_times(a, x), np.tril(a).T @ x, rtol=tol,
                               atol=tol)


def test_triangle_times_declines():
    a, x = RNG.standard_normal((20, 20)), RNG.standard_normal((20, 4))
    assert la._triangle_times(a[::2, ::2].copy()[:8, :8], x[:8], True, 0) is None  # small
    assert la._triangle_times(np.vstack([a, a])[::2], x, True, 0) is None  # strided
    assert la._triangle_times(a.astype(np.float32), x, True, 0) is None  # mixed dtypes
    assert la._triangle_times(np.stack([a, a]), x, True, 0) is None  # stacks
    assert la._triangle_times(a + 0j, x + 0j, True, 0) is None  # complex


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_frule_one_lane_and_lanes(upper):
    a = _spd(24, np.float64)
    da = RNG.standard_normal((24, 24))
    da = da + da.T
    f = lambda a: np.linalg.cholesky(a, upper=upper)
    _, t = mp.jvp(f, (a,), (da,))
    h = 1e-6
    fd = (f(a + h * da) - f(a - h * da)) / (2 * h)
    np.testing.assert_allclose(t, fd, rtol=1e-6, atol=1e-7)
    g = lambda a: np.sum(np.sin(np.linalg.cholesky(a, upper=upper)))
    v = RNG.standard_normal((24, 24))
    v = v + v.T
    hv = mp.hvp(g)(a, v)
    gg = lambda a: mp.grad(g)(a)
    np.testing.assert_allclose(hv, (gg(a + h * v) - gg(a - h * v)) / (2 * h), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("trans", [0, 1])
@pytest.mark.parametrize("lower", [True, False])
def test_solve_triangular_frule_one_lane(lower, trans):
    from mooncake_py.linalg import solve_triangular
    a, da = _tri(20, lower), RNG.standard_normal((20, 20))
    for b in (RNG.standard_normal(20), RNG.standard_normal((20, 3))):
        f = lambda a: solve_triangular(a, b, lower=lower, trans=trans)
        _, t = mp.jvp(f, (a,), (da,))
        h = 1e-6
        np.testing.assert_allclose(t, (f(a + h * da) - f(a - h * da)) / (2 * h), rtol=1e-6,
                                   atol=1e-7)
        _, t3 = mp.jvp(f, (a,), (np.stack([da, 2 * da, -da]),), lanes=True)  # masked matmul
        np.testing.assert_allclose(t3, [t, 2 * t, -t], rtol=1e-12, atol=1e-12)


def test_cholesky_rules():
    check_rule(lambda a: np.linalg.cholesky(la._sym(a)), _spd(5, np.float64))
    check_rule(lambda a: np.linalg.cholesky(la._sym(a), upper=True), _spd(4, np.float64))


def test_gp_gradient_against_finite_differences():
    from benchmarks.namespaces import numpy_namespace
    from benchmarks.suite import CASES
    case = CASES["gp_lml"]
    x, y, s = case.make_inputs(np.random.default_rng(3))
    x, y = x[:24], y[:24]
    f = case.bind(numpy_namespace())
    gx, gy, gs = mp.grad(f, argnums=(0, 1, 2))(x, y, s)
    h = 1e-6
    for i in (0, 5, 23):
        e = np.zeros_like(x)
        e[i] = h
        np.testing.assert_allclose(gx[i], (f(x + e, y, s) - f(x - e, y, s)) / (2 * h),
                                   rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(gs, (f(x, y, s + h) - f(x, y, s - h)) / (2 * h), rtol=1e-6)


# --- solve_triangular: SciPy's checks, then BLAS (trsv for one right-hand side) ---------------
def _tri(n, lower, dtype=np.float64, order="C"):
    t = RNG.standard_normal((n, n)) + 3 * np.eye(n)
    t = np.tril(t) if lower else np.triu(t)
    t = t + np.triu(RNG.standard_normal((n, n)), 1) if lower else t  # junk never read
    return np.asarray(t, dtype=dtype, order=order)


@pytest.mark.parametrize("order", ["C", "F", "strided"])
@pytest.mark.parametrize("bshape", [(7,), (7, 1), (7, 3)])
@pytest.mark.parametrize("trans", [0, 1, 2, "T", "N"])
def test_solve_triangular_matches_scipy(trans, bshape, order):
    import scipy.linalg as sla
    from mooncake_py.linalg import solve_triangular
    for lower in (True, False):
        for unit in (False, True):
            a = _tri(14 if order == "strided" else 7, lower, order="C" if order == "strided"
                     else order)
            a = a[::2, ::2] if order == "strided" else a
            b = RNG.standard_normal(bshape)
            got = solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit)
            want = sla.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit)
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_solve_triangular_float32_and_mixed_dtypes():
    import scipy.linalg as sla
    from mooncake_py.linalg import solve_triangular
    a, b = _tri(6, True, np.float32), RNG.standard_normal(6).astype(np.float32)
    got = solve_triangular(a, b, lower=True)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, sla.solve_triangular(a, b, lower=True), rtol=1e-5)
    got = solve_triangular(a, b.astype(np.float64), lower=True)  # SciPy's way
    np.testing.assert_allclose(got, sla.solve_triangular(a, b.astype(np.float64), lower=True),
                               rtol=1e-6)


def test_solve_triangular_errors_stay_scipys():
    import scipy.linalg as sla
    from mooncake_py.linalg import solve_triangular
    a, b = _tri(5, True), RNG.standard_normal(5)
    sing = a.copy()
    sing[2, 2] = 0.0
    bad = b.copy()
    bad[1] = np.nan
    for args, kw in [((sing, b), dict(lower=True)), ((a, bad), dict(lower=True)),
                     ((a, b[:4]), dict(lower=True))]:
        with pytest.raises(Exception) as ours:
            solve_triangular(*args, **kw)
        with pytest.raises(Exception) as theirs:
            sla.solve_triangular(*args, **kw)
        assert type(ours.value) is type(theirs.value) and str(ours.value) == str(theirs.value)
    x = solve_triangular(a, bad, lower=True, check_finite=False)  # asked not to check
    assert np.isnan(x[1:]).all() and np.isfinite(x[0])
    np.testing.assert_allclose(solve_triangular(sing, b, lower=True, unit_diagonal=True),
                               sla.solve_triangular(sing, b, lower=True, unit_diagonal=True))


@pytest.mark.parametrize("trans", [0, 1])
@pytest.mark.parametrize("lower", [True, False])
def test_solve_triangular_rules_vector_rhs(lower, trans):
    from mooncake_py.linalg import solve_triangular
    a = _tri(5, lower)
    f = lambda a, b: solve_triangular(np.tril(a) if lower else np.triu(a), b, lower=lower,
                                      trans=trans)
    check_rule(f, a, RNG.standard_normal(5))
    check_rule(f, a, RNG.standard_normal((5, 1)))
    check_rule(f, a, RNG.standard_normal((5, 2)))


def test_blas_trsv_path_matches_trsm():
    a = _tri(9, True)
    for trans in (0, 1):
        for order in ("C", "F"):
            m = np.asarray(a, order=order)
            b = RNG.standard_normal(9)
            one = la._blas_trsm(m, b, trans, True, False)
            col = la._blas_trsm(m, b[:, None], trans, True, False)
            two = la._blas_trsm(m, np.stack([b, b], axis=1), trans, True, False)  # trsm
            np.testing.assert_allclose(one, two[:, 0], rtol=1e-13, atol=1e-13)
            np.testing.assert_array_equal(col[:, 0], one)
            op = np.tril(m) if trans == 0 else np.tril(m).T
            np.testing.assert_allclose(op @ one, b, rtol=1e-12, atol=1e-12)
