"""The GPU path, tested without a GPU (and without CuPy).

1. The CUDA sources of every derivative-table kernel (``codegen.cuda_kernel``): parameters,
   declarations, typed literals, the ``raw`` outputs of the lane mode, the device preamble.
2. The same sources compiled as C++ for the host and run with ElementwiseKernel's semantics
   (``tests/gpu/fake_device.py``), against the CPU path; the device special functions against
   scipy.
3. The array-module helper (``mooncake_py.core.array_module``) with NumPy, and with the fake device
   for what needs a device type.
4. The GPU checks of ``tests/gpu`` (seed HVP, API, Hessian, benchmark suite) on the fake
   device, whose arrays refuse to mix with NumPy arrays: a host array created anywhere fails.

What this cannot show: that NVRTC accepts the sources, CUDA's math library agrees with the
host's, and CuPy behaves as the fake does. ``tests/gpu`` checks those on a device.
"""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import mooncake_py as mp
from mooncake_py.core import array_module as am
from mooncake_py.dual import codegen, elementwise as ew, kernels_gpu
from mooncake_py.rules.derivative_table import TABLE, load_scipy

load_scipy()  # the table's scipy.special section registers on first need
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "gpu"))
import fake_device  # noqa: E402
import gpu_checks  # noqa: E402

needs_compiler = pytest.mark.skipif(fake_device.compiler() is None,
                                    reason="no host C++ compiler (g++) to run the kernels")


def _programs():
    """Every program the forward layer can request: frules for each tangent pattern, dual
    pullbacks for each input and tangent pattern."""
    for e in TABLE.values():
        if not codegen.has_cuda(e):  # calls functions CUDA lacks: no GPU kernel
            continue
        pats = [(True,)] if e.nin == 1 else [(True, True), (True, False), (False, True)]
        for p in pats:
            yield ew.program(e, "f", 0, p)
        for k in range(e.nin):
            for tg in (True, False):
                for p in pats:
                    yield ew.program(e, "p", k, (tg,) + p)


PROGRAMS = [p for p in _programs() if p.has_tangent]
_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
_NUMBER = re.compile(r"(?<![\w.])(\d+\.\d*(?:e[-+]?\d+)?)")


# --- 1. the CUDA sources --------------------------------------------------------------------------
@pytest.mark.parametrize("lanes", [0, 3])
def test_every_kernel_source_is_closed_and_consistent(lanes):
    assert len(PROGRAMS) > 200
    for prog in PROGRAMS:
        s = kernels_gpu.kernel_spec(prog, lanes)
        where = f"{s.name}:\n{s.operation}"
        ins = [p.split() for p in s.in_params.split(", ")]
        outs = [p.split() for p in s.out_params.split(", ")]
        assert all(p[:-1] == ["T"] for p in ins), where
        assert [p[-1] for p in ins] == list(s.inputs), where
        assert set(s.inputs) <= {"a", "b", "y", "g", "ta", "tb", "tg"}, where
        assert [p[-1] for p in outs] == [n for n, _ in s.outputs], where
        for p, (name, raw) in zip(outs, s.outputs):
            assert name.startswith("out_")
            tangent = name.startswith("out_t")
            assert raw == (bool(lanes) and not tangent), where  # lane mode: primal outs raw
            assert p[:-1] == (["raw", "T"] if raw else ["T"]), where
        assert any(n.startswith("out_t") for n, _ in s.outputs), where
        # every statement ends with ';', parentheses balance, no Python left
        lines = s.operation.splitlines()
        assert all(ln.endswith(";") for ln in lines), where
        assert s.operation.count("(") == s.operation.count(")"), where
        for py in ("**", "select", " and ", " or ", "not ", "sign("):
            assert py not in s.operation, (py, where)
        # every identifier is a parameter, a local declared before use, a CUDA math function,
        # or a function the preamble defines
        declared = set(s.inputs) | {n for n, _ in s.outputs} | {"T", "i", "if", "size"}
        defined = set(re.findall(r"\b(mc_\w+)\(", s.preamble))
        for ln in lines:
            m = re.match(r"T (\w+) = ", ln)
            body = ln[m.end():] if m else ln
            for name in _IDENT.findall(_NUMBER.sub("", body)):
                assert (name in declared or name in codegen.C_MATH or name in defined), \
                    (name, where)
            if m:
                assert m.group(1) not in declared, where  # declared once
                declared.add(m.group(1))
        # each output written exactly once, raw ones by lane 0 only
        for name, raw in s.outputs:
            writes = [ln for ln in lines if re.search(rf"\b{name}(\[i\])? = ", ln)]
            assert len(writes) == 1, where
            if raw:
                assert writes[0].startswith(f"if (i < {name}.size()) {name}[i] = "), where
        # every literal is cast to T, so a float32 kernel computes in float32
        bare = [x for x in _NUMBER.findall(s.operation)
                if f"T({x})" not in s.operation and f"T(-{x})" not in s.operation]
        assert not bare, (bare, where)


def test_inputs_are_what_the_program_reads():
    e = TABLE["tanh"]
    s = kernels_gpu.kernel_spec(ew.program(e, "f", 0, (True,)), 0)
    assert s.inputs == ("a", "ta") and s.outputs == (("out_y", False), ("out_ty", False))
    assert "T y = tanh(a);" in s.operation and "out_y = y;" in s.operation
    # the pullback of tanh reads y, not a; without ġ it has no tg
    s = kernels_gpu.kernel_spec(ew.program(e, "p", 0, (False, True)), 3)
    assert s.inputs == ("y", "g", "ta") and s.outputs == (("out_r", True), ("out_tr", False))


def test_calls_cuda_lacks_come_with_their_definitions():
    for prog in PROGRAMS:
        s = kernels_gpu.kernel_spec(prog, 0)
        for name in set(re.findall(r"\b(mc_\w+)\(", s.operation)):
            assert re.search(rf"T {name}\(T", s.preamble), (name, s.name)
    assert codegen.c_preamble(set()) == ""
    pre = codegen.c_preamble({"mc_digamma", "mc_trigamma"})
    assert pre.index("mc_inf()") < pre.index("mc_digamma_d") and pre.count("double mc_inf()") == 1
    # the names of codegen.C_MISSING are all provided
    assert {f"mc_{n}" for n in codegen.C_MISSING} <= set(codegen._C_DEFS)


@pytest.mark.parametrize("name", sorted(kernels_gpu.UFUNC_PRIMAL))
def test_ops_whose_c_value_differs_take_the_primal_from_the_ufunc(name):
    e = TABLE[name]
    s = kernels_gpu.kernel_spec(ew.program(e, "f", 0, (True, True)), 0)
    assert "out_y" not in s.out_params and "fmax" not in s.operation
    assert "fmin" not in s.operation


def test_typed_literals_and_constants():
    expr = codegen.parse("select(a > 0.5, LN2 * a, -2)")
    assert codegen.c_expr(expr) == "((a > 0.5) ? (0.6931471805599453 * a) : (-2.0))"
    assert codegen.c_expr(expr, "T") == \
        "((a > T(0.5)) ? (T(0.6931471805599453) * a) : (-T(2.0)))"
    assert codegen.c_expr(codegen.parse("digamma(a) + sign(b)"), "T") == \
        "(mc_digamma(a) + ((b > T(0.0)) - (b < T(0.0))))"


# --- 2. the sources compiled for the host ---------------------------------------------------------------
@pytest.fixture(scope="module")
def xp():
    return fake_device.module()


@pytest.fixture(scope="module")
def built(xp):
    """Every kernel compiled for both dtypes in one compiler run each."""
    if fake_device.compiler() is None:
        pytest.skip("no host C++ compiler (g++) to run the kernels")
    ks = [kernels_gpu.get_kernel(p, lanes, xp) for p in PROGRAMS for lanes in (0, 3)]
    for dt in (np.float64, np.float32):
        fake_device.build(ks, dt)
    return ks


_SPECIAL_OP = """
out_dg = mc_digamma(a);
out_tg = mc_trigamma(a);
out_qg = mc_tetragamma(a);
out_ln = mc_log_ndtr(a);
out_nd = mc_ndtr(a);
out_la = mc_logaddexp(a, b);
out_l2 = mc_logaddexp2(a, b);
out_xl = mc_xlogy(b, a);
"""
_SPECIAL_OUTS = ["dg", "tg", "qg", "ln", "nd", "la", "l2", "xl"]


def _special_reference(a, b):
    sps = pytest.importorskip("scipy.special")
    with np.errstate(all="ignore"):
        return [sps.digamma(a), sps.polygamma(1, a), sps.polygamma(2, a), sps.log_ndtr(a),
                sps.ndtr(a), np.logaddexp(a, b), np.logaddexp2(a, b), sps.xlogy(b, a)]


@needs_compiler
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_device_special_functions_match_scipy(xp, dtype):
    k = xp.ElementwiseKernel("T a, T b", ", ".join(f"T out_{n}" for n in _SPECIAL_OUTS),
                             _SPECIAL_OP, "special",
                             preamble=codegen.c_preamble({f"mc_{n}" for n in codegen.C_MISSING}))
    rng = np.random.default_rng(0)
    a = np.concatenate([rng.uniform(-12, -0.01, 300), np.exp(rng.uniform(-7, 7, 300)),
                        -np.exp(rng.uniform(-7, 3.5, 100)), rng.uniform(-40, 40, 100),
                        [0.0, -0.0, -1.0, -2.0, -2.5, 1.0, 2.0, 1e-300, 1e300, np.inf, -np.inf,
                         np.nan, 6.0, -20.0, -19.999, -37.0, 1.4616321449683622]])
    b = np.concatenate([rng.uniform(-50, 50, a.size - 8),
                        [0.0, np.inf, -np.inf, np.nan, 3.0, 3.0, -1e300, 1e-300]])
    with np.errstate(over="ignore"):
        a, b = a.astype(dtype), b.astype(dtype)
    outs = [xp.empty(a.shape, dtype=dtype) for _ in _SPECIAL_OUTS]
    k(xp.asarray(a), xp.asarray(b), *outs)
    # scipy in float64 at the very (rounded) inputs, rounded to the kernel's dtype
    a64 = a.astype(np.float64)
    with np.errstate(over="ignore"):
        refs = [r.astype(dtype).astype(np.float64)
                for r in _special_reference(a64, b.astype(np.float64))]
    rtol = 1e-12 if dtype == np.float64 else 4e-6
    for name, got, want in zip(_SPECIAL_OUTS, outs, refs):
        got = got.get().astype(np.float64)
        # NaN and ±inf where scipy has them
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
        np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want), err_msg=name)
        np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want), err_msg=name)
        ok = np.isfinite(want)
        w, x = want[ok], a64[ok]
        # the polygammas are compared relative to max(|value|, 1e-3) (digamma has a root);
        # for negative x their condition number grows like 1/dist(x, integers)^(order+1)
        floor = 1e-3 if name in ("dg", "tg", "qg") else 0.0
        tol = rtol * np.maximum(np.abs(w), floor) + np.finfo(dtype).tiny
        if name in ("dg", "tg", "qg"):
            with np.errstate(invalid="ignore"):  # x = ±inf
                near = np.maximum(np.abs(x - np.round(x)), 1e-12)
            order = {"dg": 1, "tg": 2, "qg": 3}[name]
            tol = np.where(x < 0, tol * (1 + 1 / near ** order), tol)
        elif name in ("nd", "ln") and dtype == np.float32:
            tol = tol * (1 + x * x)  # the normal tail's condition number, with x rounded
        err = np.abs(got[ok] - w)
        worst = np.argmax(err - tol)
        assert np.all(err <= tol), (name, x[worst], got[ok][worst], w[worst])


def _nvrtc():
    """CuPy's kernel-code generator and NVRTC (a library, not a GPU), or why they are absent."""
    try:
        import cupy
        import cupy._core._kernel as kern
        from cupy.cuda import compiler
        from cupy_backends.cuda.libs import nvrtc
        nvrtc.getVersion()
        for name in ("_get_elementwise_kernel_code", "_ArgInfo", "_TypeMap", "_get_param_info",
                     "ParameterInfo"):
            getattr(kern, name)
        compiler._NVRTCProgram
    except Exception as e:  # noqa: BLE001 - CI has no CuPy: this check is for machines with one
        return None, f"needs CuPy and its NVRTC library: {type(e).__name__}: {e}"
    return (cupy, kern, compiler), None


def _cupy_kernel_code(kern, cupy, spec, dtype, lanes):
    """The CUDA source CuPy generates for ``spec`` (C-contiguous arrays of ``dtype``), without
    its preamble (merged separately)."""
    params = kern._get_param_info(spec.in_params, True) + kern._get_param_info(spec.out_params,
                                                                               False)
    nd = 2 if lanes else 1
    args = tuple(kern._ArgInfo(1, cupy.ndarray, dtype, nd, True, True) for _ in params)
    return kern._get_elementwise_kernel_code(
        args + (kern._ArgInfo(2, None, None, nd, False, True),), kern._TypeMap((("T", dtype),)),
        params + (kern.ParameterInfo("CIndexer _ind", False),), spec.operation, spec.name, "")


@pytest.mark.parametrize("dtype", [np.float32, pytest.param(np.float64, marks=pytest.mark.slow)])
def test_nvrtc_compiles_every_kernel_as_cupy_generates_it(dtype):
    mods, why = _nvrtc()
    if mods is None:
        pytest.skip(why)
    cupy, kern, compiler = mods
    dtype = np.dtype(dtype)
    specs = [kernels_gpu.kernel_spec(p, lanes) for p in PROGRAMS for lanes in (0, 3)]
    try:
        codes = [_cupy_kernel_code(kern, cupy, s, dtype, lanes)
                 for s, lanes in zip(specs, [0, 3] * len(PROGRAMS))]
    except (TypeError, AttributeError) as e:  # CuPy's internals changed: say so, do not guess
        pytest.skip(f"CuPy's kernel-code generator has another signature: {e}")
    blocks = []
    for s in specs:
        for b in fake_device._definitions(s.preamble):
            if b not in blocks:
                blocks.append(b)
    # one translation unit: the merged device preamble, then every kernel
    src = ("#include <cupy/complex.cuh>\n#include <cupy/carray.cuh>\n#include <cupy/atomics.cuh>\n"
           f"typedef {'double' if dtype == np.float64 else 'float'} T;\n" + "\n".join(blocks)
           + "\n".join(codes))
    inc = os.path.join(os.path.dirname(cupy._core.__file__), "include")
    cccl = os.path.join(inc, "cupy", "_cccl")
    opts = ("-arch=compute_90", "--device-as-default-execution-space", "--std=c++17",
            "-I" + inc) + tuple("-I" + os.path.join(cccl, d) for d in ("thrust", "libcudacxx",
                                                                        "cub"))
    ptx, _ = compiler._NVRTCProgram(src, "kern.cu", method="ptx").compile(opts)
    ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
    for s in specs:
        assert f".entry {s.name}(" in ptx, s.name


@needs_compiler
@pytest.mark.parametrize("lanes", [0, 3])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", [n for n, e in TABLE.items() if codegen.has_cuda(e)])
def test_kernels_match_their_cpu_twins(built, xp, name, dtype, lanes):
    gpu_checks.check_kernel_twin(xp, name, dtype, lanes)


@needs_compiler
def test_kernel_objects_are_created_lazily_once_per_program_and_mode(xp, built):
    prog = ew.program(TABLE["sin"], "f", 0, (True,))
    k = kernels_gpu.get_kernel(prog, 3, xp)
    assert kernels_gpu.get_kernel(prog, 3, xp) is k
    assert kernels_gpu.get_kernel(prog, 0, xp) is not k
    assert (prog, True, xp) in kernels_gpu.loaded_kernels()


def test_importing_and_using_mooncake_py_never_imports_cupy():
    code = ("import sys, numpy as np, mooncake_py as mp\n"
            "mp.hvp(lambda x: np.sum(np.tanh(x) ** 2))(np.ones(20000), np.ones(20000))\n"
            "mp.hessian(lambda x: np.sum(np.sin(x) * x))(np.ones(3))\n"
            "assert 'cupy' not in sys.modules, 'cupy was imported'\nprint('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# --- 3. the array-module helper -----------------------------------------------------------------------
def test_module_of_numpy_values_and_scalars():
    assert am.module_of() is np
    assert am.module_of(np.ones(2), 1.0, np.float32(2), None, "s", [np.zeros(1)]) is np
    assert am.device_module(np.ones(2)) is None and am.device_module(3.0) is None
    assert not am.is_device(np.ones(2))
    with mp.Tape() as tape:
        t = tape.track(np.ones(2))
        assert am.module_of(t) is np and am.unwrap(t) is t._value
    d = mp.dual(np.ones(2), np.ones(2))
    assert am.unwrap(d) is d.primal


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_constructors_on_numpy_are_numpy_s_own(dtype):
    g = np.ones((2, 3), dtype=dtype)
    cases = [(am.zeros((2, 3), dtype, like=g), np.zeros((2, 3), dtype)),
             (am.ones(4, dtype, like=g), np.ones(4, dtype)),
             (am.full(3, 2.5, dtype, like=g), np.full(3, 2.5, dtype)),
             (am.eye(3, 4, 1, dtype=dtype, like=g), np.eye(3, 4, 1, dtype=dtype)),
             (am.tri(3, None, -1, dtype=dtype, like=g), np.tri(3, k=-1, dtype=dtype)),
             (am.arange(5, like=g), np.arange(5)),
             (am.asarray([1, 2], like=g), np.asarray([1, 2])),
             (am.asarray([[True]]), np.asarray([[True]])),
             (am.zeros(2), np.zeros(2)), (am.eye(2), np.eye(2))]
    for got, want in cases:
        assert type(got) is np.ndarray and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    assert am.empty((2, 2), dtype, like=g).shape == (2, 2)
    h = am.to_host(g)
    assert type(h) is np.ndarray and h is g
    assert am.scalar(np.float32(1.5)) == 1.5 and type(am.scalar(np.ones(())) ) is float
    assert am.linalg(g) is np.linalg
    assert am.device_function(np.linalg.solve, g) is np.linalg.solve
    pytest.importorskip("scipy")
    import scipy.linalg
    assert am.scipy_linalg(g) is scipy.linalg


def test_device_values_get_device_constructors(xp):
    x = xp.asarray(np.ones((2, 2), dtype=np.float32))
    assert am.module_of(x, 2.0, np.float64(1.0)) is xp and am.is_device(x)
    with mp.Tape() as tape:
        t = tape.track(x)
        assert am.is_device(t) and am.module_of(t) is xp
    for got in (am.zeros(3, like=x), am.eye(2, like=t), am.tri(2, like=x),
                am.arange(3, like=x), am.asarray([1, 2], like=x), am.asarray(x > 0)):
        assert type(got) is fake_device.DeviceArray
    assert am.eye(2, dtype=x.dtype, like=x).dtype == np.float32
    assert type(am.to_host(x)) is np.ndarray
    assert am.scalar(x[0, 0]) == 1.0
    assert am.linalg(x) is xp.linalg


def test_mixed_modules_raise_a_clear_error(xp):
    x, h = xp.ones(3), np.ones(3)
    with pytest.raises(am.MixedArrayModulesError) as info:
        am.module_of(x, [2.0, h], what="np.add")
    msg = str(info.value)
    assert "np.add" in msg and "numpy.ndarray" in msg and "DeviceArray" in msg
    assert "cupy.asarray" in msg
    assert isinstance(info.value, TypeError) and isinstance(info.value, mp.MooncakeError)
    with pytest.raises(am.MixedArrayModulesError):
        am.module_of(x, np.float64(1.0), np.zeros(()))  # a 0-d host array is a host array
    with pytest.raises(am.MixedArrayModulesError):
        kernels_gpu.frule(ew.program(TABLE["sin"], "f", 0, (True,)), np.sin, x, None, h, None, 0)


def test_functions_cupy_lacks_raise_missing_rule_error_naming_the_op(xp):
    x = xp.ones(3)
    with pytest.raises(mp.MissingRuleError, match="np.linalg.outer"):
        am.device_function(np.linalg.outer, x)
    assert am.device_function(np.linalg.slogdet, x) is xp.linalg.slogdet
    for f in (lambda z: np.sum(np.linalg.outer(z, z)),
              lambda z: np.linalg.trace(z[:, None] * z),
              lambda z: np.linalg.tensordot(z, z, axes=1)):
        with pytest.raises(mp.MissingRuleError, match="has no fakecupy implementation"):
            mp.grad(f)(xp.asarray(np.arange(3.0)))
        mp.grad(f)(np.arange(3.0))  # on NumPy arrays the same code differentiates


def test_scatter_add_moves_host_index_arrays_to_the_device(xp):
    from mooncake_py.rules.cotangents import scatter_add
    v = xp.asarray(np.arange(3.0))
    out = scatter_add((4,), (np.array([0, 2, 0]),), v)
    assert type(out) is fake_device.DeviceArray
    np.testing.assert_array_equal(out.get(), [2.0, 0.0, 1.0, 0.0])
    np.testing.assert_array_equal(scatter_add((4,), ([3, 3],), np.ones(2)), [0, 0, 0, 2.0])


def test_unary_frule_on_a_zero_stride_operand_keeps_the_fused_path_working(monkeypatch):
    # regression: a broadcast (zero-stride) primal is passed to the fused CPU kernel as one
    # number; a unary op then has no array operand to take the length from
    monkeypatch.setattr(ew, "KERNEL_MIN_SIZE", 0)
    x = np.broadcast_to(np.float64(0.3), (50,))
    d = mp.dual(x, np.linspace(0, 1, 50))
    got = np.tanh(d)
    np.testing.assert_allclose(got.tangent, (1 - np.tanh(0.3) ** 2) * np.linspace(0, 1, 50))


# --- 4. the GPU checks on the fake device ---------------------------------------------------------------
@needs_compiler
def test_seed_example_on_the_fake_device(xp):
    before = {k: v.calls for k, v in kernels_gpu.loaded_kernels().items() if k[2] is xp}
    gpu_checks.check_seed_hvp(xp)
    after = {k: v.calls for k, v in kernels_gpu.loaded_kernels().items() if k[2] is xp}
    assert sum(after.values()) > sum(before.values()), "no generated kernel ran"


@needs_compiler
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_api_on_the_fake_device(xp, dtype):
    gpu_checks.check_api(xp, dtype)


@needs_compiler
def test_hessian_on_the_fake_device(xp):
    gpu_checks.check_hessian(xp, np.float64)


@needs_compiler
def test_mixed_inputs_are_refused_on_the_fake_device(xp):
    gpu_checks.check_mixed_inputs_raise(xp)


@needs_compiler
@pytest.mark.parametrize("name,dtype", [
    (n, np.float64) for n in ["sum_1000", "_sum_sin_1000", "kron_view_sum", "map_sin_cos_exp",
                              "broadcast_sin_cos_exp", "simple_mlp", "gp_lml",
                              "turing_broadcast_benchmark", "large_single_block"]
] + [(n, np.float32) for n in ["sum_sin_1000", "gp_lml", "large_single_block"]])
def test_benchmark_suite_on_the_fake_device(xp, name, dtype):
    gpu_checks.check_suite_case(xp, name, dtype)
