"""The GPU checks, written once for any CuPy-like module ``xp``.

``tests/gpu/test_gpu.py`` runs them on CuPy and a CUDA device; ``tests/test_gpu_codegen.py``
runs them on :mod:`fake_device` (host arrays that refuse to mix with NumPy arrays, and a host
C++ ElementwiseKernel), so the same code is exercised on machines without a GPU.

Every check computes on device arrays and compares with the CPU path on host copies: results
must come back as ``xp`` arrays of the input's dtype (nothing silently moved to the host).
"""
import zlib

import numpy as np

import mooncake_py as mp
from mooncake_py.core.array_module import MixedArrayModulesError, to_host
from mooncake_py.dual import elementwise as ew, kernels_gpu
from mooncake_py.rules.derivative_table import TABLE


def rtol_for(dtype):
    return 1e-10 if np.dtype(dtype) == np.float64 else 2e-4


def assert_on_device(xp, x, dtype=None):
    assert type(x) is xp.ndarray, f"expected a {xp.__name__} array, got {type(x).__name__}"
    if dtype is not None:
        assert x.dtype == dtype, f"dtype {x.dtype}, expected {np.dtype(dtype)}"


def assert_close(got, want, rtol):
    got = np.asarray(to_host(got), dtype=np.float64)
    want = np.asarray(to_host(want), dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isfinite(got), finite)
    scale = np.max(np.abs(want[finite]), initial=0.0)
    np.testing.assert_allclose(got[finite], want[finite], rtol=rtol, atol=rtol * 1e-3 * scale)


# --- the seed example -----------------------------------------------------------------------------
def logp(x):
    return -0.5 * np.sum(x ** 2)


def check_seed_hvp(xp, n=1000, dtype=np.float32):
    """``logp(x) = -0.5 Σx²`` on a float32 device array: prepare_hvp_cache, value_and_hvp."""
    rng = np.random.default_rng(0)
    xh = rng.standard_normal(n).astype(dtype)
    vh = rng.standard_normal(n).astype(dtype)
    x, v = xp.asarray(xh), xp.asarray(vh)
    cache = mp.prepare_hvp_cache(logp, x)
    for _ in range(2):  # the cache is reusable
        y, g, hv = mp.value_and_hvp(cache, logp, v, x)
        for r in (y, g, hv):
            assert_on_device(xp, r, dtype)
        assert_close(y, -0.5 * np.sum(xh.astype(np.float64) ** 2), rtol_for(dtype))
        assert_close(g, -xh, rtol_for(dtype))
        assert_close(hv, -vh, rtol_for(dtype))


# --- API on device arrays -------------------------------------------------------------------------
def _f(x, A):
    return np.sum(np.tanh(x) * x) + x @ (A @ x) + np.sum(np.log1p(x * x))


def check_api(xp, dtype, n=6):
    """grad, value_and_grad, hvp (with lanes), hessian and the caches on device arrays."""
    rng = np.random.default_rng(1)
    xh = rng.standard_normal(n).astype(dtype)
    vh = rng.standard_normal(n).astype(dtype)
    Ah = rng.standard_normal((n, n)).astype(dtype)
    x, v, A = xp.asarray(xh), xp.asarray(vh), xp.asarray(Ah)
    f = (lambda z: _f(z, A))
    fh = (lambda z: _f(z, Ah))
    rtol = rtol_for(dtype)

    g = mp.grad(f)(x)
    assert_on_device(xp, g, dtype)
    assert_close(g, mp.grad(fh)(xh), rtol)
    val, g2 = mp.value_and_grad(f)(x)
    assert_on_device(xp, val, dtype)
    assert_close(val, fh(xh), rtol)
    hv = mp.hvp(f)(x, v)
    assert_on_device(xp, hv, dtype)
    assert_close(hv, mp.hvp(fh)(xh, vh), rtol)
    V = xp.asarray(np.stack([vh, 2 * vh, -vh]))
    hvs = mp.hvp(f, lanes=True)(x, V)
    assert_on_device(xp, hvs, dtype)
    assert_close(hvs, np.stack([to_host(hv), 2 * to_host(hv), -to_host(hv)]), rtol * 10)
    c = mp.prepare_gradient_cache(f, x)
    y, (gc,) = mp.value_and_gradient(c, f, x)
    assert_on_device(xp, gc, dtype)
    assert_close(gc, g, rtol)


def check_hessian(xp, dtype, n=5):
    """mp.hessian and the Hessian cache on a device array, against the CPU Hessian."""
    rng = np.random.default_rng(2)
    xh = rng.standard_normal(n).astype(dtype)
    Ah = rng.standard_normal((n, n)).astype(dtype)
    A = xp.asarray(Ah)
    H = mp.hessian(lambda z: _f(z, A))(xp.asarray(xh))
    assert_on_device(xp, H, dtype)
    want = mp.hessian(lambda z: _f(z, Ah))(xh)
    assert_close(H, want, rtol_for(dtype) * 10)
    f = (lambda z: _f(z, A))
    c = mp.prepare_hessian_cache(f, xp.asarray(xh), chunk_size=2)
    y, g, H2 = mp.value_gradient_and_hessian(c, f, xp.asarray(xh))
    assert_on_device(xp, H2, dtype)
    assert_close(H2, want, rtol_for(dtype) * 10)


def check_mixed_inputs_raise(xp):
    """A host direction for a device point (and the reverse) is refused with a clear error."""
    x = xp.asarray(np.ones(4))
    for args in [(x, np.ones(4)), (np.ones(4), xp.ones(4))]:
        try:
            mp.hvp(logp)(*args)
        except MixedArrayModulesError as e:
            assert "cupy.asarray" in str(e)
        else:
            raise AssertionError("mixing host and device arrays was not refused")


# --- the elementwise kernels against their CPU twins -------------------------------------------------
def _logu(rng, lo, hi, n):
    return np.exp(rng.uniform(np.log(lo), np.log(hi), n))


def _real(lo=1e-3, hi=30.0):
    return lambda rng, n: _logu(rng, lo, hi, n) * rng.choice([-1.0, 1.0], n)


def _pos(lo=1e-3, hi=1e3):
    return lambda rng, n: _logu(rng, lo, hi, n)


def _interval(lo, hi):
    return lambda rng, n: rng.uniform(lo, hi, n)


DOMAINS = {
    "sqrt": _pos(), "cbrt": _real(1e-3, 1e3), "reciprocal": _real(1e-3, 1e3), "log": _pos(),
    "log2": _pos(), "log10": _pos(), "log1p": _interval(-0.9, 1e3), "exp": _real(1e-3, 20.0),
    "exp2": _real(1e-3, 20.0), "expm1": _real(1e-3, 20.0), "sin": _real(1e-3, 1e2),
    "cos": _real(1e-3, 1e2), "tan": _interval(-1.4, 1.4), "arcsin": _interval(-0.99, 0.99),
    "arccos": _interval(-0.99, 0.99), "arctan": _real(1e-3, 1e3), "sinh": _real(1e-3, 20.0),
    "cosh": _real(1e-3, 20.0), "tanh": _real(1e-3, 10.0), "arcsinh": _real(1e-3, 1e3),
    "arccosh": lambda rng, n: 1.0 + _logu(rng, 1e-3, 1e3, n), "arctanh": _interval(-0.99, 0.99),
    "logit": _interval(1e-3, 1 - 1e-3), "gammaln": _pos(1e-2, 1e2), "psi": _pos(1e-2, 1e2),
    "erf": _real(1e-3, 4.0), "erfc": _real(1e-3, 4.0), "ndtr": _real(1e-3, 8.0),
    "log_ndtr": _real(1e-3, 30.0), "expit": _real(1e-3, 20.0),
}
BINARY_DOMAINS = {
    "divide": (_real(1e-2, 1e2), _real(1e-2, 1e2)),
    "power": (_pos(1e-2, 1e2), _interval(-3.0, 3.0)),
    "float_power": (_pos(1e-2, 1e2), _interval(-3.0, 3.0)),
    "remainder": (_real(1e-2, 1e2), _real(0.1, 10.0)),
    "fmod": (_real(1e-2, 1e2), _real(0.1, 10.0)),
    "xlogy": (_real(1e-2, 1e2), _pos(1e-2, 1e2)),
    "logaddexp": (_real(1e-2, 30.0), _real(1e-2, 30.0)),
    "logaddexp2": (_real(1e-2, 30.0), _real(1e-2, 30.0)),
}


def kernel_inputs(entry, dtype, shape=(4, 33), lanes=3):
    """Host inputs for an entry's kernels: primals (``b`` broadcast along rows), tangents with
    ``lanes`` lanes (0: none), a cotangent and its tangent."""
    rng = np.random.default_rng(zlib.crc32(entry.name.encode()))
    n = int(np.prod(shape))
    if entry.nin == 1:
        xs = [DOMAINS.get(entry.name, _real())(rng, n).reshape(shape)]
    else:
        sa, sb = BINARY_DOMAINS.get(entry.name, (_real(1e-2, 1e2), _real(1e-2, 1e2)))
        xs = [sa(rng, n).reshape(shape), sb(rng, shape[-1])]
    xs = [x.astype(dtype) for x in xs]
    lead = (lanes,) if lanes else ()
    ts = [rng.standard_normal(lead + x.shape).astype(dtype) for x in xs]
    g = rng.standard_normal(shape).astype(dtype)
    tg = rng.standard_normal(lead + shape).astype(dtype)
    return xs, ts, g, tg


def check_kernel_twin(xp, name, dtype, lanes):
    """The GPU frule and dual-pullback kernels of one table entry against the CPU program
    (the NumPy composition on host copies of the same inputs)."""
    entry = TABLE[name]
    rtol = rtol_for(dtype) * (10 if np.dtype(dtype) == np.float32 else 1)
    xs, ts, g, tg = kernel_inputs(entry, dtype, lanes=lanes)
    present = (True,) * entry.nin
    dev = [xp.asarray(x) for x in xs]
    dts = [xp.asarray(t) for t in ts]
    a, b = xs[0], (xs[1] if entry.nin == 2 else None)
    ta, tb = ts[0], (ts[1] if entry.nin == 2 else None)
    da, db = dev[0], (dev[1] if entry.nin == 2 else None)
    dta, dtb = dts[0], (dts[1] if entry.nin == 2 else None)
    uf = entry.ufunc
    with np.errstate(all="ignore"):
        # frule: (a, ȧ[, b, ḃ]) -> (y, ẏ); the CPU twin is the lane-aware NumPy rule
        cpu = ew._op_frule(entry)((a,) if b is None else (a, b),
                                  (ta,) if b is None else (ta, tb), lanes, {})
        prog = ew.program(entry, "f", 0, present)
        got = kernels_gpu.frule(prog, uf, da, db, dta, dtb, lanes)
        if entry.name == "float_power" and np.dtype(dtype) != np.float64:
            assert got is None  # float_power computes in float64: the composition path
        else:
            assert got is not None, "the GPU path refused device arrays"
            assert_on_device(xp, got[0], cpu[0].dtype)
            assert_on_device(xp, got[1], cpu[0].dtype)
            assert_close(got[0], cpu[0], rtol)
            assert_close(got[1], cpu[1], rtol)
        # dual pullbacks: (g, ġ, a, ȧ[, b, ḃ], y) -> (r, ṙ), one per input
        y = uf(*xs)
        dy, dg, dtg = xp.asarray(y), xp.asarray(g), xp.asarray(tg)
        for k in range(entry.nin):
            prog = ew.program(entry, "p", k, (True,) + present)
            r, tr = ew._pullback_native((entry, k, g) + ((a, y) if b is None else (a, b, y)),
                                        (None, None, tg) + ((ta, None) if b is None else
                                                            (ta, tb, None)), lanes, {})
            got = kernels_gpu.pullback(prog, dg, dtg, da, dta, db, dtb, dy, lanes)
            if entry.name == "float_power" and np.dtype(dtype) != np.float64:
                assert got is None  # y is float64: dtypes differ, the composition path
                continue
            assert got is not None, "the GPU path refused device arrays"
            assert_on_device(xp, got[0], dtype)
            assert_on_device(xp, got[1], dtype)
            assert_close(got[0], r, rtol)
            assert_close(got[1], tr, rtol)


# --- the benchmark suite ------------------------------------------------------------------------------
def device_namespace(xp):
    """The suite's namespace for device inputs: ``np.`` functions (which dispatch to ``xp``),
    with the constructors taken from ``xp`` so that constants live on the device too."""
    from benchmarks.namespaces import Namespace, numpy_namespace
    host = numpy_namespace()
    return Namespace(f"numpy over {xp.__name__}", np, eye=xp.eye, asarray=xp.asarray,
                     linalg=host.linalg, special=host.special)


def check_suite_case(xp, name, dtype):
    """A benchmark case's gradient (and one HVP) on device arrays of ``dtype`` against the CPU
    path on host copies."""
    from benchmarks.namespaces import numpy_namespace
    from benchmarks.suite import CASES
    case = CASES[name]
    args = [np.asarray(a, dtype=dtype) if np.ndim(a) else dtype(a)
            for a in case.make_inputs(np.random.default_rng(3))]
    dargs = [xp.asarray(a) for a in args]
    g_host, diff_host = case.closure(numpy_namespace(), args)
    g_dev, diff_dev = case.closure(device_namespace(xp), dargs)
    nums = tuple(range(len(diff_dev)))
    want = mp.grad(g_host, argnums=nums)(*diff_host)
    got = mp.grad(g_dev, argnums=nums)(*diff_dev)
    rtol = 1e-8 if np.dtype(dtype) == np.float64 else 2e-3
    for gd, gh, x in zip(got, want, diff_dev):
        assert_on_device(xp, gd)
        assert_close(gd, gh, rtol)
    rng = np.random.default_rng(4)
    vs = tuple(rng.standard_normal(np.shape(d)).astype(dtype) for d in diff_host)
    hv_host = mp.hvp(g_host, argnums=nums)(*diff_host, vs)
    hv_dev = mp.hvp(g_dev, argnums=nums)(*diff_dev, tuple(xp.asarray(v) for v in vs))
    for hd, hh in zip(hv_dev, hv_host):
        assert_on_device(xp, hd)
        assert_close(hd, hh, rtol * 10)
