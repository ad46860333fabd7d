"""Keeping small BLAS/LAPACK calls off OpenBLAS's thread pool, with no extra dependency.

OpenBLAS splits even a 100 × 100 triangular solve or Cholesky factorisation across its threads;
waking them costs more than the work (tens of µs per call, more on a loaded machine), and a
gradient makes several such calls per op. :func:`single_threaded` runs a block with every
OpenBLAS loaded in the process (NumPy's and SciPy's bundle one each) set to one thread, through
OpenBLAS's own ``openblas_set_num_threads`` (found with ctypes, as threadpoolctl does), and
restores the previous counts afterwards. Where no OpenBLAS can be found (another BLAS, another
platform) it does nothing.

Rules use it for calls on small matrices only (:func:`small`): large ones keep every thread.
"""
import ctypes
import functools
import sys
import threading

import numpy as np

from .dispatch import WRAPPER_TYPES

# Matrices with at most this many rows run single-threaded inside rules (a 128 × 128 Cholesky
# or solve takes ~50-200 µs on one core; splitting it across threads gains nothing).
SMALL_N = 256
# ... and at least this many (below ~64³ flops OpenBLAS stays on one thread by itself, so the
# switch, ~1 µs, would be pure cost).
MIN_N = 32

_lock = threading.Lock()
_active = {}  # library name -> number of blocks inside a limit on it
_saved = {}  # library name -> (setter, count before the outermost block)
_libs = None  # [(name, get, set)] for each OpenBLAS loaded ("numpy", "scipy" or its path)
_scanned_modules = -1

_PREFIXES = ("openblas_", "scipy_openblas_")
_SUFFIXES = ("64_", "")


def _library_name(path):
    low = path.lower()
    return "numpy" if "numpy" in low else "scipy" if "scipy.libs" in low or "/scipy/" in low \
        else path


def _scan():
    """(name, get_num_threads, set_num_threads) of every OpenBLAS mapped in the process."""
    found, paths = [], []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and "openblas" in parts[-1].lower() and parts[-1] not in paths:
                    paths.append(parts[-1])
    except OSError:
        return found
    for p in paths:
        try:
            lib = ctypes.CDLL(p)
        except OSError:
            continue
        for pre in _PREFIXES:
            for suf in _SUFFIXES:
                get = getattr(lib, f"{pre}get_num_threads{suf}", None)
                put = getattr(lib, f"{pre}set_num_threads{suf}", None)
                if get is not None and put is not None:
                    get.restype, get.argtypes = ctypes.c_int, []
                    put.restype, put.argtypes = None, [ctypes.c_int]
                    found.append((_library_name(p), get, put))
                    break
            else:
                continue
            break
    return found


def _handles():
    global _libs, _scanned_modules
    n = len(sys.modules)
    if n != _scanned_modules:  # a module imported since may have loaded another OpenBLAS
        _libs, _scanned_modules = _scan(), n
    return _libs


class _SingleThreaded:
    """Context manager of :func:`single_threaded`, for the OpenBLAS of one library (NumPy's
    or SciPy's: changing the other one's count would make its next threaded call pay for
    re-waking its pool) or of all. Nested and concurrent blocks share one limit per library,
    set by the first to enter and lifted by the last to leave."""
    __slots__ = ("lib",)

    def __init__(self, lib):
        self.lib = lib

    def __enter__(self):
        with _lock:
            for name, get, put in _handles():
                if self.lib is not None and name != self.lib:
                    continue
                c = _active.get(name, 0)
                if c == 0:
                    n = get()
                    if n > 1:
                        put(1)
                        _saved[name] = (put, n)
                _active[name] = c + 1
        return self

    def __exit__(self, *exc):
        with _lock:
            for name in list(_active):
                if self.lib is not None and name != self.lib:
                    continue
                c = _active[name] - 1
                if c:
                    _active[name] = c
                    continue
                del _active[name]
                saved = _saved.pop(name, None)
                if saved is not None:
                    saved[0](saved[1])
        return False


_SINGLE = _SingleThreaded(None)
_BY_LIB = {"numpy": _SingleThreaded("numpy"), "scipy": _SingleThreaded("scipy")}


def single_threaded(lib=None):
    """A context manager: calls into OpenBLAS inside it run on one thread: those of NumPy
    (``lib="numpy"``), of SciPy (``lib="scipy"``) or of every library (``None``).

    Example:
        >>> import numpy as np
        >>> with single_threaded("numpy"):
        ...     L = np.linalg.cholesky(np.eye(3) * 4.0)
        >>> L[0, 0]
        np.float64(2.0)
    """
    return _SINGLE if lib is None else _BY_LIB[lib]


class _Nothing:
    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_NOTHING = _Nothing()


def _matrix_dims(a):
    """The plain array inside ``a`` (through tracked/dual wrappers) when it is a NumPy array."""
    while type(a) in WRAPPER_TYPES:
        a = a._value
    return a.shape if type(a) is np.ndarray else None


def small(*arrays, lib="numpy"):
    """:func:`single_threaded` for a BLAS/LAPACK call on ``arrays`` that OpenBLAS would thread
    although it is too small to gain from it: some matrix has at least :data:`MIN_N` ²
    entries and none has a side over :data:`SMALL_N`. Otherwise (tiny calls, which OpenBLAS
    runs on one thread anyway; large ones; device arrays) a no-op context. Wrapped values
    (tracked, dual) are judged by their plain values; lists and other arguments are ignored.

    ``lib`` says whose OpenBLAS the call uses: ``"numpy"`` (NumPy's functions, the default),
    ``"scipy"`` (scipy.linalg's), or None for all.

    Example:
        >>> import numpy as np
        >>> one = single_threaded("numpy")
        >>> small(np.eye(100)) is one, small(np.eye(1000)) is one, small(np.eye(4)) is one
        (True, False, False)
    """
    medium = False
    for a in arrays:
        t = type(a)
        if t is not np.ndarray and t not in WRAPPER_TYPES:
            if hasattr(a, "__cuda_array_interface__"):
                return _NOTHING
            continue
        shape = _matrix_dims(a)
        if shape is None:
            return _NOTHING
        if len(shape) >= 2:
            m, n = shape[-2], shape[-1]
            if m > SMALL_N or n > SMALL_N:
                return _NOTHING
            if m * n >= MIN_N * MIN_N:
                medium = True
    return single_threaded(lib) if medium else _NOTHING


def _limited_rrule(rule):
    def limited(args, kwargs, needs):
        ctx = small(*args)
        if ctx is _NOTHING:
            return rule(args, kwargs, needs)
        with ctx:
            out, pullback = rule(args, kwargs, needs)
        if pullback is None:
            return out, pullback
        return out, _LimitedPullback(pullback)
    limited.__name__ = getattr(rule, "__name__", "rrule")
    limited.__wrapped__ = rule
    return limited


class _LimitedPullback:
    """A pullback of a medium-sized BLAS call, run single-threaded like its forward call."""
    __slots__ = ("pb",)

    def __init__(self, pb):
        self.pb = pb

    def __call__(self, g):
        with _BY_LIB["numpy"]:  # (SciPy calls in pullbacks limit their own library)
            return self.pb(g)


def _limited_frule(rule):
    @functools.wraps(rule)
    def limited(primals, tangents, **kw):
        ctx = small(*primals)
        if ctx is _NOTHING:
            return rule(primals, tangents, **kw)
        with ctx:
            return rule(primals, tangents, **kw)
    return limited


def limit_small_calls(rrules, frules, functions):
    """Wrap the reverse and forward rules of the BLAS/LAPACK functions (matmul, dot, einsum,
    numpy.linalg, the triangular solves: ``functions``, rules/linear_algebra.py's
    ``blas_functions()``) so that, on medium-sized matrices (see :func:`small`),
    the call and its pullback run single-threaded. Done once when the rules are loaded.

    Example:
        >>> from mooncake_py.rules.registry import RRULES
        >>> import numpy as np
        >>> RRULES[np.matmul].__name__
        'rrule(numpy.matmul)'
    """
    for fn in functions:
        r = rrules.get(fn)
        if r is not None and not getattr(r, "_mc_blas_limited", False):
            rrules[fn] = _limited_rrule(r)
            rrules[fn]._mc_blas_limited = True
        r = frules.get(fn)
        if r is not None and not getattr(r, "_mc_blas_limited", False):
            frules[fn] = _limited_frule(r)
            frules[fn]._mc_blas_limited = True
