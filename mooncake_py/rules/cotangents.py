"""Cotangent representations the reverse sweep accumulates besides plain arrays."""
import numpy as np

from ..core import array_module as am
from .registry import primitive


def _index_like(index, out):
    """``index`` with its host index arrays (and lists) moved to ``out``'s device, if ``out`` is
    a device array: the rules build index arrays with NumPy."""
    if am.device_module(out) is None:
        return index
    if type(index) is tuple:
        return tuple(_index_like(k, out) for k in index)
    if isinstance(index, (list, np.ndarray)):
        return am.asarray(index, like=out)
    return index


@primitive
def scatter_add(shape, index, values):
    """A zero array of ``shape`` (dtype and array type of ``values``) with ``values`` added at
    ``index``; repeated integer indices accumulate. Linear in ``values``."""
    out = np.zeros_like(values, shape=shape)
    if _is_basic(index):  # no position twice: an assignment, not NumPy's unbuffered add.at
        out[index] = values
    else:
        np.add.at(out, _index_like(index, out), values)
    return out


_BASIC = (int, np.integer, slice)


def _is_basic(index):
    """Ints, slices, Ellipsis and None only (``rules.indexing.is_basic_index``, which imports
    this module): such an index selects no position twice."""
    for k in index if type(index) is tuple else (index,):
        if not (k is None or k is Ellipsis or (isinstance(k, _BASIC) and type(k) is not bool)):
            return False
    return True


class IndexedCotangent:
    """The cotangent of ``x`` from ``x[index]``: ``values`` scattered into zeros of ``shape``.

    Kept sparse so that a loop reading ``x[i]`` n times costs O(n) in the reverse sweep rather
    than O(n²): the sweep adds it in place into a buffer it owns.
    """
    __slots__ = ("basic", "index", "shape", "values")

    def __init__(self, shape, index, values, basic):
        self.shape, self.index, self.values, self.basic = shape, index, values, basic

    def dense(self):
        return scatter_add(self.shape, self.index, self.values)

    def add_into(self, buf):
        """Add into the plain ndarray ``buf`` in place."""
        if self.basic:
            buf[self.index] += self.values
        else:
            np.add.at(buf, self.index, self.values)
        return buf


def _int_key(key):
    if type(key) is not tuple:
        key = (key,)
    return key if all(isinstance(k, (int, np.integer)) and not isinstance(k, bool)
                      for k in key) else None


class IndexedCotangentList:
    """Several sparse contributions to one array's cotangent, added up only when needed.

    The sweep collects here the contributions it cannot add in place (values that are dual
    numbers, in forward-over-reverse), so that n reads ``x[i]`` cost one scatter at the end
    instead of n dense arrays.
    """
    __slots__ = ("items", "shape")

    def __init__(self, shape, items):
        self.shape, self.items = shape, items

    def dense(self):
        keys = [_int_key(it.index) for it in self.items]
        if all(k is not None and len(k) == len(keys[0]) for k in keys):
            index = tuple(np.array(col, dtype=np.intp) for col in zip(*keys))
            return scatter_add(self.shape, index, np.stack([it.values for it in self.items]))
        total = self.items[0].dense()
        for it in self.items[1:]:
            total = total + it.dense()
        return total
