"""What one recorded operation costs: mooncake_py's per-op tape overhead.

``python -m benchmarks.overhead [--quick]`` prints, for a scalar loop (``s = s + x[i]``, 1000
iterations: 2000 recorded ops, every one tiny, so the time is all overhead) and for
``np.sum(np.sin(x))`` at n = 1000 and 10⁶ (2 ops, so at 10⁶ the time is NumPy's kernels): the
primal time, the gradient time, the number of recorded ops, the gradient time per op, the extra time
per op over the primal, and gradient / primal. The design target (DESIGN.md §7) is about 1 µs
per recorded op (recording plus its share of the reverse sweep) and, for large arrays, a
gradient within about 3× the primal.
"""
import argparse
import sys

import numpy as np

import mooncake_py as mp

from .timing import measure, format_time


def scalar_loop(x):
    s = 0.0
    for i in range(1000):
        s = s + x[i]
    return s


def sum_sin(x):
    return np.sum(np.sin(x))


CASES = [
    ("scalar loop s = s + x[i], n=1000", scalar_loop, 1000),
    ("np.sum(np.sin(x)), n=1000", sum_sin, 1000),
    ("np.sum(np.sin(x)), n=10^6", sum_sin, 10 ** 6),
]


def recorded_ops(f, x):
    """How many operations ``f(x)`` records on a tape (the input itself not counted)."""
    with mp.Tape() as tape:
        f(tape.track(x))
    return len(tape) - 1


def measure_case(f, n, budget, seed=0):
    """Timings of one case as a dict (seconds, and per-op microseconds)."""
    x = np.random.default_rng(seed).standard_normal(n)
    g = mp.grad(f)
    primal = measure(lambda: f(x), budget)["median_s"]
    grad = measure(lambda: g(x), budget)["median_s"]
    ops = recorded_ops(f, x)
    return {"n": n, "primal_s": primal, "gradient_s": grad, "ops": ops,
            "us_per_op": grad / ops * 1e6, "extra_us_per_op": (grad - primal) / ops * 1e6,
            "ratio": grad / primal}


def table(rows):
    head = ["Case", "Primal", "Gradient", "Ops", "µs/op", "extra µs/op", "Gradient/primal"]
    lines = ["| " + " | ".join(head) + " |", "|:---|" + "---:|" * (len(head) - 1)]
    for name, r in rows:
        lines.append(f"| {name} | {format_time(r['primal_s'])} | {format_time(r['gradient_s'])} "
                     f"| {r['ops']} | {r['us_per_op']:.3g} | {r['extra_us_per_op']:.3g} "
                     f"| {r['ratio']:.3g} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.overhead", description=__doc__)
    p.add_argument("--quick", action="store_true", help="tiny time budget, skip n = 10^6")
    p.add_argument("--budget", type=float, default=None, help="seconds per measurement")
    a = p.parse_args(argv)
    budget = a.budget if a.budget is not None else (0.02 if a.quick else 0.5)
    rows = [(name, measure_case(f, n, budget)) for name, f, n in CASES
            if not (a.quick and n > 10 ** 4)]
    print(table(rows))
    return rows


if __name__ == "__main__":
    main()
    sys.exit(0)
