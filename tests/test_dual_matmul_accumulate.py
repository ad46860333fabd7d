"""The dual matmul's tangent ȧb + aḃ with the second product accumulated into the first by
one gemm (beta = 1): equal to the two products added, on every operand layout and dtype, and
HVPs through it equal finite differences of the gradient."""
import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.dual import core_rules, lean
from mooncake_py.rules.linear_algebra import _gemm_accumulate
from mooncake_py.rules.registry import FRULES


def _layouts(x):
    strided = np.repeat(x, 2, axis=-1)[..., ::2]
    return {"C": np.ascontiguousarray(x), "F": np.asfortranarray(x), "strided": strided}


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-13), (np.float32, 1e-5)])
@pytest.mark.parametrize("la", ["C", "F", "strided"])
@pytest.mark.parametrize("lb", ["C", "F", "strided"])
def test_frule_tangent_equals_sum_of_products(dtype, rtol, la, lb):
    rng = np.random.default_rng(0)
    a0, b0 = rng.standard_normal((7, 5)).astype(dtype), rng.standard_normal((5, 6)).astype(dtype)
    da, db = rng.standard_normal((1, 7, 5)).astype(dtype), rng.standard_normal((1, 5, 6)).astype(dtype)
    a, b = _layouts(a0)[la], _layouts(b0)[lb]
    dbl = _layouts(db[0])[lb][None]
    y, t = FRULES[np.matmul]((a, b), (da, dbl))
    assert y.dtype == dtype and t.dtype == dtype and t.shape == (1, 7, 6)
    want = da[0].astype(np.float64) @ b0 + a0.astype(np.float64) @ db[0]
    np.testing.assert_allclose(t[0], want, rtol=rtol, atol=rtol * np.abs(want).max())
    np.testing.assert_array_equal(y, a0 @ b0)


def test_accumulate_declines_other_operands():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 3))
    ta2 = rng.standard_normal((2, 4, 5))          # two lanes
    db2 = rng.standard_normal((2, 3, 5))
    assert not _gemm_accumulate(ta2, a, db2)
    ta = rng.standard_normal((1, 4, 5))
    assert not _gemm_accumulate(ta, a.astype(np.float32), rng.standard_normal((1, 3, 5)))
    assert not _gemm_accumulate(ta, a + 0j, rng.standard_normal((1, 3, 5)))
    ro = ta.copy()
    ro.flags.writeable = False
    assert not _gemm_accumulate(ro, a, rng.standard_normal((1, 3, 5)))
    db = rng.standard_normal((1, 3, 5))
    before = ta.copy()
    assert _gemm_accumulate(ta, a, db)
    np.testing.assert_allclose(ta[0], before[0] + a @ db[0], rtol=1e-13)


@pytest.mark.parametrize("k", [1, 3])
def test_lanes_match_per_lane_products(k):
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((6, 4)), rng.standard_normal((4, 3))
    da, db = rng.standard_normal((k, 6, 4)), rng.standard_normal((k, 4, 3))
    _, t = FRULES[np.matmul]((a, b), (da, db))
    for lane in range(k):
        np.testing.assert_allclose(t[lane], da[lane] @ b + a @ db[lane], rtol=1e-13)


def test_mlp_hvp_matches_gradient_differences():
    rng = np.random.default_rng(3)
    W1, X = rng.standard_normal((12, 8)), rng.standard_normal((8, 5))
    W2, Y = rng.standard_normal((6, 12)), rng.standard_normal((6, 5))

    def f(W2, W1, Y, X):
        h = np.maximum(W1 @ X, 0.0)
        return np.sum((Y - W2 @ h) ** 2)
    args = (W2, W1, Y, X)
    v = tuple(rng.standard_normal(a.shape) for a in args)
    cache = mp.prepare_hvp_cache(f, *args)
    _, _, hv = mp.value_and_hvp(cache, f, v, *args)
    grad = mp.grad(f, argnums=(0, 1, 2, 3))
    eps = 1e-6
    plus = grad(*(a + eps * d for a, d in zip(args, v)))
    minus = grad(*(a - eps * d for a, d in zip(args, v)))
    for h, p, m in zip(hv, plus, minus):
        fd = (p - m) / (2 * eps)
        np.testing.assert_allclose(h, fd, rtol=1e-5, atol=1e-6 * np.abs(fd).max())
    _, _, hv2 = mp.value_and_hvp(cache, f, v, *args)  # replayed: equal to the first call
    for h, h2 in zip(hv, hv2):
        np.testing.assert_array_equal(h, h2)


# --- the dual matmul of two plain matrices without lanes (dual/core_rules.py's native path) ---
def _dual_layouts(x):
    return {**_layouts(x), "T": np.ascontiguousarray(x.T).T}


def _registered(a, b, da, db):
    """The registered lane-aware rule, one lane added and dropped: the path the native one
    must equal bit for bit."""
    rule = FRULES[np.matmul]
    y, t = rule((a, b), (None if da is None else da[None], None if db is None else db[None]))
    return y, None if t is None else t[0]


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@pytest.mark.parametrize("la", ["C", "F", "strided", "T"])
@pytest.mark.parametrize("lb", ["C", "F", "strided", "T"])
@pytest.mark.parametrize("which", ["both", "a", "b"])
def test_native_matmul_equals_registered_rule_bitwise(dtype, la, lb, which):
    rng = np.random.default_rng(4)
    a0, b0 = rng.standard_normal((9, 6)), rng.standard_normal((6, 8))
    da0, db0 = rng.standard_normal(a0.shape), rng.standard_normal(b0.shape)
    if dtype is np.complex128:
        a0, da0 = a0 + 1j * rng.standard_normal(a0.shape), da0 - 0.5j
    a, b, da, db = (_dual_layouts(x.astype(dtype))[lay]
                    for x, lay in ((a0, la), (b0, lb), (da0, la), (db0, lb)))
    da = None if which == "b" else da
    db = None if which == "a" else db
    native = FRULES[np.matmul]._mc_native
    y, t = native([a, b], [da, db], 0, {})
    y2, t2 = _registered(a, b, da, db)
    np.testing.assert_array_equal(y, y2)
    assert t.dtype == t2.dtype and t.shape == t2.shape
    np.testing.assert_array_equal(t, t2)


def test_native_matmul_with_an_integer_constant():
    rng = np.random.default_rng(5)
    a, da = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    m = rng.integers(-3, 4, (3, 5))
    y, t = FRULES[np.matmul]._mc_native([a, m], [da, None], 0, {})
    y2, t2 = _registered(a, m, da, None)
    np.testing.assert_array_equal(y, y2)
    np.testing.assert_array_equal(t, t2)


def _jvp_case(shape_a, shape_b, transpose_b=False):
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal(shape_a), rng.standard_normal(shape_b)
    da, db = rng.standard_normal(shape_a), rng.standard_normal(shape_b)
    if transpose_b:
        f = lambda a, b: a @ np.swapaxes(b, -1, -2)
        want = da @ np.swapaxes(b, -1, -2) + a @ np.swapaxes(db, -1, -2)
    else:
        f = lambda a, b: a @ b
        want = da @ b + a @ db
    return f, (a, b), (da, db), want


@pytest.mark.parametrize("shape_a,shape_b,tb", [
    ((5, 4), (4, 3), False), ((5, 4), (3, 4), True),        # matrices (native), a transpose
    ((4,), (4, 3), False), ((5, 4), (4,), False), ((4,), (4,), False),  # 1-D operands
    ((2, 5, 4), (4, 3), False), ((5, 4), (2, 4, 3), False),  # batched, broadcast
    ((2, 5, 4), (2, 3, 4), True)])
def test_dual_matmul_every_rank(shape_a, shape_b, tb):
    f, primals, tangents, want = _jvp_case(shape_a, shape_b, tb)
    y, t = mp.jvp(f, primals, tangents)
    np.testing.assert_array_equal(y, f(*primals))
    np.testing.assert_allclose(t, want, rtol=1e-13, atol=1e-13)


def test_matrix_hvp_takes_the_short_paths(monkeypatch):
    """The HVP of a matrix product runs its three dual products through the dispatch's short
    path (dual/lean.py), and equals bit for bit the native rule's and the registered rule's."""
    rng = np.random.default_rng(7)
    W, X = rng.standard_normal((6, 5)), rng.standard_normal((5, 4))
    f = lambda W, X: np.sum(np.tanh(W @ X.T.T) ** 2)
    v = (rng.standard_normal(W.shape), rng.standard_normal(X.shape))
    calls = []
    real = lean.matrix_product_tangent
    with monkeypatch.context() as m:
        m.setattr(lean, "matrix_product_tangent", lambda *a: calls.append(1) or real(*a))
        short = mp.hvp(f, argnums=(0, 1))(W, X, v)
    assert len(calls) == 3  # the product and the two of its pullback
    with monkeypatch.context() as m:  # the dispatch to the native rule
        m.setattr(lean, "_MATMUL_NATIVE", [object()])
        m.setattr(core_rules, "matrix_product_tangent", lambda *a: calls.append(2) or real(*a))
        native = mp.hvp(f, argnums=(0, 1))(W, X, v)
    assert calls.count(2) == 3
    with monkeypatch.context() as m:  # the registered lane-aware rule
        m.setattr(lean, "_MATMUL_NATIVE", [object()])
        m.setattr(FRULES[np.matmul], "_mc_native",
                  lambda p, t, lanes, kw: core_rules._run_rule(
                      np.matmul, FRULES[np.matmul], p, t, lanes, kw))
        registered = mp.hvp(f, argnums=(0, 1))(W, X, v)
    assert len(calls) == 6
    for h, h1, h2 in zip(short, native, registered):
        np.testing.assert_array_equal(h, h1)
        np.testing.assert_array_equal(h, h2)


def test_short_path_declines_what_it_does_not_cover():
    rng = np.random.default_rng(8)
    d = mp.dual(rng.standard_normal((3, 4)), rng.standard_normal((3, 4)))
    tag = d._tag
    assert lean.matmul(tag, d, rng.standard_normal(4)) is None        # a 1-D operand
    assert lean.matmul(tag, d, rng.standard_normal((2, 4, 2))) is None  # a batch
    assert lean.matmul(tag, d, [[1.0]] * 4) is None                     # a list
    y = lean.matmul(tag, d, np.eye(4, dtype=int))                       # an integer constant
    np.testing.assert_array_equal(mp.tangent(y), mp.tangent(d))
