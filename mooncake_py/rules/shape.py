"""Reverse rules for shape manipulation: reshape, transpose, concatenate, stack, tile, pad, ..."""
import numpy as np

from .registry import primitive, rrule, defvjp, zero_derivative
from .broadcasting import shape_of


@primitive
def astype(x, dtype):
    """``x.astype(dtype)`` as a differentiable function (the cast's pullback casts back)."""
    return x.astype(dtype)


@rrule(astype)
def _astype(x, dtype):
    out = astype(x, dtype)
    if np.dtype(dtype).kind != "f":
        return out, None
    src = x.dtype
    return out, lambda g: (astype(g, src), None)


defvjp(np.reshape, lambda g, ans, x, *a, **k: np.reshape(g, shape_of(x)))
defvjp(np.transpose, lambda g, ans, x, axes=None: np.transpose(g, None if axes is None else np.argsort(axes)))
defvjp(np.copy, lambda g, ans, x, *a, **k: g)

for _f in [np.shape, np.ndim, np.size, np.zeros_like, np.ones_like, np.empty_like, np.full_like,
           np.argmax, np.argmin, np.argsort, np.nonzero, np.count_nonzero, np.searchsorted,
           np.argwhere, np.flatnonzero, np.any, np.all, np.result_type, np.iscomplexobj,
           np.isrealobj, np.may_share_memory, np.shares_memory]:
    zero_derivative(_f)
