"""Forward rules of the linear-algebra family, and second order through them.

Every case of the reverse-rule tests (their tables are imported, not copied) is checked with
``test_rule(..., modes=MODES)``: the frule against finite differences with one direction and with
k = 3 lanes, its consistency with the rrule, and the pullback run on dual numbers (what ``hvp``
does) against finite differences of the pullback. Then Hessian-vector products of composite
functions (log-determinants, quadratic forms, a GP log marginal likelihood, spectral functions,
contractions) by forward-over-reverse against finite differences of the gradient and, where
there is one, a closed form; float32 stays float32 throughout.
"""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py import jvp
from mooncake_py.rules import linear_algebra as la
from mooncake_py.testing import test_rule, check_grads

import test_rules_linear_algebra as R  # the reverse-rule tests: their tables and input makers
from test_rules_linear_algebra import (rand, well_conditioned, lower_factor, spd, sym, separated,
                                       triangular)

MODES = ("reverse", "forward", "forward_over_reverse")


def check(fn, *args, **kwargs):
    test_rule(fn, *args, modes=MODES, **kwargs)


def cases(test, argnames):
    """The ``@pytest.mark.parametrize(argnames, ...)`` table of a reverse-rule test, so that the
    forward tests run on exactly the same inputs."""
    for mark in test.pytestmark:
        if mark.name == "parametrize" and mark.args[0] == argnames:
            return mark.args[1]
    raise LookupError(f"{test.__name__} has no parametrize table for {argnames!r}")


# --- products -------------------------------------------------------------------------------
@pytest.mark.parametrize("sa,sb", R.MATMUL_SHAPES)
def test_matmul(sa, sb):
    check(np.matmul, rand(*sa), rand(*sb))


def test_matmul_operator_transposed_and_linalg():
    check(lambda x, w: x @ w, rand(2, 3, 4), rand(4,))
    check(np.matmul, rand(4, 3).T, rand(5, 4).T)
    check(np.linalg.matmul, rand(2, 3, 4), rand(4, 2))


@pytest.mark.parametrize("sa,sb", R.DOT_SHAPES)
def test_dot(sa, sb):
    check(np.dot, rand(*sa), rand(*sb))


def test_dot_method_and_transposed():
    check(lambda a, b: a.dot(b), rand(3, 4), rand(4, 2))
    check(np.dot, rand(4, 3).T, rand(2, 4).T)


@pytest.mark.parametrize("sa,sb", cases(R.test_vdot, "sa,sb"))
def test_vdot(sa, sb):
    check(np.vdot, rand(*sa), rand(*sb))


@pytest.mark.parametrize("sa,sb", cases(R.test_inner, "sa,sb"))
def test_inner(sa, sb):
    check(np.inner, rand(*sa), rand(*sb))


@pytest.mark.parametrize("sa,sb", cases(R.test_outer, "sa,sb"))
def test_outer(sa, sb):
    check(np.outer, rand(*sa), rand(*sb))


def test_linalg_outer():
    check(np.linalg.outer, rand(3), rand(4))


@pytest.mark.parametrize("sa,sb,axes", R.TENSORDOT_CASES)
def test_tensordot(sa, sb, axes):
    check(np.tensordot, rand(*sa), rand(*sb), axes=axes)


def test_tensordot_positional_axes_and_linalg():
    check(np.tensordot, rand(2, 3), rand(3, 2), 1)
    check(np.linalg.tensordot, rand(2, 3, 4), rand(3, 4, 5), axes=2)
    check(np.linalg.tensordot, rand(2, 3), rand(3, 4), axes=([1], [0]))


# --- einsum ---------------------------------------------------------------------------------
@pytest.mark.parametrize("spec,shapes", R.EINSUM_CASES)
def test_einsum(spec, shapes):
    check(np.einsum, spec, *[rand(*s) for s in shapes])


@pytest.mark.parametrize("optimize", [True, "greedy", "optimal"])
def test_einsum_optimize_passes_through(optimize):
    check(np.einsum, "ij,jk,kl->il", rand(2, 3), rand(3, 4), rand(4, 2), optimize=optimize)


def test_einsum_explicit_path():
    ops = rand(2, 3), rand(3, 4), rand(4, 2)
    path, _ = np.einsum_path("ij,jk,kl->il", *ops, optimize="optimal")
    check(np.einsum, "ij,jk,kl->il", *ops, optimize=path)


def test_einsum_interleaved_form():
    a, b = rand(2, 3), rand(3, 4)
    check(lambda a, b: np.einsum(a, [0, 1], b, [1, 2], [0, 2]), a, b)
    check(lambda a, b: np.einsum(a, [5, 1], b, [1, 0]), a, b)
    check(lambda a: np.einsum(a, [Ellipsis, 1, 1], [Ellipsis, 1]), rand(2, 3, 3))


def test_einsum_constant_operand_and_same_operand_twice():
    w = rand(3, 4)
    check(lambda x: np.einsum("ij,jk->ik", x, w), rand(3, 2).T)
    check(lambda x: np.einsum("ij,ij->", x, x), rand(3, 3))
    check(lambda x: np.einsum("ij,jk,kl->il", x, x, x), rand(3, 3))


def test_einsum_many_labels_leaves_a_lane_label():
    # 25 distinct labels: the lane label must be a fresh one among the remaining letters.
    spec = "abcdefghijklmnopqrstuvwxy->"
    check(np.einsum, spec, rand(*([1] * 23 + [2, 2])))


# --- trace, kron ----------------------------------------------------------------------------
@pytest.mark.parametrize("shape,kw", cases(R.test_trace, "shape,kw"))
def test_trace(shape, kw):
    check(np.trace, rand(*shape), **kw)


def test_trace_positional_and_linalg():
    check(lambda a: np.trace(a, 1, 1, 0), rand(3, 4))
    check(np.linalg.trace, rand(2, 3, 3))
    check(np.linalg.trace, rand(2, 3, 4), offset=-1)


@pytest.mark.parametrize("sa,sb", cases(R.test_kron, "sa,sb"))
def test_kron(sa, sb):
    check(np.kron, rand(*sa), rand(*sb))


# --- numpy.linalg ---------------------------------------------------------------------------
@pytest.mark.parametrize("shape", cases(R.test_inv, "shape"))
def test_inv(shape):
    check(np.linalg.inv, well_conditioned(*shape))


def test_inv_transposed_input():
    check(np.linalg.inv, well_conditioned(3, 3).T)


@pytest.mark.parametrize("sa,sb", cases(R.test_solve, "sa,sb"))
def test_solve(sa, sb):
    check(np.linalg.solve, well_conditioned(*sa), rand(*sb))


def test_solve_transposed_and_constant_operands():
    check(np.linalg.solve, well_conditioned(3, 3).T, rand(2, 3).T)
    a = well_conditioned(3, 3)
    check(lambda b: np.linalg.solve(a, b), rand(3))
    check(lambda a: np.linalg.solve(a, np.ones(3)), a)
    a2 = well_conditioned(2, 3, 3)
    check(lambda b: np.linalg.solve(a2, b), rand(3, 2))


@pytest.mark.parametrize("shape", cases(R.test_det, "shape"))
def test_det(shape):
    check(np.linalg.det, well_conditioned(*shape))


@pytest.mark.parametrize("shape", cases(R.test_slogdet, "shape"))
def test_slogdet(shape):
    check(np.linalg.slogdet, well_conditioned(*shape))
    check(lambda a: np.linalg.slogdet(a).logabsdet, -well_conditioned(*shape))


def test_slogdet_sign_has_no_tangent():
    a = well_conditioned(3, 3)
    (s, l), (ds, dl) = jvp(np.linalg.slogdet, (a,), (rand(3, 3),))
    assert ds is None or np.all(ds == 0)
    assert np.ndim(dl) == 0


def test_det_and_logdet_closed_forms():
    a, v = well_conditioned(4, 4), rand(4, 4)
    tr = np.trace(np.linalg.solve(a, v))  # d log|det A| = tr(A⁻¹ V)
    _, d = jvp(lambda a: np.linalg.slogdet(a)[1], (a,), (v,))
    np.testing.assert_allclose(d, tr, rtol=1e-10)
    _, d = jvp(np.linalg.det, (a,), (v,))
    np.testing.assert_allclose(d, np.linalg.det(a) * tr, rtol=1e-10)
    _, d = jvp(np.linalg.inv, (a,), (v,))
    np.testing.assert_allclose(d, -np.linalg.inv(a) @ v @ np.linalg.inv(a), rtol=1e-10)


@pytest.mark.parametrize("shape", cases(R.test_cholesky, "shape"))
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(shape, upper):
    check(lambda x: np.linalg.cholesky(spd(x), upper=upper), rand(*shape))


def test_cholesky_symmetrised_argument():
    n = 4
    check(lambda x: np.linalg.cholesky(sym(x) + 3 * n * np.eye(n)), rand(n, n))
    check(lambda x: np.sum(np.log(np.einsum("...ii->...i", np.linalg.cholesky(spd(x))))),
          rand(2, 3, 3))


def test_cholesky_tangent_closed_form():
    # L̇ is lower triangular with L̇ Lᵀ + L L̇ᵀ = Ȧ for a symmetric Ȧ.
    a, v = spd(rand(2, 4, 4)), sym(rand(2, 4, 4))
    L, dL = jvp(np.linalg.cholesky, (a,), (v,))
    np.testing.assert_allclose(dL, np.tril(dL), atol=1e-14)
    np.testing.assert_allclose(dL @ R.mT(L) + L @ R.mT(dL), v, rtol=1e-10, atol=1e-12)
    # Only the lower triangle of a direction counts (the rrule's cotangent is its adjoint).
    w = rand(2, 4, 4)
    np.testing.assert_allclose(jvp(np.linalg.cholesky, (a,), (w,))[1],
                               jvp(np.linalg.cholesky, (a,), (from_lower(w),))[1], rtol=1e-12)


@pytest.mark.parametrize("shape", cases(R.test_eigh, "shape"))
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh(shape, uplo):
    def f(x):
        w, v = np.linalg.eigh(separated(x), UPLO=uplo)
        return {"w": w, "v2": v ** 2}  # squares: independent of the eigenvectors' signs
    check(f, 0.3 * rand(*shape))


@pytest.mark.parametrize("shape", cases(R.test_eigh_matrix_function, "shape"))
def test_eigh_matrix_function(shape):
    def f(x):  # V diag(exp λ/4) Vᵀ
        w, v = np.linalg.eigh(separated(x))
        return np.einsum("...ij,...j,...kj->...ik", v, np.exp(w / 4), v)
    check(f, 0.3 * rand(*shape))


def test_eigh_single_outputs_and_eigvalsh():
    check(lambda x: np.linalg.eigh(separated(x)).eigenvalues, 0.3 * rand(4, 4))
    check(lambda x: np.linalg.eigh(separated(x))[1][..., 0] ** 2, 0.3 * rand(4, 4))
    check(lambda x: np.linalg.eigvalsh(separated(x)), 0.3 * rand(2, 4, 4))
    check(lambda x: np.linalg.eigvalsh(separated(x), "U"), 0.3 * rand(4, 4))


def test_eigh_tangent_closed_form():
    a, d = separated(rand(4, 4)), sym(rand(4, 4))
    (w, v), (dw, dv) = jvp(np.linalg.eigh, (a,), (d,))
    np.testing.assert_allclose(dw, np.einsum("ik,ij,jk->k", v, d, v), rtol=1e-10)  # v_kᵀ Ȧ v_k
    # Differentiating A V = V Λ: Ȧ V + A V̇ = V̇ Λ + V diag(λ̇); and V̇ keeps V orthogonal.
    np.testing.assert_allclose(d @ v + a @ dv, dv * w + v * dw, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(dv.T @ v + v.T @ dv, 0, atol=1e-10)


@pytest.mark.parametrize("a", [np.eye(3), np.diag([1.0, 1.0, 2.0]), np.zeros((2, 3, 3))])
def test_eigh_degenerate_eigenvalues_only(a):
    # Symmetric functions of the eigenvalues have exact, finite tangents (here d‖A‖² = 2⟨A, Ȧ⟩).
    d = sym(rand(*a.shape))
    for f in (lambda a: np.sum(np.linalg.eigh(a)[0] ** 2),
              lambda a: np.sum(np.linalg.eigvalsh(a) ** 2)):
        _, t = jvp(f, (a,), (d,))
        np.testing.assert_allclose(t, 2 * np.sum(a * d), atol=1e-12)


# --- scipy.linalg triangular solves ---------------------------------------------------------
@pytest.mark.parametrize("sa,sb,kw", R.TRIANGULAR_CASES)
def test_solve_triangular(sa, sb, kw):
    check(mp.linalg.solve_triangular, triangular(sa, kw["lower"]), rand(*sb), **kw)


def test_solve_triangular_positional_options():
    check(lambda a, b: mp.linalg.solve_triangular(a, b, 1, True, False), lower_factor(3, 3),
          rand(3, 2))


@pytest.mark.parametrize("sc,sb,lower", R.CHO_CASES)
def test_cho_solve(sc, sb, lower):
    check(lambda c, b: mp.linalg.cho_solve((c, lower), b), triangular(sc, lower), rand(*sb))


def test_cho_solve_composed_with_cholesky():
    b = rand(3)
    check(lambda x: mp.linalg.cho_solve((np.linalg.cholesky(spd(x)), True), b), rand(3, 3))
    x, v = rand(3, 3), rand(3, 3)
    t1 = jvp(lambda x: mp.linalg.cho_solve((np.linalg.cholesky(spd(x)), True), b), (x,), (v,))[1]
    t2 = jvp(lambda x: np.linalg.solve(spd(x), b), (x,), (v,))[1]
    np.testing.assert_allclose(t1, t2, rtol=1e-10)


@pytest.fixture
def no_scipy(monkeypatch):
    monkeypatch.setattr(la, "_scipy_linalg", [None])


@pytest.mark.parametrize("sa,sb,kw", R.TRIANGULAR_CASES[::3])
def test_solve_triangular_without_scipy(no_scipy, sa, sb, kw):
    check(mp.linalg.solve_triangular, triangular(sa, kw["lower"]), rand(*sb), **kw)


@pytest.mark.parametrize("sc,sb,lower", R.CHO_CASES[::3])
def test_cho_solve_without_scipy(no_scipy, sc, sb, lower):
    check(lambda c, b: mp.linalg.cho_solve((c, lower), b), triangular(sc, lower), rand(*sb))


# --- calling conventions, float32, debug mode -----------------------------------------------
def test_dual_keyword_arguments():
    a, b = well_conditioned(3, 3), rand(3, 2)
    va, vb = rand(3, 3), rand(3, 2)
    want = jvp(np.linalg.solve, (a, b), (va, vb))[1]
    got = jvp(lambda a, b: np.linalg.solve(a, b=b), (a, b), (va, vb))[1]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    want = jvp(lambda a, b: np.tensordot(a, b, 1), (a, b), (va, vb))[1]
    got = jvp(lambda a, b: np.tensordot(a, b=b, axes=1), (a, b), (va, vb))[1]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    want = jvp(np.kron, (a, b), (va, vb))[1]
    got = jvp(lambda a, b: np.kron(a, b=b), (a, b), (va, vb))[1]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    t = lower_factor(3, 3)
    got = jvp(lambda b: mp.linalg.solve_triangular(t, b=b, lower=True), (b,), (vb,))[1]
    np.testing.assert_allclose(got, mp.linalg.solve_triangular(t, vb, lower=True), rtol=1e-12)


_L3 = lower_factor(3, 3)
_B3 = rand(3)
REVERSE_OVER_FORWARD = [
    ("matmul", lambda x: x @ x, "x"),
    ("dot", lambda x: np.dot(x, x[0]), "x"),
    ("inner", lambda x: np.inner(x, x), "x"),
    ("vdot", lambda x: np.vdot(x, x) * x, "x"),
    ("outer", lambda x: np.outer(x[0], x), "x"),
    ("tensordot", lambda x: np.tensordot(x, x, 1), "x"),
    ("einsum", lambda x: np.einsum("ij,jk->ik", x, x), "x"),
    ("trace", lambda x: np.trace(x @ x) * x, "x"),
    ("kron", lambda x: np.kron(x, x[0]), "x"),
    ("inv", np.linalg.inv, "wc"),
    ("solve", lambda a: np.linalg.solve(a, _B3), "wc"),
    ("det", lambda a: np.linalg.det(a) * a, "wc"),
    ("slogdet", lambda a: np.linalg.slogdet(a)[1] * a, "wc"),
    ("cholesky", lambda x: np.linalg.cholesky(spd(x)), "x"),
    ("eigh", lambda x: np.linalg.eigh(separated(x))[1] ** 2, "x"),
    ("eigvalsh", lambda x: np.linalg.eigvalsh(separated(x)), "x"),
    ("solve_triangular", lambda t: mp.linalg.solve_triangular(t, _B3, lower=True), "tri"),
    ("cho_solve", lambda t: mp.linalg.cho_solve((t, True), _B3), "tri"),
]


@pytest.mark.parametrize("name,f,kind", REVERSE_OVER_FORWARD)
def test_reverse_over_forward(name, f, kind):
    # The gradient of a directional derivative: the frule's own np. calls run on a tape.
    x = {"x": 0.3 * rand(3, 3), "wc": well_conditioned(3, 3), "tri": _L3}[kind]
    v = rand(3, 3)

    def g(x):
        t = jvp(f, (x,), (v,))[1]
        return np.sum(t * np.cos(np.arange(np.size(t)).reshape(np.shape(t))))
    check_grads(g, x)


def _f32_args(shapes):
    if shapes == "wc":
        return [well_conditioned(3, 3, dtype=np.float32)]
    if shapes == "tri":
        return [lower_factor(3, 3).astype(np.float32), rand(3, 2, dtype=np.float32)]
    return [rand(*s, dtype=np.float32) for s in shapes]


@pytest.mark.parametrize("fn,shapes", R.F32_CASES)
def test_float32_stays_float32(fn, shapes):
    args = _f32_args(shapes)
    for lanes in (False, True):
        dirs = tuple(rand(*((3,) if lanes else ()) + a.shape, dtype=np.float32) for a in args)
        y, t = jvp(fn, tuple(args), dirs, lanes=lanes)
        assert y.dtype == np.float32 and t.dtype == np.float32
    check(fn, *args)


@pytest.mark.parametrize("fn,shapes", R.DEBUG_CASES)
def test_debug_mode_checks_tangent_shapes(fn, shapes):
    if shapes == "wc":
        args = [well_conditioned(2, 3, 3)]
    elif shapes == "tri":
        args = [lower_factor(3, 3), rand(3)]
    else:
        args = [rand(*s) for s in shapes]
    with mp.Config(debug_mode=True):
        check(fn, *args)


# --- second order: Hessian-vector products by forward-over-reverse --------------------------
def hvp(f, xs, vs, lanes=False):
    """∇²f·v for arguments ``xs`` and directions ``vs`` (one per argument), as a list."""
    return list(mp.hvp(f, argnums=tuple(range(len(xs))), lanes=lanes)(*xs, tuple(vs)))


def fd_hvp(f, xs, vs, h):
    g = mp.grad(f, argnums=tuple(range(len(xs))))
    gp = g(*[x + h * v for x, v in zip(xs, vs)])
    gm = g(*[x - h * v for x, v in zip(xs, vs)])
    return [(p - m) / (2 * h) for p, m in zip(gp, gm)]


def from_lower(w):
    """The symmetric matrix that ``w``'s lower triangle stands for."""
    return np.tril(w) + np.swapaxes(np.tril(w, -1), -1, -2)


def check_hvp(f, *xs, rtol=1e-6, atol=1e-8, h=1e-5, symmetric=False):
    """H·v against finite differences of the gradient, with one direction and with 3 lanes;
    returns (v, H·v) for closed-form checks. ``symmetric``: directions are symmetric matrices
    (for closed forms stated on symmetric matrices)."""
    vs = [rand(*np.shape(x), dtype=np.asarray(x).dtype) for x in xs]
    vs = [sym(v) for v in vs] if symmetric else vs
    hvs = hvp(f, xs, vs)
    for hv, ref in zip(hvs, fd_hvp(f, xs, vs, h)):
        np.testing.assert_allclose(hv, ref, rtol=rtol, atol=atol)
    lanes = [np.stack([v, -2 * v, sym(rand(*np.shape(v))) if symmetric else rand(*np.shape(v))])
             for v in vs]
    hv3 = hvp(f, xs, lanes, lanes=True)
    for hv, v3, t in zip(hvs, lanes, hv3):
        np.testing.assert_allclose(t[0], hv, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(t[1], -2 * hv, rtol=1e-10, atol=1e-12)
    other = hvp(f, xs, [v3[2] for v3 in lanes])
    for t, hv in zip(hv3, other):
        np.testing.assert_allclose(t[2], hv, rtol=1e-10, atol=1e-12)
    return vs, hvs


def test_hvp_logdet_closed_form():
    a = well_conditioned(4, 4)
    (v,), (hv,) = check_hvp(lambda a: np.linalg.slogdet(a)[1], a)
    ai = np.linalg.inv(a)  # ∇ = A⁻ᵀ, so ∇²·V = -(A⁻¹ V A⁻¹)ᵀ
    np.testing.assert_allclose(hv, -(ai @ v @ ai).T, rtol=1e-10)
    check_hvp(lambda a: np.sum(np.linalg.slogdet(a)[1]), well_conditioned(2, 3, 3))


def test_hvp_det_and_inv():
    check_hvp(np.linalg.det, well_conditioned(3, 3))
    check_hvp(lambda a: np.sum(np.linalg.inv(a) ** 2), well_conditioned(2, 3, 3))


def test_hvp_quadratic_form_in_a_and_b():
    a, b = well_conditioned(4, 4), rand(4)
    f = (lambda a, b: b @ np.linalg.solve(a, b))
    (va, vb), (ha, hb) = check_hvp(f, a, b)
    ai = np.linalg.inv(a)  # ∇_b∇_b = A⁻¹ + A⁻ᵀ, alone
    (hb_only,) = hvp(lambda b: f(a, b), (b,), (vb,))
    np.testing.assert_allclose(hb_only, (ai + ai.T) @ vb, rtol=1e-10)
    check_hvp(lambda a, b: np.sum(np.linalg.solve(a, b) ** 2), well_conditioned(2, 3, 3),
              rand(3, 2))


def gp_kernel(theta, x):
    """Squared-exponential kernel plus noise; theta = (log lengthscale, log scale, log noise)."""
    d2 = (x[:, None] - x[None, :]) ** 2
    return (np.exp(2 * theta[1] - 0.5 * d2 / np.exp(2 * theta[0]))
            + np.exp(2 * theta[2]) * np.eye(len(x)))


def gp_lml(theta, y, x):
    """GP log marginal likelihood through cholesky and solve_triangular."""
    L = np.linalg.cholesky(gp_kernel(theta, x))
    alpha = mp.linalg.solve_triangular(L, y, lower=True)
    return (-0.5 * (alpha @ alpha) - np.sum(np.log(np.einsum("ii->i", L)))
            - 0.5 * len(x) * np.log(2 * np.pi))


def test_hvp_gp_log_marginal_likelihood():
    x = np.linspace(0, 1, 6)
    y = np.sin(3 * x) + 0.1 * rand(6)
    theta = np.array([-1.0, 0.2, -1.5])
    check_hvp(lambda theta, y: gp_lml(theta, y, x), theta, y)

    def lml_cho(theta):  # the same through cho_solve and the factor's diagonal
        L = np.linalg.cholesky(gp_kernel(theta, x))
        return -0.5 * (y @ mp.linalg.cho_solve((L, True), y)) - np.sum(np.log(np.diagonal(L)))
    check_hvp(lml_cho, theta)


def test_hvp_cholesky_logdet_closed_form():
    a = spd(rand(4, 4))
    (v,), (hv,) = check_hvp(lambda a: 2 * np.sum(np.log(np.einsum("ii->i", np.linalg.cholesky(a)))),
                            a, symmetric=True)
    ai = np.linalg.inv(a)  # ∇ = A⁻¹'s lower triangle read: along a symmetric V it changes by
    np.testing.assert_allclose(hv, R.read_lower(-ai @ v @ ai), rtol=1e-9, atol=1e-12)  # -A⁻¹ V A⁻¹
    # A non-symmetric direction counts by the lower triangle, the entries cholesky reads.
    w = rand(4, 4)
    f = (lambda a: np.sum(np.linalg.cholesky(a) ** 3))
    np.testing.assert_allclose(hvp(f, (a,), (w,))[0], hvp(f, (a,), (from_lower(w),))[0],
                               rtol=1e-12)
    check_hvp(lambda x: np.sum(np.linalg.cholesky(spd(x), upper=True) ** 3), rand(2, 3, 3))


def test_hvp_triangular_solves():
    t, b = lower_factor(3, 3), rand(3, 2)
    check_hvp(lambda t, b: np.sum(np.tanh(mp.linalg.solve_triangular(t, b, lower=True))), t, b)
    check_hvp(lambda t, b: np.sum(mp.linalg.solve_triangular(t, b, trans=1, lower=True) ** 2),
              t, b)
    check_hvp(lambda c, b: np.sum(np.sin(mp.linalg.cho_solve((c, True), b))), t, b)


def test_hvp_sum_of_squared_eigenvalues_closed_form():
    x = 0.3 * rand(4, 4)
    (v,), (hv,) = check_hvp(lambda x: np.sum(np.linalg.eigh(separated(x))[0] ** 2), x)
    np.testing.assert_allclose(hv, 2 * sym(v), rtol=1e-8, atol=1e-10)  # Σλ² = ‖sym X + D‖²
    (v,), (hv,) = check_hvp(lambda x: np.sum(np.linalg.eigvalsh(separated(x)) ** 2), x)
    np.testing.assert_allclose(hv, 2 * sym(v), rtol=1e-8, atol=1e-10)


def test_hvp_eigenvector_function():
    def f(x):  # Σ exp(λ/4) (v_j · c)²: sign-invariant, through V and λ
        w, v = np.linalg.eigh(separated(x))
        return np.sum(np.exp(w / 4) * (np.arange(1.0, 4.0) @ v) ** 2)
    check_hvp(f, 0.3 * rand(3, 3), rtol=1e-5)


def test_hvp_contractions():
    w = rand(4, 3)
    check_hvp(lambda x: np.sum(np.einsum("ij,jk,ik->k", x, w, np.tanh(x @ w)) ** 2), rand(4, 4))
    check_hvp(lambda x: np.sum(np.tensordot(x, x, axes=([0], [1])) ** 2), rand(3, 3))
    check_hvp(lambda x: np.sum(np.sin(np.kron(x, x[:2, :2]))), rand(3, 3))
    check_hvp(lambda x: np.sum(np.kron(x, np.einsum("ij,ij->i", x, x)) ** 2), rand(2, 3))
    check_hvp(lambda a, b: np.einsum("i,ij,j->", a, b @ b.T, a) ** 2, rand(3), rand(3, 2))


def test_hvp_matmul_chains():
    x = rand(5, 3)
    check_hvp(lambda w1, w2: np.sum(np.tanh(np.tanh(x @ w1) @ w2) ** 2), rand(3, 4), rand(4, 2))
    check_hvp(lambda a: np.sum((a @ a @ a) ** 2), 0.5 * rand(2, 3, 3))
    check_hvp(lambda v, m: v @ m @ m.T @ v, rand(3), rand(3, 3))


def test_hvp_dot_inner_outer_vdot_trace():
    check_hvp(lambda x: np.sum(np.outer(np.dot(x, x[0]), np.inner(x, x[1])) ** 2), rand(3, 3))
    check_hvp(lambda x: np.vdot(x, np.sin(x)) ** 2 + np.trace(x @ x) ** 2, rand(3, 3))
    check_hvp(lambda x: np.linalg.trace(x @ x.T) ** 2 + np.sum(np.linalg.outer(x[0], x[1]) ** 3),
              rand(3, 3))


def test_hvp_float32_stays_float32():
    a = well_conditioned(3, 3, dtype=np.float32)
    v = rand(3, 3, dtype=np.float32)
    for f in (lambda a: np.linalg.slogdet(a)[1],
              lambda a: np.sum(np.linalg.solve(a, np.ones(3, np.float32)) ** 2),
              lambda a: np.sum(np.linalg.eigvalsh(sym(a)) ** 2),
              lambda a: np.sum(np.log(np.einsum("ii->i", np.linalg.cholesky(spd(a))))),
              lambda a: np.sum(mp.linalg.solve_triangular(a, a, lower=True) ** 2)):
        (hv,) = hvp(f, (a,), (v,))
        assert mp.grad(f)(a).dtype == np.float32 and hv.dtype == np.float32
        (ref,) = fd_hvp(f, (a.astype(np.float64),), (v.astype(np.float64),), 1e-5)
        np.testing.assert_allclose(hv, ref, rtol=2e-3, atol=2e-3)


def test_hessian_logdet_closed_form_in_lane_chunks():
    a = well_conditioned(3, 3)
    ai = np.linalg.inv(a)  # ∂²/∂A_ij∂A_kl log|det A| = -A⁻¹_jk A⁻¹_li
    want = -np.einsum("jk,li->ijkl", ai, ai)
    for chunk in (1, 4, 9):
        np.testing.assert_allclose(mp.hessian(lambda a: np.linalg.slogdet(a)[1],
                                              chunk_size=chunk)(a), want, rtol=1e-10, atol=1e-13)


def test_hessian_gp_hyperparameters_is_symmetric_and_matches_hvp():
    x = np.linspace(0, 1, 5)
    y = np.cos(2 * x)
    lml = (lambda theta: gp_lml(theta, y, x))
    theta = np.array([-1.0, 0.1, -2.0])
    H = mp.hessian(lml)(theta)
    np.testing.assert_allclose(H, H.T, rtol=1e-9, atol=1e-12)
    for j in range(3):
        np.testing.assert_allclose(H[:, j], fd_hvp(lml, (theta,), (np.eye(3)[j],), 1e-5)[0],
                                   rtol=1e-6, atol=1e-8)
