"""Linear-algebra rules against finite differences (test_rule also repeats every case on strided
copies of the inputs), closed forms, float32, and the scipy-free fallbacks."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.rules import linear_algebra as la
from mooncake_py.testing import test_rule, check_grads

RNG = np.random.default_rng(1234)


def rand(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


def well_conditioned(*shape, dtype=np.float64):
    """Random square matrices (last two axes) shifted away from singularity."""
    n = shape[-1]
    return (rand(*shape) + 2 * n ** 0.5 * np.eye(n)).astype(dtype)


def lower_factor(*shape):
    """Random lower-triangular matrices with a positive, well-sized diagonal."""
    n = shape[-1]
    return np.tril(rand(*shape)) + 3 * np.eye(n)


def mT(x):  # transpose of the last two axes through a rule of this module
    return np.einsum("...ij->...ji", x)


def sym(x):
    return (x + mT(x)) / 2


# --- products -------------------------------------------------------------------------------
MATMUL_SHAPES = [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)),
                 ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)),
                 ((2, 3, 4), (4,)), ((4,), (2, 4, 3))]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES)
def test_matmul(sa, sb):
    test_rule(np.matmul, rand(*sa), rand(*sb))


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES)
def test_matmul_operator(sa, sb):
    test_rule(lambda x, w: x @ w, rand(*sa), rand(*sb))


def test_matmul_transposed_inputs():
    test_rule(np.matmul, rand(4, 3).T, rand(5, 4).T)
    test_rule(np.linalg.matmul, rand(2, 3, 4), rand(4, 2))


DOT_SHAPES = [((), ()), ((), (3, 2)), ((3, 2), ()), ((4,), (4,)), ((3, 4), (4,)),
              ((2, 3, 4), (4,)), ((4,), (4, 3)), ((3, 4), (4, 5)), ((2, 3, 4), (5, 4, 2)),
              ((4,), (2, 4, 3)), ((2, 3, 4), (4, 2))]


@pytest.mark.parametrize("sa,sb", DOT_SHAPES)
def test_dot(sa, sb):
    test_rule(np.dot, rand(*sa), rand(*sb))


def test_dot_method_and_transposed():
    test_rule(lambda a, b: a.dot(b), rand(3, 4), rand(4, 2))
    test_rule(np.dot, rand(4, 3).T, rand(2, 4).T)


@pytest.mark.parametrize("sa,sb", [((12,), (3, 4)), ((2, 3), (3, 2)), ((), ()), ((5,), (5,))])
def test_vdot(sa, sb):
    test_rule(np.vdot, rand(*sa), rand(*sb))


@pytest.mark.parametrize("sa,sb", [((), ()), ((), (3,)), ((4,), (4,)), ((3, 4), (4,)),
                                   ((2, 3, 4), (5, 4)), ((4,), (2, 3, 4))])
def test_inner(sa, sb):
    test_rule(np.inner, rand(*sa), rand(*sb))


@pytest.mark.parametrize("sa,sb", [((3,), (4,)), ((2, 3), (4,)), ((), (3,)), ((2, 2), (3, 1))])
def test_outer(sa, sb):
    test_rule(np.outer, rand(*sa), rand(*sb))


def test_linalg_outer():
    test_rule(np.linalg.outer, rand(3), rand(4))


TENSORDOT_CASES = [((3, 4), (4, 5), 1), ((3, 4), (3, 4), 2), ((2, 3), (4,), 0),
                   ((2, 3, 4), (3, 4, 5), 2), ((2, 3, 4), (4, 2, 5), ([2, 0], [0, 1])),
                   ((2, 3, 4), (3, 5), (1, 0)), ((3, 4, 2), (2, 4), ([-1, -2], [0, 1])),
                   ((4, 3), (3, 4), ([0, 1], [1, 0]))]


@pytest.mark.parametrize("sa,sb,axes", TENSORDOT_CASES)
def test_tensordot(sa, sb, axes):
    test_rule(np.tensordot, rand(*sa), rand(*sb), axes=axes)


def test_tensordot_positional_axes_and_linalg():
    test_rule(np.tensordot, rand(2, 3), rand(3, 2), 1)
    test_rule(np.linalg.tensordot, rand(2, 3, 4), rand(3, 4, 5), axes=2)


# --- einsum ---------------------------------------------------------------------------------
EINSUM_CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),              # implicit output
    ("ab,bC", [(3, 4), (4, 2)]),              # implicit: 'Ca' in ASCII order
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),                          # trace
    ("iij->ij", [(3, 3, 2)]),
    ("iji->j", [(3, 2, 3)]),
    ("iii->i", [(3, 3, 3)]),
    ("ii,i->i", [(3, 3), (3,)]),
    ("ij->", [(3, 4)]),
    ("ij->ji", [(3, 4)]),
    ("ijk->j", [(2, 3, 4)]),                   # axes summed inside one operand
    ("i,i", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,k->ik", [(3, 4), (5,)]),              # j only in the first operand
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("...ij,j...", [(5, 2, 3), (3, 5)]),
    ("...i,...i->...", [(2, 3), (4, 1, 3)]),   # broadcast batch axes
    ("i...,i...", [(2, 3), (2, 3)]),
    ("ij,ij->ij", [(3, 1), (3, 4)]),           # size-1 label broadcast
    ("ij,ij->i", [(3, 1), (3, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("i,ij,j->", [(3,), (3, 4), (4,)]),
    (",->", [(), ()]),
    ("...,...", [(), (3,)]),
    ("ij,,jk->ik", [(2, 3), (), (3, 2)]),
]


@pytest.mark.parametrize("spec,shapes", EINSUM_CASES)
def test_einsum(spec, shapes):
    test_rule(np.einsum, spec, *[rand(*s) for s in shapes])


@pytest.mark.parametrize("optimize", [True, "greedy", "optimal"])
def test_einsum_optimize_passes_through(optimize):
    test_rule(np.einsum, "ij,jk,kl->il", rand(2, 3), rand(3, 4), rand(4, 2), optimize=optimize)


def test_einsum_explicit_path():
    ops = rand(2, 3), rand(3, 4), rand(4, 2)
    path, _ = np.einsum_path("ij,jk,kl->il", *ops, optimize="optimal")
    test_rule(np.einsum, "ij,jk,kl->il", *ops, optimize=path)


def test_einsum_interleaved_form():
    a, b = rand(2, 3), rand(3, 4)
    test_rule(lambda a, b: np.einsum(a, [0, 1], b, [1, 2], [0, 2]), a, b)
    test_rule(lambda a, b: np.einsum(a, [5, 1], b, [1, 0]), a, b)  # implicit: sorted ints
    test_rule(lambda a: np.einsum(a, [Ellipsis, 1, 1], [Ellipsis, 1]), rand(2, 3, 3))


def test_einsum_constant_operand_and_transposed():
    w = rand(3, 4)
    test_rule(lambda x: np.einsum("ij,jk->ik", x, w), rand(3, 2).T)
    test_rule(lambda x: np.einsum("ij,ij->", x, x), rand(3, 3))  # same operand twice


# --- trace, kron ----------------------------------------------------------------------------
@pytest.mark.parametrize("shape,kw", [((3, 3), {}), ((3, 4), {"offset": 1}),
                                      ((4, 3), {"offset": -2}), ((3, 3), {"offset": 5}),
                                      ((2, 3, 4), {"axis1": 2, "axis2": 0}),
                                      ((2, 3, 4), {"axis1": -1, "axis2": -2, "offset": 1}),
                                      ((2, 3, 3, 2), {"axis1": 1, "axis2": 2})])
def test_trace(shape, kw):
    test_rule(np.trace, rand(*shape), **kw)


def test_trace_positional_and_linalg():
    test_rule(lambda a: np.trace(a, 1, 1, 0), rand(3, 4))
    test_rule(np.linalg.trace, rand(2, 3, 3))
    test_rule(np.linalg.trace, rand(2, 3, 4), offset=-1)


@pytest.mark.parametrize("sa,sb", [((2, 3), (4, 5)), ((2,), (3,)), ((2, 3), (4,)), ((3,), (2, 2)),
                                   ((), (3,)), ((2, 2), ()), ((), ()), ((2, 1, 2), (2, 3))])
def test_kron(sa, sb):
    test_rule(np.kron, rand(*sa), rand(*sb))


# --- numpy.linalg ---------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(3, 3), (1, 1), (2, 3, 3), (2, 1, 4, 4)])
def test_inv(shape):
    test_rule(np.linalg.inv, well_conditioned(*shape))


def test_inv_transposed_input():
    test_rule(np.linalg.inv, well_conditioned(3, 3).T)


@pytest.mark.parametrize("sa,sb", [((3, 3), (3,)), ((3, 3), (3, 2)), ((2, 3, 3), (3,)),
                                   ((2, 3, 3), (2, 3, 2)), ((2, 3, 3), (3, 2)),
                                   ((3, 3), (2, 3, 2)), ((2, 1, 3, 3), (4, 3, 1))])
def test_solve(sa, sb):
    test_rule(np.linalg.solve, well_conditioned(*sa), rand(*sb))


def test_solve_transposed_and_constant_matrix():
    test_rule(np.linalg.solve, well_conditioned(3, 3).T, rand(2, 3).T)
    a = well_conditioned(3, 3)
    test_rule(lambda b: np.linalg.solve(a, b), rand(3))
    test_rule(lambda a: np.linalg.solve(a, np.ones(3)), a)


@pytest.mark.parametrize("shape", [(3, 3), (1, 1), (2, 3, 3), (2, 2, 2, 2)])
def test_det(shape):
    test_rule(np.linalg.det, well_conditioned(*shape))


@pytest.mark.parametrize("shape", [(3, 3), (2, 3, 3), (1, 1)])
def test_slogdet(shape):
    test_rule(np.linalg.slogdet, well_conditioned(*shape))
    test_rule(lambda a: np.linalg.slogdet(a).logabsdet, -well_conditioned(*shape))


def test_logdet_closed_form():
    a = rand(4, 4)
    g = mp.grad(lambda a: np.linalg.slogdet(a)[1])(a)
    np.testing.assert_allclose(g, np.linalg.inv(a).T, rtol=1e-10)
    g = mp.grad(lambda a: np.linalg.det(a))(a)
    np.testing.assert_allclose(g, np.linalg.det(a) * np.linalg.inv(a).T, rtol=1e-10)
    b = rand(4)
    g = mp.grad(lambda b: b @ np.linalg.solve(a, b))(b)  # d(bᵀA⁻¹b)/db = (A⁻¹ + A⁻ᵀ) b
    np.testing.assert_allclose(g, np.linalg.solve(a, b) + np.linalg.solve(a.T, b), rtol=1e-10)


def spd(x):
    n = x.shape[-1]
    return np.matmul(x, mT(x)) + n * np.eye(n, dtype=x.dtype)


@pytest.mark.parametrize("shape", [(3, 3), (1, 1), (2, 4, 4), (2, 1, 3, 3)])
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(shape, upper):
    test_rule(lambda x: np.linalg.cholesky(spd(x), upper=upper), rand(*shape))


def test_cholesky_symmetrised_argument():
    n = 4
    test_rule(lambda x: np.linalg.cholesky(sym(x) + 3 * n * np.eye(n)), rand(n, n))
    test_rule(lambda x: np.sum(np.log(np.einsum("...ii->...i", np.linalg.cholesky(spd(x))))),
              rand(2, 3, 3))


def read_lower(g):
    """The cotangent of the lower triangle read for a symmetric cotangent ``g``: twice ``g``
    below the diagonal, ``g`` on it (docs/conventions.md, one-triangle linear algebra)."""
    return g * (2 * np.tri(g.shape[-1]) - np.eye(g.shape[-1]))


def test_cholesky_cotangent_is_that_of_the_lower_triangle():
    a = spd(rand(4, 4))
    g = mp.grad(lambda a: np.sum(np.linalg.cholesky(a) * rand(4, 4)))(a)
    np.testing.assert_array_equal(np.triu(g, 1), 0)
    # 2 log det via the factor: symmetric gradient A⁻¹, of which the lower triangle is read
    g = mp.grad(lambda a: 2 * np.sum(np.log(np.einsum("ii->i", np.linalg.cholesky(a)))))(a)
    np.testing.assert_allclose(g, read_lower(np.linalg.inv(a)), rtol=1e-10, atol=1e-15)


def separated(x, spread=3.0):
    """A symmetric matrix (stack) with well-separated eigenvalues: sym(x) + diag(0, s, 2s, ...)."""
    n = x.shape[-1]
    return sym(x) + np.diag(spread * np.arange(n))


@pytest.mark.parametrize("shape", [(3, 3), (1, 1), (2, 4, 4)])
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh(shape, uplo):
    def f(x):
        w, v = np.linalg.eigh(separated(x), UPLO=uplo)
        # Squaring makes the result independent of the eigenvectors' signs. (A dict, not a
        # tuple: test_rule calls np.ndim on the output before checking for a container.)
        return {"w": w, "v2": v ** 2}
    test_rule(f, 0.3 * rand(*shape))


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4)])
def test_eigh_matrix_function(shape):
    def f(x):  # V diag(exp λ) Vᵀ = expm of the symmetric matrix
        w, v = np.linalg.eigh(separated(x))
        return np.einsum("...ij,...j,...kj->...ik", v, np.exp(w / 4), v)
    test_rule(f, 0.3 * rand(*shape))


def test_eigh_single_outputs():
    test_rule(lambda x: np.linalg.eigh(separated(x)).eigenvalues, 0.3 * rand(4, 4))
    test_rule(lambda x: np.linalg.eigh(separated(x))[1][..., 0] ** 2, 0.3 * rand(4, 4))
    test_rule(lambda x: np.linalg.eigvalsh(separated(x)), 0.3 * rand(2, 4, 4))


def test_eigh_eigenvalue_closed_form():
    a = separated(rand(4, 4))
    w, v = np.linalg.eigh(a)
    g = mp.grad(lambda a: np.linalg.eigh(a)[0][2])(a)  # dλ_k/dA = v_k v_kᵀ (lower triangle read)
    np.testing.assert_allclose(g, read_lower(np.outer(v[:, 2], v[:, 2])), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("a", [np.eye(3), np.diag([1.0, 1.0, 2.0]), np.zeros((2, 3, 3))])
def test_eigh_degenerate_eigenvalues_only(a):
    # Eigenvector cotangents are zero here: the gradient stays finite and exact (2A).
    g = mp.grad(lambda a: np.sum(np.linalg.eigh(a)[0] ** 2))(a)
    np.testing.assert_allclose(g, 2 * a, atol=1e-12)
    g = mp.grad(lambda a: np.sum(np.linalg.eigvalsh(a) ** 2))(a)
    np.testing.assert_allclose(g, 2 * a, atol=1e-12)


# --- scipy.linalg triangular solves ---------------------------------------------------------
TRIANGULAR_CASES = [
    ((3, 3), (3,), {"lower": True}),
    ((3, 3), (3, 2), {"lower": True}),
    ((3, 3), (3,), {"lower": False}),
    ((3, 3), (3, 2), {"lower": True, "trans": 1}),
    ((3, 3), (3, 2), {"lower": False, "trans": "T"}),
    ((3, 3), (3,), {"lower": True, "trans": "N"}),
    ((3, 3), (3,), {"lower": True, "trans": 2}),
    ((3, 3), (3, 2), {"lower": True, "unit_diagonal": True}),
    ((3, 3), (3,), {"lower": False, "unit_diagonal": True, "trans": 1}),
    ((2, 3, 3), (3,), {"lower": True}),
    ((2, 3, 3), (2, 3, 2), {"lower": False, "trans": 1}),
    ((3, 3), (2, 3, 2), {"lower": True}),
]


def triangular(shape, lower):
    """A triangular factor with junk in the other triangle, which the solves must not read."""
    t = lower_factor(*shape)
    return t + np.triu(rand(*shape), 1) if lower else mT(t) + np.tril(rand(*shape), -1)


@pytest.mark.parametrize("sa,sb,kw", TRIANGULAR_CASES)
def test_solve_triangular(sa, sb, kw):
    test_rule(mp.linalg.solve_triangular, triangular(sa, kw["lower"]), rand(*sb), **kw)


@pytest.mark.parametrize("trans", [0, 1])
def test_solve_triangular_matches_dense_solve_gradient(trans):
    t, b = lower_factor(3, 3), rand(3, 2)
    w = rand(3, 2)
    gt, gb = mp.grad(lambda t, b: np.sum(w * mp.linalg.solve_triangular(t, b, trans=trans,
                                                                         lower=True)),
                     argnums=(0, 1))(t, b)
    dense = (lambda t, b: np.sum(w * np.linalg.solve(t.T if trans else t, b)))
    ht, hb = mp.grad(dense, argnums=(0, 1))(t, b)
    np.testing.assert_allclose(gb, hb, rtol=1e-10)
    np.testing.assert_allclose(gt, np.tril(ht), rtol=1e-10, atol=1e-13)


def test_solve_triangular_keyword_tracked():
    t = lower_factor(3, 3)
    check_grads(lambda b: np.sum(mp.linalg.solve_triangular(t, b=b, lower=True) ** 2), rand(3))
    check_grads(lambda t: np.sum(mp.linalg.solve_triangular(a=t, b=np.ones(3), lower=True) ** 2),
                t)


CHO_CASES = [((3, 3), (3,), True), ((3, 3), (3, 2), True), ((3, 3), (3,), False),
             ((3, 3), (3, 2), False), ((2, 3, 3), (3,), True), ((2, 3, 3), (2, 3, 2), False),
             ((3, 3), (2, 3, 1), True)]


@pytest.mark.parametrize("sc,sb,lower", CHO_CASES)
def test_cho_solve(sc, sb, lower):
    test_rule(lambda c, b: mp.linalg.cho_solve((c, lower), b), triangular(sc, lower), rand(*sb))


def test_cho_solve_composed_with_cholesky():
    b = rand(3)
    f = lambda x: mp.linalg.cho_solve((np.linalg.cholesky(spd(x)), True), b)  # noqa: E731
    test_rule(f, rand(3, 3))
    x = rand(3, 3)
    g1 = mp.grad(lambda x: np.sum(f(x) ** 2))(x)
    g2 = mp.grad(lambda x: np.sum(np.linalg.solve(spd(x), b) ** 2))(x)
    np.testing.assert_allclose(g1, g2, rtol=1e-10)


@pytest.fixture
def no_scipy(monkeypatch):
    monkeypatch.setattr(la, "_scipy_linalg", [None])


@pytest.mark.parametrize("sa,sb,kw", TRIANGULAR_CASES)
def test_solve_triangular_without_scipy(no_scipy, sa, sb, kw):
    import scipy.linalg as sla
    a, b = triangular(sa, kw["lower"]), rand(*sb)
    np.testing.assert_allclose(mp.linalg.solve_triangular(a, b, **kw),
                               sla.solve_triangular(a, b, **kw), rtol=1e-12)
    check_grads(lambda a, b: np.sum(mp.linalg.solve_triangular(a, b, **kw) * 0.7), a, b)


@pytest.mark.parametrize("sc,sb,lower", CHO_CASES)
def test_cho_solve_without_scipy(no_scipy, sc, sb, lower):
    import scipy.linalg as sla
    c, b = triangular(sc, lower), rand(*sb)
    np.testing.assert_allclose(mp.linalg.cho_solve((c, lower), b),
                               sla.cho_solve((c, lower), b), rtol=1e-12)
    check_grads(lambda c, b: np.sum(np.sin(mp.linalg.cho_solve((c, lower), b))), c, b)


def test_scipy_functions_exported():
    assert mp.linalg.solve_triangular is la.solve_triangular
    assert mp.linalg.cho_solve is la.cho_solve
    assert sorted(la.__all__) == ["cho_solve", "solve_triangular"]


# --- float32 --------------------------------------------------------------------------------
F32_CASES = [
    (np.matmul, [(3, 4), (4, 2)]),
    (np.dot, [(3, 4), (4,)]),
    (np.inner, [(3, 4), (4,)]),
    (np.outer, [(3,), (4,)]),
    (np.vdot, [(3,), (3,)]),
    (np.kron, [(2, 2), (3,)]),
    (lambda a, b: np.tensordot(a, b, 1), [(3, 4), (4, 2)]),
    (lambda a, b: np.einsum("ii,ij->j", a, b), [(3, 3), (3, 2)]),
    (np.trace, [(3, 3)]),
    (np.linalg.inv, "wc"),
    (lambda a: np.linalg.solve(a, np.ones(3, np.float32)), "wc"),
    (np.linalg.det, "wc"),
    (lambda a: np.linalg.slogdet(a)[1], "wc"),
    (lambda x: np.linalg.cholesky(spd(x)), [(3, 3)]),
    (lambda x: np.linalg.eigh(separated(x).astype(np.float32))[0], [(3, 3)]),
    (lambda a, b: mp.linalg.solve_triangular(a, b, lower=True), "tri"),
    (lambda a, b: mp.linalg.cho_solve((a, True), b), "tri"),
]


@pytest.mark.parametrize("fn,shapes", F32_CASES)
def test_float32_stays_float32(fn, shapes):
    if shapes == "wc":
        args = [well_conditioned(3, 3, dtype=np.float32)]
    elif shapes == "tri":
        args = [lower_factor(3, 3).astype(np.float32), rand(3, 2, dtype=np.float32)]
    else:
        args = [rand(*s, dtype=np.float32) for s in shapes]
    y = fn(*args)
    assert y.dtype == np.float32
    gs = mp.grad(lambda *a: np.sum(fn(*a)), argnums=tuple(range(len(args))))(*args)
    assert all(g.dtype == np.float32 for g in gs)
    test_rule(fn, *args)


# --- calling conventions --------------------------------------------------------------------
def test_tracked_keyword_arguments():
    a, b = well_conditioned(3, 3), rand(3, 2)
    check_grads(lambda a, b: np.sum(np.linalg.solve(a, b=b) ** 2), a, b)
    check_grads(lambda a, b: np.sum(np.tensordot(a, b=b, axes=1) ** 2), a, b)
    check_grads(lambda a, b: np.sum(np.dot(a, b=b) ** 2), a, b)


DEBUG_CASES = [
    (lambda a, b: np.tensordot(a, b, 1), [(3, 4), (4, 2)]),
    (lambda a, b: np.dot(a, b), [(), (3,)]),
    (lambda a, b, c: np.einsum("ij,jk,kk->ik", a, b, c), [(2, 3), (3, 4), (4, 4)]),
    (lambda a: np.trace(a, 1, 1, 0), [(3, 4)]),
    (np.kron, [(2, 3), (3,)]),
    (np.linalg.slogdet, "wc"),
    (lambda x: np.linalg.eigh(separated(x), "U")[1] ** 2, [(3, 3)]),
    (lambda a, b: mp.linalg.solve_triangular(a, b, 1, True), "tri"),
    (lambda a, b: mp.linalg.cho_solve((a, True), b, False), "tri"),
]


@pytest.mark.parametrize("fn,shapes", DEBUG_CASES)
def test_debug_mode_checks_cotangent_structure(fn, shapes):
    if shapes == "wc":
        args = [well_conditioned(2, 3, 3)]
    elif shapes == "tri":
        args = [lower_factor(3, 3), rand(3)]
    else:
        args = [rand(*s) for s in shapes]
    with mp.Config(debug_mode=True):
        test_rule(fn, *args)
