"""Library-wide settings, scoped with a context manager."""
import contextvars
from dataclasses import dataclass


@dataclass
class Config:
    """Settings for differentiation; use as a context manager to apply them to a block.

    debug_mode: check every rule's outputs and cotangents (structure, shape, dtype) and raise
        :class:`~mooncake_py.errors.RuleError` naming the rule at fault. Slower; for rule authors.
    chunk_size: number of directions (lanes) per sweep for ``hessian``/``jacobian``; None chooses.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> with mp.Config(debug_mode=True):
        ...     g = mp.grad(lambda x: np.sum(np.sin(x)))(np.zeros(3))
        >>> g
        array([1., 1., 1.])
    """
    debug_mode: bool = False
    chunk_size: int = None

    # The tokens that undo each `with` live in the context (per thread, per asyncio task), not
    # on the object: one Config entered by several threads at once must not hand one thread's
    # token to another's __exit__.
    def __enter__(self):
        token = _CONFIG.set(self)
        _TOKENS.set(_TOKENS.get() + (token,))
        return self

    def __exit__(self, *exc):
        tokens = _TOKENS.get()
        _TOKENS.set(tokens[:-1])
        _CONFIG.reset(tokens[-1])
        return False


_CONFIG = contextvars.ContextVar("mooncake_config", default=Config())  # noqa: B039  (never mutated: Config(...) makes new ones)
_TOKENS = contextvars.ContextVar("mooncake_config_tokens", default=())


def current_config():
    """The settings in force in this context."""
    return _CONFIG.get()
