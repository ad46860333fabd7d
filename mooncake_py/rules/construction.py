"""Building arrays from differentiable parts: np.linspace (tracked endpoints), np.meshgrid,
np.vander, np.select, np.piecewise, np.nan_to_num, np.bincount (tracked weights).

All but np.bincount are :func:`~.registry.composite`: NumPy's own construction written with
ruled ops (arange arithmetic, reshape/broadcast, ``np.where``, gathers and scatters), so second
order comes free. np.bincount is a scatter-add of the weights: its pullback gathers ``ȳ[x]``.

Conventions: np.nan_to_num has derivative 1 where the input is finite and 0 where a value was
replaced; np.select and np.piecewise have the derivative of the branch chosen at each element
(a constant branch gives 0).

Not reachable: ``np.full(shape, x)``, ``np.r_[...]`` and ``np.c_[...]`` convert their parts with
``np.asarray`` before any dispatch, so a tracked part raises TrackingLostError; write
``np.full_like(x, x, shape=shape)`` (or ``np.broadcast_to(x, shape)``) and ``np.concatenate``
/ ``np.stack`` / ``np.column_stack`` instead; the error says so (:func:`with_constructor_hint`).

Example:
    >>> import numpy as np, mooncake_py as mp
    >>> mp.grad(lambda a: np.sum(np.linspace(a[0], a[1], 5)))(np.array([0.0, 1.0]))
    array([2.5, 2.5])
    >>> mp.grad(lambda w: np.sum(np.bincount([0, 2, 2], weights=w) * [1.0, 5.0, 7.0]))(np.ones(3))
    array([1., 7., 7.])
    >>> mp.grad(lambda x: np.sum(np.nan_to_num(x)))(np.array([np.nan, 2.0]))
    array([0., 1.])
"""
import operator
import os
import sys

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from .. import array_module as am
from ..dispatch import WRAPPER_TYPES
from .broadcasting import shape_of
from .cotangents import scatter_add
from .differences import as_array
from .registry import composite, rrule, frule
from .shape import astype


# --- np.linspace --------------------------------------------------------------------------------
@composite(np.linspace)
def _linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *,
              device=None):
    """``start + i·step`` with ``step = (stop - start)/div``, the last sample exactly ``stop``:
    NumPy's arithmetic, differentiable in ``start`` and ``stop``."""
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    div = (num - 1) if endpoint else num
    start, stop = as_array(start) * 1.0, as_array(stop) * 1.0
    dt = np.result_type(start, stop, float(num))
    delta = stop - start
    nd = len(shape_of(delta))
    y = am.arange(0, num, dtype=dt, like=am.unwrap(delta)).reshape((-1,) + (1,) * nd)
    if div > 0:
        step = delta / div
        if np.any(step == 0):  # NumPy divides first then, so that a zero span stays exact
            y = (y / div) * delta
        else:
            y = y * step
    else:
        step = np.nan
        y = y * delta
    y = y + start
    if endpoint and num > 1:
        last = np.broadcast_to(stop, shape_of(delta))
        y = np.concatenate([y[:-1], np.reshape(last, (1,) + tuple(shape_of(delta)))], axis=0)
    if axis != 0:
        y = np.moveaxis(y, 0, normalize_axis_index(axis, nd + 1))
    if dtype is not None and np.dtype(dtype) != y.dtype:
        if np.issubdtype(dtype, np.integer):
            y = np.floor(y)
        y = astype(y, dtype)
    return (y, step) if retstep else y


# --- np.meshgrid ------------------------------------------------------------------------------
@composite(np.meshgrid)
def _meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    """Each 1-D input reshaped onto its own axis, then (unless ``sparse``) broadcast."""
    if indexing not in ("xy", "ij"):
        raise ValueError("Valid values for `indexing` are 'xy' and 'ij'.")
    ndim = len(xi)
    s0 = (1,) * ndim
    out = [np.reshape(as_array(x), s0[:i] + (-1,) + s0[i + 1:]) for i, x in enumerate(xi)]
    if indexing == "xy" and ndim > 1:  # the first two axes swapped
        out[0] = np.reshape(out[0], (1, -1) + s0[2:])
        out[1] = np.reshape(out[1], (-1, 1) + s0[2:])
    if not sparse:
        out = np.broadcast_arrays(*out)
    if copy:
        out = [np.copy(x) for x in out]
    return tuple(out)


# --- np.vander ---------------------------------------------------------------------------------
@composite(np.vander)
def _vander(x, N=None, increasing=False):
    """Columns 1, x, x·x, ... as running products (NumPy's multiply.accumulate), never as
    powers, so that the derivative at x = 0 is finite."""
    x = as_array(x)
    if len(shape_of(x)) != 1:
        raise ValueError("x must be a one-dimensional array or sequence.")
    n = shape_of(x)[0]
    N = n if N is None else N
    dt = np.promote_types(x.dtype, int)
    if x.dtype != dt:
        x = astype(x, dt)
    cols = [am.ones((n, min(N, 1)), dtype=dt, like=am.unwrap(x))]
    if N > 1:
        cols.append(np.cumprod(np.repeat(x[:, None], N - 1, axis=1), axis=1))
    v = np.concatenate(cols, axis=1) if len(cols) > 1 else cols[0]
    return v if increasing else v[:, ::-1]


# --- selection ----------------------------------------------------------------------------------
@composite(np.select)
def _select(condlist, choicelist, default=0):
    """The first matching choice per element, by ``np.where`` from the last condition back."""
    if len(condlist) != len(choicelist):
        raise ValueError("list of cases must be same length as list of conditions")
    if len(condlist) == 0:
        raise ValueError("select with an empty condition list is not possible")
    for i, c in enumerate(condlist):
        if am.asarray(c).dtype.type is not np.bool_:
            raise TypeError(f"invalid entry {i} in condlist: should be boolean ndarray")
    dt = np.result_type(*[_weak(c) for c in (*choicelist, default)])
    result = default
    for cond, choice in zip(condlist[::-1], choicelist[::-1]):
        result = np.where(cond, choice, result)
    result = as_array(result)
    return result if result.dtype == dt else astype(result, dt)


def _weak(v):
    """Python numbers stay Python numbers (weakly typed in NumPy's promotion, as np.select
    keeps them); everything else becomes an array."""
    return v if type(v) in (int, float, complex) else as_array(v)


@composite(np.piecewise)
def _piecewise(x, condlist, funclist, *args, **kw):
    """Each function applied to the elements its condition selects (``x[cond]``), scattered
    back; later conditions win, as NumPy's successive assignments do."""
    x = as_array(x)
    shape = tuple(shape_of(x))
    if np.isscalar(condlist) or (not isinstance(condlist[0], (list, np.ndarray)) and shape):
        condlist = [condlist]
    conds = [am.asarray(c, dtype=bool) for c in condlist]
    n, n2 = len(conds), len(funclist)
    if n == n2 - 1:
        conds.append(~np.any(conds, axis=0))
    elif n != n2:
        raise ValueError(f"with {n} condition(s), either {n} or {n + 1} functions are expected")
    if not shape:  # NumPy treats a 0-d array as one element
        y = _pieces(np.reshape(x, (1,)), [np.reshape(c, (1,)) for c in conds], funclist, args, kw)
        return np.reshape(y, ())
    return _pieces(x, conds, funclist, args, kw)


def _pieces(x, conds, funclist, args, kw):
    shape = tuple(shape_of(x))
    y = am.zeros(shape, dtype=x.dtype, like=am.unwrap(x))
    for cond, func in zip(conds, funclist):
        cond = np.broadcast_to(cond, shape)
        if not callable(func):  # a constant value, differentiable if it is tracked
            c = as_array(func)
            y = np.where(cond, c if type(c) in WRAPPER_TYPES else c.astype(x.dtype), y)
        elif np.any(cond):
            piece = scatter_add(shape, cond, func(x[cond], *args, **kw))
            y = np.where(cond, piece if piece.dtype == x.dtype else astype(piece, x.dtype), y)
    return y


# --- np.nan_to_num ------------------------------------------------------------------------------
@composite(np.nan_to_num)
def _nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """Non-finite entries replaced by constants (derivative 0 there), the rest passed through.
    The result is always a new array, also for ``copy=False``."""
    x = as_array(x)
    if x.dtype.kind == "c":  # NumPy replaces in the real and imaginary parts separately
        parts = [_nan_to_num(p, copy, nan, posinf, neginf) for p in (np.real(x), np.imag(x))]
        return parts[0] + 1j * parts[1]
    if x.dtype.kind != "f":
        return x
    info = np.finfo(x.dtype)
    big = info.max if posinf is None else posinf
    small = info.min if neginf is None else neginf
    isnan = np.isnan(x)
    replacement = np.where(isnan, nan, np.where(np.greater(x, 0) & ~isnan, big, small))
    return np.where(np.isfinite(x), x, replacement.astype(x.dtype))


# --- np.bincount --------------------------------------------------------------------------------
@rrule(np.bincount, needs=True)
def _bincount(needs, x, weights=None, minlength=0):
    y = np.bincount(x, weights, minlength)
    if len(needs) < 2 or not needs[1]:
        return y, None
    wdt, idx, rest = weights.dtype, am.asarray(x), (None,) * (len(needs) - 2)

    def pullback(g):
        gw = g[idx]  # each weight went to the bin of its x
        return (None, gw if gw.dtype == wdt else astype(gw, wdt)) + rest
    return y, pullback


@frule(np.bincount, lanes=True)
def _bincount_f(primals, tangents, **kw):
    x, *rest = primals
    y = np.bincount(x, *rest, **kw)
    dw = tangents[1] if len(tangents) > 1 else None
    if dw is None:
        return y, None
    # every lane's weights scattered into its row of bins at once
    k = shape_of(dw)[0]
    dy = scatter_add((k,) + tuple(y.shape), (slice(None), am.asarray(x)), dw)
    return y, dy if dy.dtype == y.dtype else astype(dy, y.dtype)


# --- constructors that convert their parts before any dispatch: name the spelling that works ----
_CONSTRUCTOR_HINTS = {
    ("_index_tricks_impl.py", "AxisConcatenator.__getitem__"):
        "np.r_[...] and np.c_[...] convert each part with np.array, which no tracked or dual "
        "value survives: join the parts with np.concatenate([...]) (for np.r_), "
        "np.column_stack([...]) (for np.c_) or np.stack([...]) instead; those are differentiated.",
    ("numeric.py", "full"):
        "np.full(shape, x) converts x with np.asarray: write np.full_like(x, x, shape=shape) "
        "or np.broadcast_to(x, shape) (add .copy() for a writable array) instead; those are "
        "differentiated.",
}


def with_constructor_hint(err):
    """``err`` (a TrackingLostError) with a first sentence naming the differentiable spelling
    when it was raised inside np.r_/np.c_ or np.full, which reach no rule.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> try:
        ...     mp.grad(lambda x: np.sum(np.r_[x, x]))(np.ones(2))
        ... except mp.TrackingLostError as e:
        ...     print(str(e)[:60])
        np.r_[...] and np.c_[...] convert each part with np.array, w
    """
    f = sys._getframe(1)
    for _ in range(8):  # the NumPy frame is a few calls up from the conversion
        if f is None:
            break
        code = f.f_code
        # Python 3.10 has no qualified name: there any __getitem__ of the file gets the hint
        name = getattr(code, "co_qualname", "AxisConcatenator." + code.co_name
                       if code.co_name == "__getitem__" else code.co_name)
        hint = _CONSTRUCTOR_HINTS.get((os.path.basename(code.co_filename), name))
        if hint is not None:
            new = type(err)(f"{hint} ({err})")
            new.__dict__.update(err.__dict__)  # (its source: errors.lost_error_behind)
            return new
        f = f.f_back
    return err
