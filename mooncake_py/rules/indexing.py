"""Reverse and forward rules for indexing: ``x[key]`` with ints, slices, ellipsis, newaxis,
integer arrays and boolean masks; np.take, np.take_along_axis, and np.sort (a gather by the
sorting permutation).

A gather's cotangent is :class:`~.cotangents.IndexedCotangent`: ``g`` together with the index it
came from, kept sparse so that the reverse sweep adds it in place into the input's buffer (a loop
reading ``x[i]`` n times then costs O(n), not O(n²)).

Every function here is linear in its array argument, so its frule applies the same gather to
the tangent; the frules are lane-aware (the lane axis is kept first).
"""
import operator

import numpy as np

from ..core import array_module as am
from ..errors import MutationError
from .broadcasting import shape_of
from .cotangents import IndexedCotangent
from .lanes import lane_getitem
from .registry import frule, rrule
from .shape import _flat, linear_frule, linear_in_first

_BASIC = (int, np.integer, slice)


def is_basic_index(key):
    """Whether ``key`` uses only ints, slices, Ellipsis and None, so that no position of the
    array is selected twice (then ``buf[key] += g`` is a correct scatter-add).

    Example:
        >>> is_basic_index((0, slice(None), None)), is_basic_index([0, 0])
        (True, False)
    """
    if type(key) is not tuple:
        key = (key,)
    return all(k is None or k is Ellipsis or isinstance(k, _BASIC) for k in key)


def _frozen(key):
    """``key`` with its lists and index arrays copied, so that the pullback sees the positions
    read now even if the caller later reuses (mutates) its index buffers."""
    if type(key) is tuple:
        return tuple(_frozen(k) for k in key)
    if isinstance(key, (list, np.ndarray)):
        k = np.array(key)
        # x[[]] selects nothing, but np.array([]) is float: keep it a valid (integer) index.
        return k if k.size or k.dtype.kind in "biu" else k.astype(np.intp)
    if am.device_module(key) is not None:  # a CuPy index array
        return key.copy()
    return key


@rrule(operator.getitem)
def _getitem(x, key):
    y = x[key]
    if is_basic_index(key):
        shape = shape_of(x)
        return y, lambda g: (IndexedCotangent(shape, key, g, True), None)
    shape, key = shape_of(x), _frozen(key)
    return y, lambda g: (IndexedCotangent(shape, key, g, False), None)


@frule(operator.getitem, lanes=True)
def _getitem_f(primals, tangents):
    (x, key), dx = primals, tangents[0]
    y = x[key]
    if dx is None:
        return y, None
    if type(key) is int or type(key) is slice:  # the scalar-loop case, kept short
        return y, dx[:, key]
    # Advanced indices may move their axes to the front: lane_getitem keeps the lane axis first.
    return y, lane_getitem(dx, key, len(shape_of(x)))


def _in_range(indices, n, mode):
    """``indices`` as the non-negative positions they address along an axis of length ``n``."""
    idx = am.asarray(indices)
    if idx.dtype.kind not in "iu":  # [] is float to np.asarray; NumPy accepts it as no indices
        idx = idx.astype(np.intp)
    if mode == "clip":  # clip mode clamps negative indices to 0 too
        return np.clip(idx, 0, max(n - 1, 0))
    return idx % n if n else idx.copy()


@linear_in_first(np.take)
def _take(a, indices, axis=None, out=None, mode="raise"):
    if out is not None:
        raise MutationError("np.take(..., out=...) writes into an existing array, which the tape "
                            "cannot represent yet; drop out= and use the returned value.")
    y = np.take(a, indices, axis=axis, mode=mode)
    shape = shape_of(a)
    if not shape:  # a 0-d array read (possibly repeatedly) as if it were flat
        return y, lambda g: np.sum(g)
    if axis is None:
        idx = _in_range(indices, int(np.prod(shape)), mode)
        key = np.unravel_index(idx, shape)
    else:
        ax = int(axis) % len(shape)
        key = (slice(None),) * ax + (_in_range(indices, shape[ax], mode),)
    basic = np.ndim(indices) == 0
    if basic:
        key = tuple(int(k) if isinstance(k, np.ndarray) and k.ndim == 0 else k for k in key)
    return y, lambda g: IndexedCotangent(shape, key, g, basic)


@linear_frule(np.take)
def _take_f(dx, y, a, indices, axis=None, out=None, mode="raise"):
    if out is not None:
        raise MutationError("np.take(..., out=...) writes into an existing array, which forward "
                            "mode cannot represent; drop out= and use the returned value.")
    if axis is None:  # indices address the flattened array
        return np.take(_flat(dx), indices, axis=1, mode=mode)
    return np.take(dx, indices, axis=int(axis) % len(shape_of(a)) + 1, mode=mode)


@linear_in_first(np.take_along_axis)
def _take_along_axis(arr, indices, axis=-1):
    y = np.take_along_axis(arr, indices, axis)
    shape = shape_of(arr)
    idx = am.asarray(indices).copy()
    if not shape:
        return y, lambda g: np.sum(g)
    if axis is None:
        key = np.unravel_index(idx % max(int(np.prod(shape)), 1), shape)
    else:
        nd = len(shape)
        ax = int(axis) % nd
        # Every other axis is indexed by a broadcast arange, as take_along_axis itself does.
        key = tuple(idx if d == ax else
                    am.arange(n, like=idx).reshape((1,) * d + (n,) + (1,) * (nd - d - 1))
                    for d, n in enumerate(shape))
    return y, lambda g: IndexedCotangent(shape, key, g, False)


def _lane_take_along(dx, a, indices, axis):
    """``np.take_along_axis(x, indices, axis)`` for every lane of the lane-first tangent ``dx``
    of ``a``: the indices get a lane axis of length one, which broadcasts."""
    idx = np.expand_dims(am.asarray(indices), 0)
    if axis is None:  # indices address the flattened array
        return np.take_along_axis(_flat(dx), idx, axis=1)
    return np.take_along_axis(dx, idx, axis=int(axis) % len(shape_of(a)) + 1)


@linear_frule(np.take_along_axis)
def _take_along_axis_f(dx, y, arr, indices, axis=-1):
    return _lane_take_along(dx, arr, indices, axis)


@linear_in_first(np.sort)
def _sort(a, axis=-1, kind=None, order=None, **kw):
    y = np.sort(a, axis, kind, order, **kw)
    shape = shape_of(a)
    # y is a gathered by this permutation (ties hold equal values, so any valid one will do);
    # the pullback gathers g by its inverse.
    perm = np.argsort(a, axis=axis, kind="stable")
    ax = -1 if axis is None else axis

    def pullback(g):
        gx = np.take_along_axis(g, np.argsort(perm, axis=ax), axis=ax)
        return np.reshape(gx, shape) if axis is None else gx
    return y, pullback


@linear_frule(np.sort)
def _sort_f(dx, y, a, axis=-1, kind=None, order=None, **kw):
    # The same permutation as the pullback's, so that forward and reverse agree even on ties.
    return _lane_take_along(dx, a, np.argsort(a, axis=axis, kind="stable"), axis)
