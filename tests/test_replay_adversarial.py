"""Adversarial programs for prepared-cache replay (tape/replay.py, replay_writes.py,
source_replay.py): code a NumPy user might write that stresses what a plan assumes about
aliasing, buffers, layouts, dtypes, non-finite values, chunking and reuse. Every replayed
result is compared with a fresh recording of the same call (and, where the program is smooth,
with finite differences), over several calls with new and repeated values; each test also
checks that the cache really replayed, so that a silent fallback to recording cannot make it
pass."""
import sys
import threading

import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.testing import fd_gradient
import mooncake_py.transforms.second_order as so
from mooncake_py.replay import source as sr
from mooncake_py.replay.source import SourceReplayer


def _inputs(shape, n=3, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape) for _ in range(n)]


def _close(got, want, rtol=1e-12, atol=1e-14):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=rtol, atol=atol)


def _hvp_cache(f, x):
    """An HVP cache replaying generated source, as HVPCache will by default."""
    c = mp.prepare_hvp_cache(f, x)
    c._replay = SourceReplayer(dual=True, kind="hvp")
    return c


def _check_all(f, xs, fd=True, min_replays=4):
    """Gradient, pullback and HVP caches of ``f`` against fresh recordings (and finite
    differences), over ``xs`` then its first element twice more."""
    gc = mp.prepare_gradient_cache(f, xs[0])
    pc = mp.prepare_pullback_cache(f, xs[0])
    hc = _hvp_cache(f, xs[0])
    rng = np.random.default_rng(7)
    for x in xs + xs[:1] * 2:
        v = rng.standard_normal(x.shape)
        y0, g0 = mp.value_and_grad(f)(x.copy())
        y, (g,) = mp.value_and_gradient(gc, f, x.copy())
        _close(y, y0)
        _close(g, g0)
        y, (g,) = mp.value_and_pullback(pc, f, 1.0, x.copy())
        _close(y, y0)
        _close(g, g0)
        y, g, hv = mp.value_and_hvp(hc, f, v, x.copy())
        _close(g, g0)
        _close(hv, mp.hvp(f)(x.copy(), v), rtol=1e-10, atol=1e-12)
        if fd:
            _close(g0, fd_gradient(f, x), rtol=1e-5, atol=1e-6)
    for c in (gc, pc, hc):
        assert c._replay.replays >= min_replays


# --- aliasing: views made before writes, views of views, overlaps ----------------------------
def stale_view(x):
    y = np.zeros_like(x)
    v = y[2:5]                       # a view made before the writes
    y[3] = x[0] * x[1]
    s = np.sum(v * x[:3])            # reads the written element through it
    y[3] = x[2] ** 2                 # the same element again
    return s + np.sum(y * x) + y[3] * x[4]


def transposed_view_of_a_chain(x):
    y = np.empty_like(x)
    t = y.T                          # made before a chain of element writes
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            y[i, j] = np.sin(np.cos(x[i, j])) * x[i, j]
    return np.sum(t * x.T) + t[1, 2] * x[0, 0]


def raveled_view_written(x):
    y = np.zeros_like(x)
    r = y.reshape(-1)
    for k in range(x.size):
        r[k] = np.exp(np.sin(x[k // x.shape[1], k % x.shape[1]])) * 2.0
    r[5] = r[5] * x[0, 0]            # read after the write, through the view
    return np.sum(y * x) + r[6]


def view_of_view(x):
    y = np.zeros_like(x)
    b = y[1:][:, 1:3]
    b[0, 1] = x[0, 0] * x[1, 1]
    b[1, 0] = b[0, 1] + x[2, 2]
    return np.sum(y ** 2) + np.sum(b * x[1:, 1:3])


def overlapping_slices(x):
    y = np.zeros_like(x)
    y[0:4] = x[:4] * 2.0
    y[2:6] = y[0:4] * x[2:6]         # the value overlaps the region written
    y[1:3] = y[2:4]
    return np.sum(y * y)


def chain_then_reads_of_overwritten(x):
    y = np.zeros_like(x)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            y[i, j] = np.sin(x[i, j]) * x[i, j]
    a = y[0, 0] * 1.0                # the chain's value, read before it is overwritten
    y[0, 0] = np.cos(x[0, 0])
    for j in range(x.shape[1]):      # a second chain over elements already written
        y[1, j] = np.exp(x[2, j]) * y[1, j]
    return np.sum(y * y) + a * 3.0


def two_buffers_one_escapes(x):
    bufs = []
    for r in range(2):
        y = np.zeros_like(x)
        bufs.append(y)
        for i in range(x.size):
            y[i] = np.sin(x[i]) * (r + 1.0)
    bufs[0][3] = bufs[1][4] * 2.0
    return np.sum(bufs[0] * bufs[1])


def like_constructors(x):
    a = np.zeros(x.size, like=x)
    b = np.ones(x.size, like=x)
    e = np.eye(x.size, like=x)
    for i in range(x.size):
        a[i] = np.sin(x[i]) * x[(i + 1) % x.size]
        b[i] = b[i] * x[i]
        e[i, i] = x[i] * x[i]
    z = np.zeros(x.size, like=x)     # must still be zeros after the writes above
    return np.sum(a * b) + np.sum(e @ x) + np.sum(z * x)


MATRIX = [stale_view, transposed_view_of_a_chain, raveled_view_written, view_of_view,
          chain_then_reads_of_overwritten]
VECTOR = [overlapping_slices, two_buffers_one_escapes, like_constructors]


@pytest.mark.parametrize("f", MATRIX + VECTOR, ids=lambda f: f.__name__)
def test_aliasing_programs_replay_as_recorded(f):
    xs = _inputs((3, 4) if f in MATRIX else (12,))
    if f is stale_view:
        xs = [x.ravel()[:6] for x in xs]
    _check_all(f, xs)


def returns_its_buffer(x):
    y = np.zeros_like(x)
    for i in range(x.size):
        y[i] = np.sin(x[i]) * np.cos(x[i]) + x[i]
    return y


def test_pullback_results_are_not_mutated_by_later_calls():
    xs = _inputs((12,))
    c = mp.prepare_pullback_cache(returns_its_buffer, xs[0])
    kept = []
    for k, x in enumerate(xs * 2):
        ybar = np.arange(12.0) - k
        y, (g,) = mp.value_and_pullback(c, returns_its_buffer, ybar, x)
        y0, pb = mp.vjp(returns_its_buffer, x)
        _close(y, y0)
        _close(g, pb(ybar)[0])
        kept.append((y, y.copy()))
    for y, snapshot in kept:
        np.testing.assert_array_equal(y, snapshot)
    assert type(c._replay.plan).__name__ == "SourcePlan" and c._replay.replays >= 5


# --- the user's side: results mutated in place, the same input array refilled -----------------
def naive_map(x):
    y = np.empty_like(x)
    for i in range(x.size):
        y[i] = np.sin(np.cos(np.exp(x[i]))) * x[(i + 1) % x.size]
    return np.sum(y * y)


def scalar_loop(x):
    s = 0.0
    for i in range(x.size):
        s = s + np.sin(x[i]) * x[(i + 1) % x.size] / 3 + np.sqrt(x[i] * x[i] + 1.0)
    return s


@pytest.mark.parametrize("f", [naive_map, scalar_loop, lambda x: np.sum(x * x)],
                         ids=["naive_map", "scalar_loop", "sum_sq"])
def test_results_mutated_by_the_caller_do_not_reach_the_next_call(f):
    rng = np.random.default_rng(1)
    x, v = rng.standard_normal(12), rng.standard_normal(12)
    caches = {"grad": mp.prepare_gradient_cache(f, x), "pb": mp.prepare_pullback_cache(f, x),
              "hvp": _hvp_cache(f, x), "hess": mp.prepare_hessian_cache(f, x)}
    for _ in range(4):
        x[...] = rng.standard_normal(12)   # the same array object, new values
        v[...] = rng.standard_normal(12)
        g0 = mp.grad(f)(x.copy())
        outs = {"grad": mp.value_and_gradient(caches["grad"], f, x)[1][0],
                "pb": mp.value_and_pullback(caches["pb"], f, 1.0, x)[1][0]}
        _, g, hv = mp.value_and_hvp(caches["hvp"], f, v, x)
        _, g2, H = mp.value_gradient_and_hessian(caches["hess"], f, x)
        for got in (outs["grad"], outs["pb"], g, g2):
            _close(got, g0)
        _close(hv, mp.hvp(f)(x.copy(), v.copy()), rtol=1e-10, atol=1e-12)
        _close(H, mp.hessian(f)(x.copy()), rtol=1e-10, atol=1e-12)
        for r in (outs["grad"], outs["pb"], g, hv, g2, H):
            r *= -7.0                       # an optimizer scaling its step in place
            r.flat[0] = 1e9
    assert caches["grad"]._replay.replays >= 3 and caches["hvp"]._replay.replays >= 3


# --- layouts of the arguments ------------------------------------------------------------------
def element_reads_2d(x):
    s = 0.0
    for i in range(3):
        for j in range(4):
            s = s + np.sin(x[i, j]) * x[i, (j + 1) % 4] + x[i, -1] * x[-1, j]
    return s


def element_writes_2d(x):
    y = np.empty_like(x)
    for i in range(3):
        for j in range(4):
            y[i, j] = np.sin(x[i, j]) * x[i, (j + 1) % 4]
    y[-1, -2] = x[0, 0] * 3.0
    return np.sum(y * np.arange(12.0).reshape(3, 4))


@pytest.mark.parametrize("f", [element_reads_2d, element_writes_2d], ids=lambda f: f.__name__)
@pytest.mark.parametrize("prepared_order", ["C", "F"])
def test_fortran_strided_and_readonly_arguments(f, prepared_order):
    base = np.random.default_rng(2).standard_normal((3, 4))
    readonly = base.copy()
    readonly.flags.writeable = False
    layouts = [base.copy(), np.asfortranarray(base), np.repeat(base, 2, axis=1)[:, ::2],
               base[::-1, ::-1].copy()[::-1, ::-1], readonly]
    first = np.asfortranarray(base) if prepared_order == "F" else base.copy()
    gc, hc = mp.prepare_gradient_cache(f, first), _hvp_cache(f, first)
    v = np.random.default_rng(3).standard_normal((3, 4))
    y0, g0 = mp.value_and_grad(f)(base.copy())
    hv0 = mp.hvp(f)(base.copy(), v)
    for x in layouts * 2:
        y, (g,) = mp.value_and_gradient(gc, f, x)
        _close(y, y0)
        _close(g, g0)
        _close(mp.value_and_hvp(hc, f, v, x)[2], hv0, rtol=1e-10, atol=1e-12)
    assert type(gc._replay.plan).__name__ == "SourcePlan" and gc._replay.replays >= 9
    assert hc._replay.replays >= 9


# --- chunking: segment and function boundaries at every position -------------------------------
def mixed_with_writes(x):
    y = np.zeros_like(x)
    for i in range(x.size):
        y[i] = np.sin(x[i]) * x[(i + 1) % x.size]
    z = np.exp(y * 0.1) * x          # array ops between the scalar runs
    s = 0.0
    for i in range(x.size):
        s = s + z[i] * np.tanh(x[i]) + y[i]
    y[2] = s * 0.5                   # a write after the buffer was read by array ops
    return np.sum(y * z)


def shared_outside_value(x):
    a = x[0] * x[1]                  # read by both runs and by an array op
    s = 0.0
    for i in range(x.size):
        s = s + a * np.sin(x[i]) + a
    t = np.sum(x * a)
    for i in range(x.size):
        s = s * 0.9 + a * x[i]
    return s + t


@pytest.mark.parametrize("min_run,max_run", [(2, 3), (3, 7), (8, 9), (8, 4000)])
@pytest.mark.parametrize("f", [naive_map, mixed_with_writes, shared_outside_value],
                         ids=lambda f: f.__name__)
def test_runs_cut_at_every_length(monkeypatch, f, min_run, max_run):
    monkeypatch.setattr(sr, "MIN_RUN", min_run)
    monkeypatch.setattr(sr, "MAX_RUN", max_run)
    _check_all(f, _inputs((12,)), fd=False)


# --- failures: an exception in a replayed rule, then the next call -----------------------------
def cholesky_of_written_matrix(x):
    A = np.zeros_like(x, shape=(3, 3))
    k = 0
    for i in range(3):
        for j in range(3):
            A[i, j] = x[k] * x[(k + 1) % 9]
            k += 1
    L = np.linalg.cholesky(A @ A.T + np.eye(3) * x[0])
    s = 0.0
    for i in range(3):
        s = s + np.log(L[i, i]) * 2.0
    return s


def test_error_inside_a_replay_then_the_next_call_works():
    good = _inputs((9,), n=3, seed=4)
    for g in good:
        g[0] = 3.0 + abs(g[0])
    bad = good[1].copy()
    bad[0] = -50.0                   # not positive definite: LinAlgError mid-plan
    gc, hc = mp.prepare_gradient_cache(cholesky_of_written_matrix, good[0]), \
        _hvp_cache(cholesky_of_written_matrix, good[0])
    v = good[2]
    for x in [good[0], good[1], bad, good[2], bad, bad, good[0], bad, good[1]]:
        if x is bad:
            with pytest.raises(np.linalg.LinAlgError):
                mp.value_and_gradient(gc, cholesky_of_written_matrix, x)
            with pytest.raises(np.linalg.LinAlgError):
                mp.value_and_hvp(hc, cholesky_of_written_matrix, v, x)
            continue
        _close(mp.value_and_gradient(gc, cholesky_of_written_matrix, x)[1][0],
               mp.grad(cholesky_of_written_matrix)(x))
        _close(mp.value_and_hvp(hc, cholesky_of_written_matrix, v, x)[2],
               mp.hvp(cholesky_of_written_matrix)(x, v), rtol=1e-10, atol=1e-12)
    assert gc._replay.replays >= 4 and not gc._replay.disabled
    assert hc._replay.replays >= 4 and not hc._replay.disabled


# --- non-finite values: inputs and directions ---------------------------------------------------
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (inf - inf in the tangents, as NumPy)
def test_special_tangents_in_generated_hvp_code():
    x = np.random.default_rng(5).standard_normal(12)
    c = _hvp_cache(scalar_loop, x)
    for v in (np.zeros(12), np.full(12, -0.0), np.full(12, np.inf), np.full(12, np.nan),
              np.random.default_rng(6).standard_normal(12)):
        got = mp.value_and_hvp(c, scalar_loop, v, x)[2]
        want = mp.hvp(scalar_loop)(x, v)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, equal_nan=True)
        np.testing.assert_array_equal(np.signbit(got)[~np.isnan(want)],
                                      np.signbit(want)[~np.isnan(want)])
    assert type(c._replay.plan).__name__ == "SourcePlan" and c._replay.replays >= 4


# --- threads -----------------------------------------------------------------------------------
def test_threads_calling_one_cache():
    """Several threads sharing one cache from its first call (the plan is recorded and its
    code generated while the others call): each gets its own call's derivative. Results may
    alias cache buffers, so each thread checks a copy taken right after its call."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)      # switch threads often, inside the replay
    try:
        X = _inputs((12,), n=6, seed=8)
        V = _inputs((12,), n=6, seed=9)
        want_g = [mp.grad(mixed_with_writes)(x) for x in X]
        want_h = [mp.hvp(mixed_with_writes)(x, v) for x, v in zip(X, V)]
        gc, hc = mp.prepare_gradient_cache(mixed_with_writes, X[0]), \
            _hvp_cache(mixed_with_writes, X[0])
        errors = []

        def work(t):
            for rep in range(15):
                k = (t * 3 + rep) % 6
                try:
                    g = np.array(mp.value_and_gradient(gc, mixed_with_writes, X[k])[1][0])
                    hv = np.array(mp.value_and_hvp(hc, mixed_with_writes, V[k], X[k])[2])
                    if not (np.allclose(g, want_g[k]) and np.allclose(hv, want_h[k])):
                        errors.append((t, rep))
                except Exception as e:  # (reported below, with the thread's call)
                    errors.append((t, rep, repr(e)))

        threads = [threading.Thread(target=work, args=(t,)) for t in range(3)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(old)
    assert errors == []
    assert gc._replay.replays >= 30 and hc._replay.replays >= 30


# --- in-place methods on a buffer between two scalar runs ---------------------------------------
IN_PLACE = {
    "fill": lambda y, x: y.fill(2.0),
    "sort": lambda y, x: y.sort(),          # a permutation that depends on the values
    "imul_int": lambda y, x: y.__imul__(2),
    "ipow": lambda y, x: y.__ipow__(2),
    "transposed_iadd": lambda y, x: y.reshape(2, 3).T.__iadd__(x.reshape(2, 3).T),
}


@pytest.mark.parametrize("name", sorted(IN_PLACE))
def test_in_place_methods_on_a_written_buffer(name):
    op = IN_PLACE[name]

    def f(x):
        y = np.zeros_like(x)
        for i in range(6):
            y[i] = np.sin(x[i]) * x[(i + 1) % 6] + 0.1
        op(y, x)
        s = 0.0
        for i in range(6):
            s = s + np.cos(y[i]) * x[i]
        return s

    _check_all(f, _inputs((6,)), fd=name != "sort")


# --- value-dependent masks and orders: same count, other positions -----------------------------
MASKED = {
    "boolean_index": lambda x: np.sum(x[x > 0] ** 2 * np.arange(6.0)),
    "where": lambda x: np.sum(np.where(x > 0, x * x, np.sin(x)) * np.arange(12.0)),
    "times_mask": lambda x: np.sum(x * (x > 0) * np.arange(12.0)),
    "sum_where": lambda x: np.sum(x * x * np.arange(12.0), where=x > 0),
    "argsort_index": lambda x: np.sum(x[np.argsort(x)] * np.arange(12.0)),
    "sort": lambda x: np.sum(np.sort(x) * np.arange(12.0)),
    "relu_loop": lambda x: sum(np.maximum(x[i], 0.0) * i for i in range(12)),
}


@pytest.mark.filterwarnings("ignore:the prepared")  # (guards flip: the caches stop replaying)
@pytest.mark.parametrize("name", sorted(MASKED))
def test_masks_with_the_same_count_at_other_positions(name):
    """Each call permutes the same values: a guard that checked only a mask's count or a
    result's shape would replay the recorded positions (a wrong derivative)."""
    f = MASKED[name]
    base = np.array([1., -1, 2, -2, 3, -3, .5, -.5, 1.5, -1.5, .2, -.2])
    xs = [base[np.random.default_rng(k).permutation(12)] * (1 + 0.1 * k) for k in range(4)]
    gc, hc = mp.prepare_gradient_cache(f, xs[0]), _hvp_cache(f, xs[0])
    v = np.linspace(-1, 1, 12)
    for x in xs + xs[:2]:
        _close(mp.value_and_gradient(gc, f, x)[1][0], mp.grad(f)(x))
        _close(mp.value_and_hvp(hc, f, v, x)[2], mp.hvp(f)(x, v), rtol=1e-10, atol=1e-12)


# --- bad cotangents and directions, then a good call ---------------------------------------------
def test_bad_cotangent_or_direction_then_the_next_call_works():
    x = np.linspace(-1, 1, 12)
    pc, hc = mp.prepare_pullback_cache(returns_its_buffer, x), _hvp_cache(scalar_loop, x)
    _, pb = mp.vjp(returns_its_buffer, x)
    good = np.arange(12.0)
    for bad in (np.arange(13.0), np.ones((3, 4)), 2.0, [1.0] * 12):
        with pytest.raises(mp.errors.MooncakeError):
            mp.value_and_pullback(pc, returns_its_buffer, bad, x)
        with pytest.raises(mp.errors.MooncakeError):
            mp.value_and_hvp(hc, scalar_loop, bad, x)
        _close(mp.value_and_pullback(pc, returns_its_buffer, good, x)[1][0], pb(good)[0])
        _close(mp.value_and_hvp(hc, scalar_loop, good, x)[2], mp.hvp(scalar_loop)(x, good),
               rtol=1e-10, atol=1e-12)
    assert pc._replay.replays >= 3 and hc._replay.replays >= 3


# --- found today: a view that NumPy shares, the tape copies -------------------------------------
def astype_without_copy(x):
    y = np.zeros_like(x)
    y[...] = x * 0.5
    z = y.astype(np.float64, copy=False)   # NumPy: z is y (same dtype, no copy)
    y[0] = x[1] * 3.0                      # so this write shows through z
    return np.sum(z)


def test_astype_without_copy_sees_later_writes():
    x = np.arange(3.0)
    y, g = mp.value_and_grad(astype_without_copy)(x)
    assert y == astype_without_copy(x) == 4.5
    _close(g, fd_gradient(astype_without_copy, x), rtol=1e-6, atol=1e-8)
    c = mp.prepare_gradient_cache(astype_without_copy, x)
    for k in range(3):
        xk = x + k
        yc, (gc,) = mp.value_and_gradient(c, astype_without_copy, xk)
        assert yc == astype_without_copy(xk)
        _close(gc, fd_gradient(astype_without_copy, xk), rtol=1e-6, atol=1e-8)


def test_astype_copies_where_numpy_copies():
    def f(x):
        y = np.zeros_like(x)
        y[...] = x * 0.5
        z = y.astype(np.float64)            # a copy: the write below must not show
        w = y.astype(np.float32, copy=False)   # another dtype: a copy whatever copy says
        y[0] = x[1] * 3.0
        return np.sum(z) + np.sum(w.astype(np.float64))
    x = np.arange(3.0)
    y, g = mp.value_and_grad(f)(x)
    assert y == f(x)
    _close(g, [1.0, 1.0, 1.0])   # (0.5 through z, 0.5 through w; float32 spoils differences)
