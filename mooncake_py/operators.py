"""Hessians for SciPy: ``hessp`` in the order ``scipy.optimize.minimize`` calls it, and the
Hessian as a ``scipy.sparse.linalg.LinearOperator`` for Krylov solvers and eigensolvers.

Both are forward-over-reverse Hessian-vector products (:func:`mooncake_py.hvp`); nothing of
the Hessian is stored. They accept what SciPy passes: directions as ``(n,)`` vectors, ``(n, 1)``
columns or ``(n, k)`` blocks (k products in one sweep, as lanes), and integer or boolean
directions (SciPy probes operators with ``int8`` vectors), which are cast to x's dtype. SciPy
itself is imported only when an operator is built.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .config import current_config
from .core.arguments import fname, is_float_leaf, leaf_error
from .core.pytree import flatten, ravel_pytree
from .errors import TangentError
from .transforms.second_order import DEFAULT_CHUNK, cast_direction, hvp
from .transforms.transformed import Transformed


def _direction(f, x, p):
    """``p`` as an array of x's dtype (integer, boolean and other float dtypes are cast)."""
    if not hasattr(p, "dtype"):
        p = np.asarray(p)
    kind = p.dtype.kind
    if kind == "c" or kind not in "biuf":
        raise TangentError(
            f"the direction given for the Hessian of {fname(f)} has dtype {p.dtype}; it must be "
            f"real (it is cast to x's dtype {x.dtype}). Complex Hessian products are not "
            "supported.")
    if kind == "f":
        return cast_direction(f, x, p)  # the rule of mp.hvp (checks the float32 range)
    return p if p.dtype == x.dtype else p.astype(x.dtype)


class _Products:
    """H·p for ``f(x, *args)`` at fixed ``args``, for one direction or a block of them."""
    __slots__ = ("f", "many", "one")

    def __init__(self, f):
        self.f = f
        self.one = hvp(f)
        self.many = hvp(f, lanes=True)

    def apply(self, x, p, args):
        """H·p with p shaped like x, flat ``(n,)``, ``(n, 1)`` or a block ``(n, k)``."""
        f = self.f
        p = _direction(f, x, p)
        xs, ps, n = np.shape(x), np.shape(p), int(np.size(x))
        if ps == xs:
            return self.one(x, *args, p)
        if len(ps) == 1 and ps[0] == n:
            return np.reshape(self.one(x, *args, np.reshape(p, xs)), (n,))
        if len(ps) == 2 and ps[0] == n:
            k = ps[1]
            if k == 1:
                return np.reshape(self.one(x, *args, np.reshape(p, xs)), (n, 1))
            chunk = current_config().chunk_size or DEFAULT_CHUNK
            out = []
            for j0 in range(0, k, chunk):
                block = p[:, j0:j0 + chunk]
                lanes = np.reshape(np.transpose(block), (block.shape[1],) + tuple(xs))
                hv = self.many(x, *args, lanes)
                out.append(np.transpose(np.reshape(hv, (block.shape[1], n))))
            return out[0] if len(out) == 1 else np.concatenate(out, axis=1)
        raise TangentError(
            f"the direction given for the Hessian of {fname(f)} has shape {ps}; x has shape "
            f"{xs} ({n} entries), so a direction is shaped {xs}, ({n},) or ({n}, 1), or a block "
            f"of k directions is ({n}, k).")


def _check_x(f, x):
    if not is_float_leaf(x):
        raise leaf_error(f, 0, x)
    return np.float64(x) if type(x) is float else x


def hessp(f: Callable[..., Any]) -> Callable[..., Any]:
    """``hessp(x, p, *args) = ∇²ₓ f(x, *args) · p``, in the argument order SciPy uses.

    Pass it as ``scipy.optimize.minimize(f, x0, args=..., jac=mp.grad(f), hessp=mp.hessp(f))``
    (Newton-CG, trust-ncg, trust-krylov, trust-constr). ``mp.hvp(f)`` takes the direction
    last, ``hvp(x, *args, p)``, which is not what SciPy calls. ``p`` may be an integer or
    boolean vector (cast to x's dtype), a column ``(n, 1)`` or a block ``(n, k)`` of k
    directions, computed in one sweep.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> from scipy.optimize import minimize
        >>> f = lambda x, a: np.sum((x - a) ** 4) + np.sum(x ** 2)
        >>> mp.hessp(f)(np.ones(2), np.array([1, 0], dtype=np.int8), 0.0)
        array([14.,  0.])
        >>> r = minimize(f, np.ones(3), args=(1.0,), jac=mp.grad(f), hessp=mp.hessp(f),
        ...              method="trust-ncg")
        >>> bool(r.success), bool(np.allclose(mp.grad(f)(r.x, 1.0), 0, atol=1e-6))
        (True, True)
    """
    products = _Products(f)

    def hessp_f(x, p, *args):
        return products.apply(_check_x(f, x), p, args)
    hessp_f.__name__ = f"hessp_{getattr(f, '__name__', 'f')}"
    hessp_f.__doc__ = f"H·p for {fname(f)}: hessp(x, p, *args) (SciPy's order)."
    return Transformed(hessp_f, hessp, (f,), hessp_f)


def hessian_operator(f: Callable[..., Any], x: Any, *args: Any) -> Any:
    """The Hessian of ``f`` at ``(x, *args)`` with respect to ``x``, as a SciPy
    ``LinearOperator`` of shape ``(n, n)`` and x's dtype (n = number of entries of x).

    ``H @ v`` is one Hessian-vector product (forward-over-reverse); ``H @ V`` for an
    ``(n, k)`` block is one sweep carrying the k directions as lanes (in chunks of
    ``Config.chunk_size``, else 128); ``H.T`` is ``H`` (the Hessian is symmetric). Use it with
    ``scipy.sparse.linalg.cg`` / ``minres`` (Newton steps), ``eigsh`` (the largest curvature,
    ``which="LA"``) or as ``hess=`` of ``minimize(method="trust-constr")`` (a constant
    operator: build a new one at each point, e.g. ``hess=lambda x, *a: mp.hessian_operator(f,
    x, *a)``). ``x`` may have any shape, or be a container (a dict of parameters, a
    dataclass, ...): the operator then acts on the flat vector of its float entries, in the
    order of :func:`mooncake_py.ravel_pytree`.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> from scipy.sparse.linalg import cg, eigsh
        >>> A = np.array([[3.0, 1.0], [1.0, 2.0]])
        >>> H = mp.hessian_operator(lambda x: 0.5 * x @ A @ x, np.zeros(2))
        >>> H.shape, H.dtype
        ((2, 2), dtype('float64'))
        >>> H @ np.eye(2)                    # one sweep with two lanes
        array([[3., 1.],
               [1., 2.]])
        >>> x, info = cg(H, np.array([1.0, 1.0]), rtol=1e-12)
        >>> np.round(x, 6)
        array([0.2, 0.4])
        >>> float(np.round(eigsh(H, k=1, which="LA")[0][0], 6))      # (5 + √5) / 2
        3.618034
    """
    from scipy.sparse.linalg import LinearOperator

    if flatten(x)[1].kind != "leaf":
        flat, unravel = ravel_pytree(x)
        g = f

        def f(v, *a):
            return g(unravel(v), *a)
        f.__qualname__ = fname(g)
        x = flat
    x = _check_x(f, x)
    products = _Products(f)
    n = int(np.size(x))

    def matvec(v):
        return products.apply(x, v, args)
    return LinearOperator((n, n), matvec=matvec, rmatvec=matvec, matmat=matvec,
                          rmatmat=matvec, dtype=x.dtype)
