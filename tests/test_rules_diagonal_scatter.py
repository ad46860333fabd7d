"""np.diagonal's and np.diag's cotangent written by a strided slice (no scatter by index): it
must equal what the index scatter gives and agree with finite differences, also on
non-contiguous inputs; and the pairwise differences of a GP kernel, whose broadcast subtract
feeds such pullbacks, against their closed form."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.rules.shape import _diagonal_adjoint
from mooncake_py.testing import test_rule

rng = np.random.default_rng(3)


@pytest.mark.parametrize("shape, offset, axis1, axis2", [
    ((6, 6), 0, 0, 1), ((5, 7), 2, 0, 1), ((5, 7), -3, 0, 1), ((5, 7), -5, 0, 1),
    ((5, 7), 7, 0, 1), ((3, 4, 5), 1, 2, 0), ((3, 4, 5), -2, 0, 2), ((2, 3, 4, 5), 0, 1, 3),
    ((2, 3, 4, 5), -1, 3, 2), ((2, 3, 4, 5), 1, 2, 3), ((0, 3), 0, 0, 1)])
def test_diagonal_adjoint_puts_the_cotangent_on_the_diagonal_of_zeros(shape, offset, axis1,
                                                                     axis2):
    y = np.diagonal(np.empty(shape), offset, axis1, axis2)
    g = rng.standard_normal(y.shape)
    out = _diagonal_adjoint(shape, offset, axis1, axis2, y.shape[-1])(g)
    ref = np.zeros(shape)
    rows = np.arange(y.shape[-1]) + max(-offset, 0)
    cols = np.arange(y.shape[-1]) + max(offset, 0)
    np.add.at(np.moveaxis(ref, (axis1, axis2), (-2, -1)), (Ellipsis, rows, cols), g)
    assert out.shape == shape and out.dtype == g.dtype
    assert np.array_equal(out, ref)


@pytest.mark.parametrize("offset", [0, 1, -2])
def test_diagonal_and_diag_rules(offset):
    test_rule(np.diagonal, rng.standard_normal((4, 5)), offset)
    test_rule(np.diagonal, rng.standard_normal((3, 4, 5)), offset, 2, 0)
    test_rule(np.diag, rng.standard_normal((5, 4)), offset)
    test_rule(np.diag, rng.standard_normal(4), offset)


def test_diagonal_gradient_float32_stays_float32():
    a = rng.standard_normal((6, 6)).astype(np.float32)
    g = mp.grad(lambda m: np.sum(np.log(np.diag(m) ** 2)))(a)
    assert g.dtype == np.float32
    assert np.allclose(g, np.diag(2 / np.diag(a).astype(float)), rtol=1e-6)


def test_subtract_rules_on_broadcast_and_noncontiguous_inputs():
    x = rng.standard_normal(6)
    test_rule(np.subtract, x[:, None], x[None, :])
    test_rule(np.subtract, rng.standard_normal((3, 4)), rng.standard_normal(4))
    test_rule(np.subtract, rng.standard_normal(4), rng.standard_normal((3, 4)))
    test_rule(np.subtract, rng.standard_normal((3, 4)), np.float64(0.5))
    test_rule(np.subtract, rng.standard_normal((3, 4)), rng.standard_normal((3, 4)))


def test_pairwise_difference_gradient_matches_the_closed_form():
    x = rng.standard_normal(7)
    w = rng.standard_normal((7, 7))

    def f(v):
        return np.sum(w * (v[:, None] - v[None, :]))
    g = mp.grad(f)(x)
    assert np.allclose(g, w.sum(1) - w.sum(0), rtol=1e-13, atol=1e-14)
    cache = mp.prepare_gradient_cache(f, x)
    for _ in range(2):
        _, gc = mp.value_and_gradient(cache, f, x)
        assert np.array_equal(gc[0], g)
    h = mp.hvp(lambda v: np.sum((v[:, None] - v[None, :]) ** 2))(x, np.ones(7))
    assert np.allclose(h, np.zeros(7), atol=1e-12)
