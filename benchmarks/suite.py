"""The thirteen cases of Mooncake.jl's inter-framework benchmark, written once for any ``xp``.

Each case is ``fn(xp, *args) -> scalar`` where ``xp`` is an array namespace
(:mod:`benchmarks.namespaces`): NumPy for mooncake_py (and for the primal timing),
autograd.numpy, jax.numpy or the torch adapter. ``make_inputs(rng)`` returns the float64
arguments, sized as in Mooncake.jl's ``bench/run_benchmarks.jl``; ``argnums`` says which of them
are differentiated (the others, like the Turing case's data, are constants).

The code is what a NumPy user would write, loops and all: the point of the suite is how each
framework copes with ordinary code, not with code rewritten for it.

Example:
    >>> import numpy as np
    >>> from benchmarks.suite import CASES
    >>> case = CASES["sum_sin_1000"]
    >>> args = case.make_inputs(np.random.default_rng(0))
    >>> bool(abs(case.fn(np, *args) - np.sum(np.sin(args[0]))) < 1e-12)
    True
"""
import functools
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

LOG_2PI = math.log(2.0 * math.pi)


@dataclass(frozen=True)
class Case:
    """One benchmark: ``fn(xp, *args)``, its inputs, and which inputs are differentiated.

    ``unsupported`` maps a framework name to the reason it cannot run this code as written; the
    harness still tries, and prints the reason only if the attempt fails. ``mutates`` marks code
    that writes into arrays.
    """
    name: str
    fn: Callable
    make_inputs: Callable
    argnums: tuple = (0,)
    unsupported: dict = field(default_factory=dict)
    mutates: bool = False

    def bind(self, xp):
        """``fn`` with the namespace fixed: ``case.bind(np)(*args)``."""
        return functools.partial(self.fn, xp)

    def closure(self, xp, args):
        """``(g, diff)`` with ``g(*diff) == fn(xp, *args)``: ``diff`` are the differentiated
        arguments, and the others are fixed inside ``g``."""
        diff = tuple(args[i] for i in self.argnums)
        fn, nums = self.fn, self.argnums

        def g(*d):
            full = list(args)
            for i, v in zip(nums, d):
                full[i] = v
            return fn(xp, *full)
        g.__name__ = g.__qualname__ = self.name
        return g, diff


# --- the functions ---------------------------------------------------------------------------

def sum_1000(xp, x):
    return xp.sum(x)


def _sum_1000(xp, x):
    s = 0.0
    for i in range(len(x)):
        s += x[i]
    return s


def sum_sin_1000(xp, x):
    return xp.sum(xp.sin(x))


def _sum_sin_1000(xp, x):
    s = 0.0
    for i in range(len(x)):
        s += xp.sin(x[i])
    return s


def kron_sum(xp, a, b):
    return xp.sum(xp.kron(a, b))


def kron_view_sum(xp, a, b):
    return kron_sum(xp, a[:20, :20], xp.triu(b))


def naive_map_sin_cos_exp(xp, x):
    # Allocate, then write element by element: the honest translation of Julia's `similar`.
    y = xp.empty_like(x)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            y[i, j] = xp.sin(xp.cos(xp.exp(x[i, j])))
    return xp.sum(y)


def map_sin_cos_exp(xp, x):
    y = xp.stack([xp.sin(xp.cos(xp.exp(v))) for v in x.ravel()]).reshape(x.shape)
    return xp.sum(y)


def broadcast_sin_cos_exp(xp, x):
    return xp.sum(xp.sin(xp.cos(xp.exp(x))))


def simple_mlp(xp, W2, W1, Y, X):
    h = xp.maximum(W1 @ X, 0.0)
    r = Y - W2 @ h
    return xp.sum(r ** 2)


def gp_lml(xp, x, y, s):
    """Log marginal likelihood of ``y`` under a GP with a unit squared-exponential kernel on
    inputs ``x`` and Gaussian noise of variance ``s``."""
    n = len(x)
    d = x[:, None] - x[None, :]
    K = xp.exp(-0.5 * d ** 2) + s * xp.eye(n)
    L = xp.linalg.cholesky(K)
    a = xp.linalg.solve_triangular(L, y, lower=True)
    return -0.5 * xp.sum(a ** 2) - xp.sum(xp.log(xp.diag(L))) - 0.5 * n * LOG_2PI


# Prior of both parameters: Normal(1, 2) truncated to [0.1, 10]; sampled in unconstrained space.
_TN_MU, _TN_SIGMA, _TN_LO, _TN_HI = 1.0, 2.0, 0.1, 10.0


def _truncated_normal_logpdf(xp, v):
    z = (v - _TN_MU) / _TN_SIGMA
    bounds = xp.special.ndtr(xp.asarray([(_TN_LO - _TN_MU) / _TN_SIGMA,
                                         (_TN_HI - _TN_MU) / _TN_SIGMA]))
    return -0.5 * z ** 2 - 0.5 * LOG_2PI - math.log(_TN_SIGMA) - xp.log(bounds[1] - bounds[0])


def _to_interval(xp, u):
    """``(v, log|dv/du|)`` for the logistic map of ``u ∈ ℝ`` onto ``(_TN_LO, _TN_HI)``."""
    p = 1.0 / (1.0 + xp.exp(-u))
    v = _TN_LO + (_TN_HI - _TN_LO) * p
    return v, math.log(_TN_HI - _TN_LO) + xp.log(p) + xp.log1p(-p)


def turing_broadcast_benchmark(xp, theta, data):
    """Log joint of ``μ, σ ~ truncated(Normal(1, 2), 0.1, 10)``, ``data .~ LogNormal(μ, σ)``,
    at unconstrained parameters ``theta`` (as Turing's linked ``LogDensityFunction``)."""
    mu, log_jac_mu = _to_interval(xp, theta[0])
    sigma, log_jac_sigma = _to_interval(xp, theta[1])
    prior = (_truncated_normal_logpdf(xp, mu) + log_jac_mu
             + _truncated_normal_logpdf(xp, sigma) + log_jac_sigma)
    logx = xp.log(data)
    loglik = xp.sum(-logx - xp.log(sigma) - 0.5 * LOG_2PI - (logx - mu) ** 2 / (2 * sigma ** 2))
    return prior + loglik


def large_single_block(xp, x):
    y, a = x[0], x[1]
    for _ in range(400):
        y = y * a
    return y


# --- inputs ----------------------------------------------------------------------------------

def _gp_inputs(rng):
    x = 0.2 * np.arange(128.0)
    s = np.float64(1.0)
    K = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2) + s * np.eye(128)
    y = np.linalg.cholesky(K) @ rng.standard_normal(128)
    return x, y, s


def _randn(*shapes):
    return lambda rng: tuple(rng.standard_normal(s) for s in shapes)


_IMMUTABLE = "JAX arrays are immutable: the case writes y[i, j] = ... into an allocated array"
_AG_WRITE = "autograd cannot differentiate writes into an array (y[i, j] = ...)"

CASES = {c.name: c for c in [
    Case("sum_1000", sum_1000, _randn(1000)),
    Case("_sum_1000", _sum_1000, _randn(1000)),
    Case("sum_sin_1000", sum_sin_1000, _randn(1000)),
    Case("_sum_sin_1000", _sum_sin_1000, _randn(1000)),
    Case("kron_sum", kron_sum, _randn((20, 20), (40, 40)), (0, 1)),
    Case("kron_view_sum", kron_view_sum, _randn((40, 30), (40, 40)), (0, 1)),
    Case("naive_map_sin_cos_exp", naive_map_sin_cos_exp, _randn((10, 10)),
         unsupported={"jax": _IMMUTABLE, "autograd": _AG_WRITE}, mutates=True),
    Case("map_sin_cos_exp", map_sin_cos_exp, _randn((10, 10))),
    Case("broadcast_sin_cos_exp", broadcast_sin_cos_exp, _randn((10, 10))),
    Case("simple_mlp", simple_mlp, _randn((128, 256), (256, 128), (128, 70), (128, 70)),
         (0, 1, 2, 3)),
    Case("gp_lml", gp_lml, _gp_inputs, (0, 1, 2)),
    Case("turing_broadcast_benchmark", turing_broadcast_benchmark,
         lambda rng: (rng.standard_normal(2), rng.lognormal(1.5, 0.5, 100_000))),
    Case("large_single_block", large_single_block, lambda rng: (np.array([0.9, 0.99]),)),
]}
