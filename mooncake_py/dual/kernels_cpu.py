"""CPU kernels: numba loops compiled lazily from generated source, cached on disk.

Numba is imported on the first kernel request, never at ``import mooncake_py``. Each kernel's
source (from :func:`mooncake_py.dual.codegen.numba_source`) is written once to a file named by
the hash of its text, in the kernel directory, and imported from there, so that
``numba.njit(cache=True)`` can store the machine code beside it: a later process loads it in
milliseconds instead of compiling (~0.1 s per kernel, plus ~0.3 s to initialise numba once).

Cache location: ``$MOONCAKE_PY_CACHE_DIR`` if set (default ``~/.cache/mooncake_py/kernels``).
In full: ``$MOONCAKE_PY_CACHE_DIR``, else the older name ``$MOONCAKE_PY_KERNEL_DIR``, else
``$XDG_CACHE_HOME/mooncake_py/kernels`` (``XDG_CACHE_HOME`` defaulting to ``~/.cache``), else a
per-user folder in the temporary directory; the first writable one is used. If none is
writable, kernels are compiled in memory for this process only. :func:`warmup` compiles the
common kernels ahead of time.
"""
import hashlib
import importlib.util
import os
import sys
import tempfile
import threading

_LOCK = threading.Lock()
_LOADED = {}  # digest of the source -> numba dispatcher
_DIR = []     # the kernel directory, once chosen ([None] when nothing is writable)


def _writable(d):
    try:
        os.makedirs(d, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=d)
        os.close(fd)
        os.remove(probe)
        return True
    except OSError:
        return False


def kernel_dir():
    """The directory holding generated kernel sources and numba's cache (None: in memory)."""
    if not _DIR:
        env = (os.environ.get("MOONCAKE_PY_CACHE_DIR")
               or os.environ.get("MOONCAKE_PY_KERNEL_DIR"))
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        uid = getattr(os, "getuid", lambda: "user")()
        candidates = ([env] if env else []) + [
            os.path.join(xdg, "mooncake_py", "kernels"),
            os.path.join(tempfile.gettempdir(), f"mooncake_py-kernels-{uid}")]
        _DIR.append(next((d for d in candidates if _writable(d)), None))
    return _DIR[0]


def _module_name(digest):
    return f"_mooncake_py_kernel_{digest}"


def _load_from_file(source, digest, d):
    path = os.path.join(d, f"k_{digest}.py")
    if not os.path.exists(path):
        # Write under a temporary name, then rename: concurrent processes never see a half
        # file, and an existing file keeps its timestamp (numba's cache checks it).
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".py.tmp")
        with os.fdopen(fd, "w") as fh:
            fh.write(source)
        os.replace(tmp, path)
    name = _module_name(digest)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    # numba's cache rebuilds a kernel's environment by importing its module by name.
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _load_in_memory(source, digest):
    import types
    name = _module_name(digest)
    mod = types.ModuleType(name)
    sys.modules[name] = mod
    exec(compile(source.replace("cache=True", "cache=False"), f"<{name}>", "exec"), mod.__dict__)
    return mod


def get_kernel(source, fname):
    """The numba dispatcher ``fname`` defined by ``source`` (compiled on its first call)."""
    digest = hashlib.sha1(source.encode()).hexdigest()[:20]
    k = _LOADED.get(digest)
    if k is not None:
        return k
    with _LOCK:
        k = _LOADED.get(digest)
        if k is None:
            d = kernel_dir()
            try:
                mod = _load_from_file(source, digest, d) if d else _load_in_memory(source, digest)
            except OSError:
                mod = _load_in_memory(source, digest)
            k = _LOADED[digest] = getattr(mod, fname)
    return k


def loaded_kernels():
    """The kernels requested so far in this process (for tests and benchmarks)."""
    return dict(_LOADED)


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
    import numpy as np
    from .elementwise import KERNEL_MIN_SIZE
    from ..forward_api import jvp
    from ..second_order import hvp

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
        from ..tape import compiled
        compiled.kernel()
        compiled.hvp_kernel()
        compiled.segment_kernels()
    return len(_LOADED)
