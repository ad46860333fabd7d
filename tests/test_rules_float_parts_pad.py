"""Rules for functions real programs call: np.ldexp, np.frexp, np.modf, np.i0, and
np.pad's gather modes (edge, reflect, symmetric, wrap), against finite differences and
frule/rrule consistency, on broadcast and non-contiguous inputs."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.testing import test_rule, check_grads

RNG = np.random.default_rng(0)
X = RNG.uniform(-3, 3, (3, 4)) + 0.1  # (no integers: modf's kink)


def test_ldexp_in_x_broadcast_against_the_exponent():
    test_rule(np.ldexp, X, np.array([1, -2, 0, 3]))
    test_rule(np.ldexp, X[0], np.array([[1], [2]]))  # x broadcast: its cotangent summed


def test_frexp_mantissa():
    test_rule(lambda x: np.frexp(x)[0], X)
    m, e = np.frexp(X)
    np.testing.assert_array_equal(mp.jvp(lambda x: np.frexp(x)[0], (X,), (np.ones_like(X),))[0], m)


def test_modf_fraction():
    test_rule(lambda x: np.modf(x)[0], X)
    check_grads(lambda x: np.sum(np.modf(x)[0] ** 2 + np.modf(x)[1]), X)


def test_i0():
    pytest.importorskip("scipy.special")
    test_rule(np.i0, X)


@pytest.mark.parametrize("mode", ["edge", "reflect", "symmetric", "wrap"])
@pytest.mark.parametrize("width", [2, ((1, 2), (3, 0))])
def test_pad_gather_modes(mode, width):
    test_rule(np.pad, X, width, mode=mode)


def test_pad_unsupported_mode_names_the_alternatives():
    # (reflect_type='odd' and 'linear_ramp' have rules now: tests/test_rules_polyfit_special.py)
    for mode in ("maximum", "mean"):
        with pytest.raises(mp.MissingRuleError, match="reflect_type"):
            mp.grad(lambda x, mode=mode: np.sum(np.pad(x, 1, mode=mode)))(X)
