"""Finite differences, integrals and products along an axis: np.diff, np.ediff1d, np.gradient,
np.trapezoid, np.cumulative_sum / np.cumulative_prod (NumPy 2's scans), np.cross.

All are :func:`~.registry.composite`: each is NumPy's own formula written with slices,
arithmetic and ``np.concatenate``, so every argument that NumPy treats as data (the array, the
``prepend``/``append`` values, the sample points and spacings) is differentiable, and second
order comes from the rules of those ops. The slicing keeps the same operation order as NumPy,
so values agree with NumPy's to the last bit or two.

Example (a roughness penalty and a trapezoid integral, with their Hessian-vector product):
    >>> import numpy as np, mooncake_py as mp
    >>> f = lambda y: np.sum(np.diff(y, n=2) ** 2) + np.trapezoid(y ** 2, dx=0.5)
    >>> mp.grad(f)(np.array([0.0, 1.0, 0.0, 1.0]))
    array([ -4. ,  13. , -12. ,   4.5])
    >>> mp.hvp(f)(np.zeros(3), np.array([1.0, 0.0, 0.0]))
    array([ 2.5, -4. ,  2. ])
"""
import numpy as np
from numpy.lib.array_utils import normalize_axis_index, normalize_axis_tuple

from ..core import array_module as am
from ..core.array_ops import astype
from ..core.dispatch import WRAPPER_TYPES
from ..errors import MutationError
from .broadcasting import shape_of
from .registry import composite


def as_array(x):
    """``x`` unchanged if it is an array or a wrapped (tracked/dual) value; a list holding
    wrapped values stacked; anything else through ``np.asarray``.

    Example:
        >>> as_array([1.0, 2.0])
        array([1., 2.])
    """
    if type(x) in WRAPPER_TYPES or isinstance(x, np.ndarray) or am.device_module(x) is not None:
        return x
    if isinstance(x, (list, tuple)) and any(type(e) in WRAPPER_TYPES for e in x):
        return np.stack([as_array(e) for e in x])  # e.g. polynomial coefficients [a, b, c]
    return np.asarray(x)


def along(axis, key, ndim):
    """The index tuple applying ``key`` to ``axis`` of an ``ndim``-dimensional array.

    Example:
        >>> along(1, slice(1, None), 3)
        (slice(None, None, None), slice(1, None, None), slice(None, None, None))
    """
    return (slice(None),) * axis + (key,) + (slice(None),) * (ndim - axis - 1)


@composite(np.diff)
def _diff(a, n=1, axis=-1, prepend=np._NoValue, append=np._NoValue):
    """n-th forward differences ``a[1:] - a[:-1]`` along ``axis``, after joining the
    ``prepend``/``append`` values (scalars are broadcast to one slice, as NumPy does)."""
    if n == 0:
        return a
    if n < 0:
        raise ValueError("order must be non-negative but got " + repr(n))
    a = as_array(a)
    nd = len(shape_of(a))
    if nd == 0:
        raise ValueError("diff requires input that is at least one dimensional")
    axis = normalize_axis_index(axis, nd)
    parts = []
    for v in (prepend, append):
        if v is np._NoValue:
            parts.append(None)
            continue
        v = as_array(v)
        if len(shape_of(v)) == 0:
            v = np.broadcast_to(v, tuple(1 if i == axis else s for i, s in enumerate(shape_of(a))))
        parts.append(v)
    if parts[0] is not None or parts[1] is not None:
        a = np.concatenate([p for p in (parts[0], a, parts[1]) if p is not None], axis=axis)
    hi, lo = along(axis, slice(1, None), nd), along(axis, slice(None, -1), nd)
    for _ in range(n):
        a = a[hi] - a[lo]
    return a


@composite(np.ediff1d)
def _ediff1d(ary, to_end=None, to_begin=None):
    """Differences of the flattened array with ``to_begin``/``to_end`` joined (flattened)."""
    d = np.diff(np.ravel(as_array(ary)))
    parts = [np.ravel(as_array(p)) for p in (to_begin,) if p is not None] + [d] + \
            [np.ravel(as_array(p)) for p in (to_end,) if p is not None]
    return np.concatenate(parts) if len(parts) > 1 else d


def _cumulative(scan, name):
    def impl(x, /, *, axis=None, dtype=None, out=None, include_initial=False):
        """NumPy's array-API scan: ``axis`` may be omitted only for 1-D input, and
        ``include_initial`` puts the identity in front."""
        if out is not None:
            raise MutationError(f"np.{name}(..., out=...) writes into an existing array, which "
                                "the tape cannot represent yet; drop out= and use the returned "
                                "value.")
        x = as_array(x)
        nd = len(shape_of(x))
        if axis is None:
            if nd > 1:
                raise ValueError("For arrays which have more than one dimension ``axis`` "
                                 "argument is required.")
            axis = 0
        if nd == 0:
            x, nd = np.reshape(x, (1,)), 1
        axis = normalize_axis_index(axis, nd)
        y = scan(x, axis=axis, dtype=dtype)
        if include_initial:
            shape = tuple(1 if i == axis else s for i, s in enumerate(shape_of(y)))
            first = am.zeros(shape, y.dtype, like=am.unwrap(y)) if scan is np.cumsum else \
                am.ones(shape, y.dtype, like=am.unwrap(y))
            y = np.concatenate((first, y), axis=axis)
        return y
    impl.__name__ = f"_{name}"
    return impl


for _name, _scan in (("cumulative_sum", np.cumsum), ("cumulative_prod", np.cumprod)):
    if hasattr(np, _name):
        composite(getattr(np, _name))(_cumulative(_scan, _name))


def _spacings(f_shape, axes, varargs):
    """Per axis: a scalar spacing, or the 1-D differences of the sample coordinates (a scalar
    again when they are uniform), as np.gradient defines them."""
    n = len(varargs)
    if n == 0:
        return [1.0] * len(axes)
    if n == 1 and np.ndim(varargs[0]) == 0:
        return list(varargs) * len(axes)
    if n != len(axes):
        raise TypeError("invalid number of arguments")
    dx = []
    for ax, d in zip(axes, varargs):
        d = as_array(d)
        nd = len(shape_of(d))
        if nd == 0:
            dx.append(d)
            continue
        if nd != 1:
            raise ValueError("distances must be either scalars or 1d")
        if shape_of(d)[0] != f_shape[ax]:
            raise ValueError("when 1d, distances must match the length of the corresponding "
                             "dimension")
        if np.issubdtype(d.dtype, np.integer):
            d = d.astype(np.float64)
        diffx = np.diff(d)
        # NumPy switches to the uniform formula when the coordinates happen to be evenly
        # spaced; tracked coordinates keep the general one (equal in value), whose derivative
        # is the one of every nearby, uneven spacing.
        uniform = type(d) not in WRAPPER_TYPES and np.all(diffx == diffx[0])
        dx.append(diffx[0] if uniform else diffx)
    return dx


def _gradient_axis(f, axis, h, edge_order):
    """np.gradient along one axis: central differences inside, one-sided at the two ends."""
    nd = len(shape_of(f))
    if shape_of(f)[axis] < edge_order + 1:
        raise ValueError("Shape of array too small to calculate a numerical gradient, at least "
                         "(edge_order + 1) elements are required.")

    def at(sl):
        return f[along(axis, sl, nd)]

    def as_column(c):  # non-uniform coefficients laid out along `axis`
        return np.reshape(c, tuple(-1 if i == axis else 1 for i in range(nd)))
    uniform = np.ndim(h) == 0
    if uniform:
        inner = (at(slice(2, None)) - at(slice(None, -2))) / (2. * h)
    else:
        dx1, dx2 = h[0:-1], h[1:]
        a = as_column(-(dx2) / (dx1 * (dx1 + dx2)))
        b = as_column((dx2 - dx1) / (dx1 * dx2))
        c = as_column(dx1 / (dx2 * (dx1 + dx2)))
        inner = a * at(slice(None, -2)) + b * at(slice(1, -1)) + c * at(slice(2, None))
    if edge_order == 1:
        first = (at(slice(1, 2)) - at(slice(0, 1))) / (h if uniform else h[0])
        last = (at(slice(-1, None)) - at(slice(-2, -1))) / (h if uniform else h[-1])
    else:
        if uniform:
            a, b, c = -1.5 / h, 2. / h, -0.5 / h
        else:
            dx1, dx2 = h[0], h[1]
            a = -(2. * dx1 + dx2) / (dx1 * (dx1 + dx2))
            b = (dx1 + dx2) / (dx1 * dx2)
            c = - dx1 / (dx2 * (dx1 + dx2))
        first = a * at(slice(0, 1)) + b * at(slice(1, 2)) + c * at(slice(2, 3))
        if uniform:
            a, b, c = 0.5 / h, -2. / h, 1.5 / h
        else:
            dx1, dx2 = h[-2], h[-1]
            a = (dx2) / (dx1 * (dx1 + dx2))
            b = - (dx2 + dx1) / (dx1 * dx2)
            c = (2. * dx2 + dx1) / (dx2 * (dx1 + dx2))
        last = a * at(slice(-3, -2)) + b * at(slice(-2, -1)) + c * at(slice(-1, None))
    # NumPy writes every part into one array of f's float type, whatever the spacings' type
    dt = f.dtype if f.dtype.kind in "fc" else np.dtype(np.float64)
    parts = [p if p.dtype == dt else astype(p, dt) for p in (first, inner, last)]
    return np.concatenate(parts, axis=axis)


@composite(np.gradient)
def _gradient(f, *varargs, axis=None, edge_order=1):
    """Second-order accurate central differences inside, first- or second-order one-sided
    differences at the ends; the sample spacings (scalars or coordinates) are differentiable."""
    f = as_array(f)
    shape = tuple(shape_of(f))
    axes = tuple(range(len(shape))) if axis is None else normalize_axis_tuple(axis, len(shape))
    dx = _spacings(shape, axes, varargs)
    if edge_order > 2:
        raise ValueError("'edge_order' greater than 2 not supported")
    outs = [_gradient_axis(f, ax, h, edge_order) for ax, h in zip(axes, dx)]
    return outs[0] if len(axes) == 1 else tuple(outs)


def _trapezoid(y, x=None, dx=1.0, axis=-1):
    """Σ Δx·(y[i+1] + y[i])/2 along ``axis``; ``y``, ``x`` and ``dx`` are all differentiable."""
    y = as_array(y)
    nd = len(shape_of(y))
    if x is None:
        d = dx
    else:
        x = as_array(x)
        if len(shape_of(x)) == 1:
            d = np.diff(x)
            d = np.reshape(d, tuple(shape_of(d)[0] if i == axis % nd else 1 for i in range(nd)))
        else:
            d = np.diff(x, axis=axis)
    ax = normalize_axis_index(axis, nd)
    hi, lo = along(ax, slice(1, None), nd), along(ax, slice(None, -1), nd)
    return np.sum(d * (y[hi] + y[lo]) / 2.0, axis=ax)


for _f in (getattr(np, "trapezoid", None), getattr(np, "trapz", None)):
    if _f is not None:
        composite(_f)(_trapezoid)


def _product(u, v):
    return None if u is None or v is None else u * v


def _difference(p, q):
    if q is None:
        return p
    return -q if p is None else p - q


@composite(np.cross)
def _cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """The cross product by its component formulas (a 2-vector has a zero third component:
    its terms are left out, as NumPy leaves them out)."""
    if axis is not None:
        axisa, axisb, axisc = (axis,) * 3
    a, b = as_array(a), as_array(b)
    na, nb = len(shape_of(a)), len(shape_of(b))
    if na < 1 or nb < 1:
        raise ValueError("At least one array has zero dimension")
    a = np.moveaxis(a, normalize_axis_index(axisa, na, msg_prefix="axisa"), -1)
    b = np.moveaxis(b, normalize_axis_index(axisb, nb, msg_prefix="axisb"), -1)
    ka, kb = shape_of(a)[-1], shape_of(b)[-1]
    if ka not in (2, 3) or kb not in (2, 3):
        raise ValueError("incompatible dimensions for cross product\n"
                         "(dimension must be 2 or 3)")
    a0, a1, a2 = a[..., 0], a[..., 1], (a[..., 2] if ka == 3 else None)
    b0, b1, b2 = b[..., 0], b[..., 1], (b[..., 2] if kb == 3 else None)
    c2 = a0 * b1 - a1 * b0
    if ka == 2 and kb == 2:
        return c2
    c0 = _difference(_product(a1, b2), _product(a2, b1))
    c1 = _difference(_product(a2, b0), _product(a0, b2))
    shape = np.broadcast_shapes(shape_of(a0), shape_of(b0))
    comps = [np.broadcast_to(c, shape) if tuple(shape_of(c)) != shape else c
             for c in (c0, c1, c2)]
    cp = np.stack(comps, axis=-1)
    return np.moveaxis(cp, -1, normalize_axis_index(axisc, len(shape) + 1, msg_prefix="axisc"))
