"""Pullbacks the reverse sweep recognises by type, to take a shorter path than a call."""
from ..rules.cotangents import IndexedCotangent


class ItemRead:
    """The pullback of ``x[i]`` (``i`` an integer, ``x`` a float64 array): the cotangent is
    ``g`` at position ``i``. A class rather than a closure so that the sweep can recognise it
    and add ``g`` into ``x``'s cotangent buffer in place.

    Example:
        >>> import numpy as np
        >>> ItemRead((3,), 1)(np.float64(2.0))[0].dense()
        array([0., 2., 0.])
    """
    # node, value: set where the short paths record the read (tape/fastpath.py,
    # mixed/dual_scalars.py) while Tape._reads is on: the read's node and the value it gave,
    # which Tape._reads hands out again for the same element read at the same node.
    __slots__ = ("key", "node", "shape", "value")

    def __init__(self, shape, key):
        self.shape, self.key = shape, key

    def __call__(self, g):
        return IndexedCotangent(self.shape, self.key, g, True), None
