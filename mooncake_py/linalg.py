"""Differentiable versions of scipy.linalg functions that do not dispatch through NumPy.

``scipy.linalg.solve_triangular`` and ``cho_solve`` convert their inputs with ``np.asarray``;
use ``mooncake_py.linalg.solve_triangular`` / ``cho_solve`` instead (same signatures). The
``numpy.linalg`` functions (``np.linalg.solve``, ``inv``, ``cholesky``, ...) work directly.
"""
from .rules.linear_algebra import *  # noqa: F401,F403
