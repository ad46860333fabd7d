"""Reaching workers: :func:`connect`, the worker plugin that prepares every worker, and the two
backends the rest of the package runs on — Dask's client, or ``"serial"`` (the same tasks run
in this process, for tests and small problems).

Nothing here imports Dask at module level: ``import mooncake_py.distributed`` and the serial
backend work without it.
"""
import os
import platform
import uuid

import numpy as np

import mooncake_py as mp

from .errors import (
    ClosedError,
    NoWorkersError,
    UnpicklableFunctionError,
    VersionMismatchError,
)

PLUGIN_NAME = "mooncake_py"
# glibc reads this variable, and mp.tune_allocator() leaves malloc alone where it is set; Dask's
# nanny sets it for every worker (distributed.nanny.pre-spawn-environ), which turned the tuning
# off there: a 125k-row cached gradient took 16.5 ms instead of 8-9.
_NANNY_MALLOC = "MALLOC_TRIM_THRESHOLD_"


def versions():
    """The versions that must agree between client and workers for pickled functions to mean
    the same code on both: Python (major.minor), NumPy, cloudpickle and mooncake_py."""
    try:
        import cloudpickle
        cp = cloudpickle.__version__
    except ImportError:
        cp = None
    return {"python": ".".join(platform.python_version_tuple()[:2]), "numpy": np.__version__,
            "cloudpickle": cp, "mooncake_py": mp.__version__}


def _nanny_malloc_value():
    try:
        import dask
        v = dask.config.get(f"distributed.nanny.pre-spawn-environ.{_NANNY_MALLOC}", None)
    except ImportError:
        return None
    return None if v is None else str(v)


def prepare_worker(expected):
    """What the plugin does on each worker: check versions against ``expected`` (the client's),
    then tune the allocator. Returns the allocator state (``mp.tune_allocator()``'s answer).

    The nanny's own ``MALLOC_TRIM_THRESHOLD_`` is removed from the worker's environment first
    (a value a user set, different from Dask's configured one, is left, and so is the tuning
    off). ``mallopt`` overrides what glibc read from the environment at start-up, so the
    tuning takes effect although the variable was set when the process began.
    """
    mine = versions()
    bad = {k: (expected[k], mine.get(k)) for k in expected if expected[k] != mine.get(k)}
    if bad:
        detail = ", ".join(f"{k}: client {a}, worker {b}" for k, (a, b) in sorted(bad.items()))
        raise VersionMismatchError(
            f"a worker runs other package versions than the client ({detail}); functions "
            f"pickled on the client could run as other code there. Install the same versions "
            f"in the workers' environment (e.g. build the cluster's image or conda environment "
            f"from the client's) and reconnect.")
    nanny = _nanny_malloc_value()
    if nanny is not None and os.environ.get(_NANNY_MALLOC) == nanny:
        del os.environ[_NANNY_MALLOC]
    return mp.tune_allocator()


def worker_plugin(expected=None):
    """A Dask ``WorkerPlugin`` that runs :func:`prepare_worker` on every worker, those that
    join later included. ``expected`` defaults to this process's :func:`versions`."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class MooncakeWorkerPlugin(WorkerPlugin):
        name = PLUGIN_NAME

        def __init__(self, expected):
            self.expected = expected

        def setup(self, worker):
            worker.mooncake_allocator = prepare_worker(self.expected)

    return MooncakeWorkerPlugin(versions() if expected is None else expected)


NO_WORKERS_WAIT = 60  # seconds a call waits for a worker when the cluster has none

_PREPARED = set()  # ids of clients whose workers got the plugin


def connect(address=None, *, n_workers=None, processes=True, **kw):
    """A Dask client whose workers are prepared for mooncake_py.

    With no ``address``: the current default client if there is one, else an embedded
    ``LocalCluster`` of ``n_workers`` processes (default: one per core) with one thread each
    (tape code holds the GIL, so threads would take turns). ``address`` may be a scheduler
    address (``"tcp://10.0.0.5:8786"``), the path of a ``scheduler.json`` file, or a Cluster
    object (``dask_jobqueue.SLURMCluster``, ``dask_kubernetes.KubeCluster``); ``kw`` go to
    ``LocalCluster`` or ``Client``. Every worker, those that join later too, gets a plugin
    that checks its Python, NumPy, cloudpickle and mooncake_py versions against this process's
    (:class:`VersionMismatchError`) and applies ``mp.tune_allocator()``.

    Example (needs Dask; ``client="serial"`` elsewhere in this package needs nothing):
        >>> from mooncake_py.distributed import connect
        >>> client = connect(n_workers=2)            # doctest: +SKIP
        >>> client = connect("scheduler.json")       # doctest: +SKIP
    """
    from distributed import Client, LocalCluster, default_client
    if address is None:
        try:
            client = default_client()
        except ValueError:
            cluster = LocalCluster(n_workers=n_workers or os.cpu_count() or 1,
                                   threads_per_worker=1, processes=processes, **kw)
            client = Client(cluster)
    elif isinstance(address, (str, os.PathLike)) and str(address).endswith(".json"):
        client = Client(scheduler_file=os.fspath(address), **kw)
    else:
        client = Client(address, **kw)
    prepare(client)
    return client


def prepare(client):
    """Register the worker plugin on ``client`` once (raises VersionMismatchError)."""
    if id(client) not in _PREPARED:
        client.register_plugin(worker_plugin(), name=PLUGIN_NAME)
        _PREPARED.add(id(client))
    return client


def dumps(obj, what, *, buffers=None):
    """``obj`` as cloudpickle bytes, or UnpicklableFunctionError naming ``what``. With a list
    ``buffers``, large arrays go there out of band (pickle protocol 5) instead of being copied
    into the bytes: a cheap check that ``obj`` pickles."""
    try:
        import cloudpickle
    except ImportError:
        return obj
    try:
        if buffers is None:
            return cloudpickle.dumps(obj)
        return cloudpickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    except Exception as e:  # cloudpickle raises TypeError, PicklingError, AttributeError...
        raise UnpicklableFunctionError(
            f"the {what} cannot be pickled ({type(e).__name__}: {e}), so it cannot be sent to "
            f"the workers. Functions travel by cloudpickle with what they close over: keep "
            f"open files, locks, sockets, database connections or clients out of it (make them "
            f"inside the function, or in the shard generator on the worker).") from e


def new_token(kind):
    return f"mooncake-{kind}-{uuid.uuid4().hex[:12]}"


class SerialFuture:
    """A finished 'task' of the serial backend."""
    __slots__ = ("key", "value")

    def __init__(self, value, key):
        self.value, self.key = value, key


class Serial:
    """The backend of ``client="serial"``: tasks run at submission, in this process."""
    name = "serial"

    def check_open(self):
        pass

    def workers(self):
        return ["serial"]

    def submit(self, fn, *args, worker=None, key=None):
        args = [a.value if isinstance(a, SerialFuture) else a for a in args]
        return SerialFuture(fn(*args), key)

    def gather(self, futures):
        return [f.value for f in futures]

    def who_has(self, futures):
        return {f.key: ["serial"] for f in futures}

    def pack(self, obj, what):
        """What :meth:`share` sends: the pickled bytes, which the task loads (as a worker
        would, so the serial backend freezes what a function reads as Dask does)."""
        return dumps(obj, what)

    def share(self, data):
        return data

    def run_everywhere(self, fn, *args):
        return {"serial": fn(*args)}

    def release(self, futures):
        pass

    def lost(self, exc):
        return False


class DaskBackend:
    """The backend on a Dask client: tasks pinned (loosely) to the worker asked for, so that
    they run where their shards are and move elsewhere only when that worker is gone."""
    name = "dask"

    def __init__(self, client):
        self.client = client

    def check_open(self):
        if self.client.status in ("closing", "closed"):
            raise ClosedError(
                "the Dask client is closed; connect again (mooncake_py.distributed.connect) "
                "and build the shards and objective on the new client.")

    def workers(self):
        """The workers' addresses, sorted; with none (all lost, or not started yet) it waits
        up to ``NO_WORKERS_WAIT`` seconds for one: tasks spread over no workers would make no
        results, and a nanny restarts a killed worker within seconds."""
        have = self.client.nthreads()
        if not have:
            try:
                self.client.wait_for_workers(1, timeout=NO_WORKERS_WAIT)
            except Exception as e:  # (a TimeoutError, by Dask version)
                raise NoWorkersError(
                    f"the Dask cluster has had no worker for {NO_WORKERS_WAIT} s; start or "
                    f"scale up workers (cluster.scale(n)) and call again.") from e
            have = self.client.nthreads()
        return sorted(have)

    def submit(self, fn, *args, worker=None, key=None):
        where = {} if worker is None else {"workers": [worker], "allow_other_workers": True}
        return self.client.submit(fn, *args, pure=False, key=key or new_token(fn.__name__),
                                  **where)

    def gather(self, futures):
        return self.client.gather(futures)

    def who_has(self, futures):
        return self.client.who_has(futures)

    def pack(self, obj, what):
        """What :meth:`share` sends: ``obj`` itself, checked to pickle. Dask pickles it on
        the way with its arrays out of band (a 72 MB matrix reached 2 workers in ~0.09 s;
        pickled to bytes first it took ~0.16 s, plus the pickling and a copy on each
        worker)."""
        dumps(obj, what, buffers=[])
        return obj

    def share(self, data):
        """``data`` on every worker, sent once from the client straight to them (not through
        the scheduler inside each task's graph: a 72 MB matrix cost ~0.4 s a worker that way).
        A copy on every worker survives the loss of any one, and a new worker gets it from
        the others."""
        self.workers()   # (with none, scatter would wait and then raise a bare TimeoutError)
        return self.client.scatter(data, broadcast=True, hash=False, direct=self._direct())

    def _direct(self):
        # Through the scheduler, a 72 MB context took ~0.5 s to reach 2 workers, straight to
        # them ~0.17 s; only a cluster on this machine is surely reachable that way (behind
        # Kubernetes or a jump host, workers may not be), elsewhere the client's own setting
        # (Client(direct_to_workers=...)) decides.
        cluster = getattr(self.client, "cluster", None)
        if cluster is not None and type(cluster).__name__ == "LocalCluster":
            return True
        return None

    def run_everywhere(self, fn, *args):
        return self.client.run(fn, *args)

    def release(self, futures):
        for f in futures:
            f.release()

    def lost(self, exc):
        """Whether ``exc`` is a task cancelled because data it needed was lost with a worker."""
        from distributed.client import FutureCancelledError
        return isinstance(exc, FutureCancelledError)


def backend(client):
    """The backend for ``client``: ``"serial"``, a Dask Client, a backend, or None (the
    default client, else a new LocalCluster, through :func:`connect`)."""
    if isinstance(client, (Serial, DaskBackend)):
        return client
    if isinstance(client, str) and client == "serial":
        return Serial()
    if client is None:
        client = connect()
    else:
        prepare(client)
    b = DaskBackend(client)
    b.check_open()
    return b
