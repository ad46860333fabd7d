"""Rules for ``np.fft``: every transform is linear, so its frule is the same transform of the
tangent and its pullback is the adjoint transform, for the inner product ``Re Σ conj(a)·b``.

Adjoints, with ``F`` the unnormalised DFT and ``dual(norm)`` swapping "backward" and "forward":

- ``fft(x, norm)``, ``ifft``, ``fftn``, ``ifftn``: the adjoint of ``fft(·, norm)`` is
  ``ifft(·, dual(norm))`` (``Fᴴ`` carries the scaling the other way), then the padding or
  truncation of ``n=``/``s=`` undone (truncation's adjoint pads with zeros, and vice versa);
- ``rfft`` keeps the first ``n//2 + 1`` bins of ``F·x`` for real ``x``; the adjoint is
  ``Re(Fᴴ·ȳ padded with zeros)`` = ``irfft(ȳ·w, dual(norm))`` with ``w`` = 1 at the DC (and,
  for even ``n``, Nyquist) bin and ½ at the interior bins, which irfft counts twice;
- ``irfft`` reads the interior bins twice and only the real parts of DC/Nyquist; its adjoint is
  ``rfft(ȳ, dual(norm))·w'`` with ``w'`` = 2 at the interior bins (the DC/Nyquist bins of a real
  signal's rfft are real, matching the ignored imaginary parts);
- the n-dimensional real transforms put the half spectrum on the last axis and are otherwise
  ``fftn``, so the same weights apply along that axis;
- ``hfft``, ``ihfft``, the 2-D variants and ``fftshift``/``ifftshift`` are compositions of the
  above (and of ``np.roll``), as NumPy defines them.
"""
import inspect

import numpy as np

from ..core.array_ops import astype
from .broadcasting import shape_of
from .complex import EXPLICIT, is_complex
from .registry import composite, frule, rrule

_DUAL = {None: "forward", "backward": "forward", "forward": "backward", "ortho": "ortho"}


def _bind(fn, args, kwargs):
    b = inspect.signature(fn).bind(*args, **kwargs)
    b.apply_defaults()
    return b.arguments


def _resize(g, shape, axes):
    """``g`` truncated or zero-padded along ``axes`` to the lengths of ``shape`` there."""
    gs = tuple(shape_of(g))
    cut = tuple(slice(0, min(gs[a], shape[a])) if a in axes else slice(None)
                for a in range(len(gs)))
    if any(gs[a] > shape[a] for a in axes):
        g = g[cut]
    if any(gs[a] < shape[a] for a in axes):
        g = np.pad(g, [(0, max(shape[a] - gs[a], 0)) if a in axes else (0, 0)
                       for a in range(len(gs))])
    return g


def _weights(n, length, axis, ndim, dtype, interior):
    """Per-bin weights of a half spectrum of ``length`` bins of a length-``n`` signal, shaped to
    broadcast along ``axis``: 1 at DC (and Nyquist for even n), ``interior`` elsewhere."""
    w = np.full(length, interior, dtype=dtype)
    w[:1] = 1
    if n % 2 == 0 and n // 2 < length:
        w[n // 2] = 1
    return np.reshape(w, (length,) + (1,) * (ndim - 1 - axis))


def _real_dtype(x):
    return np.finfo(getattr(x, "dtype", np.float64)).dtype


def _as_input_kind(g, x):
    """The cotangent of ``x``: real where ``x`` is real (its imaginary part pairs with
    nothing), in ``x``'s dtype."""
    if not is_complex(x) and is_complex(g):
        g = np.real(g)
    dt = getattr(x, "dtype", None)
    return g if dt is None or g.dtype == dt else astype(g, dt)


def _axes_1d(p, x):
    return (p["axis"] % len(shape_of(x)),)


def _axes_nd(p, x, default_all=True):
    nd = len(shape_of(x))
    axes, s = p["axes"], p["s"]
    if axes is None:
        axes = range(nd) if s is None else range(nd - len(s), nd)
    return tuple(a % nd for a in axes)


def _register(fn, pullback_of, one_d):
    """The rrule and lane-aware frule of one transform ``fn(a, n|s, axis|axes, norm)``."""

    @rrule(fn, needs=True)
    def _(needs, *args, **kwargs):
        p = _bind(fn, args, kwargs)
        p.pop("out", None)
        a = p["a"]
        y = fn(**p)
        axes = _axes_1d(p, a) if one_d else _axes_nd(p, a)
        rest = (None,) * (len(needs) - 1)
        return y, lambda g: (pullback_of(g, a, y, axes, p),) + rest

    @frule(fn, lanes=True)
    def _f(primals, tangents, **kwargs):
        p = _bind(fn, primals, kwargs)
        p.pop("out", None)
        y = fn(**p)
        da = tangents[0]
        if da is None:
            return y, None
        a = p["a"]
        nd = len(shape_of(a))
        # the same transform over the same axes, counted from the end past the lane axis
        if one_d:
            q = dict(p, a=da, axis=p["axis"] % nd - nd)
        else:
            q = dict(p, a=da, axes=tuple(ax - nd for ax in _axes_nd(p, a)))
        return y, fn(**q)
    EXPLICIT.add(fn)


# --- complex-to-complex ---------------------------------------------------------------------
def _c2c(inverse_of):
    def pullback(g, a, y, axes, p):
        if inverse_of in (np.fft.fft, np.fft.ifft):
            back = inverse_of(g, axis=axes[0], norm=_DUAL[p["norm"]])
        else:
            back = inverse_of(g, axes=axes, norm=_DUAL[p["norm"]])
        return _as_input_kind(_resize(back, tuple(shape_of(a)), axes), a)
    return pullback


_register(np.fft.fft, _c2c(np.fft.ifft), True)
_register(np.fft.ifft, _c2c(np.fft.fft), True)
_register(np.fft.fftn, _c2c(np.fft.ifftn), False)
_register(np.fft.ifftn, _c2c(np.fft.fftn), False)


# --- real-to-complex and back ---------------------------------------------------------------
def _rfft_pullback(g, a, y, axes, p):
    last = axes[-1]
    shape = list(shape_of(a))
    n = p["n"] if "n" in p else (p["s"][-1] if p["s"] is not None else shape[last])
    n = shape[last] if n is None else n
    w = _weights(n, shape_of(y)[last], last, len(shape), _real_dtype(y), 0.5)
    if "n" in p:
        back = np.fft.irfft(g * w, n=n, axis=last, norm=_DUAL[p["norm"]])
    else:
        s = [shape_of(y)[ax] for ax in axes[:-1]] + [n]
        back = np.fft.irfftn(g * w, s=s, axes=axes, norm=_DUAL[p["norm"]])
    return _as_input_kind(_resize(back, tuple(shape), axes), a)


def _irfft_pullback(g, a, y, axes, p):
    last = axes[-1]
    n = shape_of(y)[last]
    if "n" in p:
        back = np.fft.rfft(g, axis=last, norm=_DUAL[p["norm"]])
    else:
        back = np.fft.rfftn(g, axes=axes, norm=_DUAL[p["norm"]])
    back = back * _weights(n, shape_of(back)[last], last, len(shape_of(back)),
                           _real_dtype(back), 2.0)
    return _as_input_kind(_resize(back, tuple(shape_of(a)), axes), a)


_register(np.fft.rfft, _rfft_pullback, True)
_register(np.fft.irfft, _irfft_pullback, True)
_register(np.fft.rfftn, _rfft_pullback, False)
_register(np.fft.irfftn, _irfft_pullback, False)


# --- compositions, as NumPy defines them --------------------------------------------------------
@composite(np.fft.hfft)
def _hfft(a, n=None, axis=-1, norm=None, out=None):
    return np.fft.irfft(np.conjugate(a), n, axis, norm=_DUAL[norm])


@composite(np.fft.ihfft)
def _ihfft(a, n=None, axis=-1, norm=None, out=None):
    return np.conjugate(np.fft.rfft(a, n, axis, norm=_DUAL[norm]))


def _two_d(nd_fn):
    def impl(a, s=None, axes=(-2, -1), norm=None, out=None):
        return nd_fn(a, s, axes, norm)
    return impl


composite(np.fft.fft2)(_two_d(np.fft.fftn))
composite(np.fft.ifft2)(_two_d(np.fft.ifftn))
composite(np.fft.rfft2)(_two_d(np.fft.rfftn))
composite(np.fft.irfft2)(_two_d(np.fft.irfftn))


def _shift(sign):
    def impl(x, axes=None):
        nd = len(shape_of(x))
        axes = tuple(range(nd)) if axes is None else \
            (axes,) if isinstance(axes, (int, np.integer)) else tuple(axes)
        shape = shape_of(x)
        return np.roll(x, [sign * (shape[ax] // 2) for ax in axes], axes)
    return impl


composite(np.fft.fftshift)(_shift(1))
composite(np.fft.ifftshift)(_shift(-1))
