"""Bad inputs get named errors that say what to do; the next call works after each one."""
import pickle

import numpy as np
import pytest

import mooncake_py as mp

pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix

def f(x):
    return np.sum(np.sin(x) * x ** 2)


class FakeTensor:
    """Stands in for a torch.Tensor: converts to NumPy, but is no NumPy array and its dtype is
    no NumPy dtype."""
    class _DType:
        is_floating_point = True

    dtype = _DType()

    def __init__(self, a):
        self._a = np.asarray(a, dtype=float)
        self.shape = self._a.shape

    def __array__(self, dtype=None, copy=None):
        return self._a


def _calls(x):
    """Every entry point, on argument x."""
    v = np.ones(2)
    return {
        "grad": lambda: mp.grad(f)(x),
        "value_and_grad": lambda: mp.value_and_grad(f)(x),
        "vjp": lambda: mp.vjp(f, x)[1](1.0),
        "jvp": lambda: mp.jvp(f, (x,), (v,)),
        "hvp": lambda: mp.hvp(f)(x, v),
        "hessian": lambda: mp.hessian(f)(x),
        "jacobian": lambda: mp.jacobian(np.sin)(x),
    }


def _works():
    np.testing.assert_allclose(mp.grad(f)(np.ones(2)), np.cos(1) + 2 * np.sin(1))


@pytest.mark.parametrize("entry", list(_calls(None)))
def test_foreign_array_is_named_and_says_convert(entry):
    with pytest.raises(mp.NonDifferentiableInputError, match="np.asarray"):
        _calls(FakeTensor([1.0, 2.0]))[entry]()
    _works()


def test_real_torch_tensor():
    torch = pytest.importorskip("torch")
    with pytest.raises(mp.NonDifferentiableInputError, match="torch"):
        mp.grad(f)(torch.ones(2, dtype=torch.float64))
    _works()


@pytest.mark.parametrize("entry", list(_calls(None)))
def test_np_matrix_is_named(entry):
    with pytest.raises(mp.NonDifferentiableInputError, match="np.matrix"):
        _calls(np.matrix([[1.0, 2.0]]))[entry]()
    _works()


def test_np_matrix_inside_a_container_is_named():
    with pytest.raises(mp.NonDifferentiableInputError, match="np.matrix"):
        mp.grad(lambda d: np.sum(np.asarray(d["w"])))({"w": np.matrix([[1.0]])})


@pytest.mark.parametrize("mode", ["auto", "forward", "reverse"])
def test_jacobian_of_an_empty_array_is_empty(mode):
    J = mp.jacobian(lambda x: np.sum(x) * np.ones(3), mode=mode)(np.zeros(0))
    assert J.shape == (3, 0)
    J = mp.jacobian(lambda x: 2 * x, mode=mode)(np.zeros((0, 2)))
    assert J.shape == (0, 2, 0, 2)
    # containers and tuple argnums: the empty leaf gets an empty block, the others their own
    Jx, Jw = mp.jacobian(lambda x, w: np.sum(x) * w + w ** 2, argnums=(0, 1),
                         mode=mode)(np.zeros(0), np.array([1.0, 2.0]))
    assert Jx.shape == (2, 0)
    np.testing.assert_allclose(Jw, np.diag([2.0, 4.0]))
    assert mp.jacobian(lambda d: 2 * d["a"], mode=mode)({"a": np.zeros(0)})["a"].shape == (0, 0)
    with pytest.raises(mp.NonDifferentiableInputError, match="no floating-point leaf"):
        mp.jacobian(lambda d: d["n"] * 1.0, mode=mode)({"n": np.arange(2)})


def test_hvp_without_v():
    with pytest.raises(mp.ArgumentError, match="direction v"):
        mp.hvp(f)(np.ones(2))
    with pytest.raises(mp.ArgumentError, match="direction v"):
        mp.hvp(f)()
    _works()


BAD_ARGNUMS = ["a", 1.0, None, (0, "b"), True, 3, -3, (0, 5)]


@pytest.mark.parametrize("argnums", BAD_ARGNUMS, ids=repr)
@pytest.mark.parametrize("transform", [mp.grad, mp.value_and_grad, mp.hessian, mp.jacobian])
def test_bad_argnums(transform, argnums):
    g = lambda x, y: np.sum(x * y)
    with pytest.raises(mp.ArgumentError, match="argnums"):
        transform(g, argnums=argnums)(np.ones(2), np.ones(2))
    with pytest.raises(TypeError):  # still a TypeError, as before it was named
        transform(g, argnums=argnums)(np.ones(2), np.ones(2))
    _works()


def test_bad_argnums_in_hvp():
    with pytest.raises(mp.ArgumentError, match="argnums"):
        mp.hvp(f, argnums="a")(np.ones(2), np.ones(2))
    with pytest.raises(mp.ArgumentError, match="valid positions"):
        mp.hvp(f, argnums=2)(np.ones(2), np.ones(2))


def _prepared():
    x = np.ones(2)
    return {
        "gradient": mp.prepare_gradient_cache(f, x),
        "pullback": mp.prepare_pullback_cache(f, x),
        "derivative": mp.prepare_derivative_cache(f, x),
        "hvp": mp.prepare_hvp_cache(f, x),
        "hessian": mp.prepare_hessian_cache(f, x),
    }


USES = {
    "gradient": lambda c: mp.value_and_gradient(c, f, np.ones(2)),
    "pullback": lambda c: mp.value_and_pullback(c, f, 1.0, np.ones(2)),
    "derivative": lambda c: mp.value_and_derivative(c, f, np.ones(2), np.ones(2)),
    "hvp": lambda c: mp.value_and_hvp(c, f, np.ones(2), np.ones(2)),
    "hessian": lambda c: mp.value_gradient_and_hessian(c, f, np.ones(2)),
}


@pytest.mark.parametrize("kind", list(USES))
def test_wrong_cache_object(kind):
    caches = _prepared()
    others = [c for k, c in caches.items() if k != kind] + [None, object(), "cache"]
    for wrong in others:
        with pytest.raises(mp.PreparedCacheSpecError, match=f"prepare_{kind}_cache"):
            USES[kind](wrong)
    USES[kind](caches[kind])  # and the right one still works


def test_jvp_needs_tuples():
    for primals, tangents in [(np.ones(2), np.ones(2)), (1.0, 1.0), ([1.0], 1.0)]:
        with pytest.raises(mp.ArgumentError, match="tuples"):
            mp.jvp(f, primals, tangents)
    _works()


# --- values escaping the call that made them -----------------------------------------------
def _saving(store, transform="grad"):
    def g(x):
        store.append(x * 1.0)
        return np.sum(x ** 2)
    x, v = np.ones(2), np.ones(2)
    {"grad": lambda: mp.grad(g)(x), "hvp": lambda: mp.hvp(g)(x, v),
     "hessian": lambda: mp.hessian(g)(x), "vjp": lambda: mp.vjp(g, x),
     "jvp": lambda: mp.jvp(g, (x,), (v,))}[transform]()
    return store[0]


@pytest.mark.parametrize("transform", ["grad", "hvp", "hessian", "vjp", "jvp"])
def test_escaped_value_reused_in_another_grad(transform):
    leaked = _saving([], transform)
    with pytest.raises(mp.EscapedValueError, match="outlived"):
        mp.grad(lambda y: np.sum(leaked * y))(np.ones(2))
    with pytest.raises(mp.TrackingLostError):  # EscapedValueError is a TrackingLostError
        np.sum(leaked * 2.0)
    _works()


def test_escaped_value_is_never_returned_as_a_gradient():
    leaked = _saving([], "jvp")
    with pytest.raises(mp.EscapedValueError):
        mp.grad(lambda y: np.sum(leaked * y))(np.ones(2))
    leaked = _saving([], "grad")
    with pytest.raises(mp.EscapedValueError):
        leaked[0] = 1.0


def test_vjp_pullback_still_sweeps_after_recording_closed():
    def g(x):
        y = x * 1.0
        y[0] = y[1] ** 2  # a write: the sweep restores and views buffers again
        return y
    y, pb = mp.vjp(g, np.array([1.0, 3.0]))
    for _ in range(2):
        gx, = pb(np.ones(2))
        np.testing.assert_allclose(gx, [0.0, 7.0])


def test_stop_gradient_is_the_way_to_save_a_value():
    store = []

    def g(x):
        store.append(mp.stop_gradient(x))
        return np.sum(x ** 2)
    mp.grad(g)(np.ones(2))
    np.testing.assert_allclose(mp.grad(lambda y: np.sum(store[0] * y))(np.ones(2)), [1.0, 1.0])


# --- deep view chains, third order ---------------------------------------------------------
def test_deep_view_chain_after_a_write():
    def g(x):
        y = x * 1.0
        v = y
        for _ in range(2000):
            v = v[1:] if v.shape[0] > 1 and _ % 1000 == 999 else v[:]
        y[1] = 3.0 * y[0]  # every view in the chain must see this write
        return np.sum(v ** 2)
    x = np.array([1.0, 2.0, 3.0, 4.0])
    # v = y[2:] = [x2, x3] after the two slicings; the write does not reach it
    np.testing.assert_allclose(mp.grad(g)(x), [0, 0, 2 * x[2], 2 * x[3]])

    def h(x):
        y = x * 1.0
        v = y
        for _ in range(2000):
            v = v[:]
        y[0] = 3.0 * y[1]
        return np.sum(v ** 2)
    np.testing.assert_allclose(mp.grad(h)(x), [0, 2 * x[1] + 18 * x[1], 2 * x[2], 2 * x[3]])


def test_jvp_of_hessian_is_the_third_derivative_contraction():
    def g(x):
        return np.sum(np.sin(x) * x ** 3) + x[0] * x[1] ** 2 * x[2]
    rng = np.random.default_rng(0)
    x, v = rng.standard_normal(3), rng.standard_normal(3)
    H, dH = mp.jvp(mp.hessian(g), (x,), (v,))
    np.testing.assert_allclose(H, mp.hessian(g)(x), rtol=1e-13)
    h = 1e-5
    fd = (mp.hessian(g)(x + h * v) - mp.hessian(g)(x - h * v)) / (2 * h)
    np.testing.assert_allclose(dH, fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(dH, dH.T, rtol=1e-13)
    # chunked rows (several sweeps joined) give the same
    with mp.Config(chunk_size=2):
        _, dH2 = mp.jvp(mp.hessian(g), (x,), (v,))
    np.testing.assert_allclose(dH2, dH, rtol=1e-13)


def test_errors_pickle_and_are_catchable_by_their_bases():
    for e in (mp.ArgumentError("m"), mp.EscapedValueError("m")):
        assert type(pickle.loads(pickle.dumps(e))) is type(e)
    assert issubclass(mp.ArgumentError, TypeError)
    assert issubclass(mp.EscapedValueError, mp.TrackingLostError)
