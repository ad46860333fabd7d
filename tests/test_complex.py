"""Complex numbers (C treated as R², cotangents for Re Σ conj(a)·b): every rule that carries
complex values against finite differences on real and imaginary parts, in reverse, forward and
forward-over-reverse mode; the reported silent zeros; named errors where there is no rule."""
import warnings

import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.testing import test_rule, check_grads

RNG = np.random.default_rng(10)


def c(*shape):
    return RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)


def r(*shape):
    return RNG.standard_normal(shape)


Z = c(3, 4)
W = c(4)
X = r(3, 4)
ZS = c(2, 3, 4)
A = c(3, 3) + 3 * np.eye(3)  # well conditioned
B = c(3, 2)


@pytest.fixture(autouse=True)
def _no_complex_warning():
    """A cast that drops an imaginary part means a derivative was dropped with it."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", np.exceptions.ComplexWarning)
        yield


def fd_grad(f, z, h=1e-6):
    """∂f/∂Re z + i·∂f/∂Im z by central differences, entry by entry."""
    z = np.asarray(z, dtype=complex)
    g = np.zeros_like(z)
    for k in np.ndindex(z.shape):
        e = np.zeros_like(z)
        e[k] = h
        dre = (f(z + e) - f(z - e)) / (2 * h)
        dim = (f(z + 1j * e) - f(z - 1j * e)) / (2 * h)
        g[k] = dre + 1j * dim
    return g


# --- the reported silent zeros --------------------------------------------------------------
def test_imag_of_real_times_complex_is_not_zero():
    g = mp.grad(lambda x: np.sum(np.imag(x * (1 + 2j))))(np.array([1.0, 2.0]))
    np.testing.assert_allclose(g, [2.0, 2.0])
    assert g.dtype == np.float64


def test_abs_of_real_made_complex_grad_jvp_hvp():
    f = lambda x: np.sum(np.abs(x + 1j * x ** 2))  # noqa: E731
    x, v = np.array([1.0, 2.0]), np.array([0.5, -1.0])
    # |x + i x²| = |x|·sqrt(1 + x²): derivative (1 + 2x²)/sqrt(1 + x²) for x > 0
    d1 = (1 + 2 * x ** 2) / np.sqrt(1 + x ** 2)
    np.testing.assert_allclose(mp.grad(f)(x), d1)
    np.testing.assert_allclose(mp.jvp(f, (x,), (v,))[1], d1 @ v)
    d2 = (2 * x ** 3 + 3 * x) / (1 + x ** 2) ** 1.5
    np.testing.assert_allclose(mp.hvp(f)(x, v), d2 * v, rtol=1e-10)


def test_complex_cotangent_to_vjp_and_prepared_pullback():
    f = lambda z: z * z  # noqa: E731
    z, ybar = c(3), c(3)
    y, pb = mp.vjp(f, z)
    got, = pb(ybar)
    np.testing.assert_allclose(got, np.conj(2 * z) * ybar)  # ȳ ↦ conj(f'(z))·ȳ
    cache = mp.prepare_pullback_cache(f, z)
    y2, (got2,) = mp.value_and_pullback(cache, f, ybar, z)
    np.testing.assert_allclose(got2, got)
    # real input, complex output: the cotangent is the real part, in the input's dtype
    x = r(3)
    _, pb = mp.vjp(lambda x: x * (2 - 3j), x)
    gx, = pb(ybar)
    assert gx.dtype == np.float64
    np.testing.assert_allclose(gx, np.real((2 + 3j) * ybar))


# --- conventions ----------------------------------------------------------------------------
def test_gradient_of_real_function_of_complex_input_is_d_re_plus_i_d_im():
    f = lambda z: np.sum(np.abs(z) ** 2 + np.real(z) * np.imag(z) ** 3)  # noqa: E731
    z = c(2, 3)
    g = mp.grad(f)(z)
    assert g.dtype == np.complex128
    np.testing.assert_allclose(g, fd_grad(f, z), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(mp.grad(lambda z: np.sum(np.abs(z) ** 2))(z), 2 * z)


def test_complex64_stays_complex64_and_real_input_dtype_is_kept():
    z = c(4).astype(np.complex64)
    g = mp.grad(lambda z: np.sum(np.abs(np.exp(z))))(z)
    assert g.dtype == np.complex64
    x = r(4).astype(np.float32)
    g = mp.grad(lambda x: np.sum(np.real(x * np.complex64(1 + 2j)) ** 2))(x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, 2 * x, rtol=1e-6)


def test_python_complex_argument():
    g = mp.grad(lambda z: np.real(z * z))(1.0 + 2.0j)
    np.testing.assert_allclose(g, np.conj(2 * (1 + 2j)))


def test_grad_jvp_hvp_agree_and_match_finite_differences():
    f = lambda z: np.real(np.sum(np.sin(z) * np.conj(z)) + np.prod(z[:2]))  # noqa: E731
    z, v = c(4), c(4)
    g = mp.grad(f)(z)
    np.testing.assert_allclose(g, fd_grad(f, z), rtol=1e-6, atol=1e-8)
    _, dy = mp.jvp(f, (z,), (v,))
    np.testing.assert_allclose(dy, np.real(np.vdot(g, v)), rtol=1e-10)  # ⟨∇f, v⟩ = Re Σ conj(g)·v
    hv = mp.hvp(f)(z, v)
    assert hv.dtype == np.complex128
    h = 1e-5
    fd = (mp.grad(f)(z + h * v) - mp.grad(f)(z - h * v)) / (2 * h)
    np.testing.assert_allclose(hv, fd, rtol=1e-6, atol=1e-8)
    # jvp of grad is the same HVP
    np.testing.assert_allclose(mp.jvp(mp.grad(f), (z,), (v,))[1], hv, rtol=1e-10)


def test_hvp_is_the_r2_hessian_on_re_and_im():
    f = lambda z: np.sum(np.abs(z) ** 4) + np.real(z[0] ** 3)  # noqa: E731
    z, v = c(2), c(2)

    def fr(u):  # f on R⁴ = (Re z, Im z)
        return f(u[:2] + 1j * u[2:])
    H = mp.hessian(fr)(np.concatenate([z.real, z.imag]))
    hv = H @ np.concatenate([v.real, v.imag])
    np.testing.assert_allclose(mp.hvp(f)(z, v), hv[:2] + 1j * hv[2:], rtol=1e-10)


# --- every rule that carries complex values, against finite differences ------------------------
def _slogdet(a):
    return np.linalg.slogdet(a)


CASES = [
    (np.add, (Z, W)), (np.add, (X, Z)), (np.subtract, (W, Z)), (np.multiply, (Z, W)),
    (np.multiply, (X, W)), (np.true_divide, (Z, W + 3)), (np.true_divide, (X, W + 3)),
    (np.negative, (Z,)), (np.square, (Z,)), (np.reciprocal, (W + 3,)),
    (np.power, (Z, W)), (np.power, (Z, 3.0)), (np.power, (Z, 2)), (np.power, (np.abs(X) + 1, W)),
    (np.power, (Z, X)), (np.float_power, (Z, W)),
    (np.exp, (Z,)), (np.log, (Z,)), (np.sqrt, (Z,)), (np.expm1, (Z,)), (np.log1p, (Z,)),
    (np.log2, (Z,)), (np.log10, (Z,)), (np.exp2, (Z,)),
    (np.sin, (Z,)), (np.cos, (Z,)), (np.tan, (Z,)), (np.sinh, (Z,)), (np.cosh, (Z,)),
    (np.tanh, (Z,)), (np.arcsin, (0.5 * Z,)), (np.arccos, (0.5 * Z,)), (np.arctan, (0.5 * Z,)),
    (np.arcsinh, (Z,)), (np.arctanh, (0.5 * Z,)),
    (np.abs, (Z,)), (np.absolute, (ZS,)), (np.angle, (Z,)), (lambda z: np.angle(z, deg=True), (Z,)),
    (np.sign, (Z,)), (np.real, (Z,)), (np.imag, (Z,)), (np.conj, (Z,)), (np.conjugate, (Z,)),
    (lambda z: z.real, (Z,)), (lambda z: z.imag, (Z,)), (lambda z: z.conj(), (Z,)),
    (lambda z: z.astype(np.complex128), (Z.astype(np.complex64),)),
    (lambda z: np.real(z).astype(np.complex128), (Z.astype(np.complex64),)),
    (lambda x: x.astype(np.complex128) * (1 - 2j), (X,)),
    (np.sum, (ZS,)), (lambda z: np.sum(z, axis=(0, 2), keepdims=True), (ZS,)),
    (np.mean, (ZS,)), (lambda z: np.mean(z, axis=1), (ZS,)), (np.prod, (Z,)),
    (lambda z: np.prod(z, axis=0), (Z,)), (np.nanprod, (Z,)), (np.add.reduce, (Z,)),
    (np.multiply.accumulate, (Z,)), (np.var, (ZS,)), (lambda z: np.std(z, axis=1, ddof=1), (Z,)),
    (lambda z: np.nanvar(z, axis=0, keepdims=True), (Z,)), (lambda z: np.diff(z, n=2, axis=0), (Z,)),
    (np.trapezoid, (Z,)), (np.polyval, (W, Z)), (np.cross, (c(3), r(3))),
    (lambda a, b: np.linspace(a, b, 4), (1 + 2j, c(2))), (np.cumsum, (W,)), (lambda z: np.cumprod(z, axis=1), (Z,)),
    (np.matmul, (Z, c(4, 2))), (np.matmul, (X, c(4, 2))), (np.matmul, (ZS, W)),
    (lambda a, b: a @ b, (A, B)), (np.dot, (Z, W)), (np.vdot, (W, c(4))),
    (np.vdot, (W, r(4))), (np.vdot, (r(4), W)), (np.inner, (Z, W)), (np.outer, (W, c(3))),
    (np.kron, (c(2, 2), c(2, 3))), (np.trace, (A,)), (np.tensordot, (ZS, c(3, 4))),
    (lambda a, b: np.einsum("ij,jk->ik", a, b), (Z, c(4, 2))),
    (lambda a, b: np.einsum("i,i->", a, b), (W, r(4))),
    (np.linalg.solve, (A, B)), (np.linalg.solve, (A, c(3))), (np.linalg.solve, (A.real, B)),
    (np.linalg.inv, (A,)), (np.linalg.det, (A,)), (_slogdet, (A,)),
    (np.reshape, (Z, (2, 6))), (np.transpose, (ZS,)), (lambda z: z[1:, ::2], (Z,)),
    (lambda z: z[[0, 2, 0]], (Z,)), (lambda a, b: np.concatenate([a, b]), (Z, X)),
    (lambda a, b: np.stack([a, b], axis=-1), (Z, X)),
    (lambda z: np.where(np.real(z) > 0, z, 0), (Z,)),
    (lambda z: np.broadcast_to(z, (2, 4)), (W,)),
]


def _id(case):
    fn = case[0]
    return getattr(fn, "__name__", "f")


@pytest.mark.parametrize("fn, args", CASES, ids=[_id(k) + str(i) for i, k in enumerate(CASES)])
def test_rule_complex(fn, args):
    test_rule(fn, *args, ndirs=2)


def test_test_rule_catches_a_missing_conjugate():
    from mooncake_py.rules.complex import EXPLICIT, declare_complex

    @mp.primitive
    def cube(z):
        return z ** 3

    @mp.rrule(cube)
    def _(z):
        return cube(z), lambda g: (3 * g * z ** 2,)  # the real formula: right only if conjugated
    declare_complex(cube, holomorphic=False)
    try:
        with pytest.raises(AssertionError, match="reverse rule disagrees"):
            test_rule(cube, W)
    finally:
        EXPLICIT.discard(cube)
    declare_complex(cube, holomorphic=True)
    test_rule(cube, W, modes=("reverse", "forward_over_reverse"))


def test_check_grads_on_complex_arguments():
    check_grads(lambda z, x: np.sum(np.abs(z @ x) ** 2), c(2, 3), r(3))


# --- second order through linear algebra ----------------------------------------------------
def test_hvp_through_solve_and_slogdet():
    f = lambda a: np.linalg.slogdet(a)[1] + np.real(np.sum(np.linalg.solve(a, B)))  # noqa: E731
    v = c(3, 3)
    h = 1e-5
    fd = (mp.grad(f)(A + h * v) - mp.grad(f)(A - h * v)) / (2 * h)
    np.testing.assert_allclose(mp.hvp(f)(A, v), fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(mp.grad(f)(A), fd_grad(f, A), rtol=1e-6, atol=1e-8)


# --- forward mode ---------------------------------------------------------------------------
def test_dual_with_complex_primal_and_tangent():
    z, v = c(3), c(3)
    d = np.exp(mp.dual(z, v))
    np.testing.assert_allclose(mp.tangent(d), np.exp(z) * v)  # holomorphic: f'(z)·ż
    d = np.abs(mp.dual(z, v))
    np.testing.assert_allclose(mp.tangent(d), np.real(np.conj(z) * v) / np.abs(z))
    assert mp.tangent(d).dtype == np.float64
    _, t = mp.jvp(lambda z: np.conj(z) * z, (z,), (v[None].repeat(2, 0),), lanes=True)
    np.testing.assert_allclose(t, np.broadcast_to(2 * np.real(np.conj(z) * v), (2, 3)))


def test_writes_into_complex_buffers():
    def f(z):
        y = np.zeros_like(z)
        y[0] = z[1] * 2j
        y[1:] = z[1:] ** 2
        return np.sum(np.abs(y) ** 2)
    z = c(3)
    np.testing.assert_allclose(mp.grad(f)(z), fd_grad(f, z), rtol=1e-6, atol=1e-8)


# --- named errors, and the next call works ----------------------------------------------------
def _ok():
    np.testing.assert_allclose(mp.grad(lambda z: np.sum(np.abs(z) ** 2))(np.array([1j])), [2j])


@pytest.mark.parametrize("f", [
    lambda z: np.sum(np.real(np.maximum(z, 0.5))),
    lambda z: np.real(np.max(z)),
], ids=["maximum", "max"])
def test_functions_without_complex_rules_raise_a_named_error(f):
    z = c(3)
    for run in (lambda: mp.grad(f)(z), lambda: mp.jvp(f, (z,), (z,))):
        with pytest.raises(mp.MissingRuleError, match="complex"):
            run()
    _ok()


def test_real_input_through_unsupported_complex_op_raises():
    with pytest.raises(mp.MissingRuleError, match="np.maximum"):
        mp.grad(lambda x: np.sum(np.real(np.maximum(x * 1j, 0.5))))(r(3))
    _ok()


def test_grad_of_complex_output_is_an_output_type_error():
    with pytest.raises(mp.OutputTypeError, match="np.real"):
        mp.grad(lambda z: np.sum(z * z))(c(3))
    _ok()


def test_complex_cotangent_for_a_real_output_is_refused():
    _, pb = mp.vjp(lambda z: np.abs(z), c(3))
    with pytest.raises(mp.TangentError, match="real"):
        pb(c(3))
    _ok()


def test_complex_tangent_for_a_real_primal_is_refused():
    with pytest.raises(mp.TangentError):
        mp.jvp(lambda x: x * 2, (r(3),), (c(3),))


def test_hessian_of_complex_input_points_to_hvp():
    with pytest.raises(mp.NonDifferentiableInputError, match="hvp"):
        mp.hessian(lambda z: np.sum(np.abs(z) ** 2))(c(2))
    _ok()


def test_object_dtype_result_of_a_rule_is_refused():
    @mp.primitive
    def boxed(x):
        return x.astype(object)

    @mp.rrule(boxed)
    def _(x):
        return boxed(x), lambda g: (g,)
    with pytest.raises(mp.MissingRuleError, match="object"):
        mp.grad(lambda x: np.sum(boxed(x)))(r(2))
    _ok()


def test_debug_mode_accepts_complex_cotangents_of_complex_inputs(debug_mode):
    f = lambda z, x: np.sum(np.abs(z * x + np.exp(z)) ** 2)  # noqa: E731
    z, x = c(3), r(3)
    gz, gx = mp.grad(f, argnums=(0, 1))(z, x)
    assert gz.dtype == np.complex128 and gx.dtype == np.float64
    np.testing.assert_allclose(gz, fd_grad(lambda u: f(u, x), z), rtol=1e-6, atol=1e-8)


# --- custom rules: cotangent shapes are checked on every call --------------------------------
def _custom(pullback):
    @mp.primitive
    def twice(x):
        return 2 * x

    @mp.rrule(twice)
    def _(x):
        return twice(x), lambda g: pullback(g, x)
    return twice


def test_custom_rule_cotangent_broadcast_is_summed_back():
    f = _custom(lambda g, x: (2 * np.broadcast_to(g, (3,) + np.shape(x)),))
    np.testing.assert_allclose(mp.grad(lambda x: np.sum(f(x)))(np.ones(2)), [6.0, 6.0])


@pytest.mark.parametrize("pullback, match", [
    (lambda g, x: (np.ones(5),), "shape"),
    (lambda g, x: 2 * g, "tuple"),
    (lambda g, x: (2 * g + 0j,), "complex cotangent"),
], ids=["shape", "structure", "complex"])
def test_custom_rule_with_wrong_cotangent_raises_rule_error(pullback, match):
    f = _custom(pullback)
    with pytest.raises(mp.RuleError, match=match):
        mp.grad(lambda x: np.sum(f(x)))(np.ones(2))
    _ok()


# --- jacobian -------------------------------------------------------------------------------
def test_jacobian_of_complex_output_agrees_in_both_modes():
    x = r(3)
    f = lambda x: np.exp(1j * x[:2]) * x[1:]  # noqa: E731
    jf = mp.jacobian(f, mode="forward")(x)
    np.testing.assert_allclose(mp.jacobian(f, mode="reverse")(x), jf)
    h = 1e-6
    fd = np.stack([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(3)], axis=-1)
    np.testing.assert_allclose(jf, fd, rtol=1e-7, atol=1e-9)


def test_jacobian_of_complex_input_points_to_jvp_and_vjp():
    with pytest.raises(mp.NonDifferentiableInputError, match="jvp"):
        mp.jacobian(lambda z: np.conj(z))(c(2))


def test_large_complex_arrays_take_the_numpy_path_of_the_elementwise_layer():
    # above KERNEL_MIN_SIZE real arrays use fused numba kernels; complex ones must not
    from mooncake_py.dual.elementwise import KERNEL_MIN_SIZE
    n = KERNEL_MIN_SIZE + 8
    z = 0.3 + 0.2j + np.linspace(0, 1, n) * (1 + 1j)
    v = np.full(n, 1 - 1j)
    f = lambda z: np.sum(np.abs(np.sin(z) * np.exp(z)) ** 2)  # noqa: E731
    h = 1e-5
    fd = (mp.grad(f)(z + h * v) - mp.grad(f)(z - h * v)) / (2 * h)
    np.testing.assert_allclose(mp.hvp(f)(z, v), fd, rtol=1e-6, atol=1e-6)


def test_complex_buffer_made_from_real_values_is_checked_too():
    def f(x):
        b = np.zeros(2, dtype=complex, like=x)
        b[0], b[1] = x[0], x[1]
        return np.real(np.max(b))
    x = np.array([1.0, 2.0])
    with pytest.raises(mp.MissingRuleError, match="max"):
        mp.grad(f)(x)
    with pytest.raises(mp.MissingRuleError, match="max"):
        mp.jvp(f, (x,), (x,))
    g = lambda x: np.sum(np.abs(np.fft.fft(np.zeros(2, dtype=complex, like=x) + x)) ** 2)  # noqa
    np.testing.assert_allclose(mp.grad(g)(x), 4 * x)


def test_complex_device_arrays_take_the_composition_path():
    """On a (stand-in) CuPy array, complex values never reach the generated kernels."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu"))
    import fake_device
    xp = fake_device.module()
    z0, v0 = c(50), c(50)
    f = lambda z: np.sum(np.abs(np.sin(z) * np.exp(z)) ** 2)  # noqa: E731
    hv = mp.hvp(f)(xp.asarray(z0), xp.asarray(v0))
    assert type(hv) is xp.ndarray and hv.dtype == np.complex128
    np.testing.assert_allclose(xp.asnumpy(hv), mp.hvp(f)(z0, v0), rtol=1e-12)


def test_custom_frule_with_complex_tangent_for_real_output_raises():
    @mp.primitive
    def half(x):
        return x / 2

    @mp.frule(half)
    def _(primals, tangents):
        return half(primals[0]), tangents[0] / 2 + 0j
    with pytest.raises(mp.RuleError, match="complex tangent"):
        mp.jvp(half, (r(2),), (r(2),))
    np.testing.assert_allclose(mp.jvp(lambda x: x * 2, (np.ones(2),), (np.ones(2),))[1], [2, 2])


def test_object_dtype_result_of_a_frule_is_refused():
    @mp.primitive
    def boxed(x):
        return x.astype(object)

    @mp.frule(boxed)
    def _(primals, tangents):
        return boxed(primals[0]), tangents[0]
    with pytest.raises(mp.MissingRuleError, match="object"):
        mp.jvp(boxed, (r(2),), (r(2),))


def test_large_real_input_with_complex_constants_skips_the_fused_kernels():
    from mooncake_py.dual.elementwise import KERNEL_MIN_SIZE
    n = KERNEL_MIN_SIZE + 8
    x, v = np.linspace(0.5, 2, n), np.cos(np.arange(n))
    f = lambda x: np.sum(np.abs(x * (1 + 2j) + 1j * x ** 2) ** 1.5)  # noqa: E731
    h = 1e-5
    fd = (mp.grad(f)(x + h * v) - mp.grad(f)(x - h * v)) / (2 * h)
    np.testing.assert_allclose(mp.hvp(f)(x, v), fd, rtol=1e-6, atol=1e-6)


def test_hvp_with_lanes_of_complex_directions():
    z, V = c(3), c(4, 3)
    f = lambda z: np.sum(np.abs(z) ** 4) + np.real(np.sum(np.fft.fft(z) ** 3)) + np.angle(z[0])  # noqa
    H = mp.hvp(f, lanes=True)(z, V)
    np.testing.assert_allclose(H, np.stack([mp.hvp(f)(z, v) for v in V]), rtol=1e-12)
    h = 1e-5
    fd = (mp.grad(f)(z + h * V[1]) - mp.grad(f)(z - h * V[1])) / (2 * h)
    np.testing.assert_allclose(H[1], fd, rtol=1e-6, atol=1e-7)
