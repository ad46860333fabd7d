"""ndarray methods on tracked and dual values: ``diagonal`` and ``partition`` are
differentiated (checked against finite differences and NumPy's values); ``view``, ``flat``,
``resize``, ``setflags`` and ``byteswap`` raise a MissingRuleError that says what to use
instead (not a bare AttributeError), and the next call works."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.testing import fd_gradient


@pytest.mark.parametrize("offset, axes", [(0, (0, 1)), (1, (0, 1)), (-1, (1, 2)), (0, (2, 0))])
def test_diagonal_method_equals_np_diagonal_and_finite_differences(offset, axes):
    w = np.arange(1.0, 13.0).reshape(2, 2, 3) ** 0.5

    def f(x):
        d = x.diagonal(offset, *axes)
        return np.sum(np.sin(d) * w.ravel()[:d.size].reshape(d.shape))
    x = np.random.default_rng(0).standard_normal((3, 3, 4))
    y, g = mp.value_and_grad(f)(x)
    assert y == f(x)
    np.testing.assert_allclose(g, fd_gradient(f, x), rtol=1e-6, atol=1e-8)
    (yv, yt) = mp.jvp(f, (x,), (np.ones_like(x),))
    np.testing.assert_allclose(yt, np.sum(g), rtol=1e-12)


def test_partition_method_in_place_as_numpy():
    def f(x):
        y = x * 1.0
        y.partition(2)
        return np.sum(y[:3] ** 2) + y[3] * 0.5

    x = np.array([5.0, 1.0, 4.0, 2.0, 3.0, 0.5])
    y, g = mp.value_and_grad(f)(x)
    assert y == f(x)
    np.testing.assert_allclose(g, fd_gradient(f, x), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(mp.hvp(f)(x, np.ones(6)), [0, 2, 0, 2, 0, 2], atol=1e-12)


_MISSING = {
    "view": (lambda x: x.view(), "x.reshape"),
    "flat": (lambda x: x.flat[0], "x.ravel()[i]"),
    "resize": (lambda x: x.resize((2, 2)), "np.pad"),
    "setflags": (lambda x: x.setflags(write=False), "x.copy()"),
    "byteswap": (lambda x: x.byteswap(), "mp.stop_gradient(x)"),
}


@pytest.mark.parametrize("name", sorted(_MISSING))
@pytest.mark.parametrize("mode", ["grad", "jvp"])
def test_missing_methods_raise_a_named_error_with_advice_and_the_next_call_works(name, mode):
    use, advice = _MISSING[name]

    def f(x):
        use(x)
        return np.sum(x)
    x = np.arange(4.0)
    with pytest.raises(mp.MissingRuleError) as info:
        mp.grad(f)(x) if mode == "grad" else mp.jvp(f, (x,), (np.ones(4),))
    msg = str(info.value)
    assert f"'{name}'" in msg and advice in msg
    assert ("TrackedArray" if mode == "grad" else "DualArray") in msg
    assert isinstance(info.value, AttributeError)  # (hasattr probes keep answering False)
    assert mp.grad(lambda x: np.sum(x * x))(x).tolist() == [0.0, 2.0, 4.0, 6.0]
