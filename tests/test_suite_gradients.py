"""Every benchmark case's mp.grad, with respect to every differentiated argument, agrees with
central finite differences (and, where there is one, with the closed form)."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.testing import check_grads
from benchmarks.namespaces import numpy_namespace
from benchmarks.suite import CASES

XP = numpy_namespace()
# A few random directions suffice for the big cases: each direction tests every input at once.
NDIRS = {"simple_mlp": 2, "gp_lml": 2, "turing_broadcast_benchmark": 2}


def _check(name):
    case = CASES[name]
    g, diff = case.closure(XP, case.make_inputs(np.random.default_rng(1)))
    check_grads(g, *diff, ndirs=NDIRS.get(name, 3))


@pytest.mark.parametrize("name", list(CASES))
def test_case_gradient_matches_finite_differences(name):
    _check(name)


def _grads(name, seed=2):
    case = CASES[name]
    args = case.make_inputs(np.random.default_rng(seed))
    g, diff = case.closure(XP, args)
    gs = mp.grad(g, argnums=tuple(range(len(diff))))(*diff)
    return diff, gs


def test_sum_cases_closed_form():
    (x,), (g,) = _grads("sum_1000")
    np.testing.assert_array_equal(g, np.ones_like(x))
    (x,), (g,) = _grads("_sum_sin_1000")
    np.testing.assert_allclose(g, np.cos(x), rtol=1e-14)


def test_kron_sum_closed_form():
    (a, b), (ga, gb) = _grads("kron_sum")
    np.testing.assert_allclose(ga, np.full_like(a, b.sum()), rtol=1e-12)
    np.testing.assert_allclose(gb, np.full_like(b, a.sum()), rtol=1e-12)


def test_kron_view_sum_closed_form():
    (a, b), (ga, gb) = _grads("kron_view_sum")
    want_a = np.zeros_like(a)
    want_a[:20, :20] = np.triu(b).sum()
    np.testing.assert_allclose(ga, want_a, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gb, np.triu(np.full_like(b, a[:20, :20].sum())), rtol=1e-12)


def test_large_single_block_closed_form():
    (x,), (g,) = _grads("large_single_block")
    np.testing.assert_allclose(g, [x[1] ** 400, 400 * x[0] * x[1] ** 399], rtol=1e-12)


def test_simple_mlp_closed_form():
    (W2, W1, Y, X), (g2, g1, gy, gx) = _grads("simple_mlp")
    z = W1 @ X
    h = np.maximum(z, 0.0)
    r = Y - W2 @ h
    gh = -2 * W2.T @ r * (z > 0)
    np.testing.assert_allclose(g2, -2 * r @ h.T, rtol=1e-10)
    np.testing.assert_allclose(g1, gh @ X.T, rtol=1e-10)
    np.testing.assert_allclose(gy, 2 * r, rtol=1e-12)
    np.testing.assert_allclose(gx, W1.T @ gh, rtol=1e-10)


def _hvp_by_differences(g, diff, v, h):
    """Central differences of the gradient along ``v``: (∇f(x + h v) − ∇f(x − h v)) / 2h."""
    nums = tuple(range(len(diff)))
    plus = mp.grad(g, argnums=nums)(*[x + h * d for x, d in zip(diff, v)])
    minus = mp.grad(g, argnums=nums)(*[x - h * d for x, d in zip(diff, v)])
    return [(p - m) / (2 * h) for p, m in zip(plus, minus)]


def _case_and_direction(name, seed):
    """The case's function of its differentiated arguments, their values, a random direction."""
    case = CASES[name]
    rng = np.random.default_rng(seed)
    g, diff = case.closure(XP, case.make_inputs(rng))
    return g, diff, tuple(rng.standard_normal(np.shape(x)) for x in diff)


@pytest.mark.parametrize("name", list(CASES))
def test_case_hvp_matches_gradient_differences(name):
    g, diff, v = _case_and_direction(name, seed=3)
    hv = mp.hvp(g, argnums=tuple(range(len(diff))))(*diff, v)
    want_norm = np.sqrt(sum(np.sum(np.square(a)) for a in hv))
    errs = []
    for h in (1e-3, 1e-4, 1e-5, 1e-6):
        fd = _hvp_by_differences(g, diff, v, h)
        errs.append(np.sqrt(sum(np.sum(np.square(a - b)) for a, b in zip(hv, fd))))
    assert min(errs) <= 1e-5 * max(want_norm, 1.0), (name, errs, want_norm)


@pytest.mark.parametrize("name", list(CASES))
def test_case_jvp_matches_finite_differences_and_the_gradient(name):
    g, diff, v = _case_and_direction(name, seed=4)
    y, dy = mp.jvp(g, tuple(diff), v)
    grads = mp.grad(g, argnums=tuple(range(len(diff))))(*diff)
    via_grad = sum(float(np.sum(gr * d)) for gr, d in zip(grads, v))
    fd = [(g(*[x + h * d for x, d in zip(diff, v)]) - g(*[x - h * d for x, d in zip(diff, v)]))
          / (2 * h) for h in (1e-3, 1e-4, 1e-5, 1e-6)]
    scale = max(abs(via_grad), 1.0)
    assert abs(dy - via_grad) <= 1e-10 * scale, (name, dy, via_grad)
    assert min(abs(dy - f) for f in fd) <= 1e-5 * scale, (name, dy, fd)


SMALL = [n for n in CASES
         if sum(np.size(x) for x in CASES[n].closure(XP, CASES[n].make_inputs(
             np.random.default_rng(0)))[1]) <= 1000]


@pytest.mark.parametrize("name", SMALL)
def test_case_jacobian_forward_and_reverse_equal_the_gradient(name):
    case = CASES[name]
    g, diff = case.closure(XP, case.make_inputs(np.random.default_rng(5)))
    x0, rest = diff[0], diff[1:]
    f = (lambda x: g(x, *rest))
    want = mp.grad(f)(x0)
    for mode in ("forward", "reverse"):
        np.testing.assert_allclose(mp.jacobian(f, mode=mode)(x0), want, rtol=1e-10, atol=1e-12)
