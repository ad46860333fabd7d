"""Timing and the machine description that goes in every report's header.

:func:`measure` runs one warm-up call (timed separately: for ``jax.jit`` it is the compile),
picks how many calls make one sample so that timer overhead is negligible for sub-microsecond
functions, then collects samples until a time budget is spent and reports the median per call.

Example:
    >>> from benchmarks.timing import measure
    >>> m = measure(lambda: sum(range(100)), budget=0.01)
    >>> m["median_s"] > 0 and len(m["samples_s"]) >= 3
    True
"""
import os
import platform
import statistics
import sys
from time import perf_counter

import numpy as np

MIN_SAMPLE_S = 2e-4  # one sample lasts at least this long (batching calls if need be)
MAX_SAMPLES = 2000


def measure(fn, budget, min_samples=3):
    """Median seconds per call of ``fn()`` after one warm-up call, within about ``budget`` s.

    Returns a dict: ``median_s``, ``samples_s`` (seconds per call, one per sample),
    ``number`` (calls per sample), ``first_call_s`` (the warm-up call) and ``second_call_s``
    (for a prepared cache: the first call that can replay).
    """
    t0 = perf_counter()
    fn()
    first = perf_counter() - t0
    t0 = perf_counter()
    fn()
    once = perf_counter() - t0
    number = max(1, int(MIN_SAMPLE_S / once)) if once < MIN_SAMPLE_S else 1
    if once > budget:  # a slow call: a few samples is all the budget allows
        min_samples = 1 if once > 5 * budget else min_samples
    samples = [once] if number == 1 else []
    start = perf_counter()
    while len(samples) < MAX_SAMPLES and (len(samples) < min_samples
                                          or perf_counter() - start < budget):
        t0 = perf_counter()
        for _ in range(number):
            fn()
        samples.append((perf_counter() - t0) / number)
    return {"median_s": statistics.median(samples), "samples_s": samples, "number": number,
            "first_call_s": first, "second_call_s": once}


def more_samples(fn, number, budget, into):
    """Append to ``into`` (a :func:`measure` result) samples of ``number`` calls of ``fn`` for
    about ``budget`` s (at least one sample), with no warm-up: a later round of an interleaved
    measurement; ``median_s`` is recomputed over every sample."""
    samples = into["samples_s"]
    start = perf_counter()
    while True:
        t0 = perf_counter()
        for _ in range(number):
            fn()
        samples.append((perf_counter() - t0) / number)
        if len(samples) >= MAX_SAMPLES * 4 or perf_counter() - start >= budget:
            break
    into["median_s"] = statistics.median(samples)
    return into


def format_time(t):
    """``t`` seconds with three significant figures and a unit: ``format_time(2.5e-6)`` is
    ``'2.5 µs'``."""
    for scale, unit in ((1e-9, "ns"), (1e-6, "µs"), (1e-3, "ms")):
        if t < scale * 999.5:
            return f"{t / scale:.3g} {unit}"
    return f"{t:.3g} s"


def _blas():
    """What BLAS NumPy uses: threadpoolctl's view if installed, else NumPy's build config."""
    try:
        import threadpoolctl
        info = threadpoolctl.threadpool_info()
        return [{k: d.get(k) for k in ("internal_api", "version", "num_threads", "threading_layer")}
                for d in info if d.get("user_api") == "blas"] or info
    except ImportError:
        pass
    try:
        cfg = np.show_config(mode="dicts")
        deps = cfg.get("Build Dependencies", {})
        return {k: {kk: deps[k].get(kk) for kk in ("name", "version")} for k in ("blas", "lapack")
                if k in deps}
    except Exception as e:  # pragma: no cover - depends on the NumPy build
        return f"unknown ({type(e).__name__})"


def machine_info(versions=None):
    """Cores, CPU, Python and NumPy versions, BLAS, and the peer frameworks' versions."""
    info = {
        "cpu_count": os.cpu_count(),
        "cpu": platform.processor() or platform.machine(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "blas": _blas(),
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        from mooncake_py.core import allocator
        info["malloc"] = allocator.state()
    except ImportError:  # pragma: no cover - an older mooncake_py
        pass
    if versions:
        info["frameworks"] = versions
    return info
