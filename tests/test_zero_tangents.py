"""Symbolic zero tangents: in an HVP with constant operands (``b`` of ``np.kron(a, b)`` not
differentiated) a constant stays a plain array. No rule may pair it with a tangent of zeros:
such a dual would cost twice its primal in every later op and in the sweep. The tangent of a
constant is ``None`` through the frules (kron, matmul/dot/einsum, the elementwise table, sum,
reshape, broadcasting) and the pullbacks on duals."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.dual import dual_array

RNG = np.random.default_rng(0)
A, V = RNG.standard_normal((4, 4)), RNG.standard_normal((4, 4))
B, W, C = RNG.standard_normal((5, 8)), RNG.standard_normal((4, 3)), RNG.standard_normal(4)

CASES = {
    "kron": lambda a: np.sum(np.kron(a, B)),
    "kron_squared": lambda a: np.sum(np.kron(B, a) ** 2),
    "matmul": lambda a: np.sum(np.sin(a @ W)),
    "dot": lambda a: np.sum(np.dot(W.T, a) ** 2),
    "einsum": lambda a: np.sum(np.einsum("ij,jk->ik", a, W) ** 2),
    "elementwise": lambda a: np.sum(np.exp(a * C + C) / (C * C + 1.0)),
    "reshape_broadcast": lambda a: np.sum((np.reshape(a, (1, 16)) + np.reshape(V, (16, 1))) ** 2),
    "sum_axis": lambda a: np.sum(np.sum(a * V, axis=0) ** 2),
}


@pytest.fixture
def zero_tangent_duals(monkeypatch):
    """The DualArrays made with a tangent that is all zeros (a materialised zero)."""
    made = []
    init = dual_array.DualArray.__init__

    def counting(self, primal, tangent, tag):
        init(self, primal, tangent, tag)
        if type(tangent) is np.ndarray and tangent.size and not np.any(tangent):
            made.append(tangent.shape)
    monkeypatch.setattr(dual_array.DualArray, "__init__", counting)
    return made


@pytest.mark.parametrize("name", sorted(CASES))
def test_constants_get_no_zero_tangent(name, zero_tangent_duals):
    f = CASES[name]
    hv = mp.hvp(f)(A, V)
    assert zero_tangent_duals == []
    h = 1e-6
    fd = (mp.grad(f)(A + h * V) - mp.grad(f)(A - h * V)) / (2 * h)
    np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-6)


def test_kron_with_a_constant_operand_equals_np_kron():
    # the one-tangent product writes value and tangent into one buffer: the same numbers as
    # np.kron of each (a zero may change sign)
    from mooncake_py.rules.linear_algebra import _kron_and_tangent
    a, b, da = RNG.standard_normal((6, 6)), RNG.standard_normal((8, 8)), RNG.standard_normal((6, 6))
    y, t = _kron_and_tangent(a, b, da[None], None)
    np.testing.assert_array_equal(y, np.kron(a, b))
    np.testing.assert_array_equal(t[0], np.kron(da, b))
    y, t = _kron_and_tangent(b, a, None, da[None])
    np.testing.assert_array_equal(y, np.kron(b, a))
    np.testing.assert_array_equal(t[0], np.kron(b, da))


@pytest.mark.parametrize("name", ["kron", "matmul", "elementwise", "sum_axis"])
def test_constants_get_no_zero_tangent_with_lanes(name, zero_tangent_duals):
    f = CASES[name]
    hess = mp.hessian(f)(A)
    assert zero_tangent_duals == []
    np.testing.assert_allclose(np.reshape(hess, (16, 16)) @ V.ravel(), mp.hvp(f)(A, V).ravel(),
                               rtol=1e-12, atol=1e-12)
