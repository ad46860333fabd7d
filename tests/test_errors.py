"""Every error type: raised where it belongs, with a message a user can act on; the next call works."""
import math

import numpy as np
import pytest

import mooncake_py as mp


def _ok():
    np.testing.assert_allclose(mp.grad(lambda x: np.sum(x * x))(np.ones(2)), [2.0, 2.0])


def test_missing_rule_names_function_and_shows_decorator():
    with pytest.raises(mp.MissingRuleError) as e:
        mp.grad(lambda x: np.sum(np.unwrap(x)))(np.ones(3))
    msg = str(e.value)
    assert "numpy.unwrap" in msg and "@mp.rrule(np.unwrap)" in msg and "zero_derivative" in msg
    _ok()


def test_non_scalar_output():
    with pytest.raises(mp.OutputTypeError, match="scalar"):
        mp.grad(lambda x: x * 2)(np.ones(3))
    _ok()


def test_integer_output():
    with pytest.raises(mp.OutputTypeError, match="no derivative"):
        mp.grad(lambda x: np.argmax(x))(np.ones(3))


@pytest.mark.parametrize("bad", [np.arange(3), 3, True, np.array(["a"]), "x"])
def test_non_differentiable_inputs(bad):
    with pytest.raises(mp.NonDifferentiableInputError, match="argument 0"):
        mp.grad(lambda x: np.sum(x))(bad)
    _ok()


@pytest.mark.parametrize("f, hint", [
    (lambda x: math.sin(x[0]), "np.sin"),
    (lambda x: np.sum(np.array([x[0], x[1]])), "np.stack"),
    (lambda x: float(x[0]), "float"),
])
def test_tracking_lost(f, hint):
    with pytest.raises(mp.TrackingLostError) as e:
        mp.grad(f)(np.ones(3))
    assert hint in str(e.value)
    _ok()


def test_writing_tracked_into_plain_array_names_the_problem():
    def f(x):
        out = np.zeros(2)
        out[0] = x[0]
        return np.sum(out)
    with pytest.raises((mp.TrackingLostError, ValueError)) as e:
        mp.grad(f)(np.ones(3))
    chain = e.value if isinstance(e.value, mp.TrackingLostError) else e.value.__cause__
    assert isinstance(chain, mp.TrackingLostError) or "tracked value" in str(e.value)
    _ok()


def test_reverse_over_reverse_refused_with_alternatives():
    f = lambda x: np.sum(np.sin(x))
    v = np.ones(3)
    with pytest.raises(mp.ReverseOverReverseError) as e:
        mp.grad(lambda x: np.sum(mp.grad(f)(x) * v))(np.ones(3))
    assert "hvp" in str(e.value) and "hessian" in str(e.value) and "jvp" in str(e.value)
    _ok()


def test_rule_error_in_debug_mode():
    @mp.primitive
    def twice(x):
        return 2 * x

    @mp.rrule(twice)
    def _(x):
        return twice(x), lambda g: (np.sum(g),)  # wrong: forgets the shape
    with mp.Config(debug_mode=True):
        with pytest.raises(mp.RuleError, match="twice"):
            mp.grad(lambda x: np.sum(twice(x)))(np.ones(3))
    _ok()


def test_ufunc_out_into_a_plain_array_is_tracking_lost():
    with pytest.raises(mp.TrackingLostError, match="out="):
        mp.grad(lambda x: np.sum(np.sin(x, out=np.empty(3))))(np.ones(3))
    _ok()


def test_every_error_is_exported_and_catalogued():
    """Each exception type of mooncake_py.errors is public (mp.<Name>), derives from
    MooncakeError, and has a row in the error catalogue of docs/conventions.md."""
    import inspect
    import pathlib
    from mooncake_py import errors
    doc = (pathlib.Path(__file__).parent.parent / "docs" / "conventions.md").read_text()
    types = [c for _, c in inspect.getmembers(errors, inspect.isclass)
             if c.__module__ == errors.__name__ and c is not errors.MooncakeError]
    assert len(types) >= 12
    for c in types:
        assert issubclass(c, mp.MooncakeError), c
        assert getattr(mp, c.__name__) is c, c
        assert f"| `{c.__name__}`" in doc, f"{c.__name__} missing from docs/conventions.md"
