"""A CPU stand-in for CuPy, to test the GPU paths on machines without a GPU.

``DeviceArray`` wraps a NumPy array and behaves, where it matters here, as a CuPy array does:

- ``np.`` ufuncs and functions on it run (through ``__array_ufunc__``/``__array_function__``)
  and return DeviceArrays; reductions return 0-d DeviceArrays, not scalars;
- a host ``numpy.ndarray`` operand (even 0-d) is refused with TypeError, as CuPy refuses
  implicit host-to-device transfers; NumPy scalars and Python numbers are accepted;
- ``np.asarray(x)`` is refused (TypeError), ``float(x)`` works (CuPy synchronises);
- functions CuPy 14 lacks (:data:`MISSING`) are not implemented;
- ``ElementwiseKernel`` compiles the kernel's CUDA C body as C++ for the host (g++) and runs it
  with ElementwiseKernel's semantics (broadcasting, ``raw`` parameters, the index ``i``).

So a host array created anywhere in a gradient/HVP/Hessian computation on DeviceArrays fails
loudly, and every generated GPU kernel can be checked against the CPU path.

Use :func:`module` to get the ``cupy``-like namespace (it registers DeviceArray with
:mod:`mooncake_py.core.array_module`).
"""
import atexit
import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import types

import numpy as np

from mooncake_py.core import array_module

# NumPy functions with rules that CuPy 14.2 does not implement (checked by introspecting
# cupy 14.2's namespaces against the rule registries).
MISSING = frozenset({np.linalg.outer, np.linalg.tensordot, np.linalg.trace, np.spacing,
                     getattr(np, "unstack", None)}) - {None}


def _unsupported(x):
    return TypeError(f"Unsupported type {type(x)} (fake device: implicit host-to-device "
                     "transfer is not allowed)")


def _unwrap(x, strict=True):
    """DeviceArrays to their NumPy arrays, recursively in lists/tuples/dicts; a host ndarray is
    refused when ``strict``."""
    t = type(x)
    if t is DeviceArray:
        return x._a
    if t is np.ndarray and strict:
        raise _unsupported(x)
    if t is list or t is tuple:
        return t(_unwrap(v, strict) for v in x)
    if t is dict:
        return {k: _unwrap(v, strict) for k, v in x.items()}
    return x


def _wrap(r):
    if isinstance(r, np.ndarray):
        return DeviceArray(r)
    if isinstance(r, np.generic):  # CuPy returns 0-d arrays where NumPy returns scalars
        return DeviceArray(np.asarray(r))
    if isinstance(r, tuple) and hasattr(r, "_fields"):
        return type(r)(*[_wrap(v) for v in r])
    if isinstance(r, (tuple, list)):
        return type(r)(_wrap(v) for v in r)
    return r


_SCALARS = (int, float, bool, complex, np.generic)


class DeviceArray:
    """A NumPy array pretending to live on a device (see the module docstring)."""
    __slots__ = ("_a",)
    __hash__ = None

    def __init__(self, a):
        self._a = a if type(a) is np.ndarray else np.asarray(a)

    # --- protocols ----------------------------------------------------------------------------
    def __array__(self, dtype=None, copy=None):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. Please use "
                        "`.get()` to construct a NumPy array explicitly. (fake device)")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method == "at":  # ufunc.at(a, index, b): the index may be host data, as in CuPy
            a, index, *rest = inputs
            if type(a) is not DeviceArray:
                return NotImplemented
            getattr(ufunc, method)(a._a, _unwrap(index, strict=False), *_unwrap(rest))
            return None
        for x in inputs + tuple(kwargs.get("out", None) or ()):
            if type(x) is DeviceArray or isinstance(x, _SCALARS):
                continue
            if type(x) is np.ndarray:
                raise _unsupported(x)
            return NotImplemented  # another wrapper (a TrackedArray): let it handle the call
        ins = _unwrap(inputs)
        if "out" in kwargs:
            kwargs = dict(kwargs, out=_unwrap(kwargs["out"]))
        return _wrap(getattr(ufunc, method)(*ins, **kwargs))

    def __array_function__(self, func, types_, args, kwargs):
        if func in MISSING:
            return NotImplemented
        if not all(issubclass(t, (DeviceArray, np.ndarray)) for t in types_):
            return NotImplemented
        return _wrap(func(*_unwrap(args), **_unwrap(kwargs)))

    # --- attributes ---------------------------------------------------------------------------
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    strides = property(lambda self: self._a.strides)
    itemsize = property(lambda self: self._a.itemsize)
    nbytes = property(lambda self: self._a.nbytes)
    flags = property(lambda self: self._a.flags)
    T = property(lambda self: DeviceArray(self._a.T))
    mT = property(lambda self: DeviceArray(np.swapaxes(self._a, -1, -2)))

    def get(self):
        """A host copy (as ``cupy.ndarray.get``)."""
        return self._a.copy()

    def item(self):
        return self._a.item()

    def __float__(self):
        return float(self._a)

    def __int__(self):
        return int(self._a)

    def __bool__(self):
        return bool(self._a)

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        for i in range(len(self._a)):
            yield self[i]

    def __repr__(self):
        return f"DeviceArray({self._a!r})"

    # --- methods --------------------------------------------------------------------------------
    def astype(self, dtype, copy=True, **kw):
        return DeviceArray(self._a.astype(dtype, copy=copy, **kw))

    def copy(self, order="C"):
        return DeviceArray(self._a.copy(order))

    def reshape(self, *shape, order="C"):
        return DeviceArray(self._a.reshape(*shape, order=order))

    def ravel(self, order="C"):
        return DeviceArray(self._a.ravel(order))

    def transpose(self, *axes):
        return DeviceArray(self._a.transpose(*axes))

    def swapaxes(self, a, b):
        return DeviceArray(self._a.swapaxes(a, b))

    def squeeze(self, axis=None):
        return DeviceArray(self._a.squeeze(axis))

    def sum(self, *args, **kw):
        return np.sum(self, *args, **kw)

    def mean(self, *args, **kw):
        return np.mean(self, *args, **kw)

    def max(self, *args, **kw):
        return np.max(self, *args, **kw)

    def min(self, *args, **kw):
        return np.min(self, *args, **kw)

    def dot(self, other):
        return np.dot(self, other)

    def __getitem__(self, key):
        return _wrap(self._a[_unwrap(key, strict=False)])

    def __setitem__(self, key, value):
        if type(value) is np.ndarray:
            raise _unsupported(value)
        if not (type(value) is DeviceArray or isinstance(value, _SCALARS)):
            raise TypeError(f"cannot set {type(value).__name__} into a fake device array")
        self._a[_unwrap(key, strict=False)] = _unwrap(value)


def _binop(ufunc, reflected=False):
    if reflected:
        return lambda self, other: ufunc(other, self)
    return lambda self, other: ufunc(self, other)


def _inplace(ufunc):
    def op(self, other):
        ufunc(self, other, out=(self,))
        return self
    return op


for _name, _uf in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                   ("truediv", np.true_divide), ("floordiv", np.floor_divide),
                   ("mod", np.remainder), ("pow", np.power), ("matmul", np.matmul),
                   ("and", np.logical_and), ("or", np.logical_or)]:
    setattr(DeviceArray, f"__{_name}__", _binop(_uf))
    setattr(DeviceArray, f"__r{_name}__", _binop(_uf, True))
    setattr(DeviceArray, f"__i{_name}__", _inplace(_uf))
for _name, _uf in [("lt", np.less), ("le", np.less_equal), ("gt", np.greater),
                   ("ge", np.greater_equal), ("eq", np.equal), ("ne", np.not_equal)]:
    setattr(DeviceArray, f"__{_name}__", _binop(_uf))
DeviceArray.__neg__ = lambda self: np.negative(self)
DeviceArray.__pos__ = lambda self: np.positive(self)
DeviceArray.__abs__ = lambda self: np.absolute(self)
DeviceArray.__invert__ = lambda self: np.invert(self)


# --- ElementwiseKernel on the host ------------------------------------------------------------------
_CTYPES = {np.dtype(np.float64): "double", np.dtype(np.float32): "float"}
_PARAM = re.compile(r"^(raw\s+)?(\w+)\s+(\w+)$")
_BUILD_DIR = []
_LIBS = {}


def compiler():
    """The host C++ compiler used for ElementwiseKernel, or None."""
    return shutil.which(os.environ.get("CXX", "g++"))


def _build_dir():
    if not _BUILD_DIR:
        d = tempfile.mkdtemp(prefix="mooncake_fake_device_")
        atexit.register(shutil.rmtree, d, True)
        _BUILD_DIR.append(d)
    return _BUILD_DIR[0]


_HEADER = """
#include <cmath>
using namespace std;
#define __device__
typedef %s T;
struct Raw { T* p; long n; T& operator[](long k) const { return p[k]; } long size() const { return n; } };
"""


def _parse(params):
    out = []
    for p in filter(None, (s.strip() for s in params.split(","))):
        m = _PARAM.match(p)
        if m is None:
            raise ValueError(f"cannot parse kernel parameter {p!r}")
        raw, ctype, name = m.groups()
        if ctype != "T":
            raise ValueError(f"the fake ElementwiseKernel supports type T only, got {p!r}")
        out.append((name, bool(raw)))
    return out


def _function(fname, ins, outs, operation):
    lines = [f'extern "C" void {fname}(long n, void** p, const long* sz) {{',
             "  for (long i = 0; i < n; ++i) {"]
    for k, (name, raw) in enumerate(ins + outs):
        const = "const " if k < len(ins) else ""
        if raw:
            lines.append(f"    Raw {name} = {{(T*)p[{k}], sz[{k}]}};")
        elif k < len(ins):
            lines.append(f"    {const}T {name} = ((T*)p[{k}])[i];")
        else:
            lines.append(f"    T& {name} = ((T*)p[{k}])[i];")
    lines += ["    {", *("      " + ln for ln in operation.splitlines()), "    }", "  }", "}"]
    return "\n".join(lines)


def _definitions(text):
    """The top-level definitions of a preamble (split where the brace depth returns to 0), so
    that the preambles of many kernels can be merged into one translation unit."""
    out, depth, start = [], 0, 0
    for j, ch in enumerate(text):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                out.append(text[start:j + 1].strip())
                start = j + 1
    return out


def build(kernels, dtype):
    """Compile the kernels (ElementwiseKernel objects of this module) for ``dtype`` in one
    shared library: one compiler run for many kernels. Their preambles are merged (the
    generated ones are prefixes of one canonical set of definitions)."""
    ctype = _CTYPES[np.dtype(dtype)]
    todo = [k for k in kernels if (k.key, ctype) not in _LIBS]
    if not todo:
        return
    preambles = []
    for k in todo:
        for block in _definitions(k.preamble):
            if block not in preambles:
                preambles.append(block)
    src = [_HEADER % ctype, "\n".join(preambles)]
    names = {}
    for j, k in enumerate(todo):
        names[k.key] = f"k{j}"
        src.append(_function(f"k{j}", k.ins, k.outs, k.operation))
    text = "\n".join(src)
    digest = hashlib.sha1(text.encode()).hexdigest()[:16]
    so = os.path.join(_build_dir(), f"k_{digest}.so")
    if not os.path.exists(so):
        cpp = so[:-3] + ".cpp"
        with open(cpp, "w") as fh:
            fh.write(text)
        res = subprocess.run([compiler(), "-O1", "-shared", "-fPIC", "-o", so, cpp],
                             capture_output=True, text=True)
        if res.returncode:
            raise RuntimeError(f"host compilation of the kernels failed:\n{res.stderr[-4000:]}")
    lib = ctypes.CDLL(so)
    for k in todo:
        fn = getattr(lib, names[k.key])
        fn.restype = None
        _LIBS[(k.key, ctype)] = (lib, fn)


class ElementwiseKernel:
    """``cupy.ElementwiseKernel`` run on the host: same constructor, same call semantics for
    parameters of the placeholder type ``T`` (outputs must be passed)."""

    def __init__(self, in_params, out_params, operation, name="kernel", preamble="", **kw):
        self.ins, self.outs = _parse(in_params), _parse(out_params)
        self.operation, self.name, self.preamble = operation, name, preamble
        self.key = hashlib.sha1("\0".join([in_params, out_params, operation, preamble])
                                .encode()).hexdigest()
        self.calls = 0

    def __call__(self, *args):
        if len(args) != len(self.ins) + len(self.outs):
            raise TypeError(f"{self.name}: expected {len(self.ins)} inputs and "
                            f"{len(self.outs)} outputs (the fake needs every output passed)")
        ins, outs = args[:len(self.ins)], args[len(self.ins):]
        dt = None
        for x in args:
            if type(x) is np.ndarray:
                raise _unsupported(x)
            if type(x) is DeviceArray:
                if dt is None:
                    dt = x.dtype
                elif x.dtype != dt:
                    raise TypeError(f"{self.name}: type T is mismatched ({dt} vs {x.dtype})")
            elif not isinstance(x, _SCALARS):
                raise TypeError(f"{self.name}: unsupported argument {type(x).__name__}")
        shape = np.broadcast_shapes(*[np.shape(_unwrap(x)) for (_, raw), x in
                                      zip(self.ins + self.outs, args) if not raw])
        for (name, raw), o in zip(self.outs, outs):
            if type(o) is not DeviceArray:
                raise TypeError(f"{self.name}: output {name} must be a device array")
            if not raw and o.shape != shape:
                raise ValueError(f"{self.name}: output {name} has shape {o.shape}, "
                                 f"expected {shape}")
        build([self], dt)
        lib, fn = _LIBS[(self.key, _CTYPES[dt])]
        n = int(np.prod(shape))
        bufs = []
        for (name, raw), x in zip(self.ins, ins):
            v = _unwrap(x)
            v = np.ascontiguousarray(v if raw else np.broadcast_to(v, shape), dtype=dt)
            bufs.append(v)
        obufs = [np.ascontiguousarray(o._a) if raw else np.empty(shape, dtype=dt)
                 for (name, raw), o in zip(self.outs, outs)]
        allb = bufs + obufs
        ptrs = (ctypes.c_void_p * len(allb))(*[b.ctypes.data for b in allb])
        sizes = (ctypes.c_long * len(allb))(*[b.size for b in allb])
        fn(ctypes.c_long(n), ptrs, sizes)
        for o, b in zip(outs, obufs):
            o._a[...] = b.reshape(o.shape)
        self.calls += 1
        return outs[0] if len(outs) == 1 else tuple(outs)


# --- the namespace --------------------------------------------------------------------------------
def _wrapped(fn):
    def f(*args, **kwargs):
        return _wrap(fn(*_unwrap(args), **_unwrap(kwargs)))
    f.__name__ = getattr(fn, "__name__", "f")
    return f


def _asarray(a, dtype=None):
    if type(a) is DeviceArray:
        return a if dtype is None or a.dtype == dtype else a.astype(dtype)
    return DeviceArray(np.array(a, dtype=dtype))  # an explicit host-to-device copy


def _solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                      check_finite=False):
    import scipy.linalg
    return _wrap(scipy.linalg.solve_triangular(_unwrap(a), _unwrap(b), trans=trans, lower=lower,
                                               unit_diagonal=unit_diagonal))


_MODULE = []


def module():
    """The fake ``cupy`` namespace (created once; registers DeviceArray with array_module)."""
    if _MODULE:
        return _MODULE[0]
    m = types.ModuleType("fakecupy")
    for name in ["zeros", "ones", "empty", "full", "eye", "tri", "arange", "zeros_like",
                 "ones_like", "empty_like", "linspace", "stack", "concatenate"]:
        setattr(m, name, _wrapped(getattr(np, name)))
    m.ndarray = DeviceArray
    m.asarray = m.array = _asarray
    m.asnumpy = lambda x: _unwrap(x).copy() if type(x) is DeviceArray else np.asarray(x)
    m.float32, m.float64 = np.float32, np.float64
    m.ElementwiseKernel = ElementwiseKernel
    m.linalg = types.ModuleType("fakecupy.linalg")
    for name in ["inv", "solve", "det", "slogdet", "cholesky", "eigh", "eigvalsh", "norm"]:
        setattr(m.linalg, name, _wrapped(getattr(np.linalg, name)))
    # cupyx.scipy.linalg / cupyx.scipy.special, as array_module looks them up
    x = types.ModuleType("fakecupyx")
    x.scipy = types.ModuleType("fakecupyx.scipy")
    x.scipy.linalg = types.ModuleType("fakecupyx.scipy.linalg")
    x.scipy.linalg.solve_triangular = _solve_triangular
    x.scipy.special = types.ModuleType("fakecupyx.scipy.special")
    sys.modules.update({"fakecupyx": x, "fakecupyx.scipy": x.scipy,
                        "fakecupyx.scipy.linalg": x.scipy.linalg,
                        "fakecupyx.scipy.special": x.scipy.special})
    array_module.register(DeviceArray, m)
    _MODULE.append(m)
    return m
