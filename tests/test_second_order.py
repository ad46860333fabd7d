"""Second order by forward-over-reverse: HVPs and Hessians against closed forms and finite
differences of the gradient; caches; reverse-over-reverse refused."""
import numpy as np
import pytest
from scipy.optimize import rosen, rosen_hess, rosen_hess_prod

import mooncake_py as mp

rng = np.random.default_rng(42)


def fd_hvp(f, x, v, h=1e-5):
    g = mp.grad(f)
    return (g(x + h * v) - g(x - h * v)) / (2 * h)


def test_quadratic_form_closed_form():
    A = rng.standard_normal((5, 5))
    f = lambda x: 0.5 * x @ A @ x
    x, v = rng.standard_normal(5), rng.standard_normal(5)
    np.testing.assert_allclose(mp.hvp(f)(x, v), 0.5 * (A + A.T) @ v, rtol=1e-13)
    np.testing.assert_allclose(mp.hessian(f)(x), 0.5 * (A + A.T), rtol=1e-13)


@pytest.mark.parametrize("n", [2, 7, 30])
def test_rosenbrock_against_scipy(n):
    x, v = rng.uniform(-1, 1, n), rng.standard_normal(n)
    f = lambda x: np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)
    assert np.isclose(f(x), rosen(x))
    np.testing.assert_allclose(mp.hvp(f)(x, v), rosen_hess_prod(x, v), rtol=1e-12)
    np.testing.assert_allclose(mp.hessian(f)(x), rosen_hess(x), rtol=1e-12, atol=1e-12)


def test_logsumexp_closed_form():
    x = rng.standard_normal(6)
    p = np.exp(x - np.log(np.sum(np.exp(x))))
    H = mp.hessian(lambda x: mp.special.logsumexp(x))(x)
    np.testing.assert_allclose(H, np.diag(p) - np.outer(p, p), atol=1e-14)


def test_logdet_closed_form():
    B = rng.standard_normal((4, 4))
    A = B @ B.T + 4 * np.eye(4)
    V = rng.standard_normal((4, 4))
    f = lambda A: np.linalg.slogdet(A)[1]
    Ainv = np.linalg.inv(A)
    # d²/dA² log|det A| applied to V: -(A⁻¹ V A⁻¹)ᵀ
    np.testing.assert_allclose(mp.hvp(f)(A, V), -(Ainv @ V @ Ainv).T, rtol=1e-10)


@pytest.mark.parametrize("f", [
    lambda x: np.sum(np.sin(x) * x ** 2),
    lambda x: np.sum(np.tanh(x[:, None] * x[None, :])),
    lambda x: np.mean(np.exp(-x ** 2)) * np.prod(np.cos(x)),
    lambda x: np.max(x ** 2) + np.std(x) + np.linalg.norm(x),
    lambda x: np.sum(mp.special.softmax(x) * np.log1p(x ** 2)),
])
def test_hvp_matches_finite_differences_of_gradient(f):
    x, v = rng.uniform(-1, 1, 8), rng.standard_normal(8)
    np.testing.assert_allclose(mp.hvp(f)(x, v), fd_hvp(f, x, v), rtol=1e-6, atol=1e-8)


def test_jvp_of_grad_equals_hvp():
    f = lambda x: np.sum(np.log1p(np.exp(x)) * x)
    x, v = rng.standard_normal(5), rng.standard_normal(5)
    _, jg = mp.jvp(mp.grad(f), (x,), (v,))
    np.testing.assert_allclose(jg, mp.hvp(f)(x, v), rtol=1e-14)


def test_hvp_lanes_equals_separate_hvps():
    f = lambda x: np.sum(np.sin(x) ** 2 * x)
    x, V = rng.standard_normal(6), rng.standard_normal((3, 6))
    HV = mp.hvp(f, lanes=True)(x, V)
    np.testing.assert_allclose(HV, np.stack([mp.hvp(f)(x, v) for v in V]), rtol=1e-13)


@pytest.mark.parametrize("chunk", [1, 3, None])
def test_hessian_chunks_agree(chunk):
    f = lambda x: np.sum(np.exp(np.sin(x)) * x[::-1])
    x = rng.standard_normal(7)
    H = mp.hessian(f, chunk_size=chunk)(x)
    cols = np.stack([fd_hvp(f, x, e) for e in np.eye(7)])
    np.testing.assert_allclose(H, cols, rtol=1e-6, atol=1e-8)


def test_hessian_matrix_argument_shape():
    f = lambda W: np.sum(np.tanh(W @ np.ones(3)) ** 2)
    W = rng.standard_normal((2, 3))
    H = mp.hessian(f)(W)
    assert H.shape == (2, 3, 2, 3)
    V = rng.standard_normal((2, 3))
    np.testing.assert_allclose(np.tensordot(H, V, axes=2), mp.hvp(f)(W, V), rtol=1e-12)


def test_several_arguments_blocks_and_mixed_hvp():
    f = lambda x, y: np.sum(x ** 2 * y[0]) + np.sum(np.sin(y)) * x[1]
    x, y = rng.standard_normal(3), rng.standard_normal(2)
    (Hxx, Hxy), (Hyx, Hyy) = mp.hessian(f, argnums=(0, 1))(x, y)
    assert Hxx.shape == (3, 3) and Hxy.shape == (3, 2) and Hyy.shape == (2, 2)
    np.testing.assert_allclose(Hxy, Hyx.T, rtol=1e-13)
    vx, vy = rng.standard_normal(3), rng.standard_normal(2)
    hx, hy = mp.hvp(f, argnums=(0, 1))(x, y, (vx, vy))
    np.testing.assert_allclose(hx, Hxx @ vx + Hxy @ vy, rtol=1e-12)
    np.testing.assert_allclose(hy, Hyx @ vx + Hyy @ vy, rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_seed_example_prepared_hvp(dtype):
    logp = lambda x: -0.5 * np.sum(x ** 2)
    x = np.arange(4, dtype=dtype)
    c = mp.prepare_hvp_cache(logp, x)
    v = np.ones(4, dtype=dtype)
    y, g, Hv = mp.value_and_hvp(c, logp, v, x)
    assert y.dtype == g.dtype == Hv.dtype == dtype
    np.testing.assert_array_equal(g, -x)
    np.testing.assert_array_equal(Hv, -v)
    with pytest.raises(mp.PreparedCacheSpecError):
        mp.value_and_hvp(c, logp, v, x.astype(np.float16))
    assert mp.value_and_hvp(c, logp, v, x)[0] == y  # usable after the error


def test_prepared_hessian_cache():
    f = lambda x: np.sum(np.sin(x) * x)
    c = mp.prepare_hessian_cache(f, np.zeros(3))
    x = rng.standard_normal(3)
    y, g, H = mp.value_gradient_and_hessian(c, f, x)
    np.testing.assert_allclose(H, np.diag(2 * np.cos(x) - x * np.sin(x)), atol=1e-14)
    np.testing.assert_allclose(g, np.sin(x) + x * np.cos(x))
    with pytest.raises(mp.PreparedCacheSpecError):
        mp.value_gradient_and_hessian(c, f, np.zeros(4))


def test_custom_rrule_gets_second_order_for_free():
    @mp.primitive
    def softplus(x):
        return np.log1p(np.exp(x))

    @mp.rrule(softplus)
    def _(x):
        return softplus(x), lambda g: (g / (1 + np.exp(-x)),)
    x, v = rng.standard_normal(4), rng.standard_normal(4)
    s = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(mp.hvp(lambda x: np.sum(softplus(x)))(x, v), s * (1 - s) * v,
                               rtol=1e-13)


def test_pullback_calling_a_function_without_frule_names_both():
    @mp.primitive
    def opaque(x):
        return np.asarray(x) * 2  # not differentiable by tracing: needs its own rules

    @mp.primitive
    def f(x):
        return x ** 2

    @mp.rrule(f)
    def _(x):
        return f(x), lambda g: (g * opaque(x),)

    @mp.rrule(opaque)
    def _(x):
        return opaque(x), lambda g: (2 * g,)
    with pytest.raises(mp.MissingRuleError) as e:
        mp.hvp(lambda x: np.sum(f(x)))(np.ones(2), np.ones(2))
    msg = str(e.value)
    assert "opaque" in msg and "frule" in msg and "pullback of" in msg and ".f" in msg


def test_reverse_over_reverse_refused_then_next_call_works():
    f = lambda x: np.sum(np.sin(x))
    with pytest.raises(mp.ReverseOverReverseError, match="hvp"):
        mp.grad(lambda x: mp.grad(f)(x) @ np.ones(3))(np.ones(3))
    np.testing.assert_allclose(mp.hvp(f)(np.zeros(3), np.ones(3)), np.zeros(3), atol=0)


def test_nested_jvp_has_no_perturbation_confusion():
    # d/dx [x * d/dy (x + y)] = d/dx [x] = 1 (a confused implementation gives 2).
    def outer(x):
        inner = lambda y: x + y
        _, dy = mp.jvp(inner, (1.0,), (1.0,))
        return x * dy
    _, d = mp.jvp(outer, (1.0,), (1.0,))
    assert d == 1.0
