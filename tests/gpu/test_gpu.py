"""GPU tests: CuPy arrays through grad, hvp, hessian and the caches; every generated
ElementwiseKernel against its CPU twin; the benchmark suite in float32 and float64.

Skipped (with the reason) without CuPy or without a usable CUDA device, so CI without a GPU
stays green. ``scripts/gpu-check.sh`` installs CuPy and runs this file on a GPU machine. The same
checks (``gpu_checks.py``) run on a CPU stand-in in ``tests/test_gpu_codegen.py``.

Kernels compile with NVRTC on first use (a fraction of a second each; CuPy caches them on disk
in ``~/.cupy/kernel_cache``), so the twin tests cover every entry in one configuration
(float64 with lanes, the Hessian mode, whose primal outputs are ``raw``) and a subset in the
others.
"""
import numpy as np
import pytest

cupy = pytest.importorskip("cupy", reason="CuPy is not installed (pip install cupy-cuda12x or "
                                          "cupy-cuda13x; see scripts/gpu-check.sh)")


def _device_problem():
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
        (cupy.arange(3.0) * 2).sum().item()  # a kernel launch: driver, runtime and NVRTC work
    except Exception as e:  # noqa: BLE001 - any failure means: no usable device here
        return f"CUDA is not usable here: {type(e).__name__}: {e}"
    return None


_PROBLEM = _device_problem()
if _PROBLEM:
    pytest.skip(_PROBLEM, allow_module_level=True)

import mooncake_py as mp  # noqa: E402
from mooncake_py.rules.derivative_table import TABLE

import gpu_checks  # noqa: E402

pytestmark = pytest.mark.gpu
SUBSET = ["sin", "tanh", "exp", "log", "sqrt", "psi", "log_ndtr", "multiply", "divide", "power",
          "maximum", "logaddexp", "xlogy"]


def test_seed_example_float32_hvp_cache():
    gpu_checks.check_seed_hvp(cupy)


def test_seed_example_large():
    gpu_checks.check_seed_hvp(cupy, n=10 ** 6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_api(dtype):
    gpu_checks.check_api(cupy, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_hessian(dtype):
    gpu_checks.check_hessian(cupy, dtype)


def test_mixed_numpy_and_cupy_inputs_raise():
    gpu_checks.check_mixed_inputs_raise(cupy)


def test_linalg_op_cupy_lacks_raises_missing_rule_error():
    x = cupy.arange(3.0)
    with pytest.raises(mp.MissingRuleError, match="np.linalg.outer"):
        mp.grad(lambda z: np.sum(np.linalg.outer(z, z)))(x)


@pytest.mark.parametrize("name", list(TABLE))
def test_kernels_float64_lanes(name):
    gpu_checks.check_kernel_twin(cupy, name, np.float64, 3)


@pytest.mark.parametrize("lanes", [0, 3])
@pytest.mark.parametrize("name", SUBSET)
def test_kernels_float32(name, lanes):
    gpu_checks.check_kernel_twin(cupy, name, np.float32, lanes)


@pytest.mark.parametrize("name", SUBSET)
def test_kernels_float64_no_lanes(name):
    gpu_checks.check_kernel_twin(cupy, name, np.float64, 0)


def _suite_cases():
    from benchmarks.suite import CASES
    for name in CASES:
        for dtype in (np.float64, np.float32):
            yield pytest.param(name, dtype, id=f"{name}-{np.dtype(dtype).name}")


@pytest.mark.parametrize("name,dtype", list(_suite_cases()))
def test_benchmark_suite(name, dtype):
    gpu_checks.check_suite_case(cupy, name, dtype)
