"""Compiled replay against Python replay, plain recording and the NumPy primal.

``python -m benchmarks.compiled_replay [--quick]`` prints, for the scalar-loop rows of the suite
(``_sum_1000``, ``_sum_sin_1000``, ``large_single_block``), the time of one call of: the primal
``f`` on NumPy values; ``mp.value_and_grad(f)`` (unprepared: records every call);
``mp.value_and_gradient`` with a cache prepared with ``replay=True`` (Python replay) and with
``compile=True`` (the numba kernel of mooncake_py/replay/compiled.py). Then the same for
Hessian-vector products: ``mp.hvp(f)`` (unprepared), ``mp.value_and_hvp`` with a cache prepared with
``replay=True`` and with ``compile=True`` (the forward-over-reverse kernel), and the ratio of the
compiled HVP to the compiled gradient. Then the suite rows whose plans are mixed (array steps
around a long scalar run: ``map_sin_cos_exp``, ``turing_broadcast_benchmark``): primal, Python
replay and the mixed compiled plan. The variants of a table are timed back to back, round after
round, and each figure is the minimum over rounds (so machine noise hits all alike). Then the
per-case cost of encoding a plan for each kernel, and each kernel's load time in fresh processes:
cold (empty cache directory: numba compiles) and warm (loaded from disk).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from time import perf_counter

import numpy as np

import mooncake_py as mp
from mooncake_py.replay import compiled
from mooncake_py.replay.plans import _split_leaves

from .suite import CASES
from .timing import format_time

NAMES = ("_sum_1000", "_sum_sin_1000", "large_single_block")
MIXED = ("map_sin_cos_exp", "turing_broadcast_benchmark")  # plans with compiled segments


def _per_call(fn, number):
    t0 = perf_counter()
    for _ in range(number):
        fn()
    return (perf_counter() - t0) / number


def _best(variants, rounds):
    numbers = {k: max(1, int(2e-3 / max(_per_call(v, 1), 1e-7))) for k, v in variants.items()}
    best = {k: float("inf") for k in variants}
    for _ in range(rounds):
        for k, v in variants.items():
            best[k] = min(best[k], _per_call(v, numbers[k]))
    return best


def _encode_time(plan, leaves, dual):
    t0 = perf_counter()
    compiled.compile_plan(plan, leaves, dual)
    return perf_counter() - t0


def time_case(name, rounds):
    """Minimum seconds per call of each variant, and the plan-encoding time (see above)."""
    case = CASES[name]
    f = lambda x: case.fn(np, x)  # noqa: E731
    x = case.make_inputs(np.random.default_rng(0))[0]
    vg = mp.value_and_grad(f)
    rc = mp.prepare_gradient_cache(f, x)
    cc = mp.prepare_gradient_cache(f, x, compile=True)
    for c in (rc, cc):
        mp.value_and_gradient(c, f, x)
        mp.value_and_gradient(c, f, x)
    assert type(cc._replay.plan) is compiled.CompiledPlan
    variants = {"primal": lambda: f(x), "unprepared": lambda: vg(x),
                "replay": lambda: mp.value_and_gradient(rc, f, x),
                "compiled": lambda: mp.value_and_gradient(cc, f, x)}
    best = _best(variants, rounds)
    plan = cc._replay.plan.plan
    best["encode"] = _encode_time(plan, _split_leaves((x,), (0,))[0], False)
    best["steps"] = len(plan.steps)
    return best


def time_case_hvp(name, rounds):
    """As :func:`time_case`, for Hessian-vector products (and the compiled gradient again, for
    the ratio)."""
    case = CASES[name]
    f = lambda x: case.fn(np, x)  # noqa: E731
    x = case.make_inputs(np.random.default_rng(0))[0]
    v = np.random.default_rng(1).standard_normal(x.shape)
    hv = mp.hvp(f)
    rc = mp.prepare_hvp_cache(f, x)
    cc = mp.prepare_hvp_cache(f, x, compile=True)
    gc = mp.prepare_gradient_cache(f, x, compile=True)
    for _ in range(2):
        for c in (rc, cc):
            mp.value_and_hvp(c, f, v, x)
        mp.value_and_gradient(gc, f, x)
    assert type(cc._replay.plan) is compiled.CompiledHVPPlan
    variants = {"unprepared": lambda: hv(x, v), "replay": lambda: mp.value_and_hvp(rc, f, v, x),
                "compiled": lambda: mp.value_and_hvp(cc, f, v, x),
                "grad": lambda: mp.value_and_gradient(gc, f, x)}
    best = _best(variants, rounds)
    seeded = mp.forward_api._seed(f, (x,), (v,), False)[1]
    best["encode"] = _encode_time(cc._replay.plan.plan, _split_leaves(seeded, (0,), True)[0],
                                  True)
    return best


def time_case_mixed(name, rounds):
    """Gradients of a suite case whose plan mixes array steps with a long scalar run: primal,
    Python replay and the mixed compiled plan; the time to split and encode the plan."""
    from .namespaces import numpy_namespace
    case = CASES[name]
    g, diff = case.closure(numpy_namespace(), case.make_inputs(np.random.default_rng(0)))
    rc = mp.prepare_gradient_cache(g, *diff)
    cc = mp.prepare_gradient_cache(g, *diff, compile=True)
    for _ in range(2):
        for c in (rc, cc):
            mp.value_and_gradient(c, g, *diff)
    plan = cc._replay.plan
    assert type(plan) is compiled.MixedPlan
    best = _best({"primal": lambda: g(*diff), "replay": lambda: mp.value_and_gradient(rc, g, *diff),
                  "compiled": lambda: mp.value_and_gradient(cc, g, *diff)}, rounds)
    leaves = _split_leaves(diff, tuple(range(len(diff))))[0]
    t0 = perf_counter()
    compiled.mix_plan(plan.plan, leaves)
    best["encode"] = perf_counter() - t0
    best["steps"] = len(plan.plan.steps)
    best["segment"] = sum(len(seg.code[0]) for seg in plan.segments)
    return best


_CHILD = ("import json, sys, time; t = time.perf_counter(); from mooncake_py.replay import compiled; "
          "getattr(compiled, sys.argv[1])(); print(json.dumps(time.perf_counter() - t))")


def kernel_load_times(which="kernel"):
    """(cold, warm) seconds for the first request of a kernel (``"kernel"``: the gradient's,
    ``"hvp_kernel"``) in a fresh process (numba import included), with an empty cache directory
    and then with the one the first run filled."""
    out = []
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, MOONCAKE_PY_CACHE_DIR=d)
        for _ in range(2):
            r = subprocess.run([sys.executable, "-c", _CHILD, which], env=env,
                               capture_output=True, text=True, check=True)
            out.append(json.loads(r.stdout.strip().splitlines()[-1]))
    return tuple(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    a = p.parse_args(argv)
    rounds = 3 if a.quick else 30
    cols = ("primal", "unprepared", "replay", "compiled")
    print(f"{'case':<20} {'steps':>6} " + " ".join(f"{c:>11}" for c in cols) +
          f" {'replay/comp':>11} {'encode':>9}")
    for name in NAMES:
        b = time_case(name, rounds)
        print(f"{name:<20} {b['steps']:>6} " + " ".join(f"{format_time(b[c]):>11}" for c in cols)
              + f" {b['replay'] / b['compiled']:>10.0f}× {format_time(b['encode']):>9}")
    print()
    cols = ("unprepared", "replay", "compiled")
    print(f"{'HVP case':<20} " + " ".join(f"{c:>11}" for c in cols) +
          f" {'replay/comp':>11} {'hvp/grad':>9} {'encode':>9}")
    for name in NAMES:
        b = time_case_hvp(name, rounds)
        print(f"{name:<20} " + " ".join(f"{format_time(b[c]):>11}" for c in cols)
              + f" {b['replay'] / b['compiled']:>10.0f}× {b['compiled'] / b['grad']:>8.2f}×"
              f" {format_time(b['encode']):>9}")
    print()
    cols = ("primal", "replay", "compiled")
    print(f"{'mixed case':<28} {'steps':>6} {'in seg.':>7} " + " ".join(f"{c:>11}" for c in cols)
          + f" {'replay/comp':>11} {'encode':>9}")
    for name in MIXED:
        b = time_case_mixed(name, rounds)
        print(f"{name:<28} {b['steps']:>6} {b['segment']:>7} "
              + " ".join(f"{format_time(b[c]):>11}" for c in cols)
              + f" {b['replay'] / b['compiled']:>10.1f}× {format_time(b['encode']):>9}")
    for which in ("kernel", "hvp_kernel", "segment_kernels"):
        cold, warm = kernel_load_times(which)
        print(f"{which} load in a fresh process (numba import included): "
              f"cold {format_time(cold)}, warm {format_time(warm)}")


if __name__ == "__main__":
    main(sys.argv[1:])
