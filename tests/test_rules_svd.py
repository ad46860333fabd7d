"""Rules of np.linalg.svd: test_rule (reverse, forward with 1 and 3 lanes, forward-over-reverse,
strided copies) on functions of the SVD that do not depend on the singular vectors' signs;
closed forms; the extra columns of full_matrices=True; repeated and zero singular values;
float32; and Hessian-vector products against finite differences of the gradient."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.transforms.forward import jvp
from mooncake_py.rules import FRULES
from mooncake_py.testing import test_rule

RNG = np.random.default_rng(7)


def orthonormal(*shape):
    """Random matrices with orthonormal columns (last two axes ``shape[-2:]``, tall)."""
    q, _ = np.linalg.qr(RNG.standard_normal(shape))
    return q


def with_singular_values(*shape, s=None):
    """A random (stack of) matrices whose singular values are ``s`` (well separated by
    default), so finite differences of U and V are accurate."""
    *batch, m, n = shape
    k = min(m, n)
    s = np.linspace(3.0, 0.7, k) if s is None else np.asarray(s, dtype=float)
    return (orthonormal(*batch, m, k) * s) @ np.swapaxes(orthonormal(*batch, n, k), -1, -2)


SHAPES = [(3, 3), (5, 3), (3, 5), (2, 4, 3), (2, 3, 4), (2, 1, 3, 3), (1, 1), (4, 1), (1, 4)]
ids = lambda s: "x".join(map(str, s))  # noqa: E731


def mT(x):
    return np.swapaxes(x, -1, -2)


# --- singular values alone ------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES, ids=ids)
def test_singular_values(shape):
    a = with_singular_values(*shape)
    test_rule(np.linalg.svd, a, compute_uv=False)
    test_rule(lambda a: np.linalg.svd(a, False, False), a)            # positional flags
    test_rule(lambda a: np.linalg.svd(a).S, a)                        # full factors unused
    test_rule(lambda a: np.linalg.svd(a, full_matrices=False)[1], a)


def test_singular_values_of_transposed_input():
    test_rule(np.linalg.svd, with_singular_values(5, 3).T, compute_uv=False)
    test_rule(lambda a: np.linalg.svd(a, full_matrices=False).S ** 2, RNG.standard_normal((4, 6)))


# --- the singular vectors, through sign-invariant functions ---------------------------------
@pytest.mark.parametrize("full_matrices", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=ids)
def test_singular_vectors_squared(shape, full_matrices):
    def f(a):  # the thin part of U and Vh, squared: independent of each pair's sign
        u, s, vh = np.linalg.svd(a, full_matrices=full_matrices)
        k = s.shape[-1]
        return {"U2": u[..., :k] ** 2, "S": s, "Vh2": vh[..., :k, :] ** 2}
    test_rule(f, with_singular_values(*shape))


@pytest.mark.parametrize("full_matrices", [False, True])
@pytest.mark.parametrize("shape", [(3, 3), (5, 3), (3, 5), (2, 4, 3), (2, 3, 4)], ids=ids)
def test_matrix_function_of_singular_values(shape, full_matrices):
    def f(a):  # U diag(sin s + s²) Vᵀ: a function of A alone
        u, s, vh = np.linalg.svd(a, full_matrices=full_matrices)
        k = s.shape[-1]
        return (u[..., :k] * (np.sin(s) + s ** 2)[..., None, :]) @ vh[..., :k, :]
    test_rule(f, with_singular_values(*shape))


@pytest.mark.parametrize("shape", [(4, 3), (3, 4), (2, 5, 4), (2, 4, 5)], ids=ids)
def test_full_matrices_one_extra_column(shape):
    # With |m - n| = 1 the extra column of U (or row of Vh) is unique up to its sign, so every
    # entry of the full factors squared is a function of A.
    def f(a):
        u, s, vh = np.linalg.svd(a)
        return {"U2": u ** 2, "Vh2": vh ** 2}
    test_rule(f, with_singular_values(*shape))


@pytest.mark.parametrize("shape", [(6, 3), (3, 6), (2, 5, 2), (2, 2, 5)], ids=ids)
def test_full_matrices_projections_onto_the_extra_columns(shape):
    # Several extra columns are defined only up to a rotation among themselves: functions
    # invariant under it (here U diag(d) Uᵀ with one weight on the whole extra block) are
    # functions of A, and their derivatives are exact.
    def f(a):
        u, s, vh = np.linalg.svd(a)
        k, (m, n) = s.shape[-1], a.shape[-2:]
        du = np.concatenate([np.arange(1.0, k + 1), np.full(m - k, 7.0)])
        dv = np.concatenate([np.arange(1.0, k + 1) ** 2, np.full(n - k, -3.0)])
        return {"P": (u * du) @ mT(u), "Q": mT(vh) @ (vh * dv[:, None])}
    test_rule(f, with_singular_values(*shape))


def test_square_full_and_thin_agree():
    a = with_singular_values(2, 4, 4)
    f = lambda fm: mp.grad(lambda a: np.sum(np.linalg.svd(a, full_matrices=fm)[0] ** 3  # noqa
                                            * np.arange(4.0)))(a)
    np.testing.assert_allclose(f(True), f(False), rtol=1e-13, atol=1e-13)


# --- closed forms ---------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(3, 3), (5, 3), (3, 5)], ids=ids)
def test_closed_forms(shape):
    a = with_singular_values(*shape)
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    # d‖A‖_* / dA = U Vᵀ, through the values-only call, the full call and the norm
    for f in (lambda a: np.sum(np.linalg.svd(a, compute_uv=False)),
              lambda a: np.sum(np.linalg.svd(a).S),
              lambda a: np.linalg.norm(a, "nuc")):
        np.testing.assert_allclose(mp.grad(f)(a), u @ vh, rtol=1e-12, atol=1e-13)
    # d s_max / dA = u₁ v₁ᵀ, d s_min / dA = u_k v_kᵀ
    np.testing.assert_allclose(mp.grad(lambda a: np.linalg.svd(a)[1][0])(a),
                               np.outer(u[:, 0], vh[0]), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(mp.grad(lambda a: np.linalg.svd(a, compute_uv=False)[-1])(a),
                               np.outer(u[:, -1], vh[-1]), rtol=1e-12, atol=1e-13)
    # forward: ṡ = diag(Uᵀ Ȧ V)
    v = RNG.standard_normal(shape)
    _, ds = jvp(lambda a: np.linalg.svd(a, compute_uv=False), (a,), (v,))
    np.testing.assert_allclose(ds, np.diag(u.T @ v @ vh.T), rtol=1e-12, atol=1e-13)


def test_reconstruction_is_the_identity_map():
    a = with_singular_values(2, 4, 3)
    v = RNG.standard_normal(a.shape)
    def rebuild(a):
        u, s, vh = np.linalg.svd(a, full_matrices=False)
        return (u * s[..., None, :]) @ vh
    _, da = jvp(rebuild, (a,), (v,))
    np.testing.assert_allclose(da, v, rtol=1e-12, atol=1e-12)
    _, pullback = mp.vjp(rebuild, a)
    np.testing.assert_allclose(pullback(v)[0], v, rtol=1e-12, atol=1e-12)


# --- repeated and zero singular values --------------------------------------------------------
DEGENERATE = [np.eye(3), np.diag([3.0, 3.0, 1.0]), np.zeros((2, 3, 3)),
              np.array([[2.0, 0.0], [0.0, 2.0], [0.0, 0.0]]),          # tall, repeated
              np.array([[1.0, 2.0, 0.5], [2.0, 4.0, 1.0]]),            # wide, rank 1
              np.outer([1.0, 2.0, -1.0, 0.5], [2.0, 1.0])]             # tall, rank 1


@pytest.mark.parametrize("a", DEGENERATE, ids=range(len(DEGENERATE)))
def test_sum_of_squared_singular_values_at_degenerate_points(a):
    # Σ s² = ‖A‖_F², so the gradient is 2A even where the singular vectors are not unique.
    for f in (lambda a: np.sum(np.linalg.svd(a, compute_uv=False) ** 2),
              lambda a: np.sum(np.linalg.svd(a)[1] ** 2)):
        np.testing.assert_allclose(mp.grad(f)(a), 2 * a, atol=1e-12)
        _, dy = jvp(f, (a,), (np.ones_like(a),))
        np.testing.assert_allclose(dy, 2 * np.sum(a), atol=1e-12)


@pytest.mark.parametrize("a", [np.diag([3.0, 3.0, 1.0]), 2 * np.eye(2),
                               np.array([[2.0, 0.0], [0.0, 2.0], [0.0, 0.0]]),
                               np.array([[0.0, 1.5, 0.0], [-1.5, 0.0, 0.0]])],
                         ids=["diag", "2I", "tall", "wide"])
def test_nuclear_norm_hvp_at_repeated_singular_values(a):
    # The nuclear norm's gradient U Vᵀ is smooth while the singular values are nonzero, even
    # repeated; its derivative needs only F₊ = 1/(s_i + s_j), which the rule keeps there.
    f = lambda a: np.linalg.norm(a, "nuc")  # noqa: E731
    v = RNG.standard_normal(a.shape)
    np.testing.assert_allclose(mp.hvp(f)(a, v), fd_hvp(f, a, v), rtol=1e-6, atol=1e-7)


# --- second order -------------------------------------------------------------------------------
def fd_hvp(f, x, v, h=1e-5):
    g = mp.grad(f)
    return (g(x + h * v) - g(x - h * v)) / (2 * h)


HVP_FUNCTIONS = {
    "nuc": lambda a: np.linalg.norm(a, "nuc"),
    "sum-s": lambda a: np.sum(np.linalg.svd(a, compute_uv=False)),
    "s-max": lambda a: np.sum(np.linalg.svd(a)[1][..., 0] ** 2),
    "norm-2": lambda a: np.linalg.norm(a, 2) * np.sum(a),
    "log-s": lambda a: np.sum(np.log(np.linalg.svd(a, full_matrices=False).S)),
    "uv": lambda a: (np.sum(np.sin(np.linalg.svd(a, full_matrices=False)[0] ** 2))
                     + np.sum(np.linalg.svd(a)[2][..., :1, :] ** 2 * a[..., :1, :])),
}


@pytest.mark.parametrize("shape", [(3, 3), (5, 3), (3, 5), (2, 4, 3)], ids=ids)
@pytest.mark.parametrize("name", list(HVP_FUNCTIONS))
def test_hvp(name, shape):
    f = HVP_FUNCTIONS[name]
    if name in ("nuc", "norm-2") and len(shape) > 2:
        f = (lambda g: lambda a: g(a[0]) * g(a[1]))(f)
    a = with_singular_values(*shape)
    v = RNG.standard_normal(shape)
    np.testing.assert_allclose(mp.hvp(f)(a, v), fd_hvp(f, a, v), rtol=1e-6, atol=1e-8)


def test_hvp_with_lanes():
    f = HVP_FUNCTIONS["nuc"]
    a, V = with_singular_values(4, 3), RNG.standard_normal((3, 4, 3))
    H = mp.hvp(f, lanes=True)(a, V)
    for l in range(3):
        np.testing.assert_allclose(H[l], mp.hvp(f)(a, V[l]), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", [(3, 3), (4, 2), (2, 4), (2, 2, 3)], ids=ids)
def test_hessian_of_sum_of_squared_singular_values(shape):
    # Σ s² = ‖A‖_F²: the Hessian is 2·I.
    for f in (lambda a: np.sum(np.linalg.svd(a, compute_uv=False) ** 2),
              lambda a: np.sum(np.linalg.svd(a, full_matrices=False).S ** 2)):
        a = with_singular_values(*shape)
        H = mp.hessian(f)(a)
        n = a.size
        np.testing.assert_allclose(np.reshape(H, (n, n)), 2 * np.eye(n), atol=1e-10)


# --- dtypes and errors ------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(3, 3), (4, 3), (3, 4)], ids=ids)
@pytest.mark.parametrize("compute_uv", [False, True])
def test_float32_preserved(shape, compute_uv):
    a = with_singular_values(*shape).astype(np.float32)
    f = (lambda a: np.sum(np.linalg.svd(a, compute_uv=False))) if not compute_uv else \
        (lambda a: np.sum(np.linalg.svd(a)[0][..., :1] ** 2 + np.linalg.svd(a)[1][0]))
    g = mp.grad(f)(a)
    assert g.dtype == np.float32 and np.all(np.isfinite(g))
    V = RNG.standard_normal((3,) + shape).astype(np.float32)
    y, dy = FRULES[np.linalg.svd]([a], [V], compute_uv=compute_uv)  # raw rule: no cast
    for o, d in zip(*((y, dy) if compute_uv else ((y,), (dy,)))):
        assert o.dtype == d.dtype == np.float32 and d.shape == (3,) + o.shape
    hv = mp.hvp(f)(a, V[0])
    assert hv.dtype == np.float32 and np.all(np.isfinite(hv))


def test_float32_test_rule():
    test_rule(np.linalg.svd, with_singular_values(4, 3).astype(np.float32), compute_uv=False)


def test_debug_mode():
    with mp.Config(debug_mode=True):
        test_rule(lambda a: {"U2": np.linalg.svd(a)[0] ** 2, "S": np.linalg.svd(a)[1]},
                  with_singular_values(4, 3))


def test_hermitian_is_refused():
    a = with_singular_values(3, 3)
    with pytest.raises(mp.MissingRuleError, match="hermitian"):
        mp.grad(lambda a: np.sum(np.linalg.svd(a, hermitian=True).S))(a)
    with pytest.raises(mp.MissingRuleError, match="hermitian"):
        jvp(lambda a: np.linalg.svd(a, compute_uv=False, hermitian=True), (a,), (a,))
