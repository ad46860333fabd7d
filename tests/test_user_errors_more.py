"""A list argument says what to pass; NumPy warnings raised
inside the library point at the user's line; one rule for a direction's float dtype in hvp and
hessp; unravel(ones) of a tree with an integer leaf is an hvp direction."""
import warnings

import numpy as np
import pytest

import mooncake_py as mp


def _sum_sq(x):
    return np.sum(x ** 2)


# --- item 6: a list of floats ------------------------------------------------------------------
LIST_CALLS = {
    "grad": lambda f: mp.grad(f)([1.0, 2.0]),
    "value_and_grad": lambda f: mp.value_and_grad(f)([1.0, 2.0]),
    "hvp": lambda f: mp.hvp(f)([1.0, 2.0], [1.0, 0.0]),
    "jvp": lambda f: mp.jvp(f, ([1.0, 2.0],), ([1.0, 0.0],)),
    "vjp": lambda f: mp.vjp(f, (1.0, 2.0)),
    "hessian": lambda f: mp.hessian(f)([1.0, 2.0]),
}


@pytest.mark.parametrize("call", LIST_CALLS)
def test_list_argument_says_what_to_pass(call):
    with pytest.raises(mp.ArgumentError, match=r"np\.array\(\[\.\.\.\]\)") as info:
        LIST_CALLS[call](_sum_sq)
    msg = str(info.value)
    assert "container" in msg and "unsupported operand" in msg and "_sum_sq" in msg
    assert isinstance(info.value, TypeError)  # code catching the TypeError still does
    assert isinstance(info.value.__cause__, TypeError)


def test_list_attribute_error_is_named_too():
    with pytest.raises(mp.ArgumentError, match="container"):
        mp.grad(lambda x: np.sum(x.T * 2.0))([1.0, 2.0])


def test_list_is_still_a_container_where_f_indexes_it():
    # the pytree meaning is kept: a list of scalar leaves, gradients a list of scalars
    assert mp.grad(lambda x: x[0] * x[1])([1.0, 2.0]) == [2.0, 1.0]
    hv = mp.hvp(lambda x: x[0] ** 2 * x[1])([1.0, 2.0], [1.0, 0.0])
    assert [float(h) for h in hv] == [4.0, 2.0]
    _, dy = mp.jvp(lambda x: x[0] * x[1], ([1.0, 2.0],), ([1.0, 0.0],))
    assert float(dy) == 2.0


def test_other_type_errors_stay_as_they_are():
    def f(x):
        raise TypeError("mine")
    with pytest.raises(TypeError, match="^mine$"):
        mp.grad(f)(np.ones(2))


# --- item 11: warnings point at the user's line ---------------------------------------------------
def _log_sum(x):
    return np.sum(np.log(x))  # LOG LINE


def _sqrt_sum(x):
    return np.sum(np.sqrt(x))


def _line_of(fn, marker):
    import inspect
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, s in enumerate(lines) if marker in s)


def _caught(call):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with np.errstate(all="warn", under="ignore"):
            call()
    return [(str(x.message), x.filename, x.lineno) for x in w if x.category is RuntimeWarning]


X0 = np.array([0.0, 1.0])


@pytest.mark.parametrize("mode", ["grad", "hvp", "jvp", "vjp"])
def test_warnings_point_at_the_users_code(mode):
    calls = {
        "grad": lambda: mp.grad(_sqrt_sum)(X0),  # CALL grad
        "hvp": lambda: mp.hvp(_sqrt_sum)(X0, np.ones(2)),  # CALL hvp
        "jvp": lambda: mp.jvp(_log_sum, (X0,), (np.ones(2),)),
        "vjp": lambda: mp.vjp(_sqrt_sum, X0)[1](1.0),  # CALL vjp
    }
    got = _caught(calls[mode])
    assert got, "no warning"
    for msg, filename, _ in got:
        assert filename == __file__, (msg, filename)  # never mooncake_py's files
        assert "encountered in" in msg
    lines = {ln for _, _, ln in got}
    if mode == "jvp":  # inside f, at the user's np.log line (log's value and its tangent)
        assert lines == {_line_of(_log_sum, "LOG LINE")}
    else:  # the sweep's 1/(2 sqrt x) at the call of the transformation
        assert _line_of(test_warnings_point_at_the_users_code, f"CALL {mode}") in lines


def test_warning_in_forward_recording_names_the_line_in_f():
    got = _caught(lambda: mp.grad(_log_sum)(X0))
    assert ("divide by zero encountered in log", __file__, _line_of(_log_sum, "LOG LINE")) in got


def test_raise_and_ignore_settings_are_kept():
    with np.errstate(divide="raise"), pytest.raises(FloatingPointError):
        mp.grad(_log_sum)(X0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(divide="ignore", invalid="ignore"):
            assert np.isinf(mp.grad(_log_sum)(X0)[0])
    # the user's own call handler is left alone (not re-pointed, still called)
    seen = []
    with np.errstate(divide="call", call=lambda kind, flag: seen.append(kind)):
        mp.grad(_log_sum)(X0)
    assert seen and all("divide" in s for s in seen)
    assert np.geterr()["divide"] == "warn" and np.geterrcall() is None


def test_warnings_filter_error_raises_the_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with np.errstate(divide="warn"), pytest.raises(RuntimeWarning, match="divide by zero"):
            mp.grad(_log_sum)(X0)


# --- item 12: a direction of another float dtype ----------------------------------------------------
def test_hvp_and_hessp_cast_a_float64_direction_for_float32_x():
    x = np.array([1.0, 2.0, 3.0], np.float32)
    f = lambda x: np.sum(x ** 3)
    v64 = np.array([1.0, 0.5, 0.25])
    want = (6 * x * v64.astype(np.float32))
    for hv in (mp.hvp(f)(x, v64), mp.hessp(f)(x, v64)):
        assert hv.dtype == np.float32
        np.testing.assert_allclose(hv, want, rtol=1e-6)
    # and a float32 direction for float64 x: cast up, result float64
    hv = mp.hvp(f)(x.astype(np.float64), v64.astype(np.float32))
    assert hv.dtype == np.float64
    np.testing.assert_allclose(hv, 6 * x * v64, rtol=1e-7)
    # containers and tuple argnums: leaf by leaf
    hv = mp.hvp(lambda p: np.sum(p["a"] ** 3))({"a": x}, {"a": v64})
    assert hv["a"].dtype == np.float32
    h0, h1 = mp.hvp(lambda a, b: np.sum(a ** 2 * b), argnums=(0, 1))(x, x, (v64, v64))
    assert h0.dtype == h1.dtype == np.float32


def test_direction_rule_rejects_non_float_in_hvp_and_out_of_range():
    x = np.ones(2, np.float32)
    with pytest.raises(mp.TangentError, match="floating-point"):
        mp.hvp(_sum_sq)(x, np.array([1, 0]))
    with pytest.raises(mp.TangentError):
        mp.hvp(_sum_sq)(x, np.array([1 + 0j, 0]))
    with pytest.raises(mp.TangentError, match="range"):
        mp.hvp(_sum_sq)(x, np.array([1e300, 0.0]))
    with pytest.raises(mp.TangentError, match="range"):
        mp.hessp(_sum_sq)(x, np.array([1e300, 0.0]))
    # hessp keeps casting SciPy's integer probes
    assert mp.hessp(_sum_sq)(x, np.array([1, 0], np.int8)).dtype == np.float32


# --- item 13: unravel(ones) as a direction ----------------------------------------------------------
def test_unravel_of_ones_is_an_hvp_direction_with_int_leaves():
    params = {"w": np.ones(2), "n": 3, "idx": np.array([0, 1]), "flag": True}
    flat, unravel = mp.ravel_pytree(params)
    f = lambda p: np.sum(p["w"][p["idx"]] ** 2) * p["n"] * p["flag"]
    hv = mp.hvp(f)(params, unravel(np.ones(flat.size)))
    np.testing.assert_allclose(hv["w"], [6.0, 6.0])
    assert hv["n"] is None and hv["idx"] is None and hv["flag"] is None
    np.testing.assert_allclose(mp.hessian(f)(params) @ np.ones(2), [6.0, 6.0])
    _, dy = mp.jvp(f, (params,), (unravel(np.ones(flat.size)),))
    assert float(dy) == 12.0
    # a float direction for an integer leaf still asks for a derivative there: an error
    d = unravel(np.ones(flat.size))
    d["idx"] = np.ones(2)
    with pytest.raises(mp.NonDifferentiableInputError):
        mp.hvp(f)(params, d)
