"""has_aux, jacobian over several arguments and containers, dataclass / namedtuple / registered
containers, ravel_pytree, and the one argument order of the prepared-cache functions."""
import collections
import dataclasses

import numpy as np
import pytest

import mooncake_py as mp

rng = np.random.default_rng(3)


def fd_jacobian(f, x, h=1e-6):
    """Central differences of a vector function of a flat vector: (m, n)."""
    cols = []
    for j in range(x.size):
        e = np.zeros_like(x)
        e[j] = h
        cols.append((np.ravel(f(x + e)) - np.ravel(f(x - e))) / (2 * h))
    return np.stack(cols, axis=1)


# --- has_aux ----------------------------------------------------------------------------------
def loss_with_aux(x, w):
    pred = np.tanh(x * w)
    return np.sum(pred ** 2), {"pred": pred, "count": 3, "mean": np.mean(pred)}


def test_grad_and_value_and_grad_with_aux():
    x = rng.standard_normal(4)
    g, aux = mp.grad(loss_with_aux, has_aux=True)(x, 0.7)
    assert type(aux["pred"]) is np.ndarray and aux["count"] == 3
    np.testing.assert_allclose(aux["pred"], np.tanh(0.7 * x))
    assert not isinstance(aux["mean"], mp.TrackedArray)
    plain = lambda x: loss_with_aux(x, 0.7)[0]
    np.testing.assert_allclose(g, mp.grad(plain)(x), rtol=1e-14)
    (y, aux2), (gx, gw) = mp.value_and_grad(loss_with_aux, argnums=(0, 1),
                                            has_aux=True)(x, 0.7)
    assert np.isclose(y, plain(x))
    np.testing.assert_allclose(gx, g)
    h = 1e-6
    assert np.isclose(gw, (loss_with_aux(x, 0.7 + h)[0] - loss_with_aux(x, 0.7 - h)[0]) / (2 * h),
                      rtol=1e-6)


def test_vjp_jvp_hvp_with_aux():
    x, v = rng.standard_normal(4), rng.standard_normal(4)
    f = lambda x: (np.sin(x) * x, np.cos(x))
    y, pb, aux = mp.vjp(f, x, has_aux=True)
    np.testing.assert_allclose(aux, np.cos(x))
    xbar, = pb(v)
    np.testing.assert_allclose(xbar, v * (np.cos(x) * x + np.sin(x)), rtol=1e-14)
    y, dy, aux = mp.jvp(f, (x,), (v,), has_aux=True)
    assert type(aux) is np.ndarray
    np.testing.assert_allclose(dy, v * (np.cos(x) * x + np.sin(x)), rtol=1e-14)
    s = lambda x: (np.sum(x ** 3), x ** 2)
    hv, aux = mp.hvp(s, has_aux=True)(x, v)
    assert type(aux) is np.ndarray
    np.testing.assert_allclose(aux, x ** 2)
    np.testing.assert_allclose(hv, 6 * x * v, rtol=1e-14)


def test_has_aux_requires_a_pair():
    with pytest.raises(mp.OutputTypeError, match="has_aux"):
        mp.grad(lambda x: np.sum(x), has_aux=True)(np.ones(2))
    with pytest.raises(mp.OutputTypeError, match="pair"):
        mp.jvp(lambda x: (x, x, x), (np.ones(2),), (np.ones(2),), has_aux=True)


# --- jacobian ---------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["forward", "reverse", "auto"])
def test_jacobian_tuple_argnums(mode):
    A = rng.standard_normal((3, 4))
    f = lambda x, w, k: np.tanh(A @ x) * w + k
    x, w = rng.standard_normal(4), rng.standard_normal(3)
    Jx, Jw = mp.jacobian(f, mode=mode, argnums=(0, 1))(x, w, 2)
    assert Jx.shape == (3, 4) and Jw.shape == (3, 3)
    np.testing.assert_allclose(Jx, fd_jacobian(lambda x: f(x, w, 2), x), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(Jw, np.diag(np.tanh(A @ x)), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_jacobian_container_input_and_output(mode):
    def f(p):
        return {"y": np.sin(p["w"]) * p["b"], "s": (np.sum(p["w"] ** 2),)}
    p = {"w": rng.standard_normal(3), "b": 1.5, "n": 4}
    J = mp.jacobian(f, mode=mode)(p)
    assert J["y"]["n"] is None and J["s"][0]["n"] is None
    assert J["y"]["w"].shape == (3, 3) and np.shape(J["y"]["b"]) == (3,)
    np.testing.assert_allclose(J["y"]["w"], np.diag(np.cos(p["w"]) * 1.5), atol=1e-15)
    np.testing.assert_allclose(J["y"]["b"], np.sin(p["w"]))
    np.testing.assert_allclose(J["s"][0]["w"], 2 * p["w"])
    assert np.shape(J["s"][0]["w"]) == (3,) and float(J["s"][0]["b"]) == 0.0


def test_jacobian_without_float_leaves_is_named_error():
    with pytest.raises(mp.NonDifferentiableInputError, match="no floating-point leaf"):
        mp.jacobian(lambda p: p[0] * 1.0, argnums=(0,))((1, 2))


# --- containers -------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Layer:
    w: np.ndarray
    b: np.ndarray
    name: str = "dense"


Pair = collections.namedtuple("Pair", "x y")


class Box:
    """A user class registered as a container."""

    def __init__(self, inner, scale):
        self.inner, self.scale = inner, scale


mp.register_pytree_node(Box, lambda b: ((b.inner,), b.scale), lambda s, ch: Box(ch[0], s))


def test_dataclass_gradient_and_hessian():
    layer = Layer(rng.standard_normal((2, 3)), rng.standard_normal(2))
    x = rng.standard_normal(3)
    f = lambda l: np.sum(np.tanh(l.w @ x + l.b) ** 2)
    g = mp.grad(f)(layer)
    assert isinstance(g, Layer) and g.w.shape == (2, 3) and g.name is None
    flat, unravel = mp.ravel_pytree(layer)
    flat_f = lambda v: f(unravel(v))
    gflat = mp.grad(flat_f)(flat)
    np.testing.assert_allclose(np.concatenate([g.w.ravel(), g.b]), gflat, rtol=1e-14)
    H = mp.hessian(f)(layer)
    assert H.shape == (8, 8)
    fd = fd_jacobian(mp.grad(flat_f), flat)
    np.testing.assert_allclose(H, fd, rtol=1e-5, atol=1e-7)
    hv = unravel(H @ np.ones(8))
    assert isinstance(hv, Layer) and hv.b.shape == (2,)


def test_namedtuple_and_registered_class():
    p = Pair(rng.standard_normal(2), 3.0)
    g = mp.grad(lambda p: np.sum(p.x ** 2) * p.y)(p)
    assert isinstance(g, Pair)
    np.testing.assert_allclose(g.x, 2 * p.x * 3.0)
    assert np.isclose(g.y, np.sum(p.x ** 2))
    box = Box({"a": rng.standard_normal(3)}, 2.0)
    gb = mp.grad(lambda b: b.scale * np.sum(np.exp(b.inner["a"])))(box)
    assert isinstance(gb, Box) and gb.scale == 2.0
    np.testing.assert_allclose(gb.inner["a"], 2.0 * np.exp(box.inner["a"]))
    hv = mp.hvp(lambda b: np.sum(b.inner["a"] ** 3))(box, Box({"a": np.ones(3)}, 2.0))
    np.testing.assert_allclose(hv.inner["a"], 6 * box.inner["a"])


def test_register_pytree_node_rejects_bad_input():
    with pytest.raises(TypeError):
        mp.register_pytree_node("Box", lambda b: ((), None), lambda a, c: None)
    with pytest.raises(TypeError):
        mp.register_pytree_node(Box, None, None)


def test_cache_spec_sees_container_structure():
    c = mp.prepare_gradient_cache(lambda l: np.sum(l.w), Layer(np.ones((2, 2)), np.ones(2)))
    with pytest.raises(mp.PreparedCacheSpecError):
        mp.value_and_gradient(c, c.spec.f, Pair(np.ones((2, 2)), np.ones(2)))
    with pytest.raises(mp.PreparedCacheSpecError, match=r"argument 0\.b"):
        mp.value_and_gradient(c, c.spec.f, Layer(np.ones((2, 2)), np.ones(3)))


def test_ravel_pytree_roundtrip_and_dtypes():
    tree = {"a": np.ones((2, 2), dtype=np.float32), "b": [np.arange(3.0), 7], "c": 2.0}
    flat, unravel = mp.ravel_pytree(tree)
    assert flat.dtype == np.float64 and flat.shape == (8,)
    back = unravel(flat)
    assert back["a"].dtype == np.float32 and back["b"][1] == 7
    np.testing.assert_array_equal(back["b"][0], tree["b"][0])
    with pytest.raises(ValueError, match="length 8"):
        unravel(np.ones(5))


# --- one argument order for the prepared caches -----------------------------------------------
def test_value_and_pullback_both_orders():
    f = lambda x, w: np.sin(x) * w
    x, w, ybar = rng.standard_normal(3), 2.0, rng.standard_normal(3)
    c = mp.prepare_pullback_cache(f, x, w)
    y1, cots1 = mp.value_and_pullback(c, f, ybar, x, w)       # consistent order
    y2, cots2 = mp.value_and_pullback(c, ybar, f, x, w)       # the earlier order
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_allclose(cots1[0], ybar * np.cos(x) * w)
    np.testing.assert_allclose(cots1[0], cots2[0])
    with pytest.raises(mp.PreparedCacheSpecError, match="different function"):
        mp.value_and_pullback(c, lambda x, w: x, ybar, x, w)


def test_value_and_derivative_both_orders():
    f = lambda x, w: np.sum(np.exp(x) * w)
    x, v = rng.standard_normal(3), rng.standard_normal(3)
    c = mp.prepare_derivative_cache(f, x, 2.0)
    y1, d1 = mp.value_and_derivative(c, f, (v, None), x, 2.0)     # tangents, then args
    y2, d2 = mp.value_and_derivative(c, f, (x, v), (2.0, None))   # earlier (primal, tangent)
    assert np.isclose(d1, np.sum(np.exp(x) * v * 2.0)) and np.isclose(d1, d2)
    c1 = mp.prepare_derivative_cache(np.sin, x)
    y, d = mp.value_and_derivative(c1, np.sin, v, x)
    np.testing.assert_allclose(d, np.cos(x) * v)
    with pytest.raises(mp.TangentError, match="tuple of 2"):
        mp.value_and_derivative(c, f, v, x, 2.0)


@pytest.mark.parametrize("mode", ["forward", "reverse", "auto"])
def test_jacobian_container_output_of_one_array(mode):
    x = rng.standard_normal(3)
    J = mp.jacobian(lambda x: (np.sin(x), np.sum(x ** 2)), mode=mode)(x)
    np.testing.assert_allclose(J[0], np.diag(np.cos(x)), atol=1e-15)
    np.testing.assert_allclose(J[1], 2 * x)
    with pytest.raises(mp.OutputTypeError, match="no float leaf"):
        mp.jacobian(lambda x: (np.argmax(x),), mode=mode)(x)
