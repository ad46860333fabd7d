"""Differentiable mirror of ``scipy.signal``: ``convolve``, ``correlate`` (n-d; 'full', 'same',
'valid'), ``fftconvolve`` (``axes=None``), ``convolve2d`` / ``correlate2d`` (zero fill) and
``lfilter`` (differentiable in ``b``, ``a`` and ``x``).

Plain arrays go straight to SciPy; tracked and dual values use the rules in
:mod:`mooncake_py.rules.signal` (the 2-D and FFT spellings are compositions of them). SciPy is
imported on first use.

Example:
    >>> import numpy as np, mooncake_py as mp
    >>> from mooncake_py.scipy import signal
    >>> x = np.array([1.0, 2.0, 3.0])
    >>> mp.grad(lambda x: np.sum(signal.convolve(x, np.array([1.0, -1.0]), "same") ** 2))(x)
    array([0., 0., 2.])
"""
from ..errors import MissingRuleError
from ..rules.registry import primitive, composite
from ..rules.broadcasting import shape_of
from ..rules.signal import convolve, correlate, lfilter, _sig, _window, _crop

__all__ = ["convolve", "correlate", "fftconvolve", "convolve2d", "correlate2d", "lfilter"]


@primitive
def fftconvolve(in1, in2, mode="full", axes=None):
    """Convolution by FFT, as ``scipy.signal.fftconvolve``; differentiable in both inputs
    (``axes=None``: every axis, then it is :func:`convolve` with ``method='fft'``).

    Example:
        >>> import numpy as np
        >>> from mooncake_py.scipy import signal
        >>> signal.fftconvolve(np.array([1.0, 2.0]), np.array([1.0, 1.0])).round(12)
        array([1., 3., 2.])
    """
    return _sig().fftconvolve(in1, in2, mode=mode, axes=axes)


@composite(fftconvolve)
def _fftconvolve(in1, in2, mode="full", axes=None):
    if axes is not None:
        raise MissingRuleError("scipy.signal.fftconvolve(..., axes=...) is not differentiated "
                               "by mooncake_py; convolve over every axis (axes=None), with "
                               "size-1 kernel axes where nothing should be convolved.")
    return convolve(in1, in2, mode, method="fft")


def _check_2d(fn, in1, in2, boundary, fillvalue):
    if len(shape_of(in1)) != 2 or len(shape_of(in2)) != 2:
        raise ValueError(f"scipy.signal.{fn}: in1 and in2 should both be 2-D")
    if boundary not in ("fill", "pad") or fillvalue != 0:
        raise MissingRuleError(f"scipy.signal.{fn}: only boundary='fill' with fillvalue=0 is "
                               "differentiated by mooncake_py; pad the input yourself (np.pad "
                               "is differentiated) for other boundaries.")


@primitive
def convolve2d(in1, in2, mode="full", boundary="fill", fillvalue=0):
    """2-D convolution, as ``scipy.signal.convolve2d``; differentiable in both inputs for
    zero fill (``boundary='fill'``, ``fillvalue=0``).

    Example:
        >>> import numpy as np
        >>> from mooncake_py.scipy import signal
        >>> signal.convolve2d(np.eye(2), np.ones((1, 2)))
        array([[1., 1., 0.],
               [0., 1., 1.]])
    """
    return _sig().convolve2d(in1, in2, mode=mode, boundary=boundary, fillvalue=fillvalue)


@composite(convolve2d)
def _convolve2d(in1, in2, mode="full", boundary="fill", fillvalue=0):
    _check_2d("convolve2d", in1, in2, boundary, fillvalue)
    return convolve(in1, in2, mode, method="direct")


@primitive
def correlate2d(in1, in2, mode="full", boundary="fill", fillvalue=0):
    """2-D cross-correlation, as ``scipy.signal.correlate2d`` (its 'same' window differs from
    ``correlate``'s for even kernel sizes, as SciPy's does); differentiable for zero fill.

    Example:
        >>> import numpy as np
        >>> from mooncake_py.scipy import signal
        >>> signal.correlate2d(np.eye(2), np.ones((1, 2)), "same")
        array([[1., 0.],
               [1., 1.]])
    """
    return _sig().correlate2d(in1, in2, mode=mode, boundary=boundary, fillvalue=fillvalue)


@composite(correlate2d)
def _correlate2d(in1, in2, mode="full", boundary="fill", fillvalue=0):
    _check_2d("correlate2d", in1, in2, boundary, fillvalue)
    if mode != "same":
        return correlate(in1, in2, mode, method="direct")
    # correlate2d centres 'same' one step later than correlate for even kernel sizes
    win = [(s + (f - (e - s)) % 2, e + (f - (e - s)) % 2, f)
           for s, e, f in _window(shape_of(in1), shape_of(in2), "same")]
    return _crop(correlate(in1, in2, "full", method="direct"), win)
