"""Differentiable mirror of ``scipy.integrate``'s sample-based rules: ``trapezoid``,
``simpson``, ``cumulative_trapezoid`` and ``cumulative_simpson``.

Plain arrays go straight to SciPy. Tracked or dual ``y``, ``x`` or ``dx`` use SciPy's own
formulas written with slicing, products and sums, whose rules exist: the rules are linear in
``y`` (trapezoid is linear in ``x`` too), so every mode and second order follow.

Example:
    >>> import numpy as np, mooncake_py as mp
    >>> from mooncake_py.scipy import integrate
    >>> x = np.linspace(0.0, 1.0, 5)
    >>> float(integrate.simpson(x ** 2, x=x))
    0.3333333333333333
    >>> mp.grad(lambda y: integrate.trapezoid(y, x=x))(x ** 2)
    array([0.125, 0.25 , 0.25 , 0.25 , 0.125])
"""
import numpy as np

from ..rules.broadcasting import shape_of
from ..rules.registry import _has_wrapper, composite, primitive

__all__ = ["trapezoid", "simpson", "cumulative_trapezoid", "cumulative_simpson"]

_integrate = []


def _si():
    if not _integrate:
        import scipy.integrate as si
        _integrate.append(si)
    return _integrate[0]


def _arr(v):
    """A list or tuple of samples (plain numbers or tracked scalars) as one array."""
    if isinstance(v, (list, tuple)):
        return np.stack([np.asarray(e) if np.isscalar(e) else e for e in v])
    return v


def _at(nd, axis, index):
    """An index tuple that applies ``index`` on ``axis`` and takes everything elsewhere."""
    sl = [slice(None)] * nd
    sl[axis] = index
    return tuple(sl)


def _spacings(y, x, dx, axis):
    """The spacings x[i+1] − x[i] shaped to broadcast against y's intervals (or ``dx``)."""
    nd = len(shape_of(y))
    if x is None:
        return dx
    nx = len(shape_of(x))
    if nx == 1:
        d = x[1:] - x[:-1]
        return np.reshape(d, tuple(-1 if i == axis % nd else 1 for i in range(nd)))
    if nx != nd:
        raise ValueError("If given, shape of x must be 1-D or the same as y.")
    return x[_at(nd, axis, slice(1, None))] - x[_at(nd, axis, slice(None, -1))]


def _safe_div(num, den):
    """num / den, and 0 where den == 0 (as SciPy's ``true_divide(..., where=den != 0)``)."""
    nz = den != 0
    return np.where(nz, num / np.where(nz, den, 1), 0)


@primitive
def trapezoid(y, x=None, dx=1.0, axis=-1):
    """Integrate samples ``y`` along ``axis`` by the trapezoidal rule, as
    ``scipy.integrate.trapezoid``; differentiable in ``y``, ``x`` and ``dx``.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> from mooncake_py.scipy import integrate
        >>> mp.grad(lambda x: integrate.trapezoid(np.ones(3), x=x))(np.array([0.0, 1.0, 3.0]))
        array([-1.,  0.,  1.])
    """
    return _si().trapezoid(y, x=x, dx=dx, axis=axis)


@composite(trapezoid)
def _trapezoid(y, x=None, dx=1.0, axis=-1):
    y, x = _arr(y), _arr(x)
    nd = len(shape_of(y))
    if x is not None and 1 < len(shape_of(x)):
        x = np.broadcast_to(x, shape_of(y))
    d = _spacings(y, x, dx, axis)
    y1, y2 = y[_at(nd, axis, slice(1, None))], y[_at(nd, axis, slice(None, -1))]
    return np.sum(d * (y1 + y2) / 2.0, axis=axis)


@primitive
def cumulative_trapezoid(y, x=None, dx=1.0, axis=-1, initial=None):
    """The running trapezoidal integral of ``y`` along ``axis``, as
    ``scipy.integrate.cumulative_trapezoid`` (``initial=0`` prepends a zero); differentiable.

    Example:
        >>> import numpy as np
        >>> from mooncake_py.scipy import integrate
        >>> integrate.cumulative_trapezoid(np.array([1.0, 2.0, 3.0]), initial=0)
        array([0. , 1.5, 4. ])
    """
    return _si().cumulative_trapezoid(y, x=x, dx=dx, axis=axis, initial=initial)


@composite(cumulative_trapezoid)
def _cumulative_trapezoid(y, x=None, dx=1.0, axis=-1, initial=None):
    y, x = _arr(y), _arr(x)
    nd = len(shape_of(y))
    if shape_of(y)[axis] == 0:
        raise ValueError("At least one point is required along `axis`.")
    d = _spacings(y, x, dx, axis)
    y1, y2 = y[_at(nd, axis, slice(1, None))], y[_at(nd, axis, slice(None, -1))]
    res = np.cumsum(d * (y1 + y2) / 2.0, axis=axis)
    if initial is not None:
        if initial != 0:
            raise ValueError("`initial` must be `None` or `0`.")
        first = res[_at(nd, axis, slice(0, 1))]
        res = np.concatenate([0 * first, res], axis=axis)
    return res


def simpson(y, x=None, *, dx=1.0, axis=-1):
    """Integrate samples ``y`` along ``axis`` by Simpson's rule, as
    ``scipy.integrate.simpson`` (for an even number of samples the last interval gets
    Cartwright's correction, as in SciPy); differentiable in ``y``, ``x`` and ``dx``.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> from mooncake_py.scipy import integrate
        >>> mp.grad(lambda y: integrate.simpson(y, dx=0.5))(np.zeros(5))
        array([0.16666667, 0.66666667, 0.33333333, 0.66666667, 0.16666667])
    """
    if _has_wrapper((y, x, dx), {}):
        # The implementation is called directly rather than registered as a composite: the
        # forward layer refuses dual values in keyword-only parameters (dx) before it looks
        # for composites.
        return _simpson(y, x, dx=dx, axis=axis)
    return _si().simpson(y, x=x, dx=dx, axis=axis)


def _basic_simpson(y, start, stop, x, dx, axis):
    nd = len(shape_of(y))
    s0 = _at(nd, axis, slice(start, stop, 2))
    s1 = _at(nd, axis, slice(start + 1, stop + 1, 2))
    s2 = _at(nd, axis, slice(start + 2, stop + 2, 2))
    if x is None:
        return np.sum(y[s0] + 4.0 * y[s1] + y[s2], axis=axis) * (dx / 3.0)
    h = x[_at(nd, axis, slice(1, None))] - x[_at(nd, axis, slice(None, -1))]
    h0, h1 = h[s0], h[s1]
    hsum, hprod = h0 + h1, h0 * h1
    h0divh1 = _safe_div(h0, h1)
    tmp = hsum / 6.0 * (y[s0] * (2.0 - _safe_div(1.0, h0divh1))
                        + y[s1] * (hsum * _safe_div(hsum, hprod))
                        + y[s2] * (2.0 - h0divh1))
    return np.sum(tmp, axis=axis)


def _simpson(y, x=None, *, dx=1.0, axis=-1):
    y, x = _arr(y), _arr(x)
    nd = len(shape_of(y))
    n = shape_of(y)[axis]
    if x is not None:
        if len(shape_of(x)) == 1:
            x = np.reshape(x, tuple(-1 if i == axis % nd else 1 for i in range(nd)))
        elif len(shape_of(x)) != nd:
            raise ValueError("If given, shape of x must be 1-D or the same as y.")
        if shape_of(x)[axis] != n:
            raise ValueError("If given, length of x along axis must be the same as y.")
    if n % 2 == 1:
        return _basic_simpson(y, 0, n - 2, x, dx, axis)
    last, second, third = (_at(nd, axis, i) for i in (-1, -2, -3))
    if n == 2:
        last_dx = dx if x is None else x[last] - x[second]
        return 0.5 * last_dx * (y[last] + y[second])
    result = _basic_simpson(y, 0, n - 3, x, dx, axis)
    if x is None:
        h0 = h1 = dx
    else:
        h0 = x[second] - x[third]
        h1 = x[last] - x[second]
    # Cartwright's correction for the last interval (SciPy's formulas)
    alpha = _safe_div(2 * h1 ** 2 + 3 * h0 * h1, 6 * (h1 + h0))
    beta = _safe_div(h1 ** 2 + 3.0 * h0 * h1, 6 * h0)
    eta = _safe_div(1 * h1 ** 3, 6 * h0 * (h0 + h1))
    return result + alpha * y[last] + beta * y[second] - eta * y[third]


def cumulative_simpson(y, *, x=None, dx=1.0, axis=-1, initial=None):
    """The running integral of ``y`` by Simpson's rule, as ``scipy.integrate.cumulative_simpson``
    (each interval from the parabola through it and a neighbour); differentiable in ``y``,
    ``x``, ``dx`` and ``initial``.

    Example:
        >>> import numpy as np
        >>> from mooncake_py.scipy import integrate
        >>> x = np.linspace(0.0, 2.0, 5)
        >>> integrate.cumulative_simpson(x ** 2, x=x, initial=0)   # x³/3, exact for parabolas
        array([0.        , 0.04166667, 0.33333333, 1.125     , 2.66666667])
    """
    if _has_wrapper((y, x, dx, initial), {}):
        # called directly, as simpson is: the parameters are keyword-only
        return _cumulative_simpson(_arr(y), _arr(x), dx, axis, initial)
    return _si().cumulative_simpson(y, x=x, dx=dx, axis=axis, initial=initial)


def _simpson_pieces_equal(y, d):
    """Each first-half interval's integral for equal spacings (SciPy's eqn (10))."""
    f1, f2, f3 = y[..., :-2], y[..., 1:-1], y[..., 2:]
    return d[..., :-1] / 3 * (5 * f1 / 4 + 2 * f2 - f3 / 4)


def _simpson_pieces_unequal(y, d):
    """Each first-half interval's integral for unequal spacings (SciPy's eqn (8))."""
    x21, x32 = d[..., :-1], d[..., 1:]
    f1, f2, f3 = y[..., :-2], y[..., 1:-1], y[..., 2:]
    x31 = x21 + x32
    x21_x31 = x21 / x31
    x21x21_x31x32 = x21_x31 * (x21 / x32)
    return x21 / 6 * ((3 - x21_x31) * f1 + (3 + x21x21_x31x32 + x21_x31) * f2
                      - x21x21_x31x32 * f3)


def _cumulative_simpson(y, x, dx, axis, initial):
    shape = shape_of(y)
    nd = len(shape)
    ax = int(axis) % nd
    n = shape[ax]
    if n < 3:
        res = np.swapaxes(_cumulative_trapezoid(y, x, dx, ax, None), ax, -1)
    else:
        ym = np.swapaxes(y, ax, -1)
        if x is not None:
            if not (tuple(shape_of(x)) == tuple(shape)
                    or (len(shape_of(x)) == 1 and shape_of(x)[0] == n)):
                raise ValueError("If given, shape of `x` must be the same as `y` or 1-D with "
                                 "the same length as `y` along `axis`.")
            xm = (np.broadcast_to(x, shape_of(ym)) if len(shape_of(x)) == 1
                  else np.swapaxes(x, ax, -1))
            d = xm[..., 1:] - xm[..., :-1]
            if np.any(d <= 0):
                raise ValueError("Input x must be strictly increasing.")
            pieces = _simpson_pieces_unequal
        else:
            if len(shape_of(dx)) and tuple(shape_of(dx)) != tuple(
                    1 if i == ax else s for i, s in enumerate(shape)):
                raise ValueError("If provided, `dx` must either be a scalar or have the same "
                                 "shape as `y` but with only 1 point along `axis`.")
            d = np.broadcast_to(np.swapaxes(dx, ax, -1) if len(shape_of(dx)) else dx,
                                tuple(shape_of(ym)[:-1]) + (n - 1,))
            pieces = _simpson_pieces_equal
        h1 = pieces(ym, d)
        h2 = np.flip(pieces(np.flip(ym, -1), np.flip(d, -1)), -1)
        # interval p: h1[p] for even p, h2[p − 1] for odd p, and the last one from h2 alone
        m = n - 1
        both = np.concatenate([h1, h2], axis=-1)
        idx = [m - 2 + (n - 2) if p == m - 1 else (p if p % 2 == 0 else n - 2 + p - 1)
               for p in range(m)]
        res = np.cumsum(np.take(both, idx, axis=-1), axis=-1)
    if initial is not None:
        first = tuple(1 if i == ax else s for i, s in enumerate(shape))
        if len(shape_of(initial)) and tuple(shape_of(initial)) != first:
            raise ValueError("If provided, `initial` must either be a scalar or have the "
                             "same shape as `y` but with only 1 point along `axis`.")
        init = np.swapaxes(np.broadcast_to(initial, first), ax, -1)
        init = init + 0 * res[..., :1]
        res = np.concatenate([init, res + init], axis=-1)
    return np.swapaxes(res, -1, ax)
