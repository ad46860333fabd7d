"""Cotangent representations the reverse sweep accumulates besides plain arrays."""
import numpy as np

from .registry import primitive


@primitive
def scatter_add(shape, index, values):
    """A zero array of ``shape`` (dtype and array type of ``values``) with ``values`` added at
    ``index``; repeated integer indices accumulate. Linear in ``values``."""
    out = np.zeros_like(values, shape=shape)
    np.add.at(out, index, values)
    return out


class IndexedCotangent:
    """The cotangent of ``x`` from ``x[index]``: ``values`` scattered into zeros of ``shape``.

    Kept sparse so that a loop reading ``x[i]`` n times costs O(n) in the reverse sweep rather
    than O(n²): the sweep adds it in place into a buffer it owns.
    """
    __slots__ = ("shape", "index", "values", "basic")

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
