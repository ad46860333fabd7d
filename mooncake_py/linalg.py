"""``mooncake_py.linalg`` is :mod:`mooncake_py.scipy.linalg`, the differentiable mirror of
``scipy.linalg`` (``solve_triangular``, ``cho_solve``, ``solve``, ``cholesky``, ``expm``, ...).

The ``numpy.linalg`` functions (``np.linalg.solve``, ``inv``, ``qr``, ``eig``, ...) need no
mirror: they dispatch through NumPy and work on tracked and dual values directly.
"""
import sys

from .scipy import linalg as _mirror

sys.modules[__name__] = _mirror  # one module under both names: mp.linalg is mp.scipy.linalg
