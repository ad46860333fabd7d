"""Differentiable mirror of ``scipy.signal``: ``convolve``, ``correlate`` (n-d; 'full', 'same',
'valid'), ``fftconvolve`` (``axes=None``), ``convolve2d`` / ``correlate2d`` (zero fill),
``lfilter`` (differentiable in ``b``, ``a``, ``x`` and ``zi``), ``lfilter_zi``, ``filtfilt``
(``method='pad'``) and ``sosfilt`` (a cascade of lfilters).

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

from ..core import array_module as am
from ..errors import MissingRuleError
from ..rules.broadcasting import shape_of
from ..rules.registry import composite, primitive
from ..rules.signal import _coefs, _crop, _sig, _window, convolve, correlate, lfilter

__all__ = ["convolve", "correlate", "fftconvolve", "convolve2d", "correlate2d", "lfilter",
           "lfilter_zi", "filtfilt", "sosfilt"]


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


# --- lfilter_zi, filtfilt ---------------------------------------------------------------------
@primitive
def lfilter_zi(b, a):
    """The initial state of :func:`lfilter` for the steady state of the step response, as
    ``scipy.signal.lfilter_zi`` (the solution of (I − Aᵀ) zi = B); differentiable in ``b``, ``a``.

    Example:
        >>> import numpy as np
        >>> from mooncake_py.scipy import signal
        >>> signal.lfilter_zi([1.0], [1.0, -0.5])   # the step response settles at 2 = 1 + zi
        array([1.])
    """
    return _sig().lfilter_zi(b, a)


@composite(lfilter_zi)
def _lfilter_zi(b, a):
    b, a = np.atleast_1d(_coefs(b)), np.atleast_1d(_coefs(a))
    while shape_of(a)[0] > 1 and not np.any(a[0] != 0):  # leading zeros of a, as SciPy
        a = a[1:]
    if shape_of(a)[0] < 1:
        raise ValueError("There must be at least one nonzero `a` coefficient.")
    # SciPy normalises only when a[0] != 1; dividing by 1.0 changes no value, and always
    # dividing keeps the derivative with respect to a[0]
    b, a = b / a[0], a / a[0]
    n = max(shape_of(a)[0], shape_of(b)[0])
    dt = np.result_type(getattr(a, "dtype", float), getattr(b, "dtype", float))
    zeros = (lambda m: am.zeros((m,), dtype=dt, like=a))
    a = np.concatenate([a, zeros(n - shape_of(a)[0])]) if shape_of(a)[0] < n else a
    b = np.concatenate([b, zeros(n - shape_of(b)[0])]) if shape_of(b)[0] < n else b
    # I − companion(a)ᵀ: the identity minus the superdiagonal, with a[1:] added to column 0
    fixed = (np.eye(n - 1) - np.eye(n - 1, k=1)).astype(dt)
    i_minus_a = np.concatenate([fixed[:, :1] + np.reshape(a[1:], (-1, 1)), fixed[:, 1:]],
                               axis=1)
    return np.linalg.solve(i_minus_a, b[1:] - a[1:] * b[0])


def _take(x, axis, start, stop):
    return x[(slice(None),) * axis + (slice(start, stop),)]


def _extend(x, n, axis, padtype):
    """SciPy's odd/even/constant extension of ``x`` by ``n`` samples at both ends."""
    size = shape_of(x)[axis]
    left, right = _take(x, axis, 0, 1), _take(x, axis, size - 1, size)
    if padtype == "constant":
        return np.concatenate([np.repeat(left, n, axis=axis), x,
                               np.repeat(right, n, axis=axis)], axis=axis)
    left_ext = np.flip(_take(x, axis, 1, n + 1), axis)               # x[n:0:-1]
    right_ext = np.flip(_take(x, axis, size - n - 1, size - 1), axis)  # x[-2:-(n+2):-1]
    if padtype == "even":
        return np.concatenate([left_ext, x, right_ext], axis=axis)
    return np.concatenate([2 * left - left_ext, x, 2 * right - right_ext], axis=axis)


@primitive
def filtfilt(b, a, x, axis=-1, padtype="odd", padlen=None, method="pad", irlen=None):
    """Zero-phase filtering, forward then backward, as ``scipy.signal.filtfilt`` (method
    'pad'); differentiable in ``b``, ``a`` and ``x``.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> from mooncake_py.scipy import signal
        >>> x = np.linspace(0.0, 1.0, 12)
        >>> bool(np.allclose(signal.filtfilt([0.5, 0.5], [1.0], x), x))  # a line passes through
        True
    """
    return _sig().filtfilt(b, a, x, axis=axis, padtype=padtype, padlen=padlen, method=method,
                           irlen=irlen)


@composite(filtfilt)
def _filtfilt(b, a, x, axis=-1, padtype="odd", padlen=None, method="pad", irlen=None):
    if method != "pad":
        raise MissingRuleError("scipy.signal.filtfilt(..., method='gust') is not "
                               "differentiated by mooncake_py; use method='pad'.")
    if padtype not in ("even", "odd", "constant", None):
        raise ValueError(f"Unknown value '{padtype}' given to padtype. padtype must be 'even', "
                         "'odd', 'constant', or None.")
    b, a = np.atleast_1d(_coefs(b)), np.atleast_1d(_coefs(a))
    nd = len(shape_of(x))
    ax = int(axis) % nd
    edge = 0 if padtype is None else (3 * max(shape_of(a)[0], shape_of(b)[0])
                                      if padlen is None else padlen)
    n = shape_of(x)[ax]
    if n <= edge:
        raise ValueError("The length of the input vector x must be greater than padlen, "
                         f"which is {edge}.")
    ext = _extend(x, edge, ax, padtype) if padtype is not None and edge > 0 else x
    zi = lfilter_zi(b, a)
    zi = np.reshape(zi, tuple(-1 if i == ax else 1 for i in range(nd)))
    y, _ = lfilter(b, a, ext, axis=ax, zi=zi * _take(ext, ax, 0, 1))
    m = shape_of(y)[ax]
    y, _ = lfilter(b, a, np.flip(y, ax), axis=ax, zi=zi * _take(y, ax, m - 1, m))
    y = np.flip(y, ax)
    return _take(y, ax, edge, m - edge) if edge > 0 else y
