"""Errors users met raw: each now raises the named error,
or works, in grad, hvp and jvp."""
import pickle
import warnings

import numpy as np
import pytest

import mooncake_py as mp

X = np.array([0.5, 2.0, 0.05])
MODES = {
    "grad": lambda f: mp.grad(f)(X),
    "hvp": lambda f: mp.hvp(f)(X, np.ones(3)),
    "jvp": lambda f: mp.jvp(f, (X,), (np.ones(3),)),
}


def _scalar_into_zeros(x):
    y = np.zeros(3)
    y[0] = x[0]
    return np.sum(y)


def _squares_into_empty(x):
    y = np.empty(3)
    for i in range(3):
        y[i] = x[i] ** 2
    return np.sum(y)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("f", [_scalar_into_zeros, _squares_into_empty])
def test_scalar_written_into_plain_array_names_the_fix(f, mode):
    # NumPy re-raises the conversion's error as "ValueError: setting an array element with a
    # sequence"; the transformation raises the TrackingLostError behind it
    with pytest.raises(mp.TrackingLostError, match="zeros_like") as info:
        MODES[mode](f)
    assert "_scalar_into_zeros" in str(info.traceback[-1].frame.code.name) or \
        "_squares_into_empty" in str(info.traceback[-1].frame.code.name)  # the user's line


def test_the_fix_works():
    def f(x):
        y = np.zeros_like(x)
        y[0] = x[0] ** 2
        return np.sum(y)
    np.testing.assert_allclose(mp.grad(f)(X), [1.0, 0.0, 0.0])


@pytest.mark.parametrize("mode", MODES)
def test_tracked_value_reaching_scipy_conversion_raises_the_named_error(mode):
    scipy_optimize = pytest.importorskip("scipy.optimize")

    def f(x):  # brentq's C code calls float() on f's result and ignores the failure
        r = scipy_optimize.brentq(lambda t: t - x[0], -10, 10)
        return r * np.sum(x)
    with pytest.raises(mp.TrackingLostError, match="converted to a Python float"):
        MODES[mode](f)


@pytest.mark.parametrize("mode", MODES)
def test_a_lost_error_cleared_before_a_bare_error_still_surfaces(mode):
    # as C code that ignores a failed conversion, after which a garbage collection clears the
    # pending error and the C code raises its own error, with nothing chained to ours
    def f(x):
        try:
            float(x[0])
        except mp.TrackingLostError:
            pass
        raise ValueError("f(a) and f(b) must have different signs")
    with pytest.raises(mp.TrackingLostError, match="converted to a Python float"):
        MODES[mode](f)


def test_unrelated_value_errors_pass_through():
    def f(x):
        raise ValueError("setting an array element with a sequence.")
    with pytest.raises(ValueError, match="setting an array element"):
        mp.grad(f)(X)


@pytest.mark.parametrize("mode", MODES)
def test_pickling_a_live_value_raises_a_named_error(mode):
    def f(x):
        pickle.dumps(np.sin(x))
        return np.sum(x)
    with pytest.raises(mp.TrackingLostError, match="stop_gradient"):
        MODES[mode](f)


def _sum_sin(x):
    return np.sum(np.sin(x))


def test_values_outside_a_transformation_still_pickle():
    # prepared caches hold duals and tracked values whose transformation has returned
    for prepare in (mp.prepare_hvp_cache, mp.prepare_gradient_cache):
        back = pickle.loads(pickle.dumps(prepare(_sum_sin, X)))
        assert back is not None
    back = pickle.loads(pickle.dumps(mp.prepare_hvp_cache(_sum_sin, X)))
    np.testing.assert_allclose(mp.value_and_hvp(back, _sum_sin, np.ones(3), X)[2], -np.sin(X))


@pytest.mark.parametrize("mode", MODES)
def test_clip_with_keyword_bounds(mode):
    f = lambda x: np.sum(np.clip(x, a_min=0.1, a_max=1.1) ** 2)
    g = lambda x: np.sum(np.clip(x, 0.1, 1.1) ** 2)
    np.testing.assert_allclose(np.asarray(MODES[mode](f), dtype=object).tolist()
                               if mode == "jvp" else MODES[mode](f),
                               np.asarray(MODES[mode](g), dtype=object).tolist()
                               if mode == "jvp" else MODES[mode](g))


@pytest.mark.parametrize("kw", [dict(a_min=0.1, a_max=1.1), dict(a_min=None, a_max=1.1),
                                dict(a_min=0.1, a_max=None),
                                dict(min=0.1, max=1.1)])
def test_clip_keywords_match_finite_differences(kw):
    from mooncake_py.testing import test_rule
    if "min" in kw and np.lib.NumpyVersion(np.__version__) < "2.1.0":
        pytest.skip("np.clip's min/max keywords are NumPy >= 2.1")
    test_rule(np.clip, np.array([0.5, 2.0, 0.05, -1.0]), **kw)


@mp.primitive
def _scaled(x):
    return 2.0 * x


@mp.rrule(_scaled)
def _scaled_rrule(x):
    return _scaled(x), lambda g: ((2.0 * g).astype(np.float32),)  # a float32 cotangent


def test_debug_mode_rejects_a_lower_precision_cotangent():
    f = lambda x: np.sum(_scaled(x))
    with mp.Config(debug_mode=True):
        with pytest.raises(mp.RuleError, match=r"_scaled.*float32 cotangent.*float64"):
            mp.grad(f)(X)
    mp.grad(f)(X)  # (outside debug mode: not checked)
