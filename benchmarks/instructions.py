"""Instructions per call of the hot paths, counted by valgrind's callgrind (not timed).

``python -m benchmarks.instructions [CASE ...]`` runs each case in a child process under
``valgrind --tool=callgrind`` twice, with N and 2N calls after the same warm-up, and prints
(I(2N) - I(N)) / N: the instructions of one call, with the interpreter's start, the imports and
the warm-up cancelled out (both runs with one ``PYTHONHASHSEED``, 0 unless set, so that the
start is the same). Counts are steady to ~0.1% from run to run, where wall-clock times on
a shared machine move by tens of percent, so a change to a hot path is judged by them. Compare
counts taken from one directory only: CPython's method cache places an attribute lookup by
the address of its name, so the checkout's path (and any change to what is allocated before
the hot loop) moves which lookups collide, and ``per_op`` reads 4.29 M in one directory and
4.60 M in another on the same commit. A difference of a few percent on the scalar-loop cases
is then checked by wall clock, interleaved, before it is called a regression.

Cases: ``per_op`` (``grad`` of a 100-iteration ``s = s + x[i]*x[i]`` loop: 300 recorded ops),
``grad_sum3`` (``grad(np.sum)`` of a 3-vector: the fixed cost of a call), ``hvp__sum_1000`` (the
unprepared HVP of the suite's ``_sum_1000``), ``hvp__sum_sin_1000`` (the same of
``_sum_sin_1000``), ``gp_lml_prepared_hvp`` and ``gp_lml_prepared_grad`` (the suite's gp_lml,
prepared HVP and gradient caches),
``simple_mlp_prepared_hvp`` (the suite's simple_mlp, prepared HVP cache), ``hvp_kron_const``
(unprepared HVP of ``np.sum(np.kron(a, b))`` in ``a`` alone, ``b`` a constant 40 x 40: the
symbolic-zero-tangent path), ``rk4_grad`` / ``rk4_hvp`` (the
unprepared gradient and HVP of ``benchmarks.rk4``'s loss, 50 steps: scalar writes into an
array), ``prepared_grad_sum`` / ``prepared_hvp_sum`` (prepared gradient and HVP caches of the
suite's ``sum_1000``, ``np.sum`` of 1000: a plan's fixed cost per call) and
``compiled_grad_bsce`` / ``compiled_hvp_bsce`` (compile=True gradient and HVP caches of
``broadcast_sin_cos_exp`` on 10 x 10: one fused kernel, the rest overhead),
``compiled_grad_sumsin`` / ``compiled_hvp_sumsin`` (the same of ``sum_sin_1000``),
``compiled_grad_loop_CASE`` / ``compiled_hvp_loop_CASE`` for CASE ``_sum_1000``,
``_sum_sin_1000`` and ``large_single_block`` (compile=True caches of scalar loops: compiled
loops), each also with ``_interp`` appended (the same on the interpreter kernel),
``compiled_grad_mapsce`` / ``compiled_hvp_mapsce`` (the same for ``map_sin_cos_exp``: a mixed
plan, one compiled segment between rule calls) and ``compiled_grad_rk4`` / ``compiled_hvp_rk4``
(compile=True caches of ``benchmarks.rk4``'s loss, 50 steps: a mixed plan with writes). Needs
valgrind on PATH.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

_CHILD = r"""
import sys
import numpy as np
import mooncake_py as mp
from benchmarks.namespaces import numpy_namespace
from benchmarks.suite import CASES

xp = numpy_namespace()

case, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
if case == "per_op":
    def f(x):
        s = 0.0
        for i in range(100):
            s = s + x[i] * x[i]
        return s
    g, x = mp.grad(f), rng.standard_normal(100)
    call = lambda: g(x)
elif case == "grad_sum3":
    g, x = mp.grad(np.sum), np.ones(3)
    call = lambda: g(x)
elif case == "hvp__sum_1000":
    f = CASES["_sum_1000"].bind(xp)
    h, x, v = mp.hvp(f), rng.standard_normal(1000), rng.standard_normal(1000)
    call = lambda: h(x, v)
elif case == "hvp__sum_sin_1000":
    f = CASES["_sum_sin_1000"].bind(xp)
    h, x, v = mp.hvp(f), rng.standard_normal(1000), rng.standard_normal(1000)
    call = lambda: h(x, v)
elif case == "gp_lml_prepared_hvp":
    c = CASES["gp_lml"]
    args = c.make_inputs(rng)
    f = c.bind(xp)
    vs = tuple(np.ones_like(a) for a in args)
    cache = mp.prepare_hvp_cache(f, *args)
    call = lambda: mp.value_and_hvp(cache, f, vs, *args)
elif case == "gp_lml_prepared_grad":
    c = CASES["gp_lml"]
    args = c.make_inputs(rng)
    f = c.bind(xp)
    cache = mp.prepare_gradient_cache(f, *args)
    call = lambda: mp.value_and_gradient(cache, f, *args)
elif case == "simple_mlp_prepared_hvp":
    c = CASES["simple_mlp"]
    args = c.make_inputs(rng)
    f = c.bind(xp)
    vs = tuple(rng.standard_normal(a.shape) for a in args)
    cache = mp.prepare_hvp_cache(f, *args)
    call = lambda: mp.value_and_hvp(cache, f, vs, *args)
elif case == "hvp_kron_const":
    a, b, v = (rng.standard_normal(s) for s in ((20, 20), (40, 40), (20, 20)))
    h = mp.hvp(lambda a: np.sum(np.kron(a, b)))
    call = lambda: h(a, v)
elif case in ("prepared_grad_sum", "prepared_hvp_sum"):
    f = CASES["sum_1000"].bind(xp)
    x, v = rng.standard_normal(1000), rng.standard_normal(1000)
    if case == "prepared_grad_sum":
        cache = mp.prepare_gradient_cache(f, x)
        call = lambda: mp.value_and_gradient(cache, f, x)
    else:
        cache = mp.prepare_hvp_cache(f, x)
        call = lambda: mp.value_and_hvp(cache, f, v, x)
elif case in ("compiled_grad_bsce", "compiled_hvp_bsce"):
    import warnings
    warnings.simplefilter("ignore")
    f = CASES["broadcast_sin_cos_exp"].bind(xp)
    x, v = rng.standard_normal((10, 10)), rng.standard_normal((10, 10))
    if case == "compiled_grad_bsce":
        cache = mp.prepare_gradient_cache(f, x, compile=True)
        call = lambda: mp.value_and_gradient(cache, f, x)
    else:
        cache = mp.prepare_hvp_cache(f, x, compile=True)
        call = lambda: mp.value_and_hvp(cache, f, v, x)
elif case in ("compiled_grad_sumsin", "compiled_hvp_sumsin"):
    import warnings
    warnings.simplefilter("ignore")
    f = CASES["sum_sin_1000"].bind(xp)
    x, v = rng.standard_normal(1000), rng.standard_normal(1000)
    if case == "compiled_hvp_sumsin":
        cache = mp.prepare_hvp_cache(f, x, compile=True)
        call = lambda: mp.value_and_hvp(cache, f, v, x)
    else:
        cache = mp.prepare_gradient_cache(f, x, compile=True)
        call = lambda: mp.value_and_gradient(cache, f, x)
elif case.startswith(("compiled_grad_loop_", "compiled_hvp_loop_")):
    # compile=True caches of a scalar loop of the suite (_sum_1000, _sum_sin_1000,
    # large_single_block); the "_interp" variants keep the interpreter kernel (no compiled
    # loops), for comparison
    name = case.split("_loop_", 1)[1]
    if name.endswith("_interp"):
        import mooncake_py.replay.compiling as compiling
        compiling.reroll = lambda *a, **k: None
        name = name[:-len("_interp")]
    c = CASES[name]
    f = c.bind(xp)
    x = c.make_inputs(rng)[0]
    v = np.ones_like(x)
    if case.startswith("compiled_grad"):
        cache = mp.prepare_gradient_cache(f, x, compile=True)
        call = lambda: mp.value_and_gradient(cache, f, x)
    else:
        cache = mp.prepare_hvp_cache(f, x, compile=True)
        call = lambda: mp.value_and_hvp(cache, f, v, x)
elif case in ("compiled_grad_mapsce", "compiled_hvp_mapsce"):
    import warnings
    warnings.simplefilter("ignore")
    f = CASES["map_sin_cos_exp"].bind(xp)
    x, v = rng.standard_normal((10, 10)), rng.standard_normal((10, 10))
    if case == "compiled_grad_mapsce":
        cache = mp.prepare_gradient_cache(f, x, compile=True)
        call = lambda: mp.value_and_gradient(cache, f, x)
    else:
        cache = mp.prepare_hvp_cache(f, x, compile=True)
        call = lambda: mp.value_and_hvp(cache, f, v, x)
elif case in ("compiled_grad_rk4", "compiled_hvp_rk4"):
    import warnings
    warnings.simplefilter("ignore")
    from benchmarks.rk4 import make_rk4
    f = make_rk4(50)
    th, v = np.array([1.1, 0.4, 0.1, 0.4]), np.array([1.0, -0.5, 0.25, 2.0])
    if case == "compiled_grad_rk4":
        cache = mp.prepare_gradient_cache(f, th, compile=True)
        call = lambda: mp.value_and_gradient(cache, f, th)
    else:
        cache = mp.prepare_hvp_cache(f, th, compile=True)
        call = lambda: mp.value_and_hvp(cache, f, v, th)
elif case in ("rk4_grad", "rk4_hvp"):
    from benchmarks.rk4 import make_rk4
    f = make_rk4(50)
    th, v = np.array([1.1, 0.4, 0.1, 0.4]), np.array([1.0, -0.5, 0.25, 2.0])
    g, h = mp.value_and_grad(f), mp.hvp(f)
    call = (lambda: g(th)) if case == "rk4_grad" else (lambda: h(th, v))
else:
    raise SystemExit(f"unknown case {case}")
for _ in range(5):
    call()
if case.startswith("compiled_"):
    # numba's objects make the heap large: a full collection falling in one of the two counted
    # runs and not the other would swamp the difference, so the warm heap is frozen
    import gc
    gc.collect()
    gc.freeze()
for _ in range(n):
    call()
"""

CASES = ("per_op", "grad_sum3", "hvp__sum_1000", "hvp__sum_sin_1000", "gp_lml_prepared_hvp",
         "gp_lml_prepared_grad", "simple_mlp_prepared_hvp", "hvp_kron_const",
         "rk4_grad", "rk4_hvp", "prepared_grad_sum", "prepared_hvp_sum", "compiled_grad_bsce",
         "compiled_hvp_bsce", "compiled_grad_sumsin", "compiled_hvp_sumsin", "compiled_grad_mapsce",
         "compiled_hvp_mapsce", "compiled_grad_rk4", "compiled_hvp_rk4") + tuple(
             f"compiled_{q}_loop_{name}{v}" for q in ("grad", "hvp")
             for name in ("_sum_1000", "_sum_sin_1000", "large_single_block")
             for v in ("", "_interp"))
REPS = {"per_op": 20, "grad_sum3": 200, "hvp__sum_1000": 5, "hvp__sum_sin_1000": 5,
        "gp_lml_prepared_hvp": 5,
        "gp_lml_prepared_grad": 10, "simple_mlp_prepared_hvp": 5,
        "hvp_kron_const": 5, "rk4_grad": 3, "rk4_hvp": 2, "prepared_grad_sum": 100,
        "prepared_hvp_sum": 100, "compiled_grad_bsce": 100, "compiled_hvp_bsce": 100,
        "compiled_grad_sumsin": 100, "compiled_hvp_sumsin": 100,
        "compiled_grad_mapsce": 50, "compiled_hvp_mapsce": 50, "compiled_grad_rk4": 20,
        "compiled_hvp_rk4": 10, **{case: 50 for case in CASES if "_loop_" in case}}


def _total(case, n, tmp):
    out = os.path.join(tmp, f"cg.{case}.{n}")
    # One hash seed for both runs (unless one is set): with a random seed per process the
    # interpreter's start differs between the N and 2N runs by enough to move grad_sum3's
    # per-call figure by ~10% (90k-105k on one version); with a fixed seed it repeats to 0.05%.
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.setdefault("PYTHONHASHSEED", "0")
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                    sys.executable, "-c", _CHILD, case, str(n)],
                   check=True, env=env, capture_output=True)
    with open(out) as fh:
        for line in fh:
            m = re.match(r"(summary|totals):\s+(\d+)", line)
            if m:
                return int(m.group(2))
    raise RuntimeError(f"no instruction total in {out}")


def count(case, n=None):
    """Instructions of one call of ``case`` (see the module docstring)."""
    n = n or REPS[case]
    # one call outside valgrind first: a kernel compiled by numba (compile=True cases) is then
    # on disk for both counted runs, which would otherwise differ by its compilation
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run([sys.executable, "-c", _CHILD, case, "1"], check=True, capture_output=True,
                   env=env)
    if case.startswith("compiled_"):
        # and one under valgrind: numba keys its disk cache by the CPU it sees, which under
        # valgrind is another, so a kernel new to the cache would otherwise be compiled in the
        # first counted run (2N) and loaded in the second, a difference of billions
        subprocess.run(["valgrind", "--tool=none", sys.executable, "-c", _CHILD, case, "1"],
                       check=True, capture_output=True, env=env)
    with tempfile.TemporaryDirectory() as tmp:
        return (_total(case, 2 * n, tmp) - _total(case, n, tmp)) / n


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cases", nargs="*", metavar="CASE", help=f"any of {', '.join(CASES)}")
    a = p.parse_args(argv)
    unknown = set(a.cases) - set(CASES)
    if unknown:
        p.error(f"unknown case(s) {sorted(unknown)}; the cases are {', '.join(CASES)}")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on PATH")
    for case in a.cases or CASES:
        print(f"{case:22s} {count(case):14,.0f} instructions per call", flush=True)


if __name__ == "__main__":
    main()
