"""A call's arguments as the rules receive them: wrapped keyword arguments moved into positional
slots, and short descriptions for error messages. Shared by the tape and the dual layer."""
import inspect

import numpy as np

from .errors import MissingRuleError
from .rules.registry import fn_name

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
