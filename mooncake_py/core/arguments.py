"""Arguments as the layers above receive them.

For the rules: wrapped keyword arguments moved into positional slots, and short descriptions for
error messages (shared by the tape and the dual layer). For the transforms and replay: which
arguments are differentiated (``norm_argnums``), whether a leaf can be (``is_float_leaf``,
``check_leaf_kind``, ``check_args``), ``has_aux`` outputs (``split_aux``), unwrapping
(``plain``), and the garbage-collector pause around a recording (``gc_paused``).
"""
import gc
import inspect
import sys
import threading

import numpy as np

from ..errors import ArgumentError, MissingRuleError, NonDifferentiableInputError, OutputTypeError
from . import array_module as am
from .dispatch import WRAPPER_TYPES
from .pytree import flatten

_SEQ = (list, tuple)
_SIGNATURES = {}

# NumPy hands a ufunc method every argument after the first as a keyword; these methods have no
# introspectable signature, so their parameters are listed here.
_UFUNC_METHOD_PARAMS = {
    "reduce": ("array", "axis", "dtype", "out", "keepdims", "initial", "where"),
    "accumulate": ("array", "axis", "dtype", "out"),
    "reduceat": ("array", "indices", "axis", "dtype", "out"),
    "outer": ("A", "B"),
    "at": ("a", "indices", "b"),
}


def fn_name(fn):
    """A readable dotted name for a function, ufunc or ufunc method key."""
    if isinstance(fn, tuple):
        return f"{fn_name(fn[0])}.{fn[1]}"
    if isinstance(fn, np.ufunc):
        return f"{_ufunc_module(fn)}{fn.__name__}"
    mod = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return f"{mod}.{name}" if mod else name


def _ufunc_module(uf):
    """``"numpy."`` or ``"scipy.special."``: where ``uf`` lives (ufuncs carry no __module__);
    ``""`` for any other ufunc (a user's ``np.frompyfunc``/numba one)."""
    name = uf.__name__
    if getattr(np, name, None) is uf:
        return "numpy."
    sps = sys.modules.get("scipy.special")
    if sps is not None and getattr(sps, name, None) is uf:
        return "scipy.special."
    return ""


def _signature(fn):
    sig = _SIGNATURES.get(fn)
    if sig is None:
        if type(fn) is tuple:
            P = inspect.Parameter
            sig = inspect.Signature([P(n, P.POSITIONAL_OR_KEYWORD, default=None)
                                     for n in _UFUNC_METHOD_PARAMS.get(fn[1], ())]
                                    + [P("kwargs", P.VAR_KEYWORD)])
        else:
            sig = inspect.signature(fn)
        _SIGNATURES[fn] = sig
    return sig


def kwargs_to_positional(fn, args, kwargs, holds, what):
    """Move the keyword arguments for which ``holds(value)`` is true (and every parameter before
    them) into positional slots, so that rules receive them positionally. ``what`` names the kind
    of value in errors ("tracked", "dual")."""
    try:
        sig = _signature(fn)
    except (TypeError, ValueError):
        raise MissingRuleError(
            f"{fn_name(fn)} received a {what} value as a keyword argument, and its parameters "
            "cannot be inspected to pass it positionally to its rule; pass it positionally."
        ) from None
    bound = sig.bind(*args, **kwargs)
    params = list(sig.parameters.values())
    last = max((i for i, p in enumerate(params) if holds(bound.arguments.get(p.name))),
               default=-1)
    pos, rest = [], {}
    for i, p in enumerate(params):
        if i <= last:
            if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                raise MissingRuleError(
                    f"{fn_name(fn)}: a {what} value was passed as the keyword-only argument "
                    f"{p.name!r}, which has no derivative rule; pass a constant there "
                    "(mp.stop_gradient(value)) or restructure the computation.")
            pos.append(bound.arguments.get(p.name, p.default))
        elif p.name in bound.arguments:
            if p.kind == p.VAR_KEYWORD:
                rest.update(bound.arguments[p.name])
            else:
                rest[p.name] = bound.arguments[p.name]
    return tuple(pos), rest


def describe_arg(a):
    """``TrackedArray[float64, shape (3,)]``-style description of one argument."""
    v = getattr(a, "_value", None)
    if v is not None and hasattr(type(a), "_mc_level"):
        return f"{type(a).__name__}[{getattr(v, 'dtype', '?')}, shape {tuple(np.shape(v))}]"
    if isinstance(a, np.ndarray):
        return f"ndarray[{a.dtype}, shape {a.shape}]"
    if type(a) in _SEQ:
        return f"{type(a).__name__} of {len(a)}"
    return type(a).__name__


class _GCPause:
    """The context manager of :func:`gc_paused`: a count of the recordings in progress, in all
    threads, under a lock. The collector is disabled by the first and enabled again by the last
    (if it was enabled before the first), so concurrent gradients never leave it disabled."""
    __slots__ = ()
    _lock = threading.Lock()
    _active = 0
    _was_enabled = False

    def __enter__(self):
        cls = _GCPause
        with cls._lock:
            if cls._active == 0:
                cls._was_enabled = gc.isenabled()
                if cls._was_enabled:
                    gc.disable()
            cls._active += 1
        return self

    def __exit__(self, *exc):
        cls = _GCPause
        with cls._lock:
            cls._active -= 1
            if cls._active == 0 and cls._was_enabled:
                gc.enable()
        return False


_GC_PAUSE = _GCPause()


def gc_paused():
    """Pause the cyclic garbage collector while a tape is recorded and swept.

    Every node stays alive until the sweep, so collections during recording find nothing to
    free, yet their cost grows with the tape (about a quarter of the per-op time on long tapes).
    Safe under threads: the collector runs again once no recording is in progress in any.

    Example:
        >>> import gc
        >>> with gc_paused():
        ...     gc.isenabled()
        False
        >>> gc.isenabled()
        True
    """
    return _GC_PAUSE


def fname(f):
    return getattr(f, "__qualname__", None) or getattr(f, "__name__", None) or repr(f)


def is_float_leaf(x):
    """Whether a leaf is differentiable: a floating or complex array/number (or a wrapped one)."""
    if type(x) is float or type(x) is complex:
        return True
    dt = getattr(x, "dtype", None)
    return dt is not None and getattr(dt, "kind", None) in ("f", "c")


def is_foreign_array(x):
    """An array of another library (a torch.Tensor): it converts to NumPy (``__array__`` or
    ``__dlpack__``) but its dtype is no NumPy dtype, so NumPy's protocols on it lead nowhere we
    can record. (Array-likes with NumPy dtypes, a pandas Series, stay ordinary constants.)"""
    if isinstance(x, (np.ndarray, np.generic, type)) or type(x) in WRAPPER_TYPES:
        return False
    if not (hasattr(x, "__array__") or hasattr(x, "__dlpack__")):
        return False
    return not isinstance(getattr(x, "dtype", None), np.dtype) and not am.is_device(x)


def leaf_error(f, argnum, x, path=""):
    dt = getattr(x, "dtype", None)
    what = f"{type(x).__name__}" + (f" with dtype {dt}" if dt is not None else "")
    hint = ("convert it to floating point (x.astype(float) or 2.0 instead of 2), or leave it "
            "out of argnums so it is treated as a constant")
    if is_foreign_array(x):
        what = f"{type(x).__module__}.{type(x).__name__}" + (f" of dtype {dt}" if dt else "")
        hint = ("mooncake_py differentiates NumPy code on NumPy (or CuPy) arrays: pass "
                "np.asarray(x) (for a torch tensor, x.detach().cpu().numpy()) instead, or leave "
                "it out of argnums so it is treated as a constant")
    return NonDifferentiableInputError(
        f"argument {argnum}{path} of {fname(f)} is a {what}, which has no derivative; {hint}.")


def check_leaf_kind(f, argnum, x, path=""):
    """Raise a named error for a differentiated leaf no transformation can take: an
    ``np.matrix`` (its ``*`` is a matrix product and its reductions stay 2-D, so rules written
    for arrays would give wrong shapes) or an array of another library.

    Example:
        >>> import numpy as np, warnings
        >>> check_leaf_kind(print, 0, np.ones(2))  # fine: nothing happens
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore", PendingDeprecationWarning)
        ...     m = np.matrix([[1.0]])
        >>> check_leaf_kind(print, 0, m)
        Traceback (most recent call last):
        ...
        mooncake_py.errors.NonDifferentiableInputError: argument 0 of print is an np.matrix; ...
    """
    if isinstance(x, np.matrix):
        raise NonDifferentiableInputError(
            f"argument {argnum}{path} of {fname(f)} is an np.matrix; np.matrix is not supported "
            "(its * is a matrix product and its reductions keep two dimensions, so derivatives "
            "would get wrong shapes). Pass np.asarray(x) and write x @ y for matrix products.")
    if is_foreign_array(x):
        raise leaf_error(f, argnum, x, path)


def check_args(f, args, nums):
    """:func:`check_leaf_kind` on every leaf of the arguments in ``nums``.

    Example:
        >>> import numpy as np
        >>> check_args(print, ({"w": np.ones(2), "n": 3}, "not differentiated"), (0,))
    """
    for i in nums:
        leaves, tree = flatten(args[i])
        for j, leaf in enumerate(leaves):
            if type(leaf) is not np.ndarray:
                check_leaf_kind(f, i, leaf, "" if tree.kind == "leaf" else f" (leaf {j})")


def _is_number_leaf(x):
    if type(x) in (float, int, complex):
        return True
    return getattr(x, "shape", None) == () and getattr(x, "dtype", None) is not None


def check_list_argument(f, args, nums, exc):
    """Raise, from ``exc`` (a ``TypeError`` or ``AttributeError`` that ``f`` raised), the named
    error that says what to pass when a differentiated argument is a list or tuple of numbers;
    return (for the caller to re-raise ``exc``) otherwise.

    Arguments are pytrees: ``[1.0, 2.0]`` is a container of two scalar leaves (its gradient is
    a list of two), not a vector, so ``f`` receives a list and ``x ** 2`` or ``x.shape`` fails
    inside it with a message about lists that does not say what to pass.

    Example:
        >>> import numpy as np
        >>> f = lambda x: np.sum(x ** 2)
        >>> check_list_argument(f, (np.ones(2),), (0,), TypeError("other"))  # nothing to say
        >>> check_list_argument(f, ([1.0, 2.0],), (0,), TypeError("unsupported operand"))
        Traceback (most recent call last):
        ...
        mooncake_py.errors.ArgumentError: <lambda> raised TypeError: unsupported operand. ...
    """
    for i in nums:
        a = args[i]
        if type(a) not in _SEQ or not a:
            continue
        leaves, _ = flatten(a)
        if not all(map(_is_number_leaf, leaves)):
            continue
        kind = type(a).__name__
        raise ArgumentError(
            f"{fname(f)} raised {type(exc).__name__}: {exc}. Its argument {i} is a {kind} of "
            f"{len(leaves)} numbers: mooncake_py takes a {kind} as a container of separate "
            f"scalar leaves (its gradient is a {kind} of scalars too), so {fname(f)} received "
            f"the {kind} itself, not an array. To differentiate it as one array, pass "
            f"np.array([...]) (np.asarray(x, dtype=float)); to keep the {kind}, index it "
            f"(x[0] * x[1]) or stack it inside {fname(f)} (np.stack(x)).") from exc


def _is_index(i):
    return isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_))


def norm_argnums(argnums, nargs, f):
    if _is_index(argnums):
        nums = (int(argnums),)
    elif isinstance(argnums, (tuple, list)) and all(map(_is_index, argnums)):
        nums = tuple(int(i) for i in argnums)
    else:
        raise ArgumentError(
            f"argnums={argnums!r} ({type(argnums).__name__}) for {fname(f)}: argnums must be "
            "the position of a positional argument (an int such as 0) or a tuple of them "
            "(argnums=(0, 1)); keyword arguments cannot be differentiated, pass them "
            "positionally.")
    for i in nums:
        if not -nargs <= i < nargs:
            raise ArgumentError(
                f"argnums={argnums!r} but {fname(f)} was called with {nargs} positional "
                f"argument(s), so valid positions are 0..{nargs - 1} (or negative from the "
                "end). Pass the argument positionally, or fix argnums.")
    return tuple(i % nargs for i in nums)


def split_aux(f, out):
    """``(value, aux)`` from the output of a function called with ``has_aux=True``."""
    if type(out) is not tuple or len(out) != 2:
        raise OutputTypeError(
            f"has_aux=True needs {fname(f)} to return a pair (value, aux); it returned "
            f"{describe_arg(out)}. Return `value, aux` (a 2-tuple), or drop has_aux=True.")
    return out


def plain(tree):
    """``tree`` with every tracked or dual leaf replaced by its plain primal value."""
    leaves, treedef = flatten(tree)
    out = []
    for leaf in leaves:
        while type(leaf) in WRAPPER_TYPES:
            leaf = leaf._value
        out.append(leaf)
    return treedef.unflatten(out)
