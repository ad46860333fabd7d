"""Second order through the Cholesky / triangular-solve rules as gp_lml uses them: HVPs against
finite differences of the gradient and against the Hessian, the cached triangle masks, and the
finiteness checks that stay on the forward call only."""
import numpy as np
import pytest

import mooncake_py as mp
from benchmarks.namespaces import numpy_namespace
from benchmarks.suite import CASES
from mooncake_py.rules import linear_algebra as la

rng = np.random.default_rng(5)
_NP = numpy_namespace()


def gp_lml(x, y, s):
    """The benchmark suite's GP log marginal likelihood, on NumPy (mp.linalg's solve)."""
    return CASES["gp_lml"].fn(_NP, x, y, s)


def inputs(n):
    x = 0.3 * np.arange(float(n)) + 0.05 * rng.standard_normal(n)
    return x, rng.standard_normal(n), np.float64(0.7)


def fd_hvp(f, args, vs, h=1e-6):
    g = mp.grad(f, argnums=tuple(range(len(args))))
    plus = g(*[a + h * v for a, v in zip(args, vs)])
    minus = g(*[a - h * v for a, v in zip(args, vs)])
    return [(p - m) / (2 * h) for p, m in zip(plus, minus)]


@pytest.mark.parametrize("n", [3, 12, 40])
def test_gp_lml_hvp_matches_fd(n):
    args = inputs(n)
    vs = (rng.standard_normal(n), rng.standard_normal(n), np.float64(0.4))
    hv = mp.hvp(gp_lml, argnums=(0, 1, 2))(*args, vs)
    for got, want in zip(hv, fd_hvp(gp_lml, args, vs)):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


def test_gp_lml_hvp_matches_hessian():
    x, y, s = inputs(6)
    f = lambda z: gp_lml(z[:6], z[6:12], z[12])
    z = np.concatenate([x, y, [s]])
    v = rng.standard_normal(13)
    np.testing.assert_allclose(mp.hvp(f)(z, v), mp.hessian(f)(z) @ v, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("unit", [True, False])
def test_triangle_mask_cached_and_correct(lower, unit):
    for n in (3, 5):
        m = la._triangle_mask(n, lower, unit, np.float64, np.ones(1))
        want = np.tri(n, k=-1 if unit else 0)
        np.testing.assert_array_equal(m, want if lower else want.T)
        assert not m.flags.writeable
        assert la._triangle_mask(n, lower, unit, np.float64, np.ones(1)) is m
    m32 = la._triangle_mask(4, lower, unit, np.float32, np.ones(1))
    assert m32.dtype == np.float32


@pytest.mark.parametrize("kw", [{"lower": True}, {"lower": False, "trans": 1},
                                {"lower": True, "unit_diagonal": True}])
def test_solve_triangular_hvp_all_variants(kw):
    n = 5
    A = rng.standard_normal((n, n)) + 3 * np.eye(n)
    b = rng.standard_normal((n, 2))
    f = lambda A, b: np.sum(mp.linalg.solve_triangular(A, b, **kw) ** 3)
    vs = (rng.standard_normal((n, n)), rng.standard_normal((n, 2)))
    hv = mp.hvp(f, argnums=(0, 1))(A, b, vs)
    for got, want in zip(hv, fd_hvp(f, (A, b), vs)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_non_finite_input_still_refused_by_the_forward_call():
    L = np.tril(rng.standard_normal((4, 4))) + 4 * np.eye(4)
    L[1, 0] = np.nan
    f = lambda b: np.sum(mp.linalg.solve_triangular(L, b, lower=True) ** 2)
    with pytest.raises(ValueError, match="infs or NaNs"):
        mp.hvp(f)(np.ones(4), np.ones(4))
    with pytest.raises(ValueError, match="infs or NaNs"):
        mp.grad(f)(np.ones(4))
    # and the next call works
    L[1, 0] = 0.5
    np.testing.assert_allclose(mp.hvp(f)(np.ones(4), np.ones(4)),
                               fd_hvp(f, (np.ones(4),), (np.ones(4),))[0], rtol=1e-5)


# --- the inner solves (BLAS trsm from the right) against SciPy's solve_triangular ------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("bshape", [(7,), (7, 3), (7, 1)])
def test_blas_trsm_matches_scipy(dtype, order, bshape):
    import scipy.linalg as sla
    tol = 1e-4 if dtype == np.float32 else 1e-12
    for lower in (True, False):
        for unit in (True, False):
            for trans in (0, 1):
                A = (rng.standard_normal((7, 7)) + 4 * np.eye(7)).astype(dtype)
                A = np.asfortranarray(A) if order == "F" else A
                b = rng.standard_normal(bshape).astype(dtype)
                want = sla.solve_triangular(A, b, trans=trans, lower=lower, unit_diagonal=unit)
                got = la._blas_trsm(A, b, trans, lower, unit)
                assert got is not None and got.shape == want.shape and got.dtype == want.dtype
                np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
                np.testing.assert_allclose(
                    la._solve_nonsingular(A, b, trans=trans, lower=lower, unit_diagonal=unit),
                    want, rtol=tol, atol=tol)


def test_inner_solve_falls_back_where_blas_does_not_apply():
    import scipy.linalg as sla
    A = rng.standard_normal((6, 6)) + 4 * np.eye(6)
    assert la._blas_trsm(A[::2, ::2], np.ones(3), 0, True, False) is None  # strided
    assert la._blas_trsm(A.astype(complex), np.ones(6, complex), 0, True, False) is None
    S, B = np.stack([A, 2 * A]), rng.standard_normal((2, 6, 2))
    assert la._blas_trsm(S, B, 0, True, False) is None  # a stack
    np.testing.assert_allclose(la._solve_nonsingular(S, B, lower=True),
                               sla.solve_triangular(S, B, lower=True), rtol=1e-12)
    Z = A + 1j * np.tril(rng.standard_normal((6, 6)))
    z = rng.standard_normal(6) + 0j
    np.testing.assert_allclose(la._solve_nonsingular(Z, z, trans=2, lower=True),
                               sla.solve_triangular(Z, z, trans=2, lower=True), rtol=1e-12)


@pytest.mark.parametrize("kw", [{"lower": True}, {"lower": False, "trans": 1},
                                {"lower": True, "unit_diagonal": True, "trans": 1}])
def test_inner_solve_derivatives_match_public_solve(kw):
    A = np.tril(rng.standard_normal((5, 5))) + 3 * np.eye(5)
    A = A if kw["lower"] else A.T.copy()
    b = rng.standard_normal((5, 2))
    vs = (rng.standard_normal((5, 5)), rng.standard_normal((5, 2)))
    f = lambda A, b: np.sum(np.sin(mp.linalg.solve_triangular(A, b, **kw)))
    g = lambda A, b: np.sum(np.sin(la._solve_nonsingular(A, b, **kw)))
    for p, q in zip(mp.grad(f, argnums=(0, 1))(A, b), mp.grad(g, argnums=(0, 1))(A, b)):
        np.testing.assert_allclose(p, q, rtol=1e-12)
    for p, q in zip(mp.hvp(f, argnums=(0, 1))(A, b, vs), mp.hvp(g, argnums=(0, 1))(A, b, vs)):
        np.testing.assert_allclose(p, q, rtol=1e-11, atol=1e-12)
    for p, q in zip(mp.hvp(g, argnums=(0, 1))(A, b, vs), fd_hvp(g, (A, b), vs)):
        np.testing.assert_allclose(p, q, rtol=1e-5, atol=1e-6)


# --- scatter_add: basic indices by assignment, the rest by np.add.at ----------------------------
@pytest.mark.parametrize("shape,index,vshape", [
    ((6, 5), (slice(1, 4), None, slice(None)), (3, 1, 5)),
    ((6, 5), (np.int64(2), Ellipsis), (5,)),
    ((6, 5), (-1, slice(None, None, 2)), (3,)),
    ((6,), (slice(None), None), (6, 1)),
    ((6, 5), slice(0, 6, 4), (1, 5)),          # broadcast values
    ((6, 5), (np.array([1, 1, 3]),), (3, 5)),  # repeats: accumulate
    ((6,), True, (1, 6)),                       # a boolean key: not basic
])
def test_scatter_add_matches_add_at(shape, index, vshape):
    from mooncake_py.rules.cotangents import scatter_add, _is_basic
    values = rng.standard_normal(vshape)
    want = np.zeros(shape)
    np.add.at(want, index, values)
    np.testing.assert_array_equal(scatter_add(shape, index, values), want)
    assert _is_basic(index) == (not isinstance(index, (bool, tuple)) or
                                 (isinstance(index, tuple) and
                                  not any(isinstance(k, np.ndarray) for k in index)))
