"""Differentiable mirror of ``scipy.signal``: ``convolve``, ``correlate`` (n-d; 'full', 'same',
'valid') and ``lfilter`` (differentiable in ``b``, ``a`` and ``x``).

Plain arrays go straight to SciPy; tracked and dual values use the rules in
:mod:`mooncake_py.rules.signal`. SciPy is imported on first use.

Example:
    >>> import numpy as np, mooncake_py as mp
    >>> from mooncake_py.scipy import signal
    >>> x = np.array([1.0, 2.0, 3.0])
    >>> mp.grad(lambda x: np.sum(signal.convolve(x, np.array([1.0, -1.0]), "same") ** 2))(x)
    array([0., 0., 2.])
"""
from ..rules.signal import convolve, correlate, lfilter

__all__ = ["convolve", "correlate", "lfilter"]
