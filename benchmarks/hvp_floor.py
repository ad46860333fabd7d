"""How low can an HVP/gradient ratio go? Hand-written NumPy gradients and HVPs of suite cases.

The speed targets ask for prepared HVPs at most 3× their prepared gradient. For a function whose cost is
matrix products that bound leaves no room: a gradient of ``C = A @ B`` costs three products
(``A B``, ``C̄ Bᵀ``, ``Aᵀ C̄``), and its Hessian-vector product, by any method that also returns the
gradient, adds the six products of the tangent (``Ȧ B``, ``A Ḃ``, ``Ċ̄ Bᵀ``, ``C̄ Ḃᵀ``, ``Ȧᵀ C̄``,
``Aᵀ Ċ̄``): nine against three, and the product of dual numbers has no cheaper form (the rank of
multiplication in ℝ[ε]/ε² is three). This module times the best code a person would write by hand,
plain NumPy with no AD at all, for the gradient and the HVP (gradient included) of such cases,
interleaved in one process, and prints the ratio: the floor any AD tool's ratio sits on.

Run: ``python -m benchmarks.hvp_floor`` (``--budget`` seconds per timing, ``--rounds`` interleaved
rounds; the lowest median per column is reported).

Example:
    >>> import numpy as np
    >>> from benchmarks.hvp_floor import mlp_inputs, mlp_gradient, mlp_hvp
    >>> args, dirs = mlp_inputs(np.random.default_rng(0), scale=0.1)
    >>> g = mlp_gradient(*args)
    >>> hv_g, hv = mlp_hvp(args, dirs)
    >>> all(np.allclose(a, b) for a, b in zip(g, hv_g))
    True
"""
import argparse

import numpy as np

from .timing import format_time, measure


# --- simple_mlp: sum((Y - W2 @ relu(W1 @ X))²), gradient in all four arguments ----------------

def mlp_inputs(rng, scale=1.0):
    """``(args, directions)`` at the suite's sizes: W2 (128, 256), W1 (256, 128), Y, X (128, 70)."""
    shapes = [(128, 256), (256, 128), (128, 70), (128, 70)]
    args = tuple(scale * rng.standard_normal(s) for s in shapes)
    dirs = tuple(rng.standard_normal(s) for s in shapes)
    return args, dirs


def mlp_gradient(W2, W1, Y, X):
    """The gradient of ``simple_mlp`` by hand: six matrix products."""
    hp = W1 @ X
    mask = hp > 0
    h = hp * mask
    r2 = 2.0 * (Y - W2 @ h)  # ∂f/∂Y; ∂f/∂(W2 h) = -r2
    gh = (W2.T @ r2) * mask  # -∂f/∂hp
    return -(r2 @ h.T), -(gh @ X.T), r2, -(W1.T @ gh)


def mlp_hvp(args, dirs):
    """``(gradient, H·v)`` of ``simple_mlp`` by hand: the gradient's six products and twelve more
    for the tangent, fused where NumPy allows (``V1 X + W1 VX`` as one product of stacked
    operands costs a copy of each and measured no faster than two)."""
    W2, W1, Y, X = args
    V2, V1, VY, VX = dirs
    hp = W1 @ X
    mask = hp > 0
    h = hp * mask
    dh = (V1 @ X + W1 @ VX) * mask
    r2 = 2.0 * (Y - W2 @ h)
    dr2 = 2.0 * (VY - V2 @ h - W2 @ dh)
    gh = (W2.T @ r2) * mask
    dgh = (V2.T @ r2 + W2.T @ dr2) * mask
    grad = (-(r2 @ h.T), -(gh @ X.T), r2, -(W1.T @ gh))
    hv = (-(dr2 @ h.T + r2 @ dh.T), -(dgh @ X.T + gh @ VX.T), dr2, -(V1.T @ gh + W1.T @ dgh))
    return grad, hv


def _mlp_cells(rng):
    import mooncake_py as mp
    from .suite import simple_mlp

    args, dirs = mlp_inputs(rng)
    f = lambda *a: simple_mlp(np, *a)  # noqa: E731
    gc = mp.prepare_gradient_cache(f, *args)
    hc = mp.prepare_hvp_cache(f, *args)
    return {
        "hand gradient": lambda: mlp_gradient(*args),
        "hand HVP": lambda: mlp_hvp(args, dirs),
        "prepared gradient": lambda: mp.value_and_gradient(gc, f, *args),
        "prepared HVP": lambda: mp.value_and_hvp(hc, f, dirs, *args),
    }


CASES = {"simple_mlp": _mlp_cells}


def run(budget=0.3, rounds=3, seed=0, cases=None, echo=print):
    """``{case: {cell: lowest median seconds over the rounds}}``; prints a table per case."""
    out = {}
    for name in cases or CASES:
        cells = CASES[name](np.random.default_rng(seed))
        best = {}
        for _ in range(rounds):  # interleaved: a slow spell of the machine hits every cell
            for cell, fn in cells.items():
                t = measure(fn, budget)["median_s"]
                best[cell] = min(best.get(cell, t), t)
        out[name] = best
        echo(f"{name}:")
        for cell, t in best.items():
            echo(f"  {cell:<18} {format_time(t):>10}")
        echo(f"  hand HVP / hand gradient          {best['hand HVP'] / best['hand gradient']:.2f}×")
        echo(f"  prepared HVP / prepared gradient  "
             f"{best['prepared HVP'] / best['prepared gradient']:.2f}×")
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.hvp_floor",
                                description=__doc__.split("\n")[0])
    p.add_argument("--budget", type=float, default=0.3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cases", default=None, help="comma-separated (default: all)")
    a = p.parse_args(argv)
    run(a.budget, a.rounds, a.seed, a.cases.split(",") if a.cases else None)


if __name__ == "__main__":
    main()
