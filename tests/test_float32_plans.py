"""Prepared caches replay float32 functions (and float32 mixed with float64, float32 scalars
and Python floats) as they do float64 ones: the plan's steps call the recorded rules on values
of the recorded dtypes, so results are bitwise those of recording every call, and float32
stays float32 in values, gradients and Hessian-vector products."""
import warnings

import numpy as np
import pytest

import mooncake_py as mp

F32 = np.float32
_RNG = np.random.default_rng(11)


def _chain(x):
    return np.sum(np.sin(x) * x + np.exp(-x * x))


def _broadcast(x):
    a = x.reshape(4, 5)
    return np.sum(np.tanh(a * a[:1, :] + a[:, 2:3]))


def _reductions(x):
    a = x.reshape(4, 5)
    return np.sum(np.max(a, axis=1, keepdims=True) * a) + np.sum(np.mean(a * a, axis=0))


def _matmul(x):
    a = x.reshape(4, 5)
    return np.sum((a @ a.T) ** 2) + x @ x


def _indexing(x):
    return np.sum(x[::2] * x[1::2]) + x[3] * x[7] - np.sum(x[[0, 5, 9]] ** 3)


def _scalar_loop(x):
    s = 0.0
    for i in range(1, x.shape[0]):
        s = s + np.sin(x[i]) * x[i - 1] - 0.5 * x[i] / (1.0 + x[i] * x[i])
    return s


def _writes(x):
    y = np.empty_like(x)
    y[0] = x[0]
    for i in range(1, x.shape[0]):
        y[i] = 0.5 * y[i - 1] + x[i] * x[i]
    y[2:5] = np.cos(x[2:5])
    return np.sum(y * y)


def _f32_scalars(x):
    c = F32(1.5)
    return np.sum(x * c) * F32(0.25) + c * x[0] * x[1] + np.sum(np.log1p(x * x)) * 2.5


def _branches(x):
    # a comparison f branches on (the same way at every call here): a guard of the plan
    if np.sum(x * x) > 0.5:
        return np.sum(x ** 3)
    return np.sum(np.cos(x))


FUNCS = [_chain, _broadcast, _reductions, _matmul, _indexing, _scalar_loop, _writes,
         _f32_scalars, _branches]


def _x(dt=F32, n=20):
    return _RNG.standard_normal(n).astype(dt)


def _same(a, b, tol=0.0):
    """Bitwise equality, dtype and type included; with ``tol``, equality up to ``tol`` times
    the larger of 1 and the largest magnitude (the compiled kernels' own sin, exp and
    summation order round differently from NumPy's, as they do for float64)."""
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for u, w in zip(a, b):
            _same(u, w, tol)
        return
    if a is None:
        return
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    if not tol:
        assert a.tobytes() == b.tobytes(), np.max(np.abs(a.astype(float) - b.astype(float)))
        return
    scale = max(1.0, float(np.max(np.abs(b))))
    assert float(np.max(np.abs(a.astype(float) - b.astype(float)))) <= tol * scale


def _tol(compile):
    return 64 * float(np.finfo(F32).eps) if compile else 0.0


def _caches(make, f, args, compile):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mp.CompileFallbackWarning)
        return make(f, *args, compile=compile), make(f, *args, replay=False)


@pytest.mark.parametrize("compile", [False, True])
@pytest.mark.parametrize("f", FUNCS)
def test_gradient_replays_float32_bitwise(f, compile):
    c, rec = _caches(mp.prepare_gradient_cache, f, (_x(),), compile)
    for k in range(4):
        x = _x()
        got = mp.value_and_gradient(c, f, x)
        want = mp.value_and_gradient(rec, f, x)
        _same(got, want, _tol(compile))
        assert np.asarray(got[0]).dtype == F32 and got[1][0].dtype == F32
    assert c.replay_state().replays >= 2, c.compile_report()
    assert "gave up" not in c.compile_report().status


@pytest.mark.parametrize("compile", [False, True])
@pytest.mark.parametrize("f", FUNCS)
def test_hvp_replays_float32_bitwise(f, compile):
    c, rec = _caches(mp.prepare_hvp_cache, f, (_x(),), compile)
    for k in range(4):
        x, v = _x(), _x()
        got = mp.value_and_hvp(c, f, v, x)
        want = mp.value_and_hvp(rec, f, v, x)
        _same(got, want, _tol(compile))
        assert all(np.asarray(r).dtype == F32 for r in got)
    assert c.replay_state().replays >= 2, c.compile_report()
    assert "gave up" not in c.compile_report().status


def _mixed(x, w):
    # float32 with float64: NumPy promotes the products to float64
    return np.sum(np.sin(x) * w) + np.sum(x * x) * 0.5


def _data(x, d):
    return np.sum((x - d) ** 2 * np.float32(0.5))


@pytest.mark.parametrize("compile", [False, True])
def test_mixed_float32_float64(compile):
    c, rec = _caches(mp.prepare_gradient_cache, _mixed, (_x(), _x(np.float64)), compile)
    h, hrec = _caches(mp.prepare_hvp_cache, _mixed, (_x(), _x(np.float64)), compile)
    for k in range(4):
        x, w = _x(), _x(np.float64)
        got = mp.value_and_gradient(c, _mixed, x, w)
        _same(got, mp.value_and_gradient(rec, _mixed, x, w), _tol(compile))
        assert got[1][0].dtype == F32 and got[1][1].dtype == np.float64
        v = (_x(), _x(np.float64))
        _same(mp.value_and_hvp(h, _mixed, v, x, w), mp.value_and_hvp(hrec, _mixed, v, x, w),
              _tol(compile))
    assert c.replay_state().replays >= 2 and h.replay_state().replays >= 2


@pytest.mark.parametrize("compile", [False, True])
def test_float32_data_argument(compile):
    """A float32 argument not differentiated is data: read afresh on every replay."""
    c, rec = _caches(lambda f, *a, **k: mp.prepare_gradient_cache(f, *a, argnums=0, **k),
                     _data, (_x(), _x()), compile)
    for k in range(4):
        x, d = _x(), _x()
        _same(mp.value_and_gradient(c, _data, x, d), mp.value_and_gradient(rec, _data, x, d),
              _tol(compile))
    assert c.replay_state().replays >= 2


def test_float32_scalar_argument():
    f = lambda x, s: np.sum(np.sin(x) * s) + s * s  # noqa: E731
    c, rec = _caches(mp.prepare_gradient_cache, f, (_x(), F32(2.0)), False)
    for k in range(4):
        x, s = _x(), F32(_RNG.standard_normal())
        got = mp.value_and_gradient(c, f, x, s)
        _same(got, mp.value_and_gradient(rec, f, x, s))
        assert type(got[1][1]) is F32
    assert c.replay_state().replays >= 2


@pytest.mark.parametrize("kind", ["gradient", "hvp"])
@pytest.mark.parametrize("prepared, called", [(F32, np.float64), (np.float64, F32)])
def test_dtype_guard(kind, prepared, called):
    """A cache replays only for the dtype it was prepared with: another raises, before and
    after a plan was made."""
    make = getattr(mp, f"prepare_{kind}_cache")
    c = make(_chain, _x(prepared))

    def call(x):
        if kind == "gradient":
            return mp.value_and_gradient(c, _chain, x)
        return mp.value_and_hvp(c, _chain, np.ones_like(x), x)
    call(_x(prepared))
    call(_x(prepared))
    assert c.replay_state().replays >= 1
    with pytest.raises(mp.PreparedCacheSpecError, match="dtype"):
        call(_x(called))
    _same(call(x := _x(prepared)), call(x))  # (and it still replays)


def _vector(x):
    a = x.reshape(4, 5)
    return np.tanh(a @ a.T) * 2.5, np.sum(np.sin(x))


@pytest.mark.parametrize("f", [_vector, _chain, _writes])
def test_pullback_replays_float32_bitwise(f):
    c = mp.prepare_pullback_cache(f, _x())
    rec = mp.prepare_pullback_cache(f, _x(), replay=False)
    for k in range(4):
        x = _x()
        ybar = _seed(f(x))
        got = mp.value_and_pullback(c, f, ybar, x)
        _same(got, mp.value_and_pullback(rec, f, ybar, x))
        assert got[1][0].dtype == F32
    # (the pullback plan of a function that writes is not among what a pullback replays)
    assert f is _writes or c.replay_state().replays >= 2


def _seed(y):
    if isinstance(y, tuple):
        return tuple(_seed(u) for u in y)
    s = _RNG.standard_normal(np.shape(y)).astype(F32)
    return s if np.ndim(y) else F32(s)


@pytest.mark.parametrize("f", [_chain, _broadcast, _matmul, _scalar_loop])
def test_derivative_replays_float32_bitwise(f):
    c = mp.prepare_derivative_cache(f, _x())
    rec = mp.prepare_derivative_cache(f, _x(), replay=False)
    for k in range(4):
        x, t = _x(), _x()
        got = mp.value_and_derivative(c, f, t, x)
        _same(got, mp.value_and_derivative(rec, f, t, x))
        assert np.asarray(got[1]).dtype == F32
    assert c.replay_state().replays >= 2
