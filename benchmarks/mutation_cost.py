"""What writing into arrays costs: gradient (and HVP) time over primal time for write loops.

``python -m benchmarks.mutation_cost [--quick]`` prints, for a few loops that write element by
element into a preallocated array, the primal time, the gradient time, the number of recorded
ops and writes, gradient / primal and µs per recorded op. Compare the per-op cost with the
scalar loop of ``benchmarks.overhead`` (``s = s + x[i]``, no writes): a write is a recorded op
like any other, plus a copy of the region it overwrites (O(region), here one element).
"""
import argparse

import numpy as np

import mooncake_py as mp

from .suite import naive_map_sin_cos_exp
from .timing import measure, format_time

N = 1000


def write_loop(x):
    """1000 one-element writes, each of a value computed from x: y[i] = sin(x[i]) * x[i]."""
    y = np.empty_like(x)
    for i in range(len(x)):
        y[i] = np.sin(x[i]) * x[i]
    return np.sum(y)


def cumsum_loop(x):
    """A running sum written in place: c[i] += c[i - 1] (each read of c[i - 1] sees the write)."""
    c = x.copy()
    for i in range(1, len(c)):
        c[i] += c[i - 1]
    return np.sum(c * c)


def naive_map(x):
    return naive_map_sin_cos_exp(np, x)


CASES = [
    ("y = empty_like(x); y[i] = sin(x[i]) * x[i], n=1000", write_loop, (N,)),
    ("c = x.copy(); c[i] += c[i-1], n=1000", cumsum_loop, (N,)),
    ("naive_map_sin_cos_exp (suite), 10x10", naive_map, (10, 10)),
]


def counts(f, x):
    """(recorded ops, of which writes) of ``f(x)`` on a tape, the input not counted."""
    from mooncake_py.tape.tape import _Write
    with mp.Tape() as tape:
        f(tape.track(x))
    return len(tape) - 1, sum(type(p) is _Write for p in tape._pullbacks)


def measure_case(f, shape, budget, hvp=True, seed=0):
    rng = np.random.default_rng(seed)
    x, v = rng.standard_normal(shape), rng.standard_normal(shape)
    primal = measure(lambda: f(x.copy()), budget)["median_s"]
    grad = measure(lambda: mp.grad(f)(x.copy()), budget)["median_s"]
    ops, writes = counts(f, x.copy())
    row = {"primal_s": primal, "gradient_s": grad, "ops": ops, "writes": writes,
           "ratio": grad / primal, "us_per_op": grad / ops * 1e6}
    if hvp:
        row["hvp_s"] = measure(lambda: mp.hvp(f)(x.copy(), v), budget)["median_s"]
    return row


def table(rows):
    head = ["Case", "Primal", "Gradient", "Ops (writes)", "µs/op", "Gradient/primal",
            "HVP/gradient"]
    lines = ["| " + " | ".join(head) + " |", "|:---|" + "---:|" * (len(head) - 1)]
    for name, r in rows:
        hv = f"{r['hvp_s'] / r['gradient_s']:.3g}" if "hvp_s" in r else "-"
        lines.append(f"| {name} | {format_time(r['primal_s'])} | {format_time(r['gradient_s'])} "
                     f"| {r['ops']} ({r['writes']}) | {r['us_per_op']:.3g} | {r['ratio']:.3g} "
                     f"| {hv} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.mutation_cost", description=__doc__)
    p.add_argument("--quick", action="store_true", help="tiny time budget, no HVPs")
    a = p.parse_args(argv)
    budget = 0.02 if a.quick else 0.5
    rows = [(name, measure_case(f, shape, budget, hvp=not a.quick)) for name, f, shape in CASES]
    print(table(rows))
    return rows


if __name__ == "__main__":
    main()
