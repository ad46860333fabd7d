"""Forward-mode public API: jvp, prepared derivative caches, jacobian; bad input; and the forward
checks test_rule offers rule authors."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.errors import NonDifferentiableInputError, OutputTypeError, PreparedCacheSpecError, TangentError, TrackingLostError
from mooncake_py.transforms.forward import jacobian, jvp, prepare_derivative_cache, value_and_derivative
from mooncake_py.rules.registry import frule, primitive, rrule
from mooncake_py.testing import test_rule


# --- jvp ----------------------------------------------------------------------------------------
def test_jvp_matches_closed_form():
    x, v = np.linspace(-1, 1, 4), np.arange(4.0)
    y, dy = jvp(lambda x: np.sin(x) * x, (x,), (v,))
    np.testing.assert_allclose(y, np.sin(x) * x)
    np.testing.assert_allclose(dy, (np.cos(x) * x + np.sin(x)) * v, rtol=1e-14)


def test_jvp_nested_structures_constants_and_outputs():
    def f(p, data, n):
        out = {"a": p["w"] * data[0] + p["b"][0], "n": n * 2, "s": np.sum(data[0])}
        return out, (p["b"][0] * 2.0,)
    p = {"w": np.array([1.0, 2.0]), "b": [3.0, 4]}
    data = (np.array([5.0, 6.0]), 7.0)
    tp = {"w": np.array([1.0, 0.0]), "b": [1.0, None]}
    (y, (z,)), (dy, (dz,)) = jvp(f, (p, data, 3), (tp, None, None))
    np.testing.assert_allclose(dy["a"], [6.0, 1.0])
    assert dy["n"] is None and y["n"] == 6
    assert dy["s"] == 0.0 and dz == 2.0 and isinstance(dz, np.float64)


def test_jvp_lanes():
    x = np.array([0.5, 1.0, 2.0])
    V = np.eye(3)[:2]
    y, dY = jvp(lambda x: np.exp(x) * x[::-1], (x,), (V,), lanes=True)
    assert dY.shape == (2, 3)
    for l in range(2):
        np.testing.assert_allclose(dY[l], jvp(lambda x: np.exp(x) * x[::-1], (x,), (V[l],))[1])


def test_jvp_float32_stays_float32_and_python_floats():
    x = np.linspace(0, 1, 3, dtype=np.float32)
    y, dy = jvp(lambda x: np.tanh(x) * 2.0, (x,), (np.ones(3, np.float32),))
    assert y.dtype == dy.dtype == np.float32
    y, dy = jvp(lambda a, b: a * b, (2.0, 3.0), (1.0, 0.0))
    assert dy == 3.0


def test_jvp_of_a_constant_output_gives_zeros():
    y, dy = jvp(lambda x: np.ones(2), (np.ones(3),), (np.ones(3),))
    np.testing.assert_array_equal(dy, np.zeros(2))
    y, dY = jvp(lambda x: np.ones(2), (np.ones(3),), (np.ones((4, 3)),), lanes=True)
    assert dY.shape == (4, 2)


@pytest.mark.parametrize("primals,tangents,lanes,err,match", [
    ((np.ones(3),), (np.ones(4),), False, TangentError, r"shape \(4,\); it must have"),
    ((np.ones(3),), (np.ones((2, 3)),), False, TangentError, "lanes=True"),
    ((np.ones(3, np.float32),), (np.ones(3),), False, TangentError, "astype"),
    ((np.arange(3),), (np.ones(3),), False, NonDifferentiableInputError, "pass None"),
    ((np.ones(3), np.ones(2)), (np.ones((2, 3)), np.ones((3, 2))), True, TangentError, "k = 2"),
    ((np.ones(3),), (np.ones(3), np.ones(3)), False, TangentError, "tangent"),
    (({"a": np.ones(2)},), ({"b": np.ones(2)},), False, TangentError, "structure"),
    ((np.ones(3),), (None,), True, TangentError, "every tangent is None"),
])
def test_jvp_bad_input(primals, tangents, lanes, err, match):
    with pytest.raises(err, match=match):
        jvp(lambda *a: a[0], primals, tangents, lanes=lanes)


def test_jvp_needs_tuples():
    with pytest.raises(TypeError, match=r"jvp\(f, \(x,\), \(v,\)\)"):
        jvp(np.sin, np.ones(2), np.ones(2))


def test_tracking_lost_inside_jvp():
    with pytest.raises(TrackingLostError):
        jvp(lambda x: np.array([float(x[0])]), (np.ones(2),), (np.ones(2),))


# --- prepared caches ------------------------------------------------------------------------------
def _f(x, w):
    return np.tanh(x * w["scale"])


def test_prepared_derivative_cache_reuses_and_validates():
    x, w = np.linspace(-1, 1, 5), {"scale": 2.0}
    c = prepare_derivative_cache(_f, x, w)
    for s in (1.0, 3.0):
        y, dy = value_and_derivative(c, _f, (x * s, np.ones(5)), (w, None))
        want_y, want_dy = jvp(_f, (x * s, w), (np.ones(5), None))
        np.testing.assert_array_equal(y, want_y)
        np.testing.assert_array_equal(dy, want_dy)


@pytest.mark.parametrize("call,match", [
    (lambda c: value_and_derivative(c, lambda x, w: x, (np.ones(5), np.ones(5)), ({}, None)),
     "prepared for"),
    (lambda c: value_and_derivative(c, _f, (np.ones(6), np.ones(6)), ({"scale": 2.0}, None)),
     r"argument 0 is a numpy.ndarray of shape \(6,\)"),
    (lambda c: value_and_derivative(c, _f, (np.ones(5, np.float32), np.ones(5, np.float32)),
                                    ({"scale": 2.0}, None)), "dtype float32"),
    (lambda c: value_and_derivative(c, _f, (np.ones(5), np.ones(5)),
                                    ({"scale": 2.0, "b": 1}, None)),
     "structure"),
    (lambda c: value_and_derivative(c, _f, (np.ones(5), np.ones(5))), "2 argument"),
    (lambda c: value_and_derivative(c, _f, (np.ones(5), np.ones(5)), ({"scale": np.ones(1)}, None)),
     r"\['scale'\] is a numpy.ndarray"),
])
def test_prepared_derivative_cache_errors_say_what_differs(call, match):
    c = prepare_derivative_cache(_f, np.zeros(5), {"scale": 2.0})
    with pytest.raises(PreparedCacheSpecError, match=match):
        call(c)


def test_prepared_derivative_cache_with_lanes():
    c = prepare_derivative_cache(np.sin, np.zeros(3), lanes=2)
    y, dY = value_and_derivative(c, np.sin, (np.zeros(3), np.ones((2, 3))))
    np.testing.assert_array_equal(dY, np.ones((2, 3)))
    with pytest.raises(PreparedCacheSpecError, match="lanes=2"):
        value_and_derivative(c, np.sin, (np.zeros(3), np.ones((3, 3))))


# --- jacobian -----------------------------------------------------------------------------------
def _g(x):
    return np.concatenate([np.sin(x) * x[::-1], np.reshape(np.sum(x ** 2), (1,))])


def _jac_g(x):
    n = len(x)
    J = np.diag(np.cos(x) * x[::-1]) + np.diag(np.sin(x))[:, ::-1]
    return np.vstack([J, 2 * x[None, :]])


@pytest.mark.parametrize("mode", ["forward", "reverse", "auto"])
@pytest.mark.parametrize("chunk", [None, 1, 2, 100])
def test_jacobian_modes_agree_with_closed_form(mode, chunk):
    x = np.linspace(-1, 1, 5)
    np.testing.assert_allclose(jacobian(_g, mode=mode, chunk_size=chunk)(x), _jac_g(x),
                               rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_jacobian_shapes(mode):
    x = np.linspace(0.1, 1, 6).reshape(2, 3)
    J = jacobian(lambda x: np.tanh(x).T, mode=mode)(x)
    assert J.shape == (3, 2, 2, 3)
    t = np.tanh(x)
    for i in range(3):
        for j in range(2):
            want = np.zeros((2, 3))
            want[j, i] = 1 - t[j, i] ** 2
            np.testing.assert_allclose(J[i, j], want, rtol=1e-14)
    assert jacobian(lambda x: np.sum(x ** 2), mode=mode)(x).shape == (2, 3)
    assert jacobian(lambda s: np.stack([s, 2 * s]), mode=mode)(1.5).tolist() == [1.0, 2.0]


def test_jacobian_uses_config_chunk_size_and_argnums():
    x = np.linspace(-1, 1, 5)
    with mp.Config(chunk_size=2):
        J = jacobian(lambda a, b: _g(b) * a, mode="forward", argnums=1)(2.0, x)
    np.testing.assert_allclose(J, 2.0 * _jac_g(x), rtol=1e-13, atol=1e-15)


def test_jacobian_errors():
    with pytest.raises(NonDifferentiableInputError):
        jacobian(np.sin)(np.arange(3))
    with pytest.raises(OutputTypeError):  # containers are fine, but not without float leaves
        jacobian(lambda x: (x > 0, np.argmax(x)), mode="forward")(np.ones(2))
    with pytest.raises(ValueError, match="mode"):
        jacobian(np.sin, mode="sideways")


# --- forward checks for rule authors ------------------------------------------------------------
def test_test_rule_forward_catches_a_wrong_frule():
    @primitive
    def cube(x):
        return x ** 3

    @rrule(cube)
    def _(x):
        return cube(x), lambda g: (3 * g * x ** 2,)

    @frule(cube)
    def _(primals, tangents):
        (x,), (dx,) = primals, tangents
        return cube(x), 2 * x ** 2 * dx  # wrong factor
    test_rule(cube, np.linspace(1, 2, 3), modes=("reverse",))  # reverse only: fine
    with pytest.raises(AssertionError, match="forward rule disagrees"):
        test_rule(cube, np.linspace(1, 2, 3), modes=("reverse", "forward"))


def test_test_rule_catches_an_inconsistent_pair():
    @primitive
    def scale(x):
        return 2.0 * x

    @rrule(scale)
    def _(x):
        return scale(x), lambda g: (2.0 * g,)

    @frule(scale)
    def _(primals, tangents):
        return scale(primals[0]), 2.0 * tangents[0] + 1e-3
    with pytest.raises(AssertionError):
        test_rule(scale, np.linspace(1, 2, 3), modes=("reverse", "forward"))


def test_test_rule_forward_over_reverse_catches_a_non_numpy_pullback():
    @primitive
    def sq(x):
        return x * x

    @rrule(sq)
    def _(x):
        return x * x, lambda g: (2 * g * np.asarray(x),)  # drops to a plain array
    test_rule(sq, np.linspace(1, 2, 3), modes=("reverse", "forward"))
    with pytest.raises((AssertionError, TrackingLostError)):
        test_rule(sq, np.linspace(1, 2, 3), modes=("forward_over_reverse",))


def test_test_rule_rejects_unknown_modes():
    with pytest.raises(ValueError, match="unknown mode"):
        test_rule(np.sin, np.ones(2), modes=("sideways",))
