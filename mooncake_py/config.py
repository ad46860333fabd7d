"""Library-wide settings, scoped with a context manager."""
import contextvars
from dataclasses import dataclass, field


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
    _tokens: list = field(default_factory=list, repr=False, compare=False)

    def __enter__(self):
        self._tokens.append(_CONFIG.set(self))
        return self

    def __exit__(self, *exc):
        _CONFIG.reset(self._tokens.pop())
        return False


_CONFIG = contextvars.ContextVar("mooncake_config", default=Config())


def current_config():
    """The settings in force in this context."""
    return _CONFIG.get()
