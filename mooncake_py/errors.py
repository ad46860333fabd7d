"""Every exception mooncake_py raises on purpose.

All derive from :class:`MooncakeError`, so ``except mp.MooncakeError`` catches any of them.
Messages are one paragraph: what happened, with which function and types, and what to do.
"""


class MooncakeError(Exception):
    """Base class of every mooncake_py error.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> try:
        ...     mp.grad(lambda x: x * 2)(np.ones(3))   # grad of a non-scalar output
        ... except mp.MooncakeError as e:
        ...     print(type(e).__name__)
        OutputTypeError
    """


class MissingRuleError(MooncakeError, NotImplementedError):
    """A function reached by a tracked or dual value has no rule for the mode in use.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> double = mp.primitive(lambda x: 2 * x)   # opaque, and no rule registered
        >>> try:
        ...     mp.grad(lambda x: np.sum(double(x)))(np.ones(3))
        ... except mp.MissingRuleError:
        ...     print("no rule")
        no rule
    """


class MissingMethodError(MissingRuleError, AttributeError):
    """An ndarray method or attribute that tracked and dual values do not have. Also an
    AttributeError, so that ``hasattr`` probes in user code still answer False.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> def f(x):
        ...     return np.sum(x.view())
        >>> try:
        ...     mp.grad(f)(np.ones(2))
        ... except mp.MissingRuleError as e:
        ...     print(str(e).split(':')[0])
        TrackedArray has no 'view' (ndarray.view)
    """


class ReverseOverReverseError(MooncakeError):
    """A reverse sweep was itself recorded on an outer tape (reverse-over-reverse).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> g = mp.grad(lambda x: np.sum(x ** 3))
        >>> try:
        ...     mp.grad(lambda x: np.sum(g(x)))(np.ones(2))   # use mp.hvp or mp.hessian instead
        ... except mp.ReverseOverReverseError:
        ...     print("refused")
        refused
    """


class OutputTypeError(MooncakeError, TypeError):
    """``grad`` of a function whose output is not a real floating-point scalar.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> try:
        ...     mp.grad(np.sin)(np.ones(3))     # reduce to a scalar, or use mp.jacobian / mp.vjp
        ... except mp.OutputTypeError:
        ...     print("not a scalar")
        not a scalar
    """


class NonDifferentiableInputError(MooncakeError, TypeError):
    """A derivative was asked with respect to an integer, boolean, complex, object or string input.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> try:
        ...     mp.grad(np.sum)(np.arange(3))   # pass np.arange(3.0)
        ... except mp.NonDifferentiableInputError:
        ...     print("integer input")
        integer input
    """


class PreparedCacheSpecError(MooncakeError, ValueError):
    """A prepared cache was called with arguments (or a function) unlike those it was prepared with.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> c = mp.prepare_gradient_cache(np.sum, np.ones(3))
        >>> try:
        ...     mp.value_and_gradient(c, np.sum, np.ones(4))   # another shape: prepare a new cache
        ... except mp.PreparedCacheSpecError:
        ...     print("other shape")
        other shape
    """


class StaleReplayError(MooncakeError, RuntimeError):
    """Under ``Config(debug_mode=True)`` a prepared cache's replay differed from a fresh recording.

    A replay re-runs what ``f`` did when recorded without running ``f``; its guards see the
    branches ``f`` took and, by identity, the globals and closure variables it reads, but not an
    array refilled in place nor random numbers drawn inside ``f``. Debug mode records every call
    as well and raises this at the first difference (the value, then each derivative). Pass
    such data as a non-differentiated argument (``argnums``), or prepare with ``replay=False``.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> data = np.ones(3)
        >>> f = lambda x: np.sum(x * data)
        >>> c = mp.prepare_gradient_cache(f, np.ones(3))
        >>> _ = mp.value_and_gradient(c, f, np.ones(3))   # records
        >>> data[:] = 2.0                                   # refilled in place: same object
        >>> with mp.Config(debug_mode=True):
        ...     try:
        ...         mp.value_and_gradient(c, f, np.ones(3))
        ...     except mp.StaleReplayError:
        ...         print("stale")
        stale
    """


class TrackingLostError(MooncakeError, TypeError):
    """A tracked value was turned into a plain array or Python number, which would drop its derivative.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> import math
        >>> try:
        ...     mp.grad(lambda x: math.sin(x[0]))(np.ones(2))   # use np.sin
        ... except mp.TrackingLostError:
        ...     print("derivative would be lost")
        derivative would be lost
    """


class MutationError(MooncakeError):
    """An in-place write that the tape cannot represent.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> def f(x):
        ...     y = x.copy()
        ...     a, b = np.split(y, 2)   # views of y that the tape cannot follow
        ...     a[0, 0] = 1.0           # copy first: a = a.copy()
        ...     return np.sum(y)
        >>> try:
        ...     mp.grad(f)(np.ones((4, 2)))
        ... except mp.MutationError:
        ...     print("refused")
        refused
    """


class RuleError(MooncakeError):
    """A rule returned the wrong structure, shape or dtype (checked in debug mode).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> bad = mp.defvjp(mp.primitive(lambda x: 2 * x), lambda g, ans, x: np.ones(5))
        >>> try:
        ...     mp.grad(lambda x: np.sum(bad(x)))(np.ones(3))   # a (5,) cotangent for x of (3,)
        ... except mp.RuleError:
        ...     print("wrong cotangent shape")
        wrong cotangent shape
    """


class TangentError(MooncakeError, ValueError):
    """A tangent (forward-mode direction) does not match its primal in shape, dtype or lane count.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> try:
        ...     mp.jvp(np.sin, (np.ones(3),), (np.ones(4),))
        ... except mp.TangentError:
        ...     print("shape mismatch")
        shape mismatch
    """


class MixedArrayModulesError(MooncakeError, TypeError):
    """NumPy (host) arrays and CuPy (device) arrays were mixed in one operation."""


class ArgumentError(MooncakeError, TypeError):
    """A transformation was called wrongly: ``argnums`` of the wrong type or out of range, a
    missing direction ``v``, ``primals``/``tangents`` that are not tuples, or an object that is
    not the prepared cache the function takes.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> try:
        ...     mp.hvp(np.sum)(np.ones(3))   # the direction is missing: mp.hvp(f)(x, v)
        ... except mp.ArgumentError:
        ...     print("no direction")
        no direction
    """


class EscapedValueError(TrackingLostError):
    """A tracked or dual value outlived the ``grad``/``jvp``/``hvp`` call that made it (saved in
    a list or a global) and was used afterwards, where its derivative means nothing.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> saved = []
        >>> def f(x):
        ...     saved.append(x)                 # save mp.stop_gradient(x), or use has_aux=True
        ...     return np.sum(x ** 2)
        >>> g = mp.grad(f)(np.ones(2))
        >>> try:
        ...     np.sin(saved[0])
        ... except mp.EscapedValueError:
        ...     print("escaped")
        escaped
    """


# What CPython or a C extension makes of an exception raised by ``__float__``/``__array__``:
# NumPy's ``plain[i] = x`` re-raises it as ValueError("setting an array element with a
# sequence"), and C code that ignores the failure (SciPy's brentq calling float on f's result)
# ends in SystemError("... returned a result with an exception set"). Either has ours as its
# cause or context.
_CONVERSION_WRAPPERS = (ValueError, SystemError)


def lost_error_behind(exc, source):
    """The TrackingLostError made by a value of ``source`` (a tape or tag) that ``exc`` stands in
    for, or None: for ``exc`` a ValueError or SystemError, which is how NumPy and C extensions
    report an exception raised inside the conversions they call (see above). ``grad``, ``jvp``,
    ``hvp``, ... raise the TrackingLostError instead, whose message names the fix.

    Example:
        >>> tape = object()
        >>> inner = TrackingLostError("a tracked value was written into a plain array")
        >>> inner._mc_source = tape
        >>> outer = ValueError("setting an array element with a sequence.")
        >>> outer.__cause__ = inner
        >>> lost_error_behind(outer, tape) is inner
        True
    """
    if type(exc) not in _CONVERSION_WRAPPERS:
        return None
    e = exc
    for _ in range(4):  # (the conversion error is the direct cause, or one or two steps down)
        e = e.__cause__ or e.__context__
        if e is None:
            break
        if isinstance(e, TrackingLostError):
            return e if getattr(e, "_mc_source", None) is source else None
    if exc.__cause__ is None and exc.__context__ is None:
        # C code that ignored a failed conversion can lose our error altogether: a garbage
        # collection running while it is pending reports it as unraisable and clears it, and
        # the C code then raises its own bare error (brentq: "f(a) and f(b) must have different
        # signs"). The source keeps the last error its values made.
        return getattr(source, "lost", None)
    return None


def raise_lost_error_behind(exc, source):
    """Raise :func:`lost_error_behind` ``(exc, source)`` in place of ``exc`` (the error in flight
    when a tape or tag closes), with ``exc``'s traceback, which runs down to the user's line; do
    nothing if there is none."""
    err = lost_error_behind(exc, source)
    if err is not None:
        err.__cause__ = None
        err.__suppress_context__ = True  # (the stand-in adds nothing to the message)
        raise err.with_traceback(exc.__traceback__)


def escaped_message(kind, fn):
    """The message of EscapedValueError for a ``kind`` ("tracked"/"dual") value reaching ``fn``.

    Example:
        >>> escaped_message("dual", "numpy.sin")[:60]
        'A dual value outlived the jvp/hvp/hessian call that made it '
    """
    made = "grad/vjp/hvp/hessian" if kind == "tracked" else "jvp/hvp/hessian"
    return (f"A {kind} value outlived the {made} call that made it and reached {fn}: the "
            f"function being differentiated saved it (in a list, a closure, a global) and it "
            "was used after that call returned, where its derivative is meaningless (in a "
            "later grad it would be mistaken for an outer variable). Return what you need "
            "instead of saving it: use has_aux=True to get extra outputs as plain arrays, or "
            "save mp.stop_gradient(x) (its plain value) rather than x.")


class CompileFallbackWarning(MooncakeError, UserWarning):
    """A ``compile=True`` cache runs part of its plan outside the compiled kernels (as
    generated source or as rule calls): warned once per cache, naming the first step that
    fell back and why. ``cache.compile_report()`` lists every step.

    Example:
        >>> import warnings, numpy as np, mooncake_py as mp
        >>> f = lambda x: np.sum(np.cumsum(x))    # a scan: no kernel for it
        >>> c = mp.prepare_gradient_cache(f, np.ones(3), compile=True)
        >>> with warnings.catch_warnings(record=True) as w:
        ...     warnings.simplefilter("always")
        ...     _ = mp.value_and_gradient(c, f, np.ones(3))
        >>> [type(x.message).__name__ for x in w]
        ['CompileFallbackWarning']
    """
