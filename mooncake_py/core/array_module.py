"""Which array module (NumPy or CuPy) a value lives in, and constructors that follow it.

Rules call ``np.`` functions, and CuPy's own protocol support (``__array_ufunc__``,
``__array_function__``) routes them to CuPy when the operands are CuPy arrays. What does *not*
follow the operands is everything that builds an array from nothing or from host data:
``np.zeros(shape)``, ``np.eye(n)``, ``np.tri(n)``, ``np.arange(n)``, ``np.asarray(mask)``,
scipy functions (which call ``np.asarray``), ``float(x)``. Each goes through this module, so
that a result built next to a device array is a device array too and nothing moves to the host
behind the user's back.

The module of a value is found from its type (cached): ``numpy.ndarray`` is NumPy, an array
type defined in a ``cupy`` package is CuPy, TrackedArray and DualArray are unwrapped to the
value they carry. Scalars (Python numbers, NumPy scalars) belong to no module: both NumPy and
CuPy accept them. A host ``ndarray`` mixed with a device array raises
:class:`MixedArrayModulesError` here rather than an obscure error from inside CuPy.

CuPy is never imported by this module: a CuPy array can only exist once ``cupy`` is imported.

Example:
    >>> import numpy as np
    >>> from mooncake_py.core import array_module as am
    >>> g = np.ones(3, dtype=np.float32)
    >>> am.module_of(g, 2.0) is np
    True
    >>> am.eye(2, dtype=g.dtype, like=g)
    array([[1., 0.],
           [0., 1.]], dtype=float32)
"""
import sys

import numpy as np

from ..errors import MissingRuleError, MixedArrayModulesError
from .dispatch import WRAPPER_TYPES

__all__ = ["MixedArrayModulesError", "module_of", "device_module", "is_device", "unwrap",
           "zeros", "ones", "empty", "full", "eye", "tri", "arange", "asarray", "to_host",
           "scalar", "linalg", "scipy_linalg", "scipy_special", "register"]


_SEQ = (list, tuple)
_NONE = object()  # "not an array of any module" (scalars, None, other objects), in the cache
_MODULES = {np.ndarray: np}  # array type -> its module (or _NONE), filled as types are seen


def register(array_type, module):
    """Recognise ``array_type`` as an array of ``module`` (a NumPy-like namespace with
    ``zeros``, ``eye``, ``asarray``, ``linalg``... and, for the fused GPU kernels,
    ``ElementwiseKernel``). CuPy needs no registration; this is for other device libraries and
    for test doubles."""
    _MODULES[array_type] = module


def _module_of_type(t):
    m = _MODULES.get(t)
    if m is None:
        root = (getattr(t, "__module__", None) or "").split(".")[0]
        if root in ("cupy", "cupyx") and "cupy" in sys.modules:
            m = sys.modules["cupy"]
        elif issubclass(t, np.ndarray):
            m = np
        else:
            m = _NONE
        _MODULES[t] = m
    return m


def unwrap(x):
    """The plain value inside TrackedArray/DualArray wrappers (the primal, for a dual)."""
    while type(x) in WRAPPER_TYPES:
        x = x._value
    return x


def device_module(x):
    """The module of ``x`` when ``x`` (a plain value, not a wrapper) is an array of a module other
    than NumPy, else None. One dict lookup: cheap enough for the hot paths of the rules."""
    m = _MODULES.get(type(x))
    if m is np or m is _NONE:
        return None
    if m is None:
        m = _module_of_type(type(x))
        return None if m is np or m is _NONE else m
    return m


def is_device(x):
    """Whether ``x`` (or the value it wraps) is an array of a device module such as CuPy."""
    return device_module(unwrap(x)) is not None


def _describe(x):
    return (f"{type(x).__module__}.{type(x).__name__} of dtype {getattr(x, 'dtype', '?')}, "
            f"shape {tuple(getattr(x, 'shape', ()))}")


def _collect(values, found):
    for v in values:
        if type(v) in _SEQ:
            _collect(v, found)
            continue
        v = unwrap(v)
        m = _module_of_type(type(v))
        if m is not _NONE:
            found.setdefault(m, v)


def module_of(*values, what=None):
    """The array module (``numpy`` or ``cupy``) of ``values`` (wrappers unwrapped, lists and
    tuples searched); NumPy when none is an array.

    Raises :class:`MixedArrayModulesError` when arrays of different modules meet: a host array
    next to a device array would otherwise be copied (or refused) by the device library, and
    results would silently end up on the wrong side. ``what`` names the operation in the message.

    Example:
        >>> import numpy as np
        >>> from mooncake_py.core.array_module import module_of
        >>> module_of(np.ones(2), [3.0, np.float32(1)]).__name__
        'numpy'
    """
    found = {}
    _collect(values, found)
    if not found:
        return np
    if len(found) == 1:
        return next(iter(found))
    raise mixed_error(list(found.values()), what)


def mixed_error(arrays, what=None):
    """The :class:`MixedArrayModulesError` for ``arrays`` of different modules."""
    where = f" in {what}" if what else ""
    kinds = "; ".join(_describe(a) for a in arrays)
    return MixedArrayModulesError(
        f"arrays of different array modules were mixed{where}: {kinds}. mooncake_py never "
        "moves data between host and device behind your back, so a computation (its inputs, "
        "the constants it uses and the directions given to hvp/jvp) must live in one module. "
        "Move the host arrays to the device with cupy.asarray(x) (or the device arrays to the "
        "host with cupy.asnumpy(x)); build constants with the module of the inputs "
        "(cupy.eye rather than np.eye).")


def _xp(like):
    if like is None or type(like) is np.ndarray:  # (the common case, without module_of's walk)
        return np
    return module_of(like)


# --- constructors that follow a reference value --------------------------------------------------
def zeros(shape, dtype=float, like=None):
    """``xp.zeros(shape, dtype)`` in the module of ``like`` (NumPy when None)."""
    return _xp(like).zeros(shape, dtype=dtype)


def ones(shape, dtype=float, like=None):
    """``xp.ones(shape, dtype)`` in the module of ``like``."""
    return _xp(like).ones(shape, dtype=dtype)


def empty(shape, dtype=float, like=None):
    """``xp.empty(shape, dtype)`` in the module of ``like``."""
    return _xp(like).empty(shape, dtype=dtype)


def full(shape, fill_value, dtype=None, like=None):
    """``xp.full(shape, fill_value, dtype)`` in the module of ``like``."""
    return _xp(like).full(shape, fill_value, dtype=dtype)


def eye(N, M=None, k=0, dtype=float, like=None):
    """``xp.eye(N, M, k, dtype)`` in the module of ``like``."""
    return _xp(like).eye(N, M, k, dtype=dtype)


def tri(N, M=None, k=0, dtype=float, like=None):
    """``xp.tri(N, M, k, dtype)`` in the module of ``like``."""
    return _xp(like).tri(N, M, k, dtype=dtype)


def arange(*args, dtype=None, like=None):
    """``xp.arange(*args, dtype=dtype)`` in the module of ``like``."""
    return _xp(like).arange(*args, dtype=dtype)


def asarray(a, dtype=None, like=None):
    """Plain data (a mask, an index list, a comparison result) as an array of the module of
    ``like``, or of ``a`` itself when ``like`` is None: ``np.asarray`` that keeps device
    arrays on the device. Not for differentiable values (a wrapped ``a`` raises
    TrackingLostError, as ``np.asarray`` does)."""
    xp = module_of(a if like is None else like)
    if xp is np:
        return np.asarray(a, dtype=dtype)
    return xp.asarray(a, dtype=dtype)


def to_host(x):
    """``x`` as a NumPy array (an explicit device-to-host copy for device arrays): for the few
    values that must be read on the host, such as index lists that decide shapes."""
    xp = module_of(x)
    if xp is np:
        return np.asarray(x)
    get = getattr(xp, "asnumpy", None)
    return get(x) if get is not None else x.get()


def scalar(x):
    """``x`` (a plain value) as a Python float. On a device array this synchronises and copies
    one number to the host: call it only where a Python number is genuinely needed (a shape, a
    branch). A tracked or dual value raises TrackingLostError, as ``float(x)`` does."""
    return float(x)


# --- modules of functions ------------------------------------------------------------------------
def linalg(like):
    """``numpy.linalg`` or ``cupy.linalg``, following ``like``."""
    return module_of(like).linalg


def _sub(xp, numpy_name, device_name, fn_name):
    if xp is np:
        try:
            return __import__(numpy_name, fromlist=["_"])
        except ImportError:
            return None
    try:
        return __import__(device_name.format(xp.__name__), fromlist=["_"])
    except ImportError as e:
        raise MissingRuleError(
            f"{fn_name} on {xp.__name__} arrays needs {device_name.format(xp.__name__)}, which "
            f"could not be imported ({e}).") from e


def scipy_linalg(like, fn_name="scipy.linalg"):
    """``scipy.linalg`` (None without scipy) or ``cupyx.scipy.linalg``, following ``like``."""
    return _sub(module_of(like), "scipy.linalg", "{}x.scipy.linalg", fn_name)


def scipy_special(like, fn_name="scipy.special"):
    """``scipy.special`` (None without scipy) or ``cupyx.scipy.special``, following ``like``."""
    return _sub(module_of(like), "scipy.special", "{}x.scipy.special", fn_name)


def device_function(fn, like):
    """``fn`` (a NumPy function, e.g. ``np.linalg.slogdet``) as the function of ``like``'s
    module that its array protocol dispatches to; raises MissingRuleError naming the op when
    that module has no counterpart (instead of NumPy's "no implementation found")."""
    xp = module_of(like)
    if xp is np:
        return fn
    mod = xp
    for part in (getattr(fn, "__module__", "") or "").split(".")[1:]:
        mod = getattr(mod, part, None)
        if mod is None:
            break
    impl = getattr(mod, getattr(fn, "__name__", ""), None) if mod is not None else None
    if impl is None:
        name = f"{fn.__module__}.{fn.__name__}".replace("numpy.", "np.")
        raise MissingRuleError(
            f"{name} has no {xp.__name__} implementation, so mooncake_py cannot run it (or its "
            f"rule) on {xp.__name__} arrays. Compute it with another function {xp.__name__} "
            "provides, or move the data to the host (cupy.asnumpy) for this part.")
    return impl
