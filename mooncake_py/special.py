"""``mooncake_py.special`` is :mod:`mooncake_py.scipy.special` (one module under two names).

Example:
    >>> import mooncake_py as mp
    >>> from mooncake_py.scipy import special
    >>> mp.special is special
    True
"""
import sys

from .scipy import special as _special

sys.modules[__name__] = _special
