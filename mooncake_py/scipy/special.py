"""Differentiable mirror of :mod:`scipy.special`: a port changes one import.

``from scipy import special`` becomes ``from mooncake_py.scipy import special``. Two kinds of
functions live here:

- scipy.special's *ufuncs* that the derivative table covers (``expit``, ``gammaln``,
  ``betaln``, ``erfinv``, ``i0e``, ``j0``, ``gammainc``, ``iv`` ...). They are scipy's own
  objects, re-exported: they dispatch through NumPy's ``__array_ufunc__`` and find their rules,
  so ``scipy.special.expit(x)`` works as well on tracked or dual values.
- functions that are *not* ufuncs (``logsumexp``, ``softmax``, ``log_softmax``,
  ``polygamma``, ``multigammaln``). scipy converts their inputs with ``np.asarray``, which
  loses tracking, so they are primitives with rules of their own; on plain arrays they give
  scipy's results.

``mooncake_py.special`` is this very module. Importing it does not import scipy: the ufuncs
are looked up (and their table section registered) on first attribute access.

Example:
    >>> import numpy as np, mooncake_py as mp
    >>> from mooncake_py.scipy import special
    >>> float(mp.grad(lambda x: special.expit(x))(0.0))
    0.25
    >>> mp.grad(lambda x: np.sum(special.gammaln(x)))(np.array([1.0, 2.0]))
    array([-0.57721566,  0.42278434])
"""
from ..rules.derivative_table import SCIPY_RULED_UFUNCS, SCIPY_UFUNCS, load_scipy
from ..rules.special import *
from ..rules.special import __all__ as _FUNCTIONS

__all__ = [*_FUNCTIONS, *sorted(SCIPY_UFUNCS | SCIPY_RULED_UFUNCS)]  # noqa: PLE0604  (names of the re-exported functions)


def __getattr__(name):
    # The ufuncs are scipy's own objects; fetching one is the moment scipy is certainly needed,
    # so scipy.special is imported (and the table's scipy section registered) only here.
    if name in SCIPY_UFUNCS or name in SCIPY_RULED_UFUNCS:
        sps = load_scipy()
        if sps is None:
            raise AttributeError(f"mooncake_py.scipy.special.{name} needs scipy, which is not "
                                 "installed")
        fn = getattr(sps, name)
        globals()[name] = fn  # later lookups are plain attribute hits
        return fn
    raise AttributeError(f"module 'mooncake_py.scipy.special' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
