"""A loss summed over shards: :func:`objective` and :class:`Objective`."""
import numpy as np

from . import worker
from .client import new_token
from .context import Broadcast, LossContext, gather
from .errors import ArgumentError, ClosedError, ThetaShapeError
from .shards import ShardSet


def objective(loss, shards, *, argnums=0, client=None, theta_shape=None):
    """The sum over ``shards`` of ``loss(theta, *shard)``, with its derivatives: an
    :class:`Objective`.

    ``argnums`` is θ's position among the loss's arguments (the shard's arrays fill the
    others, in order). ``loss`` is pickled now (cloudpickle, with what it closes over:
    :class:`UnpicklableFunctionError` if it cannot be) and loaded once per worker, where each
    shard gets prepared caches built on its data. Each call is one task per worker; per-shard
    results come back and are summed in shard order, so results do not depend on the number
    of workers. θ's shape is fixed by ``theta_shape`` or the first call.

    Example:
        >>> import numpy as np
        >>> from mooncake_py import distributed as md
        >>> rows = lambda s: (np.arange(6.0).reshape(3, 2) + s, np.ones(3))   # (X, y) of shard s
        >>> S = md.shards(rows, range(3), client="serial")
        >>> with md.objective(lambda t, X, y: 0.5 * np.sum((X @ t - y) ** 2), S) as obj:
        ...     value, grad = obj.value_and_grad(np.zeros(2))
        ...     H = obj.hessian(np.zeros(2))
        >>> X = np.concatenate([rows(s)[0] for s in range(3)])
        >>> value, bool(np.array_equal(H, X.T @ X))
        (4.5, True)
    """
    if not isinstance(shards, ShardSet):
        raise ArgumentError(f"objective() takes a ShardSet (from md.shards(make, specs) or "
                            f"ShardSet.from_dask), not {type(shards).__name__}.")
    if type(argnums) is not int or not 0 <= argnums <= len(shards.shapes[0]):
        raise ArgumentError(f"argnums must be an int from 0 to {len(shards.shapes[0])} (θ's "
                            f"position among the {len(shards.shapes[0])} shard arrays), "
                            f"not {argnums!r}.")
    if client is not None and client != "serial" and getattr(shards.backend, "client",
                                                              None) is not client:
        raise ArgumentError("the shards live on another client than the one given; build the "
                            "objective on the shards' client (or leave client=None).")
    return Objective(loss, shards, argnums, theta_shape)


class Objective:
    """A loss summed over the shards of a :class:`ShardSet`; see :func:`objective`.

    ``value(theta)``, ``value_and_grad(theta)``, ``hvp(theta, v)`` (``v`` of shape
    ``(k, *θ.shape)`` with ``lanes=True``), ``hessian(theta)``, and SciPy's forms
    ``fun_and_jac(theta, *args)`` (``minimize(..., jac=True)``) and
    ``hessp(theta, p, *args)``. ``close()`` (or leaving a ``with`` block) frees the workers'
    caches for it.
    """

    def __init__(self, loss, shards, argnums, theta_shape):
        self.shards = shards
        self.backend = shards.backend
        self.token = new_token("objective")
        self.ctx = Broadcast(self.backend, LossContext(loss, argnums), "loss", self.token)
        self.theta_shape = None if theta_shape is None else tuple(theta_shape)
        self.closed = False
        self._layout = None

    # -- arguments ------------------------------------------------------------------------
    def _theta(self, theta):
        theta = np.asarray(theta)
        if not np.issubdtype(theta.dtype, np.floating):
            theta = theta.astype(np.float64)
        if self.theta_shape is None:
            self.theta_shape = theta.shape
        elif theta.shape != self.theta_shape:
            raise ThetaShapeError(f"θ has shape {theta.shape}, but this objective's θ has shape "
                                  f"{self.theta_shape} (set by theta_shape or its first call); "
                                  f"pass θ of that shape, or build another objective.")
        return theta

    def _direction(self, theta, v, lanes):
        v = np.asarray(v, dtype=theta.dtype)
        want = v.shape[1:] if lanes else v.shape
        if want != theta.shape or (lanes and v.ndim == 0):
            form = "(k, *θ.shape) with lanes=True" if lanes else "θ's shape"
            raise ThetaShapeError(f"the direction has shape {v.shape}; it must be {form}, "
                                  f"θ being {theta.shape}.")
        return v

    # -- the one call path ----------------------------------------------------------------
    def _per_shard(self, mode, theta, extra=None):
        """The per-shard results of ``mode``, in shard order."""
        if self.closed:
            raise ClosedError("this objective was closed; build a new one with "
                              "md.objective(loss, shards).")
        self.backend.check_open()
        placed = []

        def submit():
            if placed:   # again, after a worker's loss: regroup on the workers left
                self.shards.suspect()
            groups = self.shards.groups()
            if self._layout != self.shards.layout:
                self.ctx.keep_only({wk for wk, _ in groups} | set(self.backend.workers()))
                self._layout = self.shards.layout
            placed[:] = groups
            return [self.backend.submit(worker.run_group, self.token, self.ctx.on(wk),
                                        self.shards.layout, mode, theta, extra, idx,
                                        *(self.shards.futures[i] for i in idx), worker=wk)
                    for wk, idx in groups]

        results = gather(self.backend, self.ctx, submit)
        out = [None] * len(self.shards)
        for (wk, idx), (got, ran_on) in zip(placed, results):
            if ran_on != wk:   # the worker was lost mid-call: regroup before the next one
                self.shards.suspect()
            for i, r in zip(idx, got):
                out[i] = r
        return out

    @staticmethod
    def _sum(parts):
        # left to right in shard order: the same floating-point sum whatever the grouping
        total = parts[0]
        if isinstance(total, np.ndarray):
            total = total.copy()
            for p in parts[1:]:
                total += p
            return total
        for p in parts[1:]:
            total = total + p
        return total

    # -- public -----------------------------------------------------------------------------
    def value(self, theta):
        """The loss summed over the shards.

        Example: :func:`objective`."""
        return self._sum(self._per_shard("value", self._theta(theta)))

    def value_and_grad(self, theta):
        """``(value, gradient)`` summed over the shards (prepared gradient caches).

        Example: :func:`objective`."""
        parts = self._per_shard("value_and_grad", self._theta(theta))
        return self._sum([p[0] for p in parts]), self._sum([p[1] for p in parts])

    def hvp(self, theta, v, lanes=False):
        """∇²f(θ)·v; with ``lanes=True``, ``v`` holds k directions on a leading axis and the
        k products come back in one sweep per shard.

        Example:
            >>> import numpy as np
            >>> from mooncake_py import distributed as md
            >>> S = md.shards(lambda s: np.full((4, 2), s + 1.0), range(2), client="serial")
            >>> obj = md.objective(lambda t, X: np.sum((X @ t) ** 2), S)
            >>> obj.hvp(np.zeros(2), np.array([1.0, 0.0]))
            array([40., 40.])
        """
        theta = self._theta(theta)
        v = self._direction(theta, v, lanes)
        return self._sum(self._per_shard("hvp_lanes" if lanes else "hvp", theta, v))

    def hessian(self, theta):
        """The Hessian (shape ``θ.shape * 2``) summed over the shards.

        Example: :func:`objective`."""
        return self._sum(self._per_shard("hessian", self._theta(theta)))

    def fun_and_jac(self, theta, *args):
        """``(value, gradient)`` for ``scipy.optimize.minimize(obj.fun_and_jac, x0, jac=True)``;
        ``args`` (SciPy's ``args=``) are ignored: the data is in the shards.

        Example:
            >>> import numpy as np
            >>> from scipy.optimize import minimize
            >>> from mooncake_py import distributed as md
            >>> S = md.shards(lambda s: np.arange(3.0) + s, range(2), client="serial")
            >>> obj = md.objective(lambda t, a: np.sum((t - a) ** 2), S)
            >>> r = minimize(obj.fun_and_jac, np.zeros(1), jac=True, hessp=obj.hessp,
            ...              method="trust-krylov")
            >>> float(np.round(r.x[0], 6))
            1.5
        """
        return self.value_and_grad(theta)

    def hessp(self, theta, p, *args):
        """∇²f(θ)·p in SciPy's argument order (``minimize(..., hessp=obj.hessp)``).

        Example: :meth:`fun_and_jac`."""
        return self.hvp(theta, p)

    def close(self):
        """Free this objective's state on the workers (its loaded loss and shard caches).
        The shards stay; later calls raise :class:`ClosedError`."""
        if self.closed:
            return
        self.closed = True
        self.ctx.close()
        try:
            self.backend.check_open()
        except ClosedError:
            return
        self.backend.run_everywhere(worker.drop, self.token)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        state = "closed" if self.closed else f"θ shape {self.theta_shape}"
        return f"Objective({self.shards!r}, {state})"
