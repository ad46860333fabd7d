"""Every exception mooncake_py raises on purpose.

All derive from :class:`MooncakeError`, so ``except mp.MooncakeError`` catches any of them.
Messages are one paragraph: what happened, with which function and types, and what to do.
"""


class MooncakeError(Exception):
    """Base class of every mooncake_py error."""


class MissingRuleError(MooncakeError, NotImplementedError):
    """A function reached by a tracked or dual value has no rule for the mode in use."""


class ReverseOverReverseError(MooncakeError):
    """A reverse sweep was itself recorded on an outer tape (reverse-over-reverse)."""


class OutputTypeError(MooncakeError, TypeError):
    """``grad`` of a function whose output is not a real floating-point scalar."""


class NonDifferentiableInputError(MooncakeError, TypeError):
    """A derivative was asked with respect to an integer, boolean, complex, object or string input."""


class PreparedCacheSpecError(MooncakeError, ValueError):
    """A prepared cache was called with arguments (or a function) unlike those it was prepared with."""


class TrackingLostError(MooncakeError, TypeError):
    """A tracked value was turned into a plain array or Python number, which would drop its derivative."""


class MutationError(MooncakeError):
    """An in-place write that the tape cannot represent."""


class RuleError(MooncakeError):
    """A rule returned the wrong structure, shape or dtype (checked in debug mode)."""


class TangentError(MooncakeError, ValueError):
    """A tangent (forward-mode direction) does not match its primal in shape, dtype or lane count."""


class MixedArrayModulesError(MooncakeError, TypeError):
    """NumPy (host) arrays and CuPy (device) arrays were mixed in one operation."""
