"""Derivatives of losses over data spread across processes or machines, on Dask.

``connect`` reaches (or starts) a Dask cluster; ``shards`` makes the data on the workers;
``objective`` sums a loss over the shards, with gradients, HVPs and Hessians computed where the
data is and summed in shard order; ``hessian``, ``hvp_columns`` and ``sparse_hessian`` spread blocks
of Hessian lanes over workers. ``client="serial"`` runs the same code in this process. Dask
(``pip install 'mooncake_py[distributed]'``) is imported only when a cluster is used.
See docs/distributed.md.
"""
from .client import connect, worker_plugin
from .errors import (
                     ClosedError,
                     DistributedError,
                     NonScalarLossError,
                     NoWorkersError,
                     ShardError,
                     ThetaShapeError,
                     UnpicklableFunctionError,
                     VersionMismatchError,
)
from .hessian import hessian, hvp_columns, sparse_hessian
from .objective import Objective, objective
from .shards import ShardSet, shards

__all__ = ["connect", "worker_plugin", "shards", "ShardSet", "objective", "Objective",
           "hessian", "hvp_columns", "sparse_hessian", "DistributedError", "UnpicklableFunctionError",
           "ThetaShapeError", "NonScalarLossError", "ShardError", "ClosedError", "NoWorkersError",
           "VersionMismatchError"]
