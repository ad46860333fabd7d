"""Reverse rules of the elementwise ops, generated from the derivative table, plus clip and where.

The pullback of an elementwise op is itself a primitive, :func:`ew_pullback`, so the forward
layer can give it a fused frule (one kernel for ``ḡ·f'(a)`` and its tangent ``ḡ_t·f'(a) +
ḡ·f''(a)·a_t``) without the rules knowing about duals.
"""
import operator

import numpy as np

from ..errors import MissingRuleError
from .broadcasting import shape_of, unbroadcast
from .derivative_table import constant_input_message, on_new_entries
from .lanes import align
from .registry import (
    RRULES,
    composite,
    fn_name,
    frule,
    primitive,
    rrule,
    stop_gradient,
    zero_derivative,
)


@primitive
def ew_pullback(entry, k, g, *xs):
    """Cotangent of input ``k`` of elementwise op ``entry``: ``g * ∂y/∂x_k(xs)``.

    ``xs`` are the op's inputs followed by its output ``y``.

    Example (``y = x ** 2``: the cotangent of ``x`` is ``g · 2x``):
        >>> import numpy as np
        >>> from mooncake_py.rules.derivative_table import TABLE
        >>> x = np.array([1.0, -3.0])
        >>> ew_pullback(TABLE["power"], 0, np.ones(2), x, 2, x ** 2)
        array([ 2., -6.])
    """
    if type(g) is np.ndarray:  # (scalar loops pay one type test for the short forms)
        fast = _SHORT.get((entry.ufunc, k))
        if fast is not None:
            r = fast(g, *xs)
            if r is not None:
                return r
    d = entry.np_d1[k](*xs)
    dt = getattr(d, "dtype", None)
    if dt is not None and dt != xs[-1].dtype and dt.kind in "fb":
        d = d.astype(xs[-1].dtype)  # keep float32 float32 (select(...) yields float64)
    return g * d


def _same_float(g, a, y):
    """Whether ``g``, the input ``a`` and the output ``y`` are NumPy float arrays of one dtype,
    where the short forms below give the table's result operation for operation."""
    dt = g.dtype
    return type(a) is np.ndarray and type(y) is np.ndarray and dt.kind == "f" and \
        a.dtype == dt and y.dtype == dt


def _square_pullback(g, a, b, y):
    # The table's 2·pow(a, 1)·g: pow(a, 1) is a exactly, but NumPy runs it as a general pow
    # per element (the slowest pass of an MLP's squared-error pullback).
    if (type(b) is not int and type(b) is not float) or b != 2 or not _same_float(g, a, y):
        return None
    d = a * 2
    if d.shape == g.shape:
        return np.multiply(g, d, out=d)
    return g * d


def _extremum_pullback(first, greater):
    """``g · ∂max/∂x`` (``greater``) or ``g · ∂min/∂x`` for input 0 (``first``) or 1: 1 where
    x wins, ½ at ties (README "Conventions"), 0 elsewhere, as the table's nested selects give,
    but by one comparison and one product; the tie pass runs only when there are ties."""
    wins, ties = (np.greater, np.equal) if greater else (np.less, np.equal)

    def pullback(g, a, b, y):
        x = a if first else b
        if not _same_float(g, x, y):
            return None
        other = b if first else a
        r = g * wins(x, other)
        tie = ties(a, b)
        if tie.any():
            r = np.where(tie, g * 0.5, r)
        return r
    return pullback


# (ufunc, input) -> short form of ew_pullback on NumPy arrays, or None to take the table's way
_SHORT = {(np.power, 0): _square_pullback,
          (np.maximum, 0): _extremum_pullback(True, True),
          (np.maximum, 1): _extremum_pullback(False, True),
          (np.minimum, 0): _extremum_pullback(True, False),
          (np.minimum, 1): _extremum_pullback(False, False)}


def _partial(entry, k):
    """``(g, *xs) -> cotangent`` for input ``k``, short-circuiting the constant derivatives."""
    d = entry.d1[k]
    if d == "1":
        return lambda g, *xs: g
    if d == "-1":
        return lambda g, *xs: -g
    return lambda g, *xs: ew_pullback(entry, k, g, *xs)


# Python's operators reach the same NumPy loops, but skip the ufunc call overhead (~0.4 µs) on
# NumPy scalars, which dominates scalar-loop code.
_OPERATORS = {np.add: operator.add, np.subtract: operator.sub, np.multiply: operator.mul,
              np.true_divide: operator.truediv, np.power: operator.pow,
              np.negative: operator.neg, np.positive: operator.pos}


def _unary_rule(entry):
    uf, part = entry.ufunc, _partial(entry, 0)
    op = _OPERATORS.get(uf, uf)

    def rule(args, kwargs, needs):
        a, = args
        y = uf(a, **kwargs) if kwargs else op(a)
        return y, lambda g: (part(g, a, y),)
    rule.__name__ = f"rrule({fn_name(uf)})"
    return rule


def _scalar_factor_cotangent(g, other, shape):
    """The cotangent ``sum(g * other)`` of a scalar factor (``shape`` ()) of a product with the
    float64 array ``other`` of the NumPy array ``g``'s shape, as one dot product: the general
    way writes the whole product ``g * other`` only to sum it (two passes over an n²
    temporary for ``s * eye(n)``). None for other operands. The sum's order differs from
    np.sum's pairwise one: equal to rounding, not bitwise."""
    if shape != () or type(other) is not np.ndarray or g.dtype != _F64 or \
            other.dtype != _F64 or g.shape != other.shape or g.size < 64:
        return None
    return np.reshape(np.vdot(g, other), ())


_F64 = np.dtype(np.float64)


def _binary_rule(entry):
    uf, pa, pb = entry.ufunc, _partial(entry, 0), _partial(entry, 1)
    op = _OPERATORS.get(uf, uf)
    product = uf is np.multiply  # (a product's pullback: pa(g) = g * b, pb(g) = g * a)

    def rule(args, kwargs, needs):
        a, b = args
        y = uf(a, b, **kwargs) if kwargs else op(a, b)

        def pullback(g):
            ga = gb = None
            if product and type(g) is np.ndarray:  # (scalar loops: one test)
                ga = _scalar_factor_cotangent(g, b, shape_of(a)) if needs[0] else None
                gb = _scalar_factor_cotangent(g, a, shape_of(b)) if needs[1] else None
            return (ga if ga is not None or not needs[0] else
                    unbroadcast(pa(g, a, b, y), shape_of(a)),
                    gb if gb is not None or not needs[1] else
                    unbroadcast(pb(g, a, b, y), shape_of(b)))
        return y, pullback
    rule.__name__ = f"rrule({fn_name(uf)})"
    return rule


def _constant_inputs_rule(entry, rule):
    """``rule``, refusing a cotangent for an input the table holds constant (an order)."""
    def checked(args, kwargs, needs):
        for k in entry.constant:
            if needs[k]:
                raise MissingRuleError(constant_input_message(entry, k))
        return rule(args, kwargs, needs)
    checked.__name__ = rule.__name__
    return checked


@on_new_entries
def _register(entries):
    for e in entries:
        rule = _unary_rule(e) if e.nin == 1 else _binary_rule(e)
        RRULES[e.ufunc] = _constant_inputs_rule(e, rule) if e.constant else rule


for _f in [np.sign, np.floor, np.ceil, np.rint, np.trunc, np.round, np.around, np.fix,
           np.floor_divide, np.greater, np.greater_equal, np.less, np.less_equal, np.equal,
           np.not_equal, np.isnan, np.isfinite, np.isinf, np.signbit, np.logical_and,
           np.logical_or, np.logical_not, np.logical_xor, np.isclose, np.allclose,
           np.array_equal, np.heaviside, np.nextafter, np.spacing, np.isreal, np.iscomplex]:
    zero_derivative(_f)


@rrule(np.clip, needs=True)
def _clip(needs, a, a_min=None, a_max=None, **kw):
    lo = kw.pop("min", a_min)
    hi = kw.pop("max", a_max)
    out = np.clip(a, lo, hi, **kw)

    def pullback(g):
        inside = True
        if lo is not None:
            inside = inside & (a >= lo)
        if hi is not None:
            inside = inside & (a <= hi)
        return (unbroadcast(g * inside, shape_of(a)) if needs[0] else None,
                unbroadcast(g * (a < lo), shape_of(lo)) if needs[1] and lo is not None else None,
                unbroadcast(g * (a > hi), shape_of(hi)) if needs[2] and hi is not None else None)
    return out, pullback


@rrule(np.where, needs=True)
def _where(needs, cond, *xy):
    out = np.where(cond, *xy)
    if not xy:  # np.where(cond): indices, no derivative
        return out, None
    x, y = xy

    def pullback(g):
        return (None,
                unbroadcast(np.where(cond, g, 0), shape_of(x)) if needs[1] else None,
                unbroadcast(np.where(cond, 0, g), shape_of(y)) if needs[2] else None)
    return out, pullback


# --- floating-point parts: ldexp, frexp, modf ------------------------------------------------------
@rrule(np.ldexp, needs=True)
def _ldexp(needs, x, i, **kw):
    """``x·2^i``: linear in ``x`` (the exponent ``i`` is an integer: no derivative).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> mp.grad(lambda x: np.sum(np.ldexp(x, [1, 3])))(np.ones(2))
        array([2., 8.])
    """
    y = np.ldexp(x, i, **kw)
    return y, lambda g: (unbroadcast(np.ldexp(g, i), shape_of(x)) if needs[0] else None, None)


@frule(np.ldexp, lanes=True)
def _ldexp_f(primals, tangents, **kw):
    x, i = primals
    dx = tangents[0]
    y = np.ldexp(x, i, **kw)
    # (the lane-first tangent gets x's broadcast axes after its lane axis)
    return y, None if dx is None else np.ldexp(align(dx, np.ndim(y)), i)


@composite(np.frexp)
def _frexp(x, *out, **kw):
    """``(m, e)`` with ``x = m·2^e``: ``m = ldexp(x, -e)`` for the integer ``e`` of the value
    (an exact scaling: the same numbers as np.frexp), differentiable in ``x``.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> mp.grad(lambda x: np.sum(np.frexp(x)[0]))(np.array([3.0, 0.25]))
        array([0.25, 2.  ])
    """
    if out or kw:
        raise MissingRuleError("np.frexp with out= or where= has no rule for differentiated "
                               "values; call np.frexp(x) and write its results yourself.")
    e = np.frexp(stop_gradient(x))[1]
    return np.ldexp(x, -e), e


@composite(np.modf)
def _modf(x, *out, **kw):
    """``(x - trunc(x), trunc(x))``: the fractional part has derivative 1, the integral part 0
    (the subtraction is exact: the same numbers as np.modf; ±inf has fractional part ±0).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> mp.grad(lambda x: np.sum(np.modf(x)[0] * 3))(np.array([1.5, -2.25]))
        array([3., 3.])
    """
    if out or kw:
        raise MissingRuleError("np.modf with out= or where= has no rule for differentiated "
                               "values; call np.modf(x) and write its results yourself.")
    frac, whole = np.modf(stop_gradient(x))
    return np.where(np.isinf(whole), frac, x - whole), whole


# --- np.i0 ---------------------------------------------------------------------------------------
def _i1(x):
    """scipy.special.i1 (I₁ = I₀', itself in the derivative table, so second order composes)."""
    try:
        import scipy.special as sps
    except ImportError:  # pragma: no cover
        raise MissingRuleError("the derivative of np.i0 is scipy.special.i1, and scipy is not "
                               "installed; install scipy to differentiate np.i0.") from None
    return sps.i1(x)


@rrule(np.i0)
def _np_i0(x):
    """np.i0, the modified Bessel function I₀; its derivative is I₁ (scipy.special.i1).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> print(round(float(mp.grad(np.i0)(1.0)), 6))
        0.565159
    """
    return np.i0(x), lambda g: (g * _i1(x),)


@frule(np.i0, lanes=True)
def _np_i0_f(primals, tangents):
    (x,), (dx,) = primals, tangents
    return np.i0(x), None if dx is None else _i1(x) * dx


__all__ = ["ew_pullback"]
