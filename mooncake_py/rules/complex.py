"""Complex numbers: which rules hold for complex values, and the rules of the non-holomorphic ops.

Convention: C is treated as R². Cotangents pair with tangents through the real inner product
``⟨a, b⟩ = Re Σ conj(a)·b``, so the gradient of a real ``f`` with respect to ``z`` is
``∂f/∂Re z + i·∂f/∂Im z`` (PyTorch's convention; JAX returns its complex conjugate).

Three kinds of functions carry complex values correctly:

- *structural* ones (reshape, indexing, concatenate, ...): they move entries around with real
  coefficients, so the pullback written for real arrays is also right for complex ones;
- *holomorphic* ones (``+ - * /``, exp, matmul, solve, sum, ...): their rules compute ``J·ẋ`` and
  ``Jᵀ·ȳ`` by algebraic formulas, right as they are in forward mode; in reverse mode the adjoint
  for the real inner product is ``conj(Jᵀ·conj(ȳ))``, which :class:`HolomorphicPullback` builds
  around the rule's pullback (two conjugations, paid by complex values only);
- *explicit* ones, whose rules below (or elsewhere) handle complex inputs themselves: abs,
  angle, real, imag, conj, astype, vdot, slogdet, the FFTs.

Everything else refuses complex values with a :class:`~mooncake_py.errors.MissingRuleError`
naming the function (the tape and the dual layer call :func:`check_complex_call`), rather than
give a wrong derivative. :func:`declare_complex` adds a user's primitive to one of the sets.
"""
import operator

import numpy as np

from ..core.array_ops import astype
from ..errors import MissingRuleError
from .cotangents import scatter_add
from .elementwise import ew_pullback
from .mutation import MUTATORS
from .registry import COMPOSITES, RRULES, ZERO_DERIVATIVE, fn_name, frule, rrule


def is_complex(x):
    """Whether ``x`` (an array, a wrapped array or a number) has a complex dtype.

    Example:
        >>> import numpy as np
        >>> is_complex(np.ones(2, np.complex64)), is_complex(1j), is_complex(np.ones(2))
        (True, True, False)
    """
    dt = getattr(x, "dtype", None)
    if dt is not None:
        return getattr(dt, "kind", None) == "c"  # (a scalar type's dtype is a descriptor)
    return type(x) is complex


def dtype_of(x):
    dt = getattr(x, "dtype", None)
    return dt if dt is not None else np.result_type(x)


# --- which functions carry complex values ---------------------------------------------------
_COMPLEX_SAFE_TABLE = ["negative", "positive", "square", "sqrt", "reciprocal", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh", "add", "subtract", "multiply", "true_divide", "power", "float_power"]

HOLOMORPHIC = {getattr(np, n) for n in _COMPLEX_SAFE_TABLE}
HOLOMORPHIC.update([
    np.matmul, np.dot, np.inner, np.outer, np.kron, np.tensordot, np.einsum, np.trace,
    np.linalg.inv, np.linalg.solve, np.linalg.det,
    np.sum, np.mean, np.prod, np.cumsum, np.cumprod, np.nansum, np.nanmean, np.nancumsum,
    np.nanprod, np.nancumprod,
    (np.add, "reduce"), (np.add, "accumulate"), (np.multiply, "reduce"),
    (np.multiply, "accumulate"), ew_pullback,
    np.diff, np.trapezoid, np.polyval, np.cross, np.linspace])
for _name in ("matmul", "outer", "tensordot", "trace"):
    if hasattr(np.linalg, _name):
        HOLOMORPHIC.add(getattr(np.linalg, _name))

# The shape family's rules and these: they move values without arithmetic, so complex values
# pass (filled by install(), once every family is registered).
STRUCTURAL = set()
_STRUCTURAL_FUNCTIONS = (operator.getitem, np.append, np.atleast_1d, np.atleast_2d,
                         np.atleast_3d, np.broadcast_arrays, np.empty_like, np.zeros_like,
                         np.ones_like, np.full_like, np.where, scatter_add)

# Rules that look at the dtype of their inputs themselves (registered here and in
# linear_algebra.py and fft.py).
EXPLICIT = {np.absolute, np.real, np.imag, np.conjugate, np.angle, np.sign, astype, np.vdot,
            np.linalg.slogdet, np.var, np.std, np.nanvar, np.nanstd}

# Functions NumPy defines on complex values that must not pass here: the composition of
# np.unique_values sorts (lexicographically on complex values, with no derivative to carry).
REFUSED = {np.unique_values}


def declare_complex(fn, holomorphic):
    """Declare that the rules of ``fn`` (a primitive with a user rule) hold for complex values.

    ``holomorphic=True``: ``fn`` is complex-differentiable and its rules are the algebraic
    formulas of the real case (the pullback is conjugated around by the tape); False: the rules
    handle complex inputs themselves, with cotangents for the inner product ``Re Σ conj(a)·b``.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> @mp.primitive
        ... def cube(z):
        ...     return z ** 3
        >>> @mp.rrule(cube)
        ... def _(z):
        ...     return cube(z), lambda g: (3 * g * z ** 2,)
        >>> declare_complex(cube, holomorphic=True)
        >>> mp.grad(lambda z: np.real(cube(z)))(np.complex128(1 + 1j))
        np.complex128(-6j)
    """
    (HOLOMORPHIC if holomorphic else EXPLICIT).add(fn)
    STRUCTURAL.discard(fn)


def check_complex_call(fn):
    """Raise MissingRuleError unless ``fn``'s rules carry complex values correctly.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> check_complex_call(np.exp)   # holomorphic: fine
        >>> try:
        ...     check_complex_call(np.maximum)
        ... except mp.MissingRuleError as e:
        ...     print(str(e)[:45])
        np.maximum was called on complex values, and
    """
    if fn in HOLOMORPHIC or fn in STRUCTURAL or fn in EXPLICIT:
        return
    if fn not in REFUSED and (fn in ZERO_DERIVATIVE or fn in COMPOSITES or fn in MUTATORS):
        return
    short = fn_name(fn).replace("numpy.", "np.")
    raise MissingRuleError(
        f"{short} was called on complex values, and it has no derivative rule for complex "
        "numbers (its rule is written for real ones and would give a wrong derivative). "
        "Rewrite the computation on real and imaginary parts (np.real(z), np.imag(z), "
        "np.abs(z), np.angle(z)), or, for your own primitive, declare its rules complex-ready "
        "with mooncake_py.rules.complex.declare_complex(fn, holomorphic=...).")


def has_complex(values):
    """Whether any value (or element of a list/tuple value) is complex.

    Example:
        >>> import numpy as np
        >>> has_complex([np.ones(2), [np.ones(1), 1j]]), has_complex([np.ones(2), 2.0])
        (True, False)
    """
    for v in values:
        if type(v) in (list, tuple):
            if any(is_complex(b) for b in v):
                return True
        elif is_complex(v):
            return True
    return False


# --- pullback wrappers the tape applies to ops with complex outputs ---------------------------
class HolomorphicPullback:
    """``ȳ ↦ conj(pb(conj(ȳ)))``: the adjoint of ``J`` for ``Re Σ conj(a)·b`` from a pullback
    that computes ``Jᵀ·ȳ`` algebraically."""
    __slots__ = ("pb",)

    def __init__(self, pb):
        self.pb = pb

    def __call__(self, g):
        return tuple(_conj(c) for c in self.pb(np.conjugate(g)))


def _conj(c):
    if c is None:
        return None
    if type(c) in (list, tuple):
        return type(c)(_conj(b) for b in c)
    if hasattr(c, "dense"):
        c = c.dense()
    return np.conjugate(c) if is_complex(c) else c


def real_inputs(parents, vals):
    """Per positional argument, the dtype of a tracked real input (whose cotangent must be real),
    None for the others, a tuple for a list argument; None if no tracked input is real.

    Example (``parents``: the tape nodes of the arguments, None for constants):
        >>> import numpy as np
        >>> real_inputs((3, None, (4, 5)), (np.ones(2), 2.0, [np.ones(2, complex), np.ones(2)]))
        (dtype('float64'), None, (None, dtype('float64')))
    """
    out, any_real = [], False
    for p, v in zip(parents, vals):
        if p is None:
            out.append(None)
        elif type(p) is tuple:
            per = tuple(None if q is None or is_complex(b) else dtype_of(b) for q, b in zip(p, v))
            any_real = any_real or any(d is not None for d in per)
            out.append(per)
        elif is_complex(v):
            out.append(None)
        else:
            out.append(dtype_of(v))
            any_real = True
    return tuple(out) if any_real else None


class RealParts:
    """A complex-output op's pullback, with the cotangents of its real inputs made real (the
    real part: ``x ↦ c·x`` pulls ``ȳ`` back to ``Re(conj(c)·ȳ)``) in the input's dtype."""
    __slots__ = ("dtypes", "pb")

    def __init__(self, pb, dtypes):
        self.pb, self.dtypes = pb, dtypes

    def __call__(self, g):
        return tuple(_real_part(c, d) for c, d in zip(self.pb(g), self.dtypes))


def _real_part(c, dt):
    if c is None or dt is None:
        return c
    if type(dt) is tuple:
        return type(c)(_real_part(b, d) for b, d in zip(c, dt))
    if hasattr(c, "dense"):
        c = c.dense()
    if is_complex(c):
        c = np.real(c)
    return c if dtype_of(c) == dt else astype(c, dt)


# --- real, imag, conj, angle, abs -----------------------------------------------------------
def _as_dtype(g, dt):
    return g if dtype_of(g) == dt else astype(g, dt)


@rrule(np.real)
def _real(val):
    out = np.real(val)
    if not is_complex(val):
        return out, lambda g: (g,)
    dt = dtype_of(val)
    return out, lambda g: (_as_dtype(g, dt),)


@frule(np.real, lanes=True)
def _real_f(primals, tangents):
    dx = tangents[0]
    return np.real(primals[0]), None if dx is None else np.real(dx)


@rrule(np.imag)
def _imag(val):
    out = np.imag(val)
    if not is_complex(val):
        return out, None  # zero: a real number's imaginary part is a constant
    dt = dtype_of(val)
    return out, lambda g: (_as_dtype(g, dt) * 1j,)


@frule(np.imag, lanes=True)
def _imag_f(primals, tangents):
    x, dx = primals[0], tangents[0]
    if dx is None or not is_complex(x):
        return np.imag(x), None
    return np.imag(x), np.imag(dx)



@rrule(np.conjugate)
def _conjugate(x, **kw):
    return np.conjugate(x, **kw), lambda g: (np.conjugate(g),)


@frule(np.conjugate, lanes=True)
def _conjugate_f(primals, tangents, **kw):
    dx = tangents[0]
    return np.conjugate(primals[0], **kw), None if dx is None else np.conjugate(dx)


def _safe(r):
    """``r`` with its zeros replaced by ones (a division where the numerator is zero too)."""
    return np.where(r == 0, 1, r)


@rrule(np.angle, needs=True)
def _angle(needs, z, deg=False):
    out = np.angle(z, deg)
    if not is_complex(z):
        return out, None  # 0 or π: piecewise constant on the reals
    scale = 180 / np.pi if deg else 1.0
    rest = (None,) * (len(needs) - 1)
    # dθ = Im(dz / z), so ⟨ȳ, dθ⟩ = Re(conj(i·ȳ/conj(z))·dz): the cotangent is i·ȳ·z/|z|².
    return out, lambda g: (1j * (g * scale) * z / _safe(np.real(z * np.conjugate(z))),) + rest


@frule(np.angle, lanes=True)
def _angle_f(primals, tangents, deg=False):
    z, dz = primals[0], tangents[0]
    deg = primals[1] if len(primals) > 1 else deg
    out = np.angle(z, deg)
    if dz is None or not is_complex(z):
        return out, None
    scale = 180 / np.pi if deg else 1.0
    return out, np.imag(dz * np.conjugate(z)) * scale / _safe(np.real(z * np.conjugate(z)))


@rrule(np.sign)
def _sign(x, **kw):
    y = np.sign(x, **kw)
    if not is_complex(x):
        return y, None  # piecewise constant on the reals
    r = _safe(np.absolute(x))
    # sign(z) = z/|z| moves only along the circle: ż ↦ (ż − y·Re(conj(y)·ż))/|z|, self-adjoint
    return y, lambda g: ((g - y * np.real(np.conjugate(y) * g)) / r,)


@frule(np.sign, lanes=True)
def _sign_f(primals, tangents, **kw):
    x, dx = primals[0], tangents[0]
    y = np.sign(x, **kw)
    if dx is None or not is_complex(x):
        return y, None
    return y, (dx - y * np.real(np.conjugate(y) * dx)) / _safe(np.absolute(x))


_REAL_ABS_RULE = []  # the derivative table's rule of np.absolute, kept by install()


def _abs_rule(args, kwargs, needs):
    z = args[0]
    if not is_complex(z):
        return _REAL_ABS_RULE[0](args, kwargs, needs)
    y = np.absolute(z, **kwargs)
    # ∂|z|/∂Re z + i·∂|z|/∂Im z = z/|z| (0 at z = 0, the subgradient of least norm)
    return y, lambda g: (g * z / _safe(y),)


def install():
    """Complete the tables once every family's rules are registered (mooncake_py/registration.py
    calls it): the shape family's rules join STRUCTURAL, and np.absolute's rule (the derivative
    table's) gets its complex branch, and the cast's rule becomes this module's (which handles
    real-complex casts). Idempotent."""
    declared = HOLOMORPHIC | EXPLICIT  # (declare_complex takes a function out of STRUCTURAL)
    STRUCTURAL.update(fn for fn, r in RRULES.items()
                      if getattr(r, "__module__", None) == "mooncake_py.rules.shape"
                      and fn not in declared)
    STRUCTURAL.update(fn for fn in _STRUCTURAL_FUNCTIONS if fn not in declared)
    rrule(astype)(_astype)
    if RRULES[np.absolute] is not _abs_rule:
        _REAL_ABS_RULE[:] = [RRULES[np.absolute]]
        RRULES[np.absolute] = _abs_rule


def abs_frule(real_native):
    """The lane-native frule of np.absolute: ``Re(conj(z)·ż)/|z|`` for complex ``z``, else
    ``real_native`` (the derivative table's). The dual layer registers it.

    Example:
        >>> import numpy as np
        >>> native = abs_frule(None)   # (complex inputs never reach the real rule)
        >>> native((np.array([3 + 4j]),), (np.array([1 + 0j]),), 0, {})
        (array([5.]), array([0.6]))
    """
    def native(primals, tangents, lanes, kwargs):
        z, dz = primals[0], tangents[0]
        if not is_complex(z):
            return real_native(primals, tangents, lanes, kwargs)
        y = np.absolute(z, **kwargs)
        if dz is None:
            return y, None
        return y, np.real(np.conjugate(z) * dz) / _safe(y)
    return native


# --- casts ----------------------------------------------------------------------------------
def _astype(x, dtype):  # (registered by install(), over the shape family's real-only rule)
    out = astype(x, dtype)
    src = dtype_of(x)
    if np.dtype(dtype).kind not in "fc" or src.kind not in "fc":
        return out, None
    if src.kind == "f":  # real to complex: the real part of the cotangent
        return out, lambda g: (_as_dtype(np.real(g) if is_complex(g) else g, src), None)
    # complex to real drops the imaginary part: the cotangent is real, as a complex number
    return out, lambda g: (_as_dtype(g, src), None)


__all__ = ["is_complex", "declare_complex", "check_complex_call", "HOLOMORPHIC", "STRUCTURAL",
           "EXPLICIT", "HolomorphicPullback", "RealParts", "real_inputs"]
