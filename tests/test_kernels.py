"""Fused numba kernels vs the NumPy-composition path, for every derivative-table entry; lazy
compilation; the elementwise frules against finite differences.

Cold, the kernels of the whole table take ~20 s to compile (about 0.13 s each); numba's disk
cache (see mooncake_py/dual/kernels_cpu.py) makes later runs take a second or two. float64 is
checked for every entry, float32 for a subset.
"""
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest

from mooncake_py.dual import dual, elementwise as ew
from mooncake_py.dual import codegen
from mooncake_py.rules.derivative_table import TABLE, load_scipy
from mooncake_py.rules.elementwise import ew_pullback
from mooncake_py.testing import test_rule

load_scipy()  # the table's scipy.special section registers on first need
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _logu(rng, lo, hi, n):
    return np.exp(rng.uniform(np.log(lo), np.log(hi), n))


def _signed(rng, lo, hi, n):
    return _logu(rng, lo, hi, n) * rng.choice([-1.0, 1.0], n)


# Per entry: samplers for a (and b) covering small and large magnitudes inside the domain.
def _real(lo=1e-6, hi=30.0):
    return lambda rng, n: _signed(rng, lo, hi, n)


def _pos(lo=1e-6, hi=1e6):
    return lambda rng, n: _logu(rng, lo, hi, n)


def _interval(lo, hi):
    return lambda rng, n: rng.uniform(lo, hi, n)


def _orders(hi=4):
    return lambda rng, n: rng.integers(0, hi, n).astype(float)


DOMAINS = {
    "sqrt": _pos(), "cbrt": _real(1e-6, 1e6), "reciprocal": _real(1e-6, 1e6),
    "log": _pos(), "log2": _pos(), "log10": _pos(), "log1p": _interval(-0.999, 1e3),
    "exp": _real(1e-6, 50.0), "exp2": _real(1e-6, 50.0), "expm1": _real(1e-8, 50.0),
    "sin": _real(1e-6, 1e3), "cos": _real(1e-6, 1e3), "tan": _interval(-1.5, 1.5),
    "arcsin": _interval(-0.999, 0.999), "arccos": _interval(-0.999, 0.999),
    "arctan": _real(1e-6, 1e6), "sinh": _real(1e-6, 50.0), "cosh": _real(1e-6, 50.0),
    "tanh": _real(1e-6, 20.0), "arcsinh": _real(1e-6, 1e6),
    "arccosh": lambda rng, n: 1.0 + _logu(rng, 1e-4, 1e4, n), "arctanh": _interval(-0.999, 0.999),
    "logit": _interval(1e-4, 1 - 1e-4), "gammaln": _pos(1e-3, 1e3), "psi": _pos(1e-3, 1e3),
    "erf": _real(1e-6, 5.0), "erfc": _real(1e-6, 5.0), "ndtr": _real(1e-6, 8.0),
    "log_ndtr": _real(1e-6, 30.0), "expit": _real(1e-6, 30.0),
    "erfinv": _interval(-0.999, 0.999), "erfcinv": _interval(1e-3, 1.999),
    "ndtri": _interval(1e-4, 1 - 1e-4), "loggamma": _pos(1e-3, 1e3), "gamma": _pos(1e-3, 100.0),
    "rgamma": _pos(1e-3, 100.0), "entr": _pos(), "y0": _pos(1e-3, 1e3), "y1": _pos(1e-3, 1e3),
}
BINARY_DOMAINS = {
    "divide": (_real(1e-3, 1e3), _real(1e-3, 1e3)),
    "power": (_pos(1e-3, 1e2), _interval(-3.0, 3.0)),
    "float_power": (_pos(1e-3, 1e2), _interval(-3.0, 3.0)),
    "remainder": (_real(1e-3, 1e3), _real(0.1, 10.0)),
    "fmod": (_real(1e-3, 1e3), _real(0.1, 10.0)),
    "xlogy": (_real(1e-3, 1e3), _pos(1e-3, 1e3)),
    "xlog1py": (_real(1e-3, 1e3), _pos(1e-3, 1e3)),
    "betaln": (_pos(1e-2, 1e2), _pos(1e-2, 1e2)), "beta": (_pos(1e-2, 1e2), _pos(1e-2, 1e2)),
    "rel_entr": (_pos(1e-3, 1e3), _pos(1e-3, 1e3)), "kl_div": (_pos(1e-3, 1e3), _pos(1e-3, 1e3)),
    "gammainc": (_pos(1e-2, 1e2), _pos(1e-3, 1e3)), "gammaincc": (_pos(1e-2, 1e2), _pos(1e-3, 1e3)),
    **{n: (_interval(0.0, 5.0), _pos(1e-3, 1e3)) for n in ("iv", "ive", "kv", "jv", "yv")},
    "yn": (_orders(), _pos(1e-2, 1e2)),  # an integer order
}
FLOAT32_SUBSET = ["sin", "tanh", "exp", "log", "sqrt", "multiply", "power", "divide", "maximum"]


def _inputs(entry, rng, n, dtype):
    if entry.nin == 1:
        samplers = (DOMAINS.get(entry.name, _real()),)
    else:
        samplers = BINARY_DOMAINS.get(entry.name, (_real(1e-3, 1e3), _real(1e-3, 1e3)))
    return [s(rng, n).astype(dtype) for s in samplers]


def _assert_close(got, want, rtol):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isfinite(got), finite)
    scale = np.max(np.abs(want[finite]), initial=0.0)
    np.testing.assert_allclose(got[finite], want[finite], rtol=rtol, atol=rtol * 1e-3 * scale)


def _cases():
    for name in TABLE:
        yield pytest.param(name, np.float64, id=f"{name}-f64")
    for name in FLOAT32_SUBSET:
        yield pytest.param(name, np.float32, id=f"{name}-f32")


@pytest.mark.parametrize("name,dtype", list(_cases()))
def test_kernels_match_numpy_composition(name, dtype):
    entry = TABLE[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    n, lanes = 257, 3
    rtol = 1e-12 if dtype == np.float64 else 1e-5
    xs = _inputs(entry, rng, n, dtype)
    ts = [rng.standard_normal((lanes, n)).astype(dtype) for _ in xs]
    present = (True,) * entry.nin
    uf = entry.ufunc
    with np.errstate(all="ignore"):
        # the frule kernel: (a, ȧ[, b, ḃ]) -> (y, ẏ), with lanes
        prog = ew.program(entry, "f", 0, present)
        a, b = xs[0], (xs[1] if entry.nin == 2 else None)
        ta, tb = ts[0], (ts[1] if entry.nin == 2 else None)
        res = ew._fused_frule(prog, uf, a, b, ta, tb, lanes)
        assert res is not None, "the fused path refused plain contiguous arrays"
        y = uf(*xs)
        assert res[0].dtype == y.dtype == dtype
        _assert_close(res[0], y, rtol)
        want, = prog.np_fn(a, b, y, None, ta, tb, None)
        _assert_close(res[1], want, rtol)
        # the dual-pullback kernels: (g, ġ, a, ȧ[, b, ḃ], y) -> (r, ṙ), one per input
        g = rng.standard_normal(n).astype(dtype)
        tg = rng.standard_normal((lanes, n)).astype(dtype)
        for k in range(entry.nin):
            if k in entry.constant:  # an order: its pullback is never asked for
                continue
            prog = ew.program(entry, "p", k, (True,) + present)
            got = ew._fused_pullback(prog, g, tg, a, ta, b, tb, y, lanes)
            assert got is not None
            r, tr = prog.np_fn(a, b, y, g, ta, tb, tg)
            _assert_close(got[0], r, rtol)
            _assert_close(got[1], tr, rtol)
            # the primal part is what the plain pullback primitive computes
            _assert_close(got[0], ew_pullback(entry, k, g, *xs, y), rtol)


@pytest.mark.parametrize("b", [2.0, 3, 0.5, -1.0, 2.5, np.float64(2.0)])
def test_power_with_constant_exponent_is_specialised_and_exact(monkeypatch, b):
    monkeypatch.setattr(ew, "KERNEL_MIN_SIZE", 0)
    rng = np.random.default_rng(0)
    x = _pos(1e-3, 1e3)(rng, 1000)
    v = rng.standard_normal(1000)
    d = np.power(dual(x, v), b)
    np.testing.assert_array_equal(d.primal, np.power(x, b))  # the very bits NumPy gives
    np.testing.assert_allclose(d.tangent, b * x ** (b - 1) * v, rtol=1e-13)


def test_specialised_exponent_never_evaluates_log_of_negative_base():
    ir = codegen.frule_ir(TABLE["power"], (True, False), const_b=2.0)
    src = codegen.numpy_source(ir, "f")
    assert "log" not in src and "pow" not in src
    with np.errstate(invalid="ignore"):  # nan primal, as NumPy gives
        d = np.power(dual(-np.linspace(1, 2, 5000), np.ones(5000)), 2.5)
    assert np.isnan(d.primal).all()
    ir = codegen.pullback_ir(TABLE["power"], 0, (True, True, False))
    assert "log" not in codegen.numpy_source(ir, "f")  # no mixed partial without ḃ


@pytest.mark.parametrize("case", ["scalar_b", "scalar_a_dual_lanes", "float32_python_scalar",
                                  "noncontiguous_falls_back", "broadcast_falls_back"])
def test_fused_path_operand_layouts(monkeypatch, case):
    monkeypatch.setattr(ew, "KERNEL_MIN_SIZE", 0)
    rng = np.random.default_rng(1)
    x, v = rng.uniform(0.5, 2, (40, 50)), rng.standard_normal((40, 50))
    if case == "scalar_b":
        d = dual(x, v)
        got = np.arctan2(d, 1.5)
        np.testing.assert_allclose(got.tangent, 1.5 / (x * x + 2.25) * v, rtol=1e-14)
    elif case == "scalar_a_dual_lanes":
        V = rng.standard_normal((3, 40, 50))
        d = dual(x, V, lanes=True)
        w = dual(np.float64(2.0), np.array([1.0, 0.0, -1.0]), like=d)
        got = w * d
        want = 2.0 * V + np.array([1.0, 0.0, -1.0])[:, None, None] * x
        np.testing.assert_allclose(got.tangent, want, rtol=1e-14)
    elif case == "float32_python_scalar":
        d = dual(x.astype(np.float32), v.astype(np.float32))
        got = np.tanh(d * 0.5)
        assert got.primal.dtype == got.tangent.dtype == np.float32
        t = np.tanh(0.5 * x)
        np.testing.assert_allclose(got.tangent, 0.5 * (1 - t * t) * v, rtol=1e-5)
    elif case == "noncontiguous_falls_back":
        d = dual(x[:, ::2], v[:, ::2])
        got = np.tanh(d)
        t = np.tanh(x[:, ::2])
        np.testing.assert_allclose(got.tangent, (1 - t * t) * v[:, ::2], rtol=1e-14)
    else:
        d = dual(x, v)
        row = np.linspace(1, 2, 50)
        got = d / row
        np.testing.assert_allclose(got.tangent, v / row, rtol=1e-14)


# --- the elementwise frules against finite differences ------------------------------------------
def _fd_inputs(entry, shape):
    rng = np.random.default_rng(7)
    if entry.nin == 1:
        s = {"exp": _real(0.1, 3), "exp2": _real(0.1, 3), "expm1": _real(0.1, 3),
             "sinh": _real(0.1, 3), "cosh": _real(0.1, 3), "sin": _real(0.1, 3),
             "cos": _real(0.1, 3), "arctan": _real(0.1, 3), "arcsinh": _real(0.1, 3),
             "log1p": _interval(-0.5, 3), "reciprocal": _real(0.3, 3), "cbrt": _real(0.3, 3),
             "sqrt": _pos(0.3, 3), "log": _pos(0.3, 3), "log2": _pos(0.3, 3),
             "log10": _pos(0.3, 3), "gammaln": _pos(0.3, 5), "psi": _pos(0.3, 5),
             "arccosh": _interval(1.2, 3), "tan": _interval(-1.2, 1.2),
             "arcsin": _interval(-0.8, 0.8), "arccos": _interval(-0.8, 0.8),
             "arctanh": _interval(-0.8, 0.8), "logit": _interval(0.1, 0.9),
             "absolute": _real(0.1, 3), "fabs": _real(0.1, 3),
             "erfinv": _interval(-0.8, 0.8), "erfcinv": _interval(0.2, 1.8),
             "ndtri": _interval(0.1, 0.9), "loggamma": _pos(0.3, 5), "gamma": _pos(0.3, 5),
             "rgamma": _pos(0.3, 5), "entr": _pos(0.3, 3), "y0": _pos(0.3, 3),
             "y1": _pos(0.3, 3),
             }.get(entry.name, _real(0.1, 3))
        return [s(rng, int(np.prod(shape))).reshape(shape)]
    sa, sb = {"divide": (_real(0.3, 3), _real(0.3, 3)),
              "power": (_pos(0.3, 3), _interval(-2, 2)),
              "float_power": (_pos(0.3, 3), _interval(-2, 2)),
              "xlogy": (_real(0.3, 3), _pos(0.3, 3)),
              "remainder": (_interval(0.1, 0.9), _interval(1.1, 2)),
              "fmod": (_interval(0.1, 0.9), _interval(1.1, 2)),
              "xlog1py": (_real(0.3, 3), _pos(0.3, 3)),
              **{n: (_pos(0.3, 3), _pos(0.3, 3)) for n in ("betaln", "beta", "rel_entr",
                                                          "kl_div", "gammainc", "gammaincc")},
              **{n: (_interval(0.2, 2.5), _pos(0.5, 3)) for n in ("iv", "ive", "kv", "jv",
                                                                 "yv")},
              "yn": (_orders(), _pos(0.5, 3)),
              }.get(entry.name, (_real(0.3, 3), _real(0.3, 3)))
    n = int(np.prod(shape))
    return [sa(rng, n).reshape(shape), sb(rng, shape[-1])]  # b broadcasts along rows


@pytest.mark.parametrize("name", list(TABLE))
def test_elementwise_frules_against_finite_differences(name):
    entry = TABLE[name]
    xs = _fd_inputs(entry, (3, 4))
    if entry.constant:  # an order (or gammainc's shape): differentiable in the other input
        a = xs[0]
        test_rule(lambda b: entry.ufunc(a, b), np.broadcast_to(xs[1], (3, 4)).copy(), ndirs=1,
                  modes=("reverse", "forward", "forward_over_reverse"))
        return
    test_rule(entry.ufunc, *xs, ndirs=1, modes=("reverse", "forward", "forward_over_reverse"))


@pytest.mark.parametrize("name", ["tanh", "log", "multiply", "power", "divide", "maximum"])
def test_fused_frules_against_finite_differences(monkeypatch, name):
    monkeypatch.setattr(ew, "KERNEL_MIN_SIZE", 0)
    entry = TABLE[name]
    xs = _fd_inputs(entry, (3, 4))
    if entry.nin == 2:
        xs[1] = np.broadcast_to(xs[1], (3, 4)).copy()  # same shapes: the fused path applies
    test_rule(entry.ufunc, *xs, ndirs=1, modes=("reverse", "forward", "forward_over_reverse"))


# --- laziness -----------------------------------------------------------------------------------
_LAZY = """
import sys, numpy as np
import mooncake_py, mooncake_py.transforms.forward as fa
from mooncake_py.dual import kernels_cpu
assert 'numba' not in sys.modules, 'importing mooncake_py imported numba'
fa.jvp(np.tanh, (np.ones(10),), (np.ones(10),))
assert 'numba' not in sys.modules, 'a small array compiled a kernel'
assert not kernels_cpu.loaded_kernels()
fa.jvp(np.tanh, (np.ones(100000),), (np.ones(100000),))
assert 'numba' in sys.modules and len(kernels_cpu.loaded_kernels()) == 1
print('ok')
"""


def test_kernels_compile_only_when_first_used():
    out = subprocess.run([sys.executable, "-c", _LAZY], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_kernel_source_text_for_every_entry():
    for e in TABLE.values():
        for prog_ir in [codegen.frule_ir(e, (True,) * e.nin)] + \
                [codegen.pullback_ir(e, k, (True,) * (e.nin + 1)) for k in range(e.nin)]:
            hoisted, kir = codegen.hoist(prog_ir)
            src = codegen.numba_source(kir, "k", frozenset(), "float64")
            assert "@numba.njit(cache=True" in src
            for name, expr in hoisted:  # hoisted calls are evaluated by NumPy/scipy
                assert not codegen.free_names(expr) - {"a", "b", "y"}
            c = codegen.c_source(prog_ir)  # the CUDA text a GPU generator will use
            assert "select" not in c and c.count(";") == len(prog_ir.body)
