"""Sparse Jacobians and Hessians: sparsity detection, coloring, compressed evaluation.

- :mod:`.tracer` — PatternArray, the wrapper that runs ``f`` on dependency patterns;
- :mod:`.pattern_rules` — how each NumPy operation maps patterns;
- :mod:`.coloring` — star coloring (Hessians), column/row coloring (Jacobians);
- :mod:`.api` — ``sparse_hessian``, ``sparse_jacobian``, the ``*_sparsity`` detectors and the
  prepared caches.

Example:
    >>> import numpy as np, mooncake_py as mp
    >>> H = mp.sparse_hessian(lambda x: np.sum(x[1:] * x[:-1]))(np.ones(4))
    >>> H.toarray()
    array([[0., 1., 0., 0.],
           [1., 0., 1., 0.],
           [0., 1., 0., 1.],
           [0., 0., 1., 0.]])
"""
from . import pattern_rules  # noqa: F401  (fills PATTERN_RULES)
from .api import (
    SparseHessianCache,
    SparseJacobianCache,
    hessian_sparsity,
    jacobian_sparsity,
    prepare_sparse_hessian_cache,
    prepare_sparse_jacobian_cache,
    sparse_hessian,
    sparse_jacobian,
    value_and_sparse_jacobian,
    value_gradient_and_sparse_hessian,
)
from .coloring import column_coloring, greedy_coloring, row_coloring, star_coloring
from .tracer import DenseFallbackWarning, PatternArray, pattern_rule

__all__ = ["PatternArray", "DenseFallbackWarning", "pattern_rule", "hessian_sparsity",
           "jacobian_sparsity", "sparse_hessian", "sparse_jacobian",
           "prepare_sparse_hessian_cache", "value_gradient_and_sparse_hessian",
           "prepare_sparse_jacobian_cache", "value_and_sparse_jacobian", "SparseHessianCache",
           "SparseJacobianCache", "star_coloring", "column_coloring", "row_coloring",
           "greedy_coloring"]
