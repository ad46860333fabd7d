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
writable, kernels are compiled in memory for this process only. ``mp.warmup()`` compiles the
common kernels ahead of time
(mooncake_py/transforms/warmup.py).
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
    exec(compile(source.replace("cache=True", "cache=False"), f"<{name}>", "exec"), mod.__dict__)  # noqa: S102  (generated source, compiled here by design)
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
