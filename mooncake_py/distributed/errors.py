"""The errors of :mod:`mooncake_py.distributed`, all subclasses of ``mp.MooncakeError``.

Each names what was wrong and what to do; they pickle (one message argument), so an error
raised on a worker arrives at the client as the same type.
"""
from ..errors import ArgumentError, MooncakeError, OutputTypeError


class DistributedError(MooncakeError):
    """Base class of the errors of :mod:`mooncake_py.distributed`."""


class UnpicklableFunctionError(DistributedError, ArgumentError):
    """A loss, function or shard generator cannot be pickled by cloudpickle, so it cannot be
    sent to the workers (raised when the objective or the shards are built, not at the first
    call)."""


class ThetaShapeError(DistributedError, ValueError):
    """θ (or a direction ``v``) has a shape other than the one the objective was first called
    with (or given as ``theta_shape``)."""


class NonScalarLossError(DistributedError, OutputTypeError):
    """The loss returned something other than a real scalar on a shard."""


class ShardError(DistributedError, ValueError):
    """No shards, a shard with no rows, or shards whose arrays disagree (a different number of
    arrays, row counts that differ inside a shard, other trailing shapes or dtypes)."""


class ClosedError(DistributedError, RuntimeError):
    """The Dask client, or the objective, was closed before the call."""


class NoWorkersError(DistributedError, RuntimeError):
    """The Dask cluster had no worker for ``client.NO_WORKERS_WAIT`` seconds when a call
    needed one."""


class VersionMismatchError(DistributedError, RuntimeError):
    """A worker runs other versions of Python, NumPy, cloudpickle or mooncake_py than the client:
    functions pickled on the client could unpickle to other code there."""
