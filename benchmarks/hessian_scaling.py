"""How the cost of a full Hessian grows with n: mooncake_py vs jax.hessian vs torch.func.hessian.

Two functions of ``x ∈ ℝⁿ``: ``dense`` (``Σ tanh(A x)``, a dense Hessian ``Aᵀ diag(·) A``)
and ``elementwise`` (``Σ sin(x)² + exp(x)``, a diagonal Hessian, where a framework that exploits
nothing still pays for n columns). mooncake_py's ``hessian`` is used only if it exists.
"""
import numpy as np

from .frameworks import namespace, available, NotApplicable
from .timing import measure


def dense(xp, x, A):
    return xp.sum(xp.tanh(A @ x))


def elementwise(xp, x, A):
    return xp.sum(xp.sin(x) ** 2 + xp.exp(x))


FUNCTIONS = {"dense": dense, "elementwise": elementwise}


def _mp(fn, x, A):
    import mooncake_py as mp
    if not hasattr(mp, "hessian"):
        raise NotApplicable("mooncake_py has no hessian yet")
    xp = namespace("mooncake_py")
    h = mp.hessian(lambda x: fn(xp, x, A))
    return lambda: h(x)


def _jax(jit):
    def build(fn, x, A):
        import jax
        xp = namespace("jax")
        h = jax.hessian(lambda x, A: fn(xp, x, A))  # A is an argument: jit must not fold it
        h = jax.jit(h) if jit else h
        jx, jA = xp.asarray(x), xp.asarray(A)
        return lambda: jax.block_until_ready(h(jx, jA))
    return build


def _torch(fn, x, A):
    import torch
    import torch.func
    xp = namespace("torch")
    tx, tA = torch.as_tensor(x), torch.as_tensor(A)
    h = torch.func.hessian(lambda x: fn(xp, x, tA))
    return lambda: h(tx)


METHODS = [("mooncake_py", "mooncake_py", _mp), ("jax", "jax", _jax(False)),
           ("jax.jit", "jax", _jax(True)), ("torch.func", "torch", _torch)]


def run(sizes, frameworks, budget, seed=0, log=print):
    """Time every method on both functions for each n in ``sizes``; a list of result dicts."""
    out = []
    rng = np.random.default_rng(seed)
    for name, fn in FUNCTIONS.items():
        for n in sizes:
            x = rng.standard_normal(n) * 0.5
            A = rng.standard_normal((n, n)) / np.sqrt(n)
            for column, fw, build in METHODS:
                r = {"function": name, "n": n, "column": column, "framework": fw}
                if fw not in frameworks:
                    continue
                why = available(fw)
                if why:
                    out.append(dict(r, status="missing", detail=why))
                    continue
                try:
                    r.update(measure(build(fn, x, A), budget, min_samples=1), status="ok",
                             detail="")
                except NotApplicable as e:
                    r.update(status="n/a", detail=str(e))
                except Exception as e:  # report, never crash the run
                    r.update(status="error", detail=f"{type(e).__name__}: {str(e)[:200]}")
                log(f"  hessian {name:12s} n={n:<5d} {column:12s} "
                    + (f"{r['median_s'] * 1e3:10.3f} ms" if r["status"] == "ok"
                       else f"{r['status']}: {r['detail'][:60]}"))
                out.append(r)
    return out
