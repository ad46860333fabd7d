"""Rules for scipy.signal's convolve, correlate (n-d, every mode) and lfilter, as primitives
exported by :mod:`mooncake_py.scipy.signal`.

Derivative table:

- ``y = crop(a ∗ b)``, the full n-d convolution cropped to the mode's window (SciPy centres
  'same' and 'valid' in the full result). Bilinear: ẏ = crop(ȧ ∗ b + a ∗ ḃ). With ḡ the
  cotangent padded back to the full size, ā = valid(ḡ ∗ flip(b)) and b̄ = valid(ḡ ∗ flip(a)).
- ``correlate(a, b) = convolve(a, flip(b))`` for real inputs, in every mode.
- ``y = lfilter(b, a, x)``, i.e. Σ_k a_k y[n−k] = Σ_k b_k x[n−k] along ``axis``. With
  v = the filter 1/A run backwards over ȳ (the adjoint of a causal filter is the same filter
  run anti-causally): x̄ = (B/A run backwards over ȳ), b̄_k = Σ_n v[n] x[n−k],
  ā_k = −Σ_n v[n] y[n−k]. Forward: ẏ = lfilter(b, a, ẋ) + lfilter(1, a, Σ_k ḃ_k x[n−k] −
  Σ_k ȧ_k y[n−k]).

The pullbacks call these primitives again, whose frules exist, so second order works.
"""
import numpy as np

from ..core import array_module as am
from .broadcasting import shape_of
from .complex import declare_complex
from .decompositions import _shift
from .lanes import align
from .linear_algebra import _addt, _dtype, _pad, _tan
from .registry import _has_wrapper, frule, primitive, rrule

__all__ = ["convolve", "correlate", "lfilter"]

_signal = []


def _sig():
    if not _signal:
        import scipy.signal as ss
        _signal.append(ss)
    return _signal[0]


def _cplx(*xs):
    return any(np.dtype(_dtype(x)).kind == "c" for x in xs)


@primitive
def convolve(in1, in2, mode="full", method="auto"):
    """N-dimensional convolution, as ``scipy.signal.convolve`` (``mode`` 'full', 'valid' or
    'same'; ``method`` is passed to SciPy for the values), differentiable in both inputs.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> from mooncake_py.scipy import signal
        >>> signal.convolve(np.array([1.0, 2.0, 3.0]), np.array([0.0, 1.0, 0.5]))
        array([0. , 1. , 2.5, 4. , 1.5])
        >>> mp.grad(lambda k: np.sum(signal.convolve(np.arange(4.0), k, "valid")))(np.ones(2))
        array([6., 3.])
    """
    return _sig().convolve(in1, in2, mode=mode, method=method)


@primitive
def correlate(in1, in2, mode="full", method="auto"):
    """N-dimensional cross-correlation, as ``scipy.signal.correlate``; differentiable in both
    (real) inputs.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> from mooncake_py.scipy import signal
        >>> signal.correlate(np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0]), "valid")
        array([3., 5.])
    """
    return _sig().correlate(in1, in2, mode=mode, method=method)


def _window(s1, s2, mode):
    """Per axis (start, stop) of the mode's window inside the full result."""
    out = []
    for n, m in zip(s1, s2):
        full = n + m - 1
        size = {"full": full, "same": n, "valid": abs(n - m) + 1}[mode]
        start = (full - size) // 2
        out.append((start, start + size, full))
    return out


def _check_mode(fn, in1, in2, mode):
    if mode not in ("full", "same", "valid"):
        raise ValueError(f"scipy.signal.{fn}: acceptable mode flags are 'valid', 'same', or "
                         "'full'.")
    if len(shape_of(in1)) != len(shape_of(in2)):
        raise ValueError(f"scipy.signal.{fn}: in1 and in2 should have the same dimensionality")


def _full_pad(g, win):
    """The cotangent of the cropped window, zero-padded to the full result's size."""
    widths = [(s, f - e) for s, e, f in win]
    if all(w == (0, 0) for w in widths):
        return g
    return np.pad(g, [(0, 0)] * (len(shape_of(g)) - len(widths)) + widths)


def _crop(y, win):
    lead = len(shape_of(y)) - len(win)
    return y[(slice(None),) * lead + tuple(slice(s, e) for s, e, _ in win)]


def _conv_cotangents(needs, g, a, b, win):
    """(ā, b̄) of crop(a ∗ b) (None where not needed)."""
    gf = _full_pad(g, win)
    ga = convolve(gf, np.flip(b), "valid") if needs[0] else None
    gb = convolve(gf, np.flip(a), "valid") if len(needs) > 1 and needs[1] else None
    return ga, gb


def _lane_conv_full(t, other, t_first):
    """The full convolution of every lane of the lane-first tangent ``t`` with ``other``
    (a size-1 lane axis on ``other`` keeps the lanes apart)."""
    o = np.expand_dims(other, 0)
    return convolve(t, o, "full") if t_first else convolve(o, t, "full")


def _register(fn, name, flipped):
    """The rules of ``fn``: convolve, or (``flipped``) correlate, which is convolve with ``in2``
    flipped on every axis, so its derivatives are convolve's with that flip."""
    def kernel(v, lanes=0):
        # a lane-first tangent keeps its lane axis in place
        return np.flip(v, tuple(range(lanes, len(shape_of(v))))) if flipped else v

    @rrule(fn, needs=True)
    def _(needs, in1, in2, mode="full", method="auto"):
        _check_mode(name, in1, in2, mode)
        y = fn(in1, in2, mode, method)
        win = _window(shape_of(in1), shape_of(in2), mode)

        # Complex correlate = convolve(in1, w), w = flip(conj(in2)), antilinear in in2: the
        # adjoints of convolve for Re Σ conj· conjugate the other factor (ā = T(ȳ, conj w)),
        # and in2 takes conj(flip(w̄)). (complex convolve is wrapped by the tape: holomorphic)
        conj = flipped and _cplx(in1, in2)
        a1 = np.conjugate(in1) if conj else in1

        def pullback(g):
            ga, gb = _conv_cotangents(needs, g, a1, kernel(in2), win)
            gb = None if gb is None else kernel(gb)
            return _pad(needs, ga, np.conjugate(gb) if conj and gb is not None else gb)
        return y, pullback

    @frule(fn, lanes=True)
    def _(primals, tangents, **kw):
        d1, d2 = _tan(tangents, 0), _tan(tangents, 1)

        def go(in1, in2, mode="full", method="auto"):
            _check_mode(name, in1, in2, mode)
            win = _window(shape_of(in1), shape_of(in2), mode)
            conj = np.conjugate if flipped and _cplx(in1, in2) else (lambda v: v)
            t = _addt(None if d1 is None else _lane_conv_full(d1, kernel(conj(in2)), True),
                      None if d2 is None else _lane_conv_full(kernel(conj(d2), 1), in1, False))
            return fn(in1, in2, mode, method), _crop(t, win)
        return go(*primals, **kw)


_register(convolve, "convolve", flipped=False)
_register(correlate, "correlate", flipped=True)


# --- lfilter ----------------------------------------------------------------------------------
@primitive
def _iir(b, a, x, axis=-1):
    """``scipy.signal.lfilter(b, a, x, axis)`` with no initial state: the primitive whose rules
    :func:`lfilter` uses."""
    return _sig().lfilter(b, a, x, axis=axis)


def lfilter(b, a, x, axis=-1, zi=None):
    """Filter ``x`` along ``axis`` with the rational transfer function b(z)/a(z) (an IIR or FIR
    filter), as ``scipy.signal.lfilter``; differentiable in ``b``, ``a``, ``x`` and the initial
    state ``zi`` (then ``(y, zf)`` is returned, as SciPy does).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> from mooncake_py.scipy import signal
        >>> signal.lfilter([1.0], [1.0, -0.5], np.array([1.0, 0.0, 0.0]))   # y[n] = x[n] + y[n-1]/2
        array([1.  , 0.5 , 0.25])
        >>> float(mp.grad(lambda p: np.sum(signal.lfilter([1.0], [1.0, p],
        ...                                               np.array([1.0, 0.0, 0.0]))))(-0.5))
        -2.0
        >>> float(mp.grad(lambda z: np.sum(signal.lfilter([1.0], [1.0, -0.5], np.zeros(3),
        ...                                               zi=np.stack([z]))[0]))(1.0))
        1.75
    """
    if zi is None:
        return _iir(b, a, x, axis)
    if _has_wrapper((b, a, x, zi), {}):
        return _lfilter_with_state(b, a, x, axis, zi)
    return _sig().lfilter(b, a, x, axis=axis, zi=zi)


def _lfilter_with_state(b, a, x, axis, zi):
    """(y, zf) of a filter started in state ``zi`` (direct form II transposed, normalised by
    a₀, as SciPy): y adds the zero-input response, A(z) y_zi = a₀ zi (zi padded with zeros),
    and zf[i] = Σ_{k>i} (b̃_k x[N+i−k] − ã_k y[N+i−k]) + zi[i+N] (terms inside the signal)."""
    b, a = _coefs(b), _coefs(a)
    nd = len(shape_of(x))
    ax = int(axis) % nd
    n, nb, na = shape_of(x)[ax], shape_of(b)[0], shape_of(a)[0]
    k = max(nb, na) - 1
    if shape_of(zi)[ax] != k:
        raise ValueError(f"Unexpected shape for zi: expected {k} along axis {axis}, found "
                         f"{tuple(shape_of(zi))}.")

    def at(v, i):  # v[..., i, ...] on the filter axis, that axis kept (size 1)
        return v[(slice(None),) * ax + (slice(i, i + 1),)]

    def along(v, start, stop):
        return v[(slice(None),) * ax + (slice(start, stop),)]

    if n >= k:
        pad_shape = tuple(n - k if i == ax else s for i, s in enumerate(shape_of(zi)))
        zpad = np.concatenate([zi, am.zeros(pad_shape, dtype=_dtype(zi), like=zi)], axis=ax)
    else:
        zpad = along(zi, 0, n)
    y = _iir(b, a, x, ax) + _iir(a[:1], a, zpad, ax)
    bt, at_ = b / a[0], a / a[0]
    zf = []
    for i in range(k):
        total = at(zi, i + n) if i + n < k else None
        for j in range(i + 1, k + 1):
            m = n + i - j
            if m < 0:
                continue
            if j < nb:
                total = _addt(total, bt[j] * at(x, m))
            if j < na:
                total = _addt(total, -at_[j] * at(y, m))
        zf.append(total if total is not None else 0 * at(zi, i))
    return y, np.concatenate(zf, axis=ax)


def _lagged_sums(v, x, k_count, axis):
    """[Σ v[n] x[n−k] over every element, for k < k_count] (``axis``: the time axis)."""
    n = shape_of(x)[axis]
    vm, xm = np.moveaxis(v, axis, -1), np.moveaxis(x, axis, -1)
    out = []
    for k in range(k_count):
        if k >= n:
            out.append(0 * np.sum(vm[..., :1]))
        else:
            out.append(np.sum(vm[..., k:] * xm[..., :n - k]))
    return np.stack(out)


def _check_lfilter(b, a):
    if len(shape_of(b)) > 1 or len(shape_of(a)) > 1:
        raise ValueError("scipy.signal.lfilter: b and a must be 1-D")


def _coefs(c):
    """Filter coefficients as an array (a list of numbers, or of tracked scalars, is stacked)."""
    if isinstance(c, (list, tuple)):
        return np.stack([am.asarray(v) if np.isscalar(v) else v for v in c]) if c else c
    return c


def _seq_cotangent(arg, g):
    """The cotangent of a coefficient argument: one entry per element for a list."""
    if g is None or not isinstance(arg, (list, tuple)):
        return g
    return [g[i] for i in range(len(arg))]


def _seq_tangent(t):
    """A lane-first tangent of a coefficient list (a tuple of per-element tangents) as one
    (lanes, taps) array; elements with no tangent are zero."""
    if not isinstance(t, tuple):
        return t
    ref = next(v for v in t if v is not None)
    return np.stack([np.zeros_like(ref) if v is None else v for v in t], axis=1)


def _one(like):
    return am.ones((1,), dtype=_dtype(like), like=like)


@rrule(_iir, needs=True)
def _lfilter(needs, b, a, x, axis=-1):
    b_arg, a_arg = b, a
    b, a = _coefs(b), _coefs(a)
    _check_lfilter(b, a)
    y = _iir(b, a, x, axis)
    ax = int(axis) % len(shape_of(x))

    def backwards(num, g):
        return np.flip(_iir(num, a, np.flip(g, ax), ax), ax)

    def pullback(g):
        gb = ga = gx = None
        if len(needs) > 2 and needs[2]:
            gx = backwards(b, g)
        if needs[0] or (len(needs) > 1 and needs[1]):
            v = backwards(_one(g), g)
            if needs[0]:
                gb = np.reshape(_lagged_sums(v, x, max(np.size(b), 1), ax), shape_of(b))
            if len(needs) > 1 and needs[1]:
                ga = np.reshape(-_lagged_sums(v, y, max(np.size(a), 1), ax), shape_of(a))
        return _pad(needs, _seq_cotangent(b_arg, gb), _seq_cotangent(a_arg, ga), gx)
    return y, pullback


def _lane_lagged(dc, z, ax):
    """Σ_k ċ_k z[n−k] for lane-first ``dc`` (k lanes × taps) and plain ``z``: lane-first."""
    nd = len(shape_of(z))
    dc = np.reshape(dc, (shape_of(dc)[0], -1))
    total = None
    for k in range(shape_of(dc)[1]):
        coef = np.reshape(dc[:, k], (shape_of(dc)[0],) + (1,) * nd)
        total = _addt(total, coef * _shift(z, -k, ax))
    return total


@frule(_iir, lanes=True)
def _lfilter_f(primals, tangents, **kw):
    db, da, dx = (_seq_tangent(_tan(tangents, i)) for i in range(3))

    def go(b, a, x, axis=-1):
        b, a = _coefs(b), _coefs(a)
        _check_lfilter(b, a)
        y = _iir(b, a, x, axis)
        nd = len(shape_of(x))
        ax = int(axis) % nd
        r = None
        if db is not None:
            r = _lane_lagged(db, x, ax)
        if da is not None:
            r = _addt(r, -_lane_lagged(da, y, ax))
        t = None if r is None else _iir(_one(r), a, r, ax + 1)
        if dx is not None:
            t = _addt(t, _iir(b, a, align(dx, nd), ax + 1))
        return y, t
    return go(*primals, **kw)


# convolve and lfilter are complex-differentiable (bilinear / rational): their rules are the
# algebraic formulas, around which the tape conjugates.

declare_complex(convolve, holomorphic=True)
declare_complex(correlate, holomorphic=False)  # conjugates in2: explicit rules above
declare_complex(_iir, holomorphic=True)
