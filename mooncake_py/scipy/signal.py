"""Differentiable mirror of ``scipy.signal``: ``convolve``, ``correlate`` (n-d; 'full', 'same',
'valid'), ``fftconvolve`` (``axes=None``), ``convolve2d`` / ``correlate2d`` (zero fill),
``lfilter`` (differentiable in ``b``, ``a`` and ``x``) and ``sosfilt`` (a cascade of lfilters).

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
import numpy as np

from ..errors import MissingRuleError
from ..rules.registry import primitive, composite
from ..rules.broadcasting import shape_of
from ..rules.signal import convolve, correlate, lfilter, _sig, _window, _crop

__all__ = ["convolve", "correlate", "fftconvolve", "convolve2d", "correlate2d", "lfilter",
           "sosfilt"]


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


@primitive
def sosfilt(sos, x, axis=-1, zi=None):
    """Filter ``x`` with cascaded second-order sections ``sos`` (rows ``b0 b1 b2 a0 a1 a2``), as
    ``scipy.signal.sosfilt``; differentiable in ``sos`` and ``x`` (``zi`` is not).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> from mooncake_py.scipy import signal
        >>> sos = np.array([[1.0, 0.0, 0.0, 1.0, -0.5, 0.0]])
        >>> signal.sosfilt(sos, np.array([1.0, 0.0, 0.0]))
        array([1.  , 0.5 , 0.25])
    """
    return _sig().sosfilt(sos, x, axis=axis, zi=zi)


@composite(sosfilt)
def _sosfilt(sos, x, axis=-1, zi=None):
    if zi is not None:
        raise MissingRuleError("scipy.signal.sosfilt with zi= (initial conditions) is not "
                               "differentiated by mooncake_py; call it without zi.")
    if len(shape_of(sos)) != 2 or shape_of(sos)[1] != 6:
        raise ValueError("sos array must be shape (n_sections, 6)")
    if not np.all(sos[:, 3] == 1):
        raise ValueError("sos[:, 3] should be all ones")
    y = x
    for i in range(shape_of(sos)[0]):  # the sections in turn: mathematically sosfilt itself
        y = lfilter(sos[i, :3], sos[i, 3:], y, axis=axis)
    return y
