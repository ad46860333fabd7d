"""A call's arguments as the rules receive them: wrapped keyword arguments moved into positional
slots, and short descriptions for error messages. Shared by the tape and the dual layer."""
import inspect

import numpy as np

from .errors import MissingRuleError
from .rules.registry import fn_name, RRULES, FRULES

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


def missing_rule_message(fn, args, kwargs, mode):
    """The MissingRuleError text for ``fn`` called on ``args`` in ``mode`` ("reverse" or
    "forward"): what was called, and the decorator to add."""
    name = fn_name(fn)
    short = name.replace("numpy.", "np.")
    call = ", ".join([describe_arg(a) for a in args] + [f"{k}=..." for k in kwargs])
    if mode == "reverse":
        other = " (it has a forward rule, so mp.jvp works)" if fn in FRULES else ""
        rule = ("rrule", "so that second order works too",
                f"    @mp.rrule({short})\n    def _(x, *args, **kwargs):\n"
                f"        y = {short}(x, *args, **kwargs)\n"
                f"        return y, lambda g: (<cotangent of x from g>, None, ...)\n\n", "",
                "mooncake_py.testing.test_rule checks a new rule against finite differences.")
    else:
        other = " (it has a reverse rule, so mp.grad works)" if fn in RRULES else ""
        rule = ("frule", "so that it composes",
                f"    @mp.frule({short})\n    def _(primals, tangents, **kwargs):\n"
                f"        x, *rest = primals\n"
                f"        dx = tangents[0]      # None where an argument carries no tangent\n"
                f"        y = {short}(x, *rest, **kwargs)\n"
                f"        return y, <J·dx>\n\n",
                f"(use @mp.frule({short}, lanes=True) to receive several directions at once), ",
                "mooncake_py.testing.test_rule(..., modes=('forward',)) checks a new rule against "
                "finite differences.")
    kind, why, example, lanes, check = rule
    return (f"mooncake_py has no {mode}-mode rule ({kind}) for {name}, called here as "
            f"{short}({call}){other}. Add one, written with np. calls {why}:\n\n{example}"
            f"{lanes}or, if its output carries no derivative, declare "
            f"mp.zero_derivative({short}). {check}")
