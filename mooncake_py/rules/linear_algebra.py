"""Reverse rules for linear algebra: matmul/dot/vdot/inner/outer/tensordot/einsum/trace/kron and
numpy.linalg (inv, solve, det, slogdet, cholesky, eigh, norm), scipy.linalg triangular solves."""
import numpy as np

from .registry import rrule
from .broadcasting import unbroadcast, shape_of


def _mT(x):
    return np.swapaxes(x, -1, -2)


@rrule(np.matmul, needs=True)
def _matmul(needs, a, b, **kw):
    y = np.matmul(a, b, **kw)
    sa, sb = shape_of(a), shape_of(b)

    def pullback(g):
        # Promote 1-D operands to matrices as matmul does, then undo it on the cotangents.
        a2 = np.expand_dims(a, 0) if len(sa) == 1 else a
        b2 = np.expand_dims(b, -1) if len(sb) == 1 else b
        g2 = np.expand_dims(g, -1) if len(sb) == 1 else g
        g2 = np.expand_dims(g2, -2) if len(sa) == 1 else g2
        ga = gb = None
        if needs[0]:
            ga = np.reshape(unbroadcast(np.matmul(g2, _mT(b2)), shape_of(a2)), sa)
        if needs[1]:
            gb = np.reshape(unbroadcast(np.matmul(_mT(a2), g2), shape_of(b2)), sb)
        return ga, gb
    return y, pullback
