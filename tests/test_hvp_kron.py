"""The kron frule's direct path (value and tangents by one broadcast matmul into kron's layout)
against the sum of two krons it replaces, against finite differences (test_rule), and the HVPs
of the suite's kron cases against finite differences of the gradient."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.rules import linear_algebra as la
from mooncake_py.testing import test_rule

rng = np.random.default_rng(11)

# Shapes whose last axes are large enough for the direct path (and 1-D ones, which always are).
SHAPES = [((5,), (7,)), ((4, 8), (5, 8)), ((3, 8), (8,)), ((8,), (2, 4, 9)),
          ((2, 3, 8), (3, 2, 8)), ((1, 40), (40, 1)), ((6, 6), (1, 6))]


def reference(a, b, da, db):
    """Per lane, kron(da, b) + kron(a, db) as the general frule composes it."""
    k = (da if da is not None else db).shape[0]
    out = []
    for s in range(k):
        t = 0
        if da is not None:
            t = t + np.kron(da[s], b)
        if db is not None:
            t = t + np.kron(a, db[s])
        out.append(t)
    return np.stack(out)


@pytest.mark.parametrize("sa,sb", SHAPES)
@pytest.mark.parametrize("which", ["both", "a", "b"])
@pytest.mark.parametrize("lanes", [1, 3])
def test_direct_value_and_tangent_match_krons(sa, sb, which, lanes):
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    da = rng.standard_normal((lanes,) + sa) if which != "b" else None
    db = rng.standard_normal((lanes,) + sb) if which != "a" else None
    r = la._kron_and_tangent(a, b, da, db)
    assert r is not None, "the direct path declined a shape it is meant for"
    y, t = r
    want = np.kron(a, b)
    assert y.shape == want.shape and y.dtype == want.dtype
    np.testing.assert_array_equal(y, want)
    ref = reference(a, b, da, db)
    assert t.shape == ref.shape and t.dtype == ref.dtype
    np.testing.assert_allclose(t, ref, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("dta,dtb", [(np.float32, np.float32), (np.float32, np.float64),
                                     (np.complex128, np.float64), (np.int64, np.float64)])
def test_direct_dtypes(dta, dtb):
    a = (rng.standard_normal((3, 8)) * 4).astype(dta)
    b = rng.standard_normal((2, 8)).astype(dtb)
    if np.dtype(dta).kind == "c":
        a = a + 1j * rng.standard_normal((3, 8))
    da = None if np.dtype(dta).kind == "i" else rng.standard_normal((2, 3, 8)).astype(a.dtype)
    db = rng.standard_normal((2, 2, 8)).astype(dtb)
    y, t = la._kron_and_tangent(a, b, da, db)
    want = np.kron(a, b)
    assert y.dtype == want.dtype
    np.testing.assert_allclose(y, want, rtol=1e-6)
    ref = reference(a, b, da, db)
    assert t.dtype == ref.dtype
    np.testing.assert_allclose(t, ref, rtol=1e-5 if want.dtype == np.float32 else 1e-13)


def test_direct_declines_what_it_does_not_cover():
    t = np.ones((1, 2, 3))
    assert la._kron_and_tangent(np.ones((2, 3)), np.ones((2, 3)), t, None) is None  # tiny last
    assert la._kron_and_tangent(np.ones((0,)), np.ones(5), np.ones((1, 0)), None) is None
    # and the frule still answers those through the general composition
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    va, vb = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    _, ty = mp.jvp(np.kron, (a, b), (va, vb))
    np.testing.assert_allclose(ty, np.kron(va, b) + np.kron(a, vb), rtol=1e-14)


@pytest.mark.parametrize("sa,sb", SHAPES[:5])
def test_kron_rule_modes(sa, sb):
    test_rule(np.kron, rng.standard_normal(sa), rng.standard_normal(sb),
              modes=("reverse", "forward", "forward_over_reverse"))


def test_jvp_with_lanes_and_one_constant():
    a, b = rng.standard_normal((4, 8)), rng.standard_normal((3, 8))
    V = rng.standard_normal((3, 4, 8))
    _, T = mp.jvp(lambda a: np.kron(a, b), (a,), (V,), lanes=True)
    np.testing.assert_allclose(T, reference(a, b, V, None), rtol=1e-13)
    _, t = mp.jvp(lambda b: np.kron(a, b), (b,), (V[0, :3],))
    np.testing.assert_allclose(t, np.kron(a, V[0, :3]), rtol=1e-13)


def fd_hvp(f, args, vs, h=1e-6):
    g = mp.grad(f, argnums=tuple(range(len(args))))
    plus = g(*[x + h * v for x, v in zip(args, vs)])
    minus = g(*[x - h * v for x, v in zip(args, vs)])
    return [(p - m) / (2 * h) for p, m in zip(plus, minus)]


@pytest.mark.parametrize("f,shapes", [
    (lambda a, b: np.sum(np.kron(a, b)), [(6, 6), (8, 8)]),
    (lambda a, b: np.sum(np.kron(a[:5, :5], np.triu(b))), [(8, 7), (8, 8)]),
    (lambda a, b: np.sum(np.sin(np.kron(a, b)) ** 2), [(4, 8), (3, 8)]),
])
def test_hvp_of_kron_cases(f, shapes):
    args = [rng.standard_normal(s) for s in shapes]
    vs = [rng.standard_normal(s) for s in shapes]
    hv = mp.hvp(f, argnums=(0, 1))(*args, tuple(vs))
    for got, want in zip(hv, fd_hvp(f, args, vs)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    H = mp.hessian(lambda x: f(x[:args[0].size].reshape(shapes[0]),
                               x[args[0].size:].reshape(shapes[1])))(
        np.concatenate([x.ravel() for x in args]))
    np.testing.assert_allclose(np.concatenate([h.ravel() for h in hv]),
                               H @ np.concatenate([v.ravel() for v in vs]), rtol=1e-10,
                               atol=1e-10)
