"""Array namespaces: one NumPy-like surface per framework, so each benchmark case is written once.

A case receives ``xp`` and uses ``xp.sum``, ``xp.kron``, ``xp.linalg.cholesky``,
``xp.linalg.solve_triangular(a, b, lower=True)``, ``xp.special.ndtr`` and so on. For NumPy,
autograd and JAX the namespace is the framework's own ``numpy`` module with the few functions it
lacks filled in; for PyTorch it is a thin adapter translating NumPy's spelling (``axis=``,
``maximum(z, 0.0)``, float64 ``eye``) to torch's. Every constructor imports its framework lazily,
so importing this module needs NumPy only.

Example:
    >>> import numpy as np
    >>> from benchmarks.namespaces import numpy_namespace
    >>> xp = numpy_namespace()
    >>> float(xp.sum(xp.kron(np.eye(2), np.ones((2, 2)))))
    8.0
"""
import numpy as np


class Namespace:
    """A module plus overrides: attributes not overridden are those of ``base``.

    The module's public attributes are copied in up front, so ``xp.sin`` costs one dict lookup
    as ``np.sin`` does (a ``__getattr__`` per call would add to every timing).
    """

    def __init__(self, name, base, **overrides):
        self.__dict__.update({k: v for k, v in vars(base).items() if not k.startswith("_")})
        self.__name__ = name
        self._base = base
        self.__dict__.update(overrides)

    def __getattr__(self, attr):
        return getattr(self.__dict__["_base"], attr)

    def __repr__(self):
        return f"<array namespace {self.__name__}>"


def numpy_namespace():
    """NumPy (what mooncake_py differentiates): scipy's triangular solve via ``mp.linalg``.

    ``scipy.linalg.solve_triangular`` converts its inputs with ``np.asarray``, which would lose
    tracking, so the mooncake_py wrapper is used when it exists; on plain arrays it is scipy's.
    Until it exists, a general ``np.linalg.solve`` stands in (same result, LU instead of a
    triangular solve).
    """
    import mooncake_py as mp
    try:
        import scipy.special as sps
        ndtr = sps.ndtr
    except ImportError:  # pragma: no cover - scipy is in the test extra
        from math import erf, sqrt
        ndtr = np.vectorize(lambda z: 0.5 * (1.0 + erf(z / sqrt(2.0))))
    st = getattr(mp.linalg, "solve_triangular", None)
    if st is None:
        def st(a, b, lower=False):
            return np.linalg.solve(a, b)
    return Namespace("numpy", np,
                     linalg=Namespace("numpy.linalg", np.linalg, solve_triangular=st),
                     special=Namespace("special", mp.special, ndtr=ndtr))


def autograd_namespace():
    """autograd.numpy, with scipy's triangular solve and the normal CDF from autograd.scipy."""
    import autograd.numpy as anp
    import autograd.scipy.linalg as asl
    import autograd.scipy.stats.norm as anorm
    return Namespace("autograd.numpy", anp,
                     linalg=Namespace("autograd.numpy.linalg", anp.linalg,
                                      solve_triangular=asl.solve_triangular),
                     special=Namespace("special", anp, ndtr=anorm.cdf))


def jax_namespace():
    """jax.numpy in float64 (``jax_enable_x64`` is switched on, as the cases are float64)."""
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl
    import jax.scipy.special as jsp
    return Namespace("jax.numpy", jnp,
                     linalg=Namespace("jax.numpy.linalg", jnp.linalg,
                                      solve_triangular=jsl.solve_triangular),
                     special=jsp)


def torch_namespace():
    """A NumPy-spelled adapter over torch, float64 throughout.

    Only what differs is wrapped (``maximum`` with a Python scalar, float64 ``eye`` and
    ``asarray``, ``solve_triangular``'s ``lower=``); ``xp.sin`` and the rest are torch's own
    functions, so the adapter adds nothing to the timings.
    """
    import torch
    f64 = torch.float64

    def tensor(a):
        return a if isinstance(a, torch.Tensor) else torch.as_tensor(a, dtype=f64)

    def maximum(a, b):
        return torch.maximum(tensor(a), tensor(b))

    def solve_triangular(a, b, lower=False):
        if b.ndim == 1:
            return torch.linalg.solve_triangular(a, b[:, None], upper=not lower)[:, 0]
        return torch.linalg.solve_triangular(a, b, upper=not lower)

    return Namespace(
        "torch", torch, maximum=maximum, asarray=tensor, eye=lambda n: torch.eye(n, dtype=f64),
        linalg=Namespace("torch.linalg", torch.linalg, solve_triangular=solve_triangular),
        special=Namespace("torch.special", torch.special))
