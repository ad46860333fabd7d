"""Fused numba dual kernels vs the NumPy-composition path, import time, compile latency.

Run: ``python benchmarks/kernels.py [--quick]``. Prints Markdown tables:

1. time per element of the forward rule (``np.op`` on DualArrays) and of the forward rule of the
   elementwise pullback (``ew_pullback`` on duals: the inner loop of an HVP), fused vs NumPy,
   for n = 10^3, 10^5, 10^7 (``--quick``: 10^3, 10^5);
2. an end-to-end Hessian-vector product (``jvp(grad(f))``) relative to the gradient;
3. the crossover size from which the fused path wins (the basis of
   ``mooncake_py.dual.elementwise.KERNEL_MIN_SIZE``);
4. ``import mooncake_py`` time, and the first-call latency of a kernel with a cold and a warm
   numba cache.
"""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, _ROOT)

from mooncake_py.dual import dual, elementwise as ew
from mooncake_py.rules.derivative_table import TABLE
from mooncake_py.rules.elementwise import ew_pullback


def best_time(fn, budget=0.3, max_reps=200):
    fn()  # warm-up (and kernel compilation)
    best, spent, reps = float("inf"), 0.0, 0
    while (spent < budget or reps < 3) and reps < max_reps:
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best, spent, reps = min(best, dt), spent + dt, reps + 1
    return best


# op name -> (table entry, builds the frule call, builds the pullback call)
def _cases(n, rng):
    x = rng.uniform(0.5, 2.0, n)
    w = rng.uniform(0.5, 2.0, n)
    v, u, gt = (rng.standard_normal(n) for _ in range(3))
    g = rng.standard_normal(n)

    def duals():
        d = dual(x, v)
        return d, dual(w, u, like=d), dual(g, gt, like=d)

    def unary(name):
        e = TABLE[name]
        y = e.ufunc(x)

        def fr():
            d, _, _ = duals()
            return lambda: e.ufunc(d)

        def pb():
            d, _, gd = duals()
            return lambda: ew_pullback(e, 0, gd, d, y)
        return fr, pb

    def binary(name, const=None):
        e = TABLE[name]
        y = e.ufunc(x, w if const is None else const)

        def fr():
            d, d2, _ = duals()
            return lambda: e.ufunc(d, d2 if const is None else const)

        def pb():
            d, d2, gd = duals()
            return lambda: ew_pullback(e, 0, gd, d, d2 if const is None else const, y)
        return fr, pb

    return {"sin": unary("sin"), "exp": unary("exp"), "tanh": unary("tanh"),
            "multiply (x*y)": binary("multiply"), "power (x**y)": binary("power"),
            "power (x**2)": binary("power", 2.0)}


_PROGRAMS = {  # op -> (frule program, pullback program), to say whether a kernel is used at all
    "sin": (("sin", "f", 0, (True,), None), ("sin", "p", 0, (True, True), None)),
    "exp": (("exp", "f", 0, (True,), None), ("exp", "p", 0, (True, True), None)),
    "tanh": (("tanh", "f", 0, (True,), None), ("tanh", "p", 0, (True, True), None)),
    "multiply (x*y)": (("multiply", "f", 0, (True, True), None),
                       ("multiply", "p", 0, (True, True, True), None)),
    "power (x**y)": (("power", "f", 0, (True, True), None),
                     ("power", "p", 0, (True, True, True), None)),
    "power (x**2)": (("power", "f", 0, (True, False), 2.0),
                     ("power", "p", 0, (True, True, False), 2.0)),
}


def _fused(op, which):
    name, kind, k, present, const_b = _PROGRAMS[op][which]
    return ew.program(TABLE[name], kind, k, present, const_b).fusible


def _compare(make):
    call = make()
    ew.USE_KERNELS, ew.KERNEL_MIN_SIZE = True, 0
    fused = best_time(call)
    ew.USE_KERNELS = False
    numpy = best_time(call)
    ew.USE_KERNELS, ew.KERNEL_MIN_SIZE = True, _THRESHOLD
    return fused, numpy


_THRESHOLD = ew.KERNEL_MIN_SIZE


def table_speed(sizes):
    rng = np.random.default_rng(0)
    rows = ["| op | n | frule fused ns/el | frule NumPy ns/el | speed-up | pullback fused ns/el "
            "| pullback NumPy ns/el | speed-up |", "|---|---|---|---|---|---|---|---|"]
    for n in sizes:
        for name, (fr, pb) in _cases(n, rng).items():
            f1, n1 = _compare(fr)
            f2, n2 = _compare(pb)
            s1 = f"{n1 / f1:.2f}x" if _fused(name, 0) else "no kernel (1 op)"
            s2 = f"{n2 / f2:.2f}x" if _fused(name, 1) else "no kernel (1 op)"
            rows.append(f"| {name} | {n:.0e} | {f1 / n * 1e9:.2f} | {n1 / n * 1e9:.2f} | "
                        f"{s1} | {f2 / n * 1e9:.2f} | {n2 / n * 1e9:.2f} | {s2} |")
    return "\n".join(rows)


def table_lanes(n, k):
    rng = np.random.default_rng(1)
    x = rng.uniform(0.5, 2.0, n)
    V = rng.standard_normal((k, n))
    G = rng.standard_normal(n)
    e = TABLE["tanh"]
    y = np.tanh(x)
    rows = [f"| lanes k={k}, n={n:.0e} | fused ms | NumPy ms | speed-up |", "|---|---|---|---|"]
    for label, make in [
            ("tanh frule", lambda: (lambda d: lambda: np.tanh(d))(dual(x, V, lanes=True))),
            ("tanh pullback", lambda: (lambda d: lambda: ew_pullback(
                e, 0, dual(G, V, like=d), d, y))(dual(x, V, lanes=True)))]:
        f, nn = _compare(make)
        rows.append(f"| {label} | {f * 1e3:.2f} | {nn * 1e3:.2f} | {nn / f:.2f}x |")
    return "\n".join(rows)


def crossover():
    """Smallest power-of-two size from which the fused path is faster, per op and rule."""
    rng = np.random.default_rng(2)
    rows = ["| op | frule crossover n | pullback crossover n |", "|---|---|---|"]
    sizes = [2 ** p for p in range(6, 18)]
    for name in ("sin", "exp", "tanh", "multiply (x*y)", "power (x**y)", "power (x**2)"):
        found = []
        for which in (0, 1):
            hit = None if _fused(name, which) else "no kernel"
            for n in sizes if hit is None else ():
                f, nn = _compare(_cases(n, rng)[name][which])
                if f < nn:
                    hit = n
                    break
            found.append(hit)
        rows.append(f"| {name} | {found[0]} | {found[1]} |")
    return "\n".join(rows)


def table_hvp(n):
    """End to end: ``jvp(grad(f))`` (forward-over-reverse) against ``grad(f)`` alone."""
    import mooncake_py as mp
    from mooncake_py.transforms.forward import jvp

    rng = np.random.default_rng(3)
    x, v = rng.uniform(-1, 1, n), rng.standard_normal(n)
    rows = [f"| f (n={n:.0e}) | grad ms | HVP fused ms | HVP NumPy ms | HVP/grad fused | "
            "HVP/grad NumPy |", "|---|---|---|---|---|---|"]
    for label, f in [("sum(tanh(x) * x**2)", lambda x: np.sum(np.tanh(x) * x ** 2)),
                     ("sum(exp(-x**2) * sin(x))", lambda x: np.sum(np.exp(-x ** 2) * np.sin(x))),
                     ("sum(log1p(exp(x)) - x / (1 + x*x))",
                      lambda x: np.sum(np.log1p(np.exp(x)) - x / (1 + x * x)))]:
        g = best_time(lambda: mp.grad(f)(x))
        h = best_time(lambda: jvp(mp.grad(f), (x,), (v,)))
        ew.USE_KERNELS = False
        hn = best_time(lambda: jvp(mp.grad(f), (x,), (v,)))
        ew.USE_KERNELS = True
        rows.append(f"| {label} | {g * 1e3:.2f} | {h * 1e3:.2f} | {hn * 1e3:.2f} | {h / g:.2f} | "
                    f"{hn / g:.2f} |")
    return "\n".join(rows)


_SNIPPET_IMPORT = """
import time, sys
t0 = time.perf_counter()
import mooncake_py
t1 = time.perf_counter()
import mooncake_py.transforms.forward
t2 = time.perf_counter()
print(t1 - t0, t2 - t0, 'numba' in sys.modules)
"""

_SNIPPET_FIRST_CALL = """
import time, numpy as np
from mooncake_py.dual import dual
x = dual(np.linspace(0.1, 1, 100000), np.ones(100000))
t0 = time.perf_counter()
np.tanh(x)
t1 = time.perf_counter()
np.arctan(x)
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def _run(snippet, env=None):
    out = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True,
                         env=env, cwd=_ROOT,
                         check=True)
    return [float(v) if v not in ("True", "False") else v == "True" for v in out.stdout.split()]


def table_latency():
    imp = min((_run(_SNIPPET_IMPORT) for _ in range(5)), key=lambda r: r[0])
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, MOONCAKE_PY_KERNEL_DIR=d)
        cold = _run(_SNIPPET_FIRST_CALL, env)
        warm = _run(_SNIPPET_FIRST_CALL, env)
    return "\n".join([
        "| measurement | seconds |", "|---|---|",
        f"| import mooncake_py | {imp[0]:.3f} |",
        f"| import mooncake_py + forward_api (numba imported: {imp[2]}) | {imp[1]:.3f} |",
        f"| first fused call, cold cache (numba import + init + compile) | {cold[0]:.3f} |",
        f"| next new kernel, cold cache (compile only) | {cold[1]:.3f} |",
        f"| first fused call, warm cache (numba import + init + load) | {warm[0]:.3f} |",
        f"| next new kernel, warm cache (load only) | {warm[1]:.3f} |"])


def main():
    quick = "--quick" in sys.argv
    sizes = (10 ** 3, 10 ** 5) if quick else (10 ** 3, 10 ** 5, 10 ** 7)
    print("## Fused kernels vs NumPy composition (float64, one direction)\n")
    print(table_speed(sizes))
    print("\n## Lanes\n")
    print(table_lanes(10 ** 5, 8))
    print("\n## End to end: Hessian-vector product by jvp(grad(f))\n")
    print(table_hvp(10 ** 6))
    print("\n## Crossover (fused faster from this size on)\n")
    print(crossover())
    print(f"\n(current KERNEL_MIN_SIZE = {_THRESHOLD})\n")
    print("## Import and compile latency\n")
    print(table_latency())


if __name__ == "__main__":
    main()
