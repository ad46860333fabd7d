"""Pullbacks the reverse sweep recognises by type, to take a shorter path than a call.

Besides the classes below, a plain ``tuple`` ``(x, z)`` is the pullback of a product of two
float64 scalars as the short paths of fastpath.py record it: the cotangents are ``g * x`` and
``g * z`` (``None`` for a constant operand). Making the tuple costs a fraction of a closure
``lambda g: (g * b, g * a)`` (whose cells and function object are made per node), and the
sweep multiplies inline instead of calling. It is not callable: code that runs a tape's
pullbacks outside :meth:`Tape._run_pullbacks` goes through :func:`cotangents`.
"""
from ..rules.cotangents import IndexedCotangent
from ..rules.derivative_table import _div as div


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


class Pass:
    """The pullback of ``a + b`` (``neg`` False) or ``a - b`` (``neg`` True) for float64
    scalars: ``g`` to ``a``, ``g`` or ``-g`` to ``b`` (``which``: 0 both operands tracked,
    1 only ``a``, 2 only ``b``). One shared object per (operator, which); the sweep passes
    ``g`` on inline rather than calling it for the tuple.

    Example:
        >>> Pass(True, 0)(2.0)
        (2.0, -2.0)
    """
    __slots__ = ("neg", "which")

    def __init__(self, neg, which):
        self.neg, self.which = neg, which

    def __call__(self, g):
        which = self.which
        return (g if which != 2 else None,
                None if which == 1 else -g if self.neg else g)


class Quotient(tuple):
    """The pullback of ``a / b`` for float64 scalars, as data ``(b, y, which)`` (``y = a / b``;
    ``which``: 0 both operands tracked, 1 only ``a``, 2 only ``b``): the cotangents are
    ``g * div(1, b)`` and ``g * div(-y, b)``, the derivative table's formulas, computed when
    the sweep reaches the node as the rule's pullback computes them (so bitwise the same, with
    the same warnings at the same time). Callable data: cheaper to make than a closure, and
    called by the sweep like any pullback (division is rare enough in scalar loops that a
    further type check on every other node's path would cost more than it saves).

    Example:
        >>> import numpy as np
        >>> Quotient((np.float64(4.0), np.float64(0.5), 0))(np.float64(2.0))
        (np.float64(0.5), np.float64(-0.25))
    """
    __slots__ = ()

    def __call__(self, g):
        b, y, which = self
        return (g * div(1, b) if which != 2 else None, g * div(-y, b) if which != 1 else None)


def cotangents(pb, g):
    """The cotangents pullback ``pb`` of a tape gives for cotangent ``g`` (a call, or for a
    product's factors ``(x, z)`` the products ``g * x`` and ``g * z``).

    Example:
        >>> import numpy as np
        >>> cotangents((np.float64(3.0), None), np.float64(2.0))
        (np.float64(6.0), None)
    """
    if type(pb) is tuple:
        x, z = pb
        return (None if x is None else g * x, None if z is None else g * z)
    return pb(g)
