"""Reverse rules for indexing: ``x[key]`` with ints, slices, ellipsis, newaxis, integer arrays
and boolean masks; take, take_along_axis."""
import operator

import numpy as np

from .registry import rrule
from .broadcasting import shape_of
from .cotangents import IndexedCotangent


def is_basic_index(key):
    """Whether ``key`` uses only ints, slices, Ellipsis and None (no repeated positions)."""
    if type(key) is not tuple:
        key = (key,)
    return all(k is None or k is Ellipsis or isinstance(k, (int, np.integer, slice)) for k in key)


@rrule(operator.getitem)
def _getitem(x, key):
    y = x[key]
    shape, basic = shape_of(x), is_basic_index(key)
    return y, lambda g: (IndexedCotangent(shape, key, g, basic), None)
