"""The BLAS paths of the Cholesky and triangular-solve forward rules (rules/cholesky_blas.py,
the one-lane vector tangent of solve_triangular, the ``_neg_masked_outer`` primitive): each
against the general path it replaces (switched off by monkeypatching), finite differences,
float32, non-contiguous and Fortran-ordered operands, lanes, upper factors, ill-conditioned
kernel matrices, and the remembered inverse (never reused for a changed factor)."""
import gc

import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.rules import cholesky_blas as cb
from mooncake_py.rules import linear_algebra as la
from mooncake_py.rules.registry import FRULES
from mooncake_py.testing import test_rule as check_rule


def _spd(rng, n, dtype=np.float64):
    a = rng.standard_normal((n, n))
    return (a @ a.T + n * np.eye(n)).astype(dtype)


def _kernel(n, noise):
    x = np.linspace(-3, 3, n)
    return np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2) + noise * np.eye(n)


def _general(monkeypatch):
    """Switch the BLAS paths off: the rules then take their general lane-aware path."""
    monkeypatch.setattr(cb, "cotangent", lambda *a: None)
    monkeypatch.setattr(cb, "cotangent_and_tangent", lambda *a: None)
    monkeypatch.setattr(cb, "factor_tangent", lambda *a: None)
    monkeypatch.setattr(la, "_vector_tangent", lambda *a: None)
    monkeypatch.setattr(la, "_one_lane_outer_tangent", lambda *a: None)


def _both(monkeypatch, call):
    fast = call()
    with monkeypatch.context() as m:
        _general(m)
        slow = call()
    return fast, slow


def _close(a, b, dtype):
    tol = 1e-12 if dtype == np.float64 else 2e-5
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype == dtype
    np.testing.assert_allclose(a, b, rtol=0, atol=tol * np.abs(b).max())


def _cot_frule(L, g, dL, dg):
    return FRULES[la._cholesky_cotangent]((L, g), (dL, dg))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n,k", [(16, 1), (40, 3), (128, 1)])
@pytest.mark.parametrize("which", ["both", "L", "g"])
def test_cotangent_tangent_matches_general_path(monkeypatch, dtype, n, k, which):
    rng = np.random.default_rng(n + k)
    L = np.linalg.cholesky(_spd(rng, n, dtype))
    g = rng.standard_normal((n, n)).astype(dtype)
    dL = np.tril(rng.standard_normal((k, n, n))).astype(dtype) if which != "g" else None
    dg = rng.standard_normal((k, n, n)).astype(dtype) if which != "L" else None
    assert cb.cotangent_and_tangent(L, g, dL, dg, la._phi_mask(n, dtype, L)) is not None
    (y, t), (y0, t0) = _both(monkeypatch, lambda: _cot_frule(L, g, dL, dg))
    _close(y, y0, dtype)
    _close(t, t0, dtype)
    assert t.shape == (k, n, n)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("order", ["C", "F", "strided"])
def test_plain_cotangent_equals_general_path_bitwise(monkeypatch, dtype, order):
    rng = np.random.default_rng(20)
    n = 40
    L = np.linalg.cholesky(_spd(rng, n, dtype))
    g = rng.standard_normal((n, 2 * n)).astype(dtype)[:, ::2] if order == "strided" else \
        np.asarray(rng.standard_normal((n, n)).astype(dtype), order=order)
    L = np.asfortranarray(L) if order == "F" else L
    assert cb.cotangent(L, g, la._phi_mask(n, dtype, L)) is not None
    with monkeypatch.context() as m:
        m.setattr(cb, "cotangent", lambda *a: None)
        want = la._plain_cholesky_cotangent(L, g)
    got = la._plain_cholesky_cotangent(L, g)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, want)


def test_cotangent_tangent_noncontiguous_and_fortran_operands(monkeypatch):
    rng = np.random.default_rng(1)
    n = 24
    L = np.asfortranarray(np.linalg.cholesky(_spd(rng, n)))
    g = rng.standard_normal((n, 2 * n))[:, ::2]
    dL = np.tril(rng.standard_normal((1, n, n)))[:, :, :].transpose(0, 2, 1).transpose(0, 2, 1)
    dL = np.asfortranarray(dL)
    dg = rng.standard_normal((1, n, 3 * n))[:, :, ::3]
    (y, t), (y0, t0) = _both(monkeypatch, lambda: _cot_frule(L, g, dL, dg))
    _close(y, y0, np.float64)
    _close(t, t0, np.float64)


def test_cotangent_tangent_reads_only_lower_triangle_of_dL():
    rng = np.random.default_rng(2)
    n = 30
    L = np.linalg.cholesky(_spd(rng, n))
    g = rng.standard_normal((n, n))
    dL = np.tril(rng.standard_normal((1, n, n)))
    _, a = _cot_frule(L, g, dL, None)
    _, b = _cot_frule(L, g, dL + np.triu(rng.standard_normal((n, n)), 1), None)
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_declines_what_it_does_not_handle():
    rng = np.random.default_rng(3)
    L = np.linalg.cholesky(_spd(rng, 20))
    g = rng.standard_normal((20, 20))
    mask = la._phi_mask(20, np.float64, L)
    one = np.tril(rng.standard_normal((1, 20, 20)))
    assert cb.cotangent_and_tangent(L[:8, :8], g[:8, :8], one[:, :8, :8], None,
                                    mask[:8, :8]) is None  # small: the general path
    assert cb.cotangent_and_tangent(L, g.astype(np.float32), one, None, mask) is None
    assert cb.cotangent_and_tangent(L, g, None, None, mask) is None
    assert cb.cotangent_and_tangent(L, g, one, one[:, :, :3], mask) is None
    assert cb.factor_tangent(L.astype(np.complex128), one, mask) is None
    assert cb.factor_tangent(L, one.astype(np.float32), mask) is None


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("k", [1, 2])
def test_factor_tangent_matches_general_path(monkeypatch, dtype, upper, k):
    rng = np.random.default_rng(4 + k)
    n = 48
    a = _spd(rng, n, dtype)
    da = rng.standard_normal((k, n, n)).astype(dtype)  # not symmetric: its sym part counts
    (y, t), (y0, t0) = _both(monkeypatch, lambda: FRULES[np.linalg.cholesky](
        (a,), (da,), upper=upper))
    np.testing.assert_array_equal(y, y0)
    _close(t, t0, dtype)


def test_factor_tangent_by_solves_above_the_cache_size(monkeypatch):
    rng = np.random.default_rng(22)
    n = 40
    a = _spd(rng, n)
    da = rng.standard_normal((2, n, n))
    by_inverse = FRULES[np.linalg.cholesky]((a,), (da,))[1]
    monkeypatch.setattr(cb, "CACHE_MAX_SIZE", 0)
    cb._LAST_INVERSE[0] = None
    (y, t), (y0, t0) = _both(monkeypatch, lambda: FRULES[np.linalg.cholesky]((a,), (da,)))
    assert cb._LAST_INVERSE[0] is None
    _close(t, t0, np.float64)
    _close(by_inverse, t0, np.float64)


def test_factor_tangent_matches_finite_differences():
    rng = np.random.default_rng(6)
    n = 32
    a = _spd(rng, n)
    da = rng.standard_normal((n, n))
    da = da + da.T
    _, t = mp.jvp(np.linalg.cholesky, (a,), (da,))
    h = 1e-6
    fd = (np.linalg.cholesky(a + h * da) - np.linalg.cholesky(a - h * da)) / (2 * h)
    np.testing.assert_allclose(t, fd, rtol=1e-6, atol=1e-8 * np.abs(fd).max())


def _lower_inverse_ld(L):
    """L⁻¹ in long double by substitution (the accuracy oracle)."""
    L = L.astype(np.longdouble)
    n = len(L)
    x, eye = np.zeros_like(L), np.eye(n, dtype=np.longdouble)
    for i in range(n):
        x[i] = (eye[i] - L[i, :i] @ x[:i]) / L[i, i]
    return x


@pytest.mark.parametrize("noise", [1e-4, 1e-9])
def test_ill_conditioned_kernel_accuracy_stays_at_the_solves_level(monkeypatch, noise):
    n = 64
    K = _kernel(n, noise)
    L = np.linalg.cholesky(K)
    rng = np.random.default_rng(7)
    g = np.tril(rng.standard_normal((n, n)))
    dL = np.tril(rng.standard_normal((1, n, n)))
    dg = np.tril(rng.standard_normal((1, n, n)))
    dK = rng.standard_normal((1, n, n))
    li, mask = _lower_inverse_ld(L), la._phi_mask(n, np.float64, L).astype(np.longdouble)
    Ld = L.astype(np.longdouble)
    p = (Ld.T @ g) * mask
    s = li.T @ p @ li
    abar = (s + s.T) / 2
    dp = (dL[0].T @ g + Ld.T @ dg[0]) * mask
    z = (li.T @ dp - 2 * abar @ dL[0]) @ li
    want_t = (z + z.T) / 2
    zk = li @ ((dK[0] + dK[0].T) / 2) @ li.T
    want_f = Ld @ (zk * mask)

    def err(got, want):
        return float(np.abs(got - want).max() / np.abs(want).max())

    (y, t), (y0, t0) = _both(monkeypatch, lambda: _cot_frule(L, g, dL, dg))
    f, f0 = _both(monkeypatch, lambda: FRULES[np.linalg.cholesky]((K,), (dK,))[1])
    for fast, slow, want in ((y, y0, abar), (t[0], t0[0], want_t), (f[0], f0[0], want_f)):
        assert err(fast, want) <= 4 * err(slow, want) + 1e-14


def test_remembered_inverse_is_reused_only_for_an_unchanged_factor(monkeypatch):
    rng = np.random.default_rng(8)
    n = 32
    a = _spd(rng, n)
    L, _ = FRULES[np.linalg.cholesky]((a,), (rng.standard_normal((1, n, n)),))
    g = rng.standard_normal((n, n))
    dL = np.tril(rng.standard_normal((1, n, n)))
    calls = []
    real = cb._lower_inverse
    monkeypatch.setattr(cb, "_lower_inverse", lambda *x: calls.append(1) or real(*x))
    y, t = _cot_frule(L, g, dL, None)
    assert calls == []  # the forward rule's inverse
    L[3, 1] += 0.5  # written into: the inverse must be made again
    y2, t2 = _cot_frule(L, g, dL, None)
    assert calls == [1]
    with monkeypatch.context() as m:
        _general(m)
        y0, t0 = _cot_frule(L, g, dL, None)
    _close(y2, y0, np.float64)
    _close(t2, t0, np.float64)
    copy = L.copy()  # an equal array that is another object: not reused
    _cot_frule(copy, g, dL, None)
    assert calls == [1, 1]
    del L
    gc.collect()
    assert cb._LAST_INVERSE[0] is None  # (the entry goes with its factor)


# --- solve_triangular: one-lane vector tangents -------------------------------------------
def _st_frule(fn, a, b, da, db, **kw):
    return FRULES[fn]((a, b), (da, db), **kw)


@pytest.mark.parametrize("fn", [la.solve_triangular, la._solve_nonsingular])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("trans", [0, 1, "T"])
@pytest.mark.parametrize("bshape", ["vec", "col"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_vector_tangent_matches_general_path(monkeypatch, fn, lower, trans, bshape, dtype):
    rng = np.random.default_rng(9)
    n = 40
    L = np.linalg.cholesky(_spd(rng, n)).astype(dtype)
    a = L if lower else np.asfortranarray(L.T)
    b = rng.standard_normal(n if bshape == "vec" else (n, 1)).astype(dtype)
    da = rng.standard_normal((1, n, n)).astype(dtype)  # both triangles: one is read
    db = rng.standard_normal((1,) + b.shape).astype(dtype)
    for tans in ((da, db), (da, None), (None, db)):
        (x, t), (x0, t0) = _both(monkeypatch, lambda: _st_frule(
            fn, a, b, *tans, trans=trans, lower=lower))
        np.testing.assert_array_equal(x, x0)
        _close(t, t0, dtype)
        assert t.shape == (1,) + b.shape


def test_vector_tangent_leaves_unit_diagonal_and_lanes_to_the_general_path():
    rng = np.random.default_rng(10)
    n = 20
    a, x = np.tril(rng.standard_normal((n, n))) + 3 * np.eye(n), rng.standard_normal(n)
    da = rng.standard_normal((1, n, n))
    assert la._vector_tangent(a, x, da, None, 0, True, True) is None
    assert la._vector_tangent(a, x, np.concatenate([da, da]), None, 0, True, False) is None
    assert la._vector_tangent(a, x, None, None, 0, True, False) is None
    assert la._vector_tangent(a, x, da, None, 0, True, False) is not None


# --- the vector cotangent of a triangular matrix ----------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [5, 40])
def test_neg_masked_outer_value(dtype, n):
    rng = np.random.default_rng(11)
    u, v = (rng.standard_normal((n, 1)).astype(dtype) for _ in range(2))
    mask = la._triangle_mask(n, True, False, dtype, u)
    got = la._neg_masked_outer(u, v, mask)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, (u * -v.T) * mask)


@pytest.mark.parametrize("which", ["both", "u", "v"])
def test_neg_masked_outer_tangent_matches_general_path(monkeypatch, which):
    rng = np.random.default_rng(12)
    n = 40
    u, v = rng.standard_normal((n, 1)), rng.standard_normal((n, 1))
    du = rng.standard_normal((1, n, 1)) if which != "v" else None
    dv = rng.standard_normal((1, n, 1)) if which != "u" else None
    mask = la._triangle_mask(n, False, True, np.float64, u)
    (y, t), (y0, t0) = _both(monkeypatch, lambda: FRULES[la._neg_masked_outer](
        (u, v, mask), (du, dv, None)))
    np.testing.assert_array_equal(y, y0)
    _close(t, t0, np.float64)


def test_neg_masked_outer_forward_rule_checks():
    rng = np.random.default_rng(13)
    mask = np.tri(24)
    check_rule(lambda u, v: la._neg_masked_outer(u, v, mask), rng.standard_normal((24, 1)),
               rng.standard_normal((24, 1)), modes=("forward",))


# --- end to end: the HVPs gp_lml runs --------------------------------------------------------
def _gp(x, y, s):
    d = x[:, None] - x[None, :]
    K = np.exp(-0.5 * d ** 2) + s * np.eye(len(x), dtype=y.dtype)
    L = np.linalg.cholesky(K)
    a = mp.linalg.solve_triangular(L, y, lower=True)
    return -0.5 * np.sum(a ** 2) - np.sum(np.log(np.diag(L)))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gp_hvp_matches_general_path_and_keeps_dtype(monkeypatch, dtype):
    rng = np.random.default_rng(14)
    n = 48
    x = np.linspace(0, 6, n).astype(dtype)
    y = rng.standard_normal(n).astype(dtype)
    s = dtype(0.3)
    vs = (rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype),
          dtype(0.2))
    fast, slow = _both(monkeypatch, lambda: mp.hvp(_gp, argnums=(0, 1, 2))(x, y, s, vs))
    for a, b in zip(fast, slow):
        assert np.asarray(a).dtype == dtype
        np.testing.assert_allclose(a, b, rtol=1e-9 if dtype == np.float64 else 2e-3,
                                   atol=1e-9 if dtype == np.float64 else 1e-3 * np.abs(b).max())


def test_gp_prepared_hvp_replay_equals_fresh_recording():
    rng = np.random.default_rng(15)
    n = 40
    args = (np.linspace(0, 5, n), rng.standard_normal(n), np.float64(0.4))
    vs = (rng.standard_normal(n), rng.standard_normal(n), np.float64(0.1))
    cache = mp.prepare_hvp_cache(_gp, *args)
    first = mp.value_and_hvp(cache, _gp, vs, *args)
    again = mp.value_and_hvp(cache, _gp, vs, *args)
    fresh = mp.hvp(_gp, argnums=(0, 1, 2))(*args, vs)
    for a, b, c in zip(first[2], again[2], fresh):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


@pytest.mark.parametrize("trans", [0, 1])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_vector_pullback_equals_the_column_pullback(trans, lower, dtype):
    from mooncake_py.rules.registry import RRULES
    rng = np.random.default_rng(21)
    n = 30
    L = np.linalg.cholesky(_spd(rng, n)).astype(dtype)
    a = L if lower else L.T
    b, g = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
    rule = RRULES[la.solve_triangular]
    for needs in ((True, True), (True, False), (False, True)):
        x, pb = rule((a, b), {"lower": lower, "trans": trans}, needs)
        xc, pbc = rule((a, b[:, None]), {"lower": lower, "trans": trans}, needs)
        got, want = pb(g), pbc(g[:, None])
        np.testing.assert_array_equal(x, xc[:, 0])
        if needs[0]:
            assert got[0].dtype == dtype
            np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)
        if needs[1]:
            np.testing.assert_allclose(got[1], want[1][:, 0], rtol=1e-6, atol=1e-6)
        assert [c is None for c in got] == [c is None for c in want]


@pytest.mark.parametrize("trans", [0, 1])
@pytest.mark.parametrize("lower", [True, False])
def test_vector_solve_hvp_equals_the_column_solve_hvp(trans, lower):
    rng = np.random.default_rng(23)
    n = 24
    m = np.tril(rng.standard_normal((n, n))) + 4 * np.eye(n)
    m = m if lower else np.ascontiguousarray(m.T)
    b = rng.standard_normal(n)
    vs = (rng.standard_normal((n, n)), rng.standard_normal(n))

    def vec(a, b):
        return np.sum(mp.linalg.solve_triangular(a, b, lower=lower, trans=trans) ** 3)

    def col(a, b):
        return np.sum(mp.linalg.solve_triangular(a, b[:, None], lower=lower, trans=trans) ** 3)

    got = mp.hvp(vec, argnums=(0, 1))(m, b, vs)
    want = mp.hvp(col, argnums=(0, 1))(m, b, vs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12 * np.abs(w).max())
