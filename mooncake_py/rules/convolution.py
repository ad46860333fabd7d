"""Reverse and forward rules for 1-D discrete convolution and cross-correlation: np.convolve,
np.correlate (modes 'full', 'same', 'valid').

Both are bilinear. In 'full' mode, ``y = convolve(a, v)`` has the adjoints
``ā = correlate(ȳ, v, 'valid')`` and ``v̄ = correlate(ȳ, a, 'valid')``; ``correlate(a, v)`` is
``convolve(a, v[::-1])``. The 'same' and 'valid' outputs are windows of the 'full' one, so
their cotangent is first zero-padded back to the full length. The pullbacks are written with
np.correlate/np.convolve themselves, whose rules then give second order.

Example (the gradient of a smoothed signal's energy with respect to the filter):
    >>> import numpy as np, mooncake_py as mp
    >>> signal = np.array([1.0, 2.0, 0.0])
    >>> mp.grad(lambda w: np.sum(np.convolve(signal, w, "same") ** 2))(np.array([0.5, 0.5]))
    array([7., 7.])
"""
import numpy as np

from .broadcasting import shape_of
from .complex import declare_complex, is_complex
from .registry import frule, rrule


def _window_start(fn, n, m, mode):
    """Where NumPy's ``mode`` output starts inside the 'full' output (lengths ``n``, ``m``)."""
    short = min(n, m)
    if mode == "valid":
        return short - 1
    if mode == "same":
        # np.correlate centres the window differently when its second argument is the longer
        return short // 2 if fn is np.correlate and n < m else (short - 1) // 2
    return 0


def _mode_name(mode):
    # NumPy still accepts the legacy integer codes 0, 1, 2 for valid, same, full
    return {0: "valid", 1: "same", 2: "full"}.get(mode, mode)


def _bilinear_rule(fn):
    @rrule(fn, needs=True)
    def rule(needs, a, v, *rest, **kw):
        mode = _mode_name(rest[0] if rest else kw.get("mode", "valid" if fn is np.correlate
                                                       else "full"))
        y = fn(a, v, *rest, **kw)
        sa, sv = shape_of(a), shape_of(v)
        n, m = max(int(np.prod(sa)), 1), max(int(np.prod(sv)), 1)
        start = _window_start(fn, n, m, mode)
        extra = (None,) * len(rest)

        # Complex (Re Σ conj·, docs/complex.md): np.correlate conjugates its second argument,
        # which is just what convolve's adjoints need; correlate(a, v) = convolve(a, conj(v)
        # reversed) is antilinear in v: ā = convolve(ȳ, v), v̄ = conj(correlate(ȳ, a)) reversed.
        conj_v = fn is np.correlate and (is_complex(a) or is_complex(v))

        def pullback(g):
            full = np.pad(g, (start, n + m - 1 - start - shape_of(g)[0]))
            ga = gv = None
            if needs[0]:
                if conj_v:
                    ga = np.convolve(full, v, "valid")
                else:
                    kernel = v if fn is np.convolve else v[::-1]  # fn(a, v) = convolve(a, kernel)
                    ga = np.correlate(full, kernel, "valid")
                ga = np.reshape(ga, sa)
            if needs[1]:
                gk = np.correlate(full, a, "valid")
                gk = np.conjugate(gk) if conj_v else gk
                gv = np.reshape(gk if fn is np.convolve else gk[::-1], sv)
            return (ga, gv) + extra
        return y, pullback

    @frule(fn)
    def forward(primals, tangents, **kw):
        a, v, *rest = primals
        da, dv = tangents[:2]
        y = fn(a, v, *rest, **kw)
        parts = ([fn(da, v, *rest, **kw)] if da is not None else []) + \
                ([fn(a, dv, *rest, **kw)] if dv is not None else [])
        if not parts:
            return y, None
        return y, parts[0] if len(parts) == 1 else parts[0] + parts[1]
    return rule


_bilinear_rule(np.convolve)
_bilinear_rule(np.correlate)
# Both rules conjugate where the inner product asks (above); their frules are bilinear as written.
for _fn in (np.convolve, np.correlate):
    declare_complex(_fn, holomorphic=False)
