"""Prepared HVP caches lend the caller's directions to the duals uncopied (read-only views):
the results never share memory with the caller's arguments or directions, the directions are
never written, and a function that writes into its input still gets its own tangent."""
import warnings

import numpy as np
import pytest

import mooncake_py as mp


def _mlp(W2, W1, Y, X):
    h = np.maximum(W1 @ X, 0.0)
    r = Y - W2 @ h
    return np.sum(r ** 2)


def _inputs(rng):
    shapes = [(6, 8), (8, 5), (6, 4), (5, 4)]
    return [rng.standard_normal(s) for s in shapes], [rng.standard_normal(s) for s in shapes]


def _shares(out, arrays):
    return any(np.shares_memory(o, a) for o in out for a in arrays)


def test_mlp_results_own_their_memory_and_directions_are_untouched():
    rng = np.random.default_rng(0)
    args, vs = _inputs(rng)
    kept = [v.copy() for v in vs]
    c = mp.prepare_hvp_cache(_mlp, *args)
    for _ in range(3):  # record, then replay
        _y, g, hv = mp.value_and_hvp(c, _mlp, tuple(vs), *args)
        assert not _shares(list(g) + list(hv), args + vs)
        assert all(h.flags.writeable for h in hv)
        assert all(np.array_equal(v, k) for v, k in zip(vs, kept))
    assert c.replay_state().replays >= 2
    ref = mp.hvp(_mlp, argnums=(0, 1, 2, 3))(*args, tuple(vs))
    assert all(np.allclose(a, b, rtol=1e-12, atol=1e-12) for a, b in zip(hv, ref))


@pytest.mark.parametrize("f", [
    lambda x: np.sum(x ** 2) / 2,          # Hv = v: the tangent handed back whole
    lambda x: np.sum(np.reshape(x, (-1,)) ** 3),
    lambda x: 0.5 * (x @ x),
])
def test_one_argument_hv_is_never_the_direction(f):
    x, v = np.arange(1.0, 5.0), np.array([1.0, -2.0, 0.5, 3.0])
    kept = v.copy()
    c = mp.prepare_hvp_cache(f, x)
    for _ in range(3):
        _y, g, hv = mp.value_and_hvp(c, f, v, x)
        assert not np.shares_memory(hv, v) and not np.shares_memory(g, x)
        hv[...] = 7.0  # the caller may write into what it got back
        assert np.array_equal(v, kept)
    assert np.array_equal(mp.value_and_hvp(c, f, v, x)[2], mp.hvp(f)(x, v))


def test_read_only_direction_is_accepted():
    x, v = np.arange(1.0, 4.0), np.ones(3)
    v.flags.writeable = False
    f = lambda x: np.sum(np.sin(x) * x)
    c = mp.prepare_hvp_cache(f, x)
    for _ in range(3):
        _y, _g, hv = mp.value_and_hvp(c, f, v, x)
    assert np.allclose(hv, mp.hvp(f)(x, v), rtol=1e-12)


def _writes_into_buffer(x, y):
    b = np.zeros_like(x)
    b[1:] = x[:-1] * y[:-1]
    return np.sum(b ** 2)


def test_function_writing_into_a_buffer_keeps_directions():
    rng = np.random.default_rng(1)
    x, y, vx, vy = (rng.standard_normal(5) for _ in range(4))
    kx, ky = vx.copy(), vy.copy()
    c = mp.prepare_hvp_cache(_writes_into_buffer, x, y)
    ref = mp.hvp(_writes_into_buffer, argnums=(0, 1))(x, y, (vx, vy))
    for _ in range(3):
        out = mp.value_and_hvp(c, _writes_into_buffer, (vx, vy), x, y)
        assert all(np.allclose(a, b, rtol=1e-12) for a, b in zip(out[2], ref))
        assert np.array_equal(vx, kx) and np.array_equal(vy, ky)


def test_function_writing_into_its_input_writes_its_own_tangent():
    def f(x, w):
        x[0] = 2.0 * x[1]  # into the argument: the caller's x changes, its direction never
        return np.sum(x ** 2 * w)

    rng = np.random.default_rng(2)
    w = rng.standard_normal(4)
    v, vw = rng.standard_normal(4), rng.standard_normal(4)
    kv, kw = v.copy(), vw.copy()
    c = mp.prepare_hvp_cache(f, np.ones(4), w)
    for _ in range(3):
        x = np.arange(1.0, 5.0)
        _y, _g, hv = mp.value_and_hvp(c, f, (v, vw), x, w)
        x2 = np.arange(1.0, 5.0)
        ref = mp.hvp(f, argnums=(0, 1))(x2, w, (v.copy(), vw.copy()))
        assert np.array_equal(x, x2)
        assert all(np.allclose(a, b, rtol=1e-12) for a, b in zip(hv, ref))
        assert np.array_equal(v, kv) and np.array_equal(vw, kw)


def test_next_call_works_after_an_exception():
    def f(x):
        if np.any(np.isnan(x)):
            raise ValueError("nan input")
        return np.sum(np.exp(x))

    x, v = np.zeros(3), np.ones(3)
    c = mp.prepare_hvp_cache(f, x)
    mp.value_and_hvp(c, f, v, x)
    mp.value_and_hvp(c, f, v, x)
    with pytest.raises(ValueError, match="nan input"):
        mp.value_and_hvp(c, f, v, np.full(3, np.nan))
    _y, _g, hv = mp.value_and_hvp(c, f, v, x)
    assert np.array_equal(hv, np.ones(3)) and np.array_equal(v, np.ones(3))


def _loop_into_buffer(x):
    b = np.zeros_like(x)
    for i in range(1, x.shape[0]):
        b[i] = x[i] * x[i - 1]
    return np.sum(b * b)


@pytest.mark.parametrize("compile", [False, True])
@pytest.mark.parametrize("f", [_loop_into_buffer, lambda x: np.sum(np.sin(x) * x[::-1])])
def test_one_argument_caches_keep_the_direction(f, compile):
    x, v = np.linspace(0.1, 1.0, 6), np.linspace(-1.0, 2.0, 6)
    kept = v.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = mp.prepare_hvp_cache(f, x, compile=compile)
        for _ in range(4):
            _y, g, hv = mp.value_and_hvp(c, f, v, x)
            assert not np.shares_memory(hv, v) and not np.shares_memory(g, x)
            assert np.array_equal(v, kept)
    assert np.allclose(hv, mp.hvp(f)(x, v), rtol=1e-12, atol=1e-14)


def test_function_writing_into_an_argument_that_is_a_view():
    def f(x):
        x[0] = 3.0 * x[1]  # x is a view of the caller's buffer: the write needs its own tangent
        return np.sum(x ** 3)

    v = np.array([1.0, -1.0, 2.0])
    kept = v.copy()
    c = mp.prepare_hvp_cache(f, np.ones(3))
    for _ in range(3):
        base, base2 = np.arange(4.0), np.arange(4.0)
        _y, _g, hv = mp.value_and_hvp(c, f, v, base[1:])
        ref = mp.hvp(f)(base2[1:], v.copy())
        assert np.array_equal(base, base2) and np.array_equal(v, kept)
        assert np.allclose(hv, ref, rtol=1e-12)
