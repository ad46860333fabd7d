"""What one recorded operation costs: mooncake_py's per-op tape overhead.

``python -m benchmarks.overhead [--quick]`` prints, for scalar loops (``s = s + x[i]`` and
``s = s + x[i]*x[i]``, 1000 iterations: 2000 and 4000 recorded ops, every one tiny, so the time
is all overhead) and for
``np.sum(np.sin(x))`` at n = 1000 and 10⁶ (2 ops, so at 10⁶ the time is NumPy's kernels): the
primal time, the gradient time, the number of recorded ops, the gradient time per op, the extra time
per op over the primal, and gradient / primal; then the fixed cost of one ``grad``,
``value_and_grad`` and ``hvp`` call on a 3-vector. The design target (DESIGN.md §7) is about 1 µs
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


def scalar_loop_squares(x):
    s = 0.0
    for i in range(1000):
        s = s + x[i] * x[i]
    return s


def sum_sin(x):
    return np.sum(np.sin(x))


CASES = [
    ("scalar loop s = s + x[i], n=1000", scalar_loop, 1000),
    ("scalar loop s = s + x[i]*x[i], n=1000", scalar_loop_squares, 1000),
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


def per_call(budget):
    """Fixed cost of one call on a tiny input (3-vector): the API's own bookkeeping
    (arguments, tape set-up, output checks, the gradient's copy), and prepared caches with
    and without replay, as ``(name, seconds)``."""
    x = np.array([1.0, 2.0, 3.0])
    g, vg, h = mp.grad(np.sum), mp.value_and_grad(np.sum), mp.hvp(lambda x: np.sum(x * x))
    replayed = mp.prepare_gradient_cache(np.sum, x)
    recorded = mp.prepare_gradient_cache(np.sum, x, replay=False)
    loop = mp.prepare_gradient_cache(scalar_loop_squares, np.ones(1000))
    loop_rec = mp.prepare_gradient_cache(scalar_loop_squares, np.ones(1000), replay=False)
    y = np.random.default_rng(0).standard_normal(1000)
    hloop = mp.hvp(scalar_loop_squares)
    rows = [("np.sum(x) (the primal)", lambda: np.sum(x)), ("mp.grad(np.sum)(x)", lambda: g(x)),
            ("mp.value_and_grad(np.sum)(x)", lambda: vg(x)),
            ("mp.hvp(lambda x: np.sum(x * x))(x, x)", lambda: h(x, x)),
            ("value_and_gradient, prepared np.sum, replay=False",
             lambda: mp.value_and_gradient(recorded, np.sum, x)),
            ("value_and_gradient, prepared np.sum, replayed",
             lambda: mp.value_and_gradient(replayed, np.sum, x)),
            ("value_and_gradient, s = s + x[i]*x[i] (n=1000), replay=False",
             lambda: mp.value_and_gradient(loop_rec, scalar_loop_squares, y)),
            ("value_and_gradient, s = s + x[i]*x[i] (n=1000), replayed",
             lambda: mp.value_and_gradient(loop, scalar_loop_squares, y)),
            # forward-over-reverse of a scalar loop (mixed/dual_scalars.py): 4000 recorded ops
            ("mp.hvp, s = s + x[i]*x[i] (n=1000)", lambda: hloop(y, y))]
    return [(name, measure(fn, budget)["median_s"]) for name, fn in rows]


def per_call_table(rows):
    lines = ["| Call (x a 3-vector unless said) | Time |", "|:---|---:|"]
    lines += [f"| {name} | {format_time(t)} |" for name, t in rows]
    return "\n".join(lines)


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
    print()
    print(per_call_table(per_call(budget)))
    return rows


if __name__ == "__main__":
    main()
    sys.exit(0)
