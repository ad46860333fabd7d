"""Rule tables and the decorators that fill them.

A rule is looked up by the function object NumPy hands to ``__array_ufunc__`` /
``__array_function__`` (``np.sin``, ``np.linalg.solve``), by ``(ufunc, method)`` for ufunc
methods (``(np.add, "reduce")``), or by the wrapper that :func:`primitive` returns.

Reverse rules are stored in one internal calling convention,
``rule(args, kwargs, needs) -> (out, pullback)``, where ``needs[i]`` says whether positional
argument ``i`` wants a cotangent and ``pullback(ȳ)`` returns one entry per positional argument
(``None`` for none; a list for an argument that is a sequence of arrays).
"""
import functools

import numpy as np

from ..core.arguments import describe_arg, fn_name
from ..core.dispatch import WRAPPER_TYPES, dispatch

RRULES = {}
FRULES = {}
ZERO_DERIVATIVE = set()
COMPOSITES = {}


class _KeywordNeeds(tuple):
    """``needs`` (one flag per positional argument) of a call that also passed keywords: a
    flag past the positional ones reads False. A keyword argument is never tracked (the tape
    moves a tracked one into its positional slot first), so a rule may read ``needs[i]`` for
    parameter i however the caller spelled it: ``np.clip(x, a_min=0.1, a_max=1.1)`` reaches
    the clip rule with one positional argument and ``needs[2]`` False.

    Example:
        >>> _KeywordNeeds((True,))[2]
        False
    """
    __slots__ = ()

    def __getitem__(self, i):
        try:
            return tuple.__getitem__(self, i)
        except IndexError:
            return False


def rrule(fn, needs=False):
    """Register a reverse-mode rule (pullback) for ``fn``.

    The decorated function receives the call's arguments, with tracked values already unwrapped,
    and returns ``(out, pullback)``; ``pullback(ȳ)`` returns one cotangent per positional
    argument (``None`` where there is none). With ``needs=True`` it is called as
    ``rule(needs, *args, **kwargs)`` and may skip cotangents whose ``needs[i]`` is False.

    Write the pullback with ``np.`` calls: then it runs on dual numbers too, and second order
    (``hvp``, ``hessian``) works with no further code.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> @mp.primitive
        ... def cube(x):
        ...     return x ** 3
        >>> @mp.rrule(cube)
        ... def _(x):
        ...     return cube(x), lambda g: (3 * g * x ** 2,)
        >>> float(mp.grad(cube)(2.0))
        12.0
    """
    def register(rule):
        if needs:
            # (a call with keywords: their ``needs`` read False, see _KeywordNeeds)
            RRULES[fn] = lambda args, kwargs, nd: rule(_KeywordNeeds(nd) if kwargs else nd,
                                                       *args, **kwargs)
        else:
            RRULES[fn] = lambda args, kwargs, nd: rule(*args, **kwargs)
        RRULES[fn].__name__ = f"rrule({fn_name(fn)})"
        return rule
    return register


def defvjp(fn, *vjps):
    """Register a reverse rule as one cotangent function per positional argument.

    ``vjps[i](g, ans, *args, **kwargs)`` returns the cotangent of argument ``i`` given the output
    cotangent ``g`` and the output ``ans``; pass ``None`` for an argument with no derivative.
    Only the cotangents that are needed are computed. ``ans = fn(*args, **kwargs)``.

    Example (the rule for ``np.sin`` could read ``defvjp(np.sin, lambda g, ans, x: g * np.cos(x))``):
        >>> import numpy as np, mooncake_py as mp
        >>> scale = mp.primitive(lambda x, a: a * x)
        >>> _ = mp.defvjp(scale, lambda g, ans, x, a: g * a, lambda g, ans, x, a: np.sum(g * x))
        >>> gx, ga = mp.grad(lambda x, a: np.sum(scale(x, a)), argnums=(0, 1))(np.ones(2), 3.0)
        >>> gx, float(ga)
        (array([3., 3.]), 2.0)
    """
    def rule(args, kwargs, needs):
        ans = fn(*args, **kwargs)

        def pullback(g):
            vs = vjps + (None,) * (len(needs) - len(vjps))  # one entry per positional argument
            return tuple(v(g, ans, *args, **kwargs) if n and v is not None else None
                         for v, n in zip(vs, needs))
        return ans, pullback
    rule.__name__ = f"rrule({fn_name(fn)})"
    RRULES[fn] = rule
    return fn


FRULE_LANES = set()  # functions whose frule is lane-aware (registered with lanes=True)


def frule(fn, lanes=False):
    """Register a forward-mode rule for ``fn``: ``rule(primals, tangents, **kwargs) -> (out, ẏ)``.

    ``primals`` holds the call's positional arguments with this transformation's dual values
    unwrapped (a list/tuple argument stays a list/tuple); ``tangents`` holds one entry per
    positional argument: the tangent, ``None`` where the argument carries none (treat it as zero
    and do not materialise it), or a tuple aligned with a list/tuple argument. Return the output
    and its tangent (``None`` if it carries none; a tuple of them for a multi-output function).
    Write ẏ with ``np.`` calls, as pullbacks are written, so that rules compose. (A
    :func:`primitive` with no frule is differentiated in forward mode through its body; it needs
    an frule only if its body cannot be traced, e.g. because it calls ``np.asarray``.)

    Lanes (several directions at once): a dual value may carry k tangents, stacked on a leading
    axis of length k. ``@frule(fn)`` rules are written for one direction; with lanes the forward
    layer calls them once per lane (correct, k times the primal work). ``@frule(fn, lanes=True)``
    rules are called once and receive every tangent with a leading lane axis, always (k = 1 for a
    single direction: the layer adds and removes the axis); they return ẏ with the lane axis
    first. :mod:`mooncake_py.rules.lanes` has the helpers that make this easy (axis shifting,
    aligning ranks for broadcasting, indexing, matmul).

    Example (both forms for a cube):
        >>> import numpy as np, mooncake_py as mp
        >>> @mp.primitive
        ... def cube(x):
        ...     return x ** 3
        >>> @mp.frule(cube)
        ... def _(primals, tangents):
        ...     (x,), (dx,) = primals, tangents
        ...     return cube(x), 3 * x ** 2 * dx
        >>> @mp.frule(cube, lanes=True)             # dx has shape (k,) + x.shape
        ... def _(primals, tangents):
        ...     (x,), (dx,) = primals, tangents
        ...     return cube(x), 3 * x ** 2 * dx       # x broadcasts against the lane axis

    A reduction shifts its axes past the lane axis:
        ``return np.sum(x, axis), np.sum(dx, axis=lanes.shift_axis(axis, np.ndim(x)))``.
    """
    def register(rule):
        FRULES[fn] = rule
        if lanes:
            FRULE_LANES.add(fn)
        else:
            FRULE_LANES.discard(fn)
        return rule
    return register


def composite(fn):
    """Differentiate ``fn`` through an implementation built from functions that have rules.

    The decorated function is called, in every mode, with the call's arguments *as they are*
    (tracked or dual), so its ``np.`` calls are recorded one by one: no rule of its own is
    needed. For functions whose derivative is best expressed by composition (``np.median`` via
    ``np.sort``, ``np.ptp`` via max and min).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> float(mp.grad(lambda x: np.median(x))(np.array([3.0, 1.0, 2.0]))[0])
        0.0
    """
    def register(impl):
        COMPOSITES[fn] = impl
        return impl
    return register


def _is_numpy_dispatched(fn):
    return isinstance(fn, np.ufunc) or hasattr(fn, "_implementation")


def primitive(fn):
    """Make ``fn`` opaque to differentiation: on tracked or dual arguments it uses its rules.

    Returns a wrapper; register rules on the wrapper with :func:`rrule` / :func:`frule`. On plain
    arguments the wrapper just calls ``fn``. Tracked values may be positional arguments, elements
    of a list/tuple argument, or keyword arguments.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> @mp.primitive
        ... def square(x):
        ...     return x * x
        >>> _ = mp.defvjp(square, lambda g, ans, x: 2 * g * x)
        >>> square(3.0), float(mp.grad(square)(3.0))
        (9.0, 6.0)
    """
    if getattr(fn, "__mooncake_primitive__", False):
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return dispatch(wrapper, args, kwargs) if _has_wrapper(args, kwargs) else fn(*args, **kwargs)
    wrapper.__mooncake_primitive__ = True
    return wrapper


def _has_wrapper(args, kwargs):
    wt = WRAPPER_TYPES
    for a in ((*args, *kwargs.values()) if kwargs else args):
        t = type(a)
        if t in wt:
            return True
        if t is list or t is tuple:
            for b in a:
                if type(b) in wt:
                    return True
    return False


def zero_derivative(fn):
    """Declare that ``fn``'s outputs carry no derivative (argmax, shape queries, rounding).

    Called on tracked or dual values it runs on their plain values and returns plain results.
    A NumPy function is registered in place and returned; any other function is wrapped with
    :func:`primitive` and the wrapper is returned.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> step = mp.zero_derivative(lambda x: np.floor(x))
        >>> mp.grad(lambda x: np.sum(x * step(x)))(np.array([1.5, 2.5]))   # step(x) is constant
        array([1., 2.])
    """
    if not _is_numpy_dispatched(fn):
        fn = primitive(fn)
    ZERO_DERIVATIVE.add(fn)
    return fn


@zero_derivative
def stop_gradient(x):
    """``x`` as a constant: no derivative flows through it, in any mode.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> float(mp.grad(lambda x: x * mp.stop_gradient(x))(3.0))
        3.0
    """
    return x


def missing_rule_message(fn, args, kwargs, mode):
    """The MissingRuleError text for ``fn`` called on ``args`` in ``mode`` ("reverse" or
    "forward"): what was called, and the decorator to add."""
    name = fn_name(fn)
    short = name.replace("numpy.", "np.")
    call = ", ".join([describe_arg(a) for a in args] + [f"{k}=..." for k in kwargs])
    if mode == "reverse":
        other = " (it has a forward rule, so mp.jvp works)" if fn in FRULES else ""
        rule = ("rrule", "so that second order works too",
                (f"    @mp.rrule({short})\n    def _(x, *args, **kwargs):\n"
                f"        y = {short}(x, *args, **kwargs)\n"
                f"        return y, lambda g: (<cotangent of x from g>, None, ...)\n\n"), "",
                "mooncake_py.testing.test_rule checks a new rule against finite differences.")
    else:
        other = " (it has a reverse rule, so mp.grad works)" if fn in RRULES else ""
        rule = ("frule", "so that it composes",
                (f"    @mp.frule({short})\n    def _(primals, tangents, **kwargs):\n"
                f"        x, *rest = primals\n"
                f"        dx = tangents[0]      # None where an argument carries no tangent\n"
                f"        y = {short}(x, *rest, **kwargs)\n"
                f"        return y, <J·dx>\n\n"),
                f"(use @mp.frule({short}, lanes=True) to receive several directions at once), ",
                ("mooncake_py.testing.test_rule(..., modes=('forward',)) checks a new rule against "
                "finite differences."))
    kind, why, example, lanes, check = rule
    return (f"mooncake_py has no {mode}-mode rule ({kind}) for {name}, called here as "
            f"{short}({call}){other}. Add one, written with np. calls {why}:\n\n{example}"
            f"{lanes}or, if its output carries no derivative, declare "
            f"mp.zero_derivative({short}). {check}")
