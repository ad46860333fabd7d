"""``mp.warmup()``: compile (or load from disk) the fused kernels of common functions ahead of
time, by running ``jvp`` and ``hvp`` of a workload that uses them."""
import numpy as np

from ..dual.elementwise import KERNEL_MIN_SIZE
from ..dual.kernels_cpu import loaded_kernels
from ..replay import compiled
from .forward import jvp
from .second_order import hvp


def warmup(dtypes: tuple[str, ...] = ("float64",), lanes: bool = True,
           replay_kernels: bool = False) -> int:
    """Compile (or load from the disk cache) the fused kernels of common functions now.

    The first forward-mode or second-order call that meets an array of 8192 or more elements
    imports numba (~0.3 s) and compiles each fused kernel it uses (~0.1 s apiece) into the
    kernel cache (``$MOONCAKE_PY_CACHE_DIR``, default ``~/.cache/mooncake_py/kernels``); later
    processes load them in milliseconds. ``warmup()`` pays that cost up front, for a workload
    of common elementwise functions (arithmetic, powers, sin, cos, tan, exp, log, log1p, expm1,
    sqrt, tanh, arctan, logaddexp, maximum) under ``jvp``, ``hvp`` and, with ``lanes``, their
    lane forms, for each dtype in ``dtypes``. Call it once after installing, or at the start of
    a job whose timing matters. Returns the number of kernels now loaded in this process.

    ``replay_kernels=True`` also loads (or compiles, the first time) the interpreter kernels of
    compiled replay (``compile=True`` caches: gradient, HVP and segment kernels, not counted in
    the return value): ~0.5-3 s from disk, 5-30 s with an empty cache.

    Measured on the project's 2-core machine (float64, lanes): ``warmup()`` takes ~20 s with
    an empty cache (39 kernels compiled) and ~1-4 s once they are on disk. Then the first
    ``mp.hvp`` of ``np.sum(np.sin(x) * np.exp(x) + np.log1p(x * x))`` at n = 10⁴ takes ~2 ms,
    where without it the first call took ~11 s (empty cache) or ~2 s (kernels on disk).

    Example (``dtypes=()`` compiles nothing; ``mp.warmup()`` is the real call):
        >>> import mooncake_py as mp
        >>> mp.warmup(dtypes=()) >= 0
        True
    """
    def common(x, c):
        y = np.sin(x) * np.cos(x) + np.exp(x) / (1.0 + x * x) - np.tan(x) ** 2
        y = y + np.log(c + x) + np.log1p(x * x) + np.expm1(x) + np.sqrt(c + x ** 2)
        y = y + np.tanh(x) * np.arctan(x) + np.logaddexp(0.0, x) + np.maximum(x, 0.0) ** 3
        return np.sum(y - x ** 0.5 * c)

    for name in dtypes:
        dt = np.dtype(name)
        if dt.kind != "f":
            raise ValueError(f"warmup: dtypes must be floating-point names, not {name!r}.")
        x = np.linspace(0.1, 0.9, KERNEL_MIN_SIZE, dtype=dt)
        v = np.ones_like(x)
        jvp(common, (x, dt.type(2.0)), (v, None))
        hvp(common)(x, dt.type(2.0), v)
        if lanes:
            V = np.stack([v, -v])
            jvp(common, (x, dt.type(2.0)), (V, None), lanes=True)
            hvp(common, lanes=True)(x, dt.type(2.0), V)
    if replay_kernels:
        compiled.kernel()
        compiled.hvp_kernel()
        compiled.segment_kernels()
    return len(loaded_kernels())
