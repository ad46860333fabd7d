"""Order-based selections: np.partition, np.unique (values), and the index functions they use.

Each output value is one of the input's values, gathered by a permutation or selection that is
piecewise constant in the input: so each is a :func:`~.registry.composite` of a constant index
(computed on plain values) and a differentiable gather (``np.take_along_axis``, ``np.take``).
np.sort has its own rule in :mod:`.indexing`.

Ties: where equal values compete, the derivative goes to the element NumPy's index functions
pick (for np.unique the first occurrence, as ``return_index`` reports it).

Example (the derivative of the second smallest value, and of the distinct values' sum):
    >>> import numpy as np, mooncake_py as mp
    >>> mp.grad(lambda x: np.partition(x, 1)[1])(np.array([3.0, 1.0, 2.0]))
    array([0., 0., 1.])
    >>> mp.grad(lambda x: np.sum(np.unique(x)))(np.array([2.0, 1.0, 2.0]))
    array([1., 1., 0.])
"""
import numpy as np

from .differences import as_array
from .registry import composite, primitive, zero_derivative

zero_derivative(np.argpartition)
zero_derivative(np.lexsort)


@composite(np.partition)
def _partition(a, kth, axis=-1, kind="introselect", order=None):
    """The partitioned values, gathered by ``np.argpartition``'s permutation (which is the one
    np.partition applies: the same selection algorithm)."""
    a = as_array(a)
    idx = np.argpartition(a, kth, axis=axis, kind=kind, order=order)
    if axis is None:
        return np.take_along_axis(np.ravel(a), idx, axis=0)
    return np.take_along_axis(a, idx, axis=axis)


@zero_derivative
@primitive
def _unique_plain(ar, **kw):
    return np.unique(ar, return_index=True, **kw)


@composite(np.unique)
def _unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None,
            **kw):
    """The unique values gathered from their first occurrences; the index, inverse and count
    outputs are constants."""
    ar = as_array(ar)
    res = _unique_plain(ar, return_inverse=return_inverse, return_counts=return_counts,
                        axis=axis, **kw)
    first = res[1]
    values = np.take(ar, first, axis=axis)
    if not (return_index or return_inverse or return_counts):
        return values
    extras = ((first,) if return_index else ()) + tuple(res[2:])
    return (values,) + extras


# NumPy 2's array-API spellings: np.unique with fixed flags, results in NumPy's named tuples.
def _array_api_unique(fn, flags):
    result_type = type(fn(np.zeros(1))) if flags else None

    def impl(x):
        res = np.unique(x, **flags, equal_nan=False)
        return res if result_type is None else result_type(*res)
    impl.__name__ = f"_{fn.__name__}"
    composite(fn)(impl)


for _fn, _flags in (("unique_values", {}), ("unique_counts", {"return_counts": True}),
                    ("unique_inverse", {"return_inverse": True}),
                    ("unique_all", {"return_index": True, "return_inverse": True,
                                    "return_counts": True})):
    if hasattr(np, _fn):
        _array_api_unique(getattr(np, _fn), _flags)
