"""The benchmark harness: the Mooncake.jl suite under mooncake_py, autograd, PyTorch and JAX.

Run from the repository root::

    python -m benchmarks                      # everything installed, ~0.5 s per measurement
    python -m benchmarks --quick              # CI-sized, about a minute: see --quick
    python -m benchmarks --cases sum_1000,gp_lml --frameworks mooncake_py,jax

For each case it times the NumPy primal, then every method of :mod:`benchmarks.frameworks`
(gradient, forward-mode JVP, HVP) and reports median time / median NumPy primal time. A peer that
is not installed is "missing"; an operation a framework does not have, or code it cannot run as
written, is "n/a" with the reason; anything else that fails is an "error" with its message (the
run never stops on one). The derivatives of all methods are compared with each other once;
a result that disagrees with the others is flagged. Writes ``results.json`` (every raw timing),
``results.md`` and, if matplotlib is installed, one figure per quantity (``gradient.png``,
``forward.png``, ``hvp.png``, ``hessian_scaling.png``) to ``--out``. A progress line per cell
(elapsed seconds, case, quantity, column) goes to the terminal as the run goes.

Before anything is timed the harness calls ``mooncake_py.tune_allocator()`` once: glibc's malloc
settings are process-wide, so every framework in the run is timed under the same allocator.
"""
import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

import numpy as np

from . import frameworks as fw
from . import hessian_scaling, hvp_floor, report
from .suite import CASES
from .timing import machine_info, measure, more_samples, format_time

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
FULL_HESSIAN_SIZES = (10, 30, 100, 300, 1000, 2000)
QUICK_HESSIAN_SIZES = (10, 30)
# --quick leaves out a peer's derivative columns on a case whose primal it runs slower than
# this (JAX eager on the scalar-loop cases: 0.2 s per call, and jax.jit compiles the unrolled
# loop for tens of seconds per column)
QUICK_SLOW_PRIMAL_S = 0.02


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="CI-sized run (about a minute from a cold cache): tiny time budget, one "
                        "round, small Hessian sizes; columns that would first have to compile "
                        "(mooncake_py's compiled replay when its kernels are not in the on-disk "
                        "cache, jax.jit of the scalar-loop cases) are left out with a note")
    p.add_argument("--compile", action="store_true",
                   help="with --quick: compile what is not cached instead of leaving it out")
    p.add_argument("--cases", default=None,
                   help=f"comma-separated case names (default: all): {', '.join(CASES)}")
    p.add_argument("--frameworks", default=",".join(fw.FRAMEWORKS),
                   help="comma-separated subset of " + ",".join(fw.FRAMEWORKS))
    p.add_argument("--quantities", default=",".join(fw.QUANTITIES),
                   help="comma-separated subset of " + ",".join(fw.QUANTITIES))
    p.add_argument("--budget", type=float, default=None,
                   help="seconds of samples per measurement (default 0.5, or 0.02 with --quick)")
    p.add_argument("--hessian-sizes", default=None,
                   help="comma-separated n for the Hessian-scaling section")
    p.add_argument("--no-hessian", action="store_true", help="skip the Hessian-scaling section")
    p.add_argument("--no-floor", action="store_true",
                   help="skip the HVP/gradient floor (hand-written NumPy gradient and HVP of "
                        "the cases benchmarks/hvp_floor.py knows)")
    p.add_argument("--no-plot", action="store_true", help="do not write the figures")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="output folder (default: %(default)s)")
    p.add_argument("--threads", type=int, default=1,
                   help="threads for every framework's kernels (BLAS, torch, XLA); 0 leaves the "
                        "libraries' defaults (default: %(default)s, which keeps small cases "
                        "from paying for thread wake-ups and makes runs less noisy)")
    p.add_argument("--compare-threading", action="store_true",
                   help="also time every mooncake_py method under the BLAS libraries' default "
                        "thread counts, as extra columns marked '(default threads)', next to "
                        "the pinned ones (--threads)")
    p.add_argument("--passes", type=int, default=1,
                   help="time every cell this many times, in whole passes over the suite "
                        "minutes apart, and keep each cell's lowest median (a pass that ran "
                        "while the machine was busy does not decide a figure; default "
                        "%(default)s)")
    p.add_argument("--rounds", type=int, default=None,
                   help="time the cells of a case round-robin in this many rounds of "
                        "budget/rounds each (a slow spell of the machine then falls on every "
                        "cell of the case, not on the one that happened to run; default 3, "
                        "or 1 with --quick)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    a.cases = _choose(a.cases, list(CASES), "case")
    a.frameworks = _choose(a.frameworks, list(fw.FRAMEWORKS), "framework")
    a.quantities = _choose(a.quantities, list(fw.QUANTITIES), "quantity")
    if a.rounds is None:
        a.rounds = 1 if a.quick else 3
    if a.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    if a.passes < 1:
        raise SystemExit("--passes must be at least 1")
    if a.budget is None:
        a.budget = 0.02 if a.quick else 0.5
    if a.hessian_sizes is None:
        a.hessian_sizes = QUICK_HESSIAN_SIZES if a.quick else FULL_HESSIAN_SIZES
    else:
        a.hessian_sizes = tuple(int(n) for n in a.hessian_sizes.split(","))
    return a


_LIMITS = []  # keeps threadpoolctl's limit alive for the whole run
_DEFAULT_BLAS = []  # (set_num_threads, count) of each OpenBLAS before the run pinned it


def _openblas_handles():
    """mooncake_py's ctypes handles on every loaded OpenBLAS (NumPy's, SciPy's)."""
    import scipy.linalg  # noqa: F401  (loads SciPy's own OpenBLAS, so that it is pinned too)
    from mooncake_py.core.blas_threads import _handles
    return [(get, put) for _, get, put in _handles()]


class default_threads:
    """Context manager: the BLAS libraries at the thread counts they had before the run
    pinned them (their defaults), for the '(default threads)' columns."""

    def __enter__(self):
        self.pinned = [(put, get()) for get, put in _openblas_handles()]
        for put, n in _DEFAULT_BLAS:
            put(n)
        return self

    def __exit__(self, *exc):
        for put, n in self.pinned:
            put(n)
        return False


def limit_threads(n, frameworks):
    """Pin NumPy's BLAS, torch and XLA to ``n`` threads; a description of what was done."""
    _DEFAULT_BLAS[:] = [(put, get()) for get, put in _openblas_handles()]
    if n <= 0:
        return "library defaults"
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)
    if n == 1 and "jax" in frameworks:  # read when jax is first imported (lazily, later)
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                                   + " --xla_cpu_multi_thread_eigen=false").strip()
    done = [f"{n} thread(s)"]
    # NumPy is loaded already, so the variables above come too late for its OpenBLAS: set the
    # count through OpenBLAS itself (threadpoolctl, or mooncake_py's ctypes handles).
    try:
        import threadpoolctl
        _LIMITS.append(threadpoolctl.threadpool_limits(n))
    except ImportError:
        handles = _openblas_handles()
        for get, put in handles:
            put(n)
        if not handles:
            done.append("NumPy's BLAS not limited (no OpenBLAS found, threadpoolctl missing)")
    if "torch" in frameworks and fw.available("torch") is None:
        import torch
        torch.set_num_threads(n)
    return "; ".join(done)


def _choose(text, allowed, what):
    if text is None:
        return allowed
    chosen = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in chosen if t not in allowed]
    if bad:
        raise SystemExit(f"unknown {what}(s): {', '.join(bad)}; choose from {', '.join(allowed)}")
    return chosen


def _failure(exc, method, case):
    """``(status, detail)`` for an exception raised while building or running ``method``."""
    chain = [exc, exc.__cause__]  # NumPy re-raises errors from __float__ as ValueError
    if method.framework == "mooncake_py":
        import mooncake_py as mp
        if any(isinstance(e, mp.MutationError) for e in chain):
            return "unsupported", "MutationError (not yet supported)"
        if case.mutates and any(isinstance(e, mp.TrackingLostError) for e in chain):
            return "unsupported", "TrackingLostError (mutation not yet supported)"
        for e in chain:
            if isinstance(e, mp.MissingRuleError):
                words = str(e).split(" for ", 1)[-1].split(",", 1)[0]
                return "error", f"MissingRuleError: no rule for {words}"
    reason = case.unsupported.get(method.framework)
    if reason:
        return "n/a", reason
    msg = str(exc).strip().split("\n")[0][:200]
    return "error", f"{type(exc).__name__}: {msg}"


def _directions(args, argnums, rng):
    out = []
    for i in argnums:
        a = args[i]
        out.append(np.float64(rng.standard_normal()) if np.ndim(a) == 0
                   else rng.standard_normal(np.shape(a)))
    return tuple(out)


def run_method(method, case, args, dirs, budget, missing):
    """Time one method on one case; a result dict (see :mod:`benchmarks.report`) and the
    derivative it computed as one float64 vector (``None`` unless it succeeded)."""
    return run_methods([(method, False)], case, args, dirs, budget, missing)[0]


class _Job:
    """One cell of an interleaved measurement: its method, thread setting, record so far,
    the built ``(run, pick, info)`` (None once it failed) and its timing."""
    __slots__ = ("method", "default", "rec", "built", "timing")

    def __init__(self, method, default, rec):
        self.method, self.default, self.rec, self.built, self.timing = method, default, rec, None, None

    def threads(self):
        return default_threads() if self.default else contextlib.nullcontext()

    def fail(self, exc, case):
        status, detail = _failure(exc, self.method, case)
        self.rec, self.built = dict(self.rec, status=status, detail=detail), None


def run_methods(jobs, case, args, dirs, budget, missing, rounds=1, left_out=None):
    """Time ``jobs`` (``(method, default_threads)`` pairs) on one case, round-robin: each of
    ``rounds`` rounds gives every cell ``budget / rounds`` seconds, so that a slow spell of a
    shared machine falls on every cell instead of on whichever ran then (the first round warms
    up; the median is over all rounds' samples). ``left_out`` maps a framework to the reason
    its cells are not run ("n/a" with that note). ``[(record, vector)]`` in the order of
    ``jobs``, as :func:`run_method` gives them."""
    cells = []
    for method, default in jobs:
        rec = {"case": case.name, "quantity": method.quantity, "column": method.column
               + (" (default threads)" if default else ""), "framework": method.framework}
        job = _Job(method, default, rec)
        cells.append(job)
        if method.framework in missing:
            job.rec = dict(rec, status="missing", detail=missing[method.framework])
            continue
        if left_out and method.framework in left_out:
            job.rec = dict(rec, status="n/a", detail=left_out[method.framework])
            continue
        try:
            with job.threads():
                run, pick, *info = method.build(case, args, dirs)
            job.built = (run, pick, info)
        except fw.NotApplicable as e:
            job.rec = dict(rec, status="n/a", detail=str(e))
        except Exception as e:  # report, never crash the run
            job.fail(e, case)
    for k in range(max(1, rounds)):
        for job in cells:
            if job.built is None:
                continue
            try:
                with job.threads():
                    if job.timing is None:
                        job.timing = measure(job.built[0], budget / max(1, rounds))
                    else:
                        more_samples(job.built[0], job.timing["number"],
                                     budget / max(1, rounds), job.timing)
            except Exception as e:
                job.fail(e, case)
    out = []
    for job in cells:
        if job.built is None:
            out.append((job.rec, None))
            continue
        run, pick, info = job.built
        try:
            with job.threads():
                value = fw.as_vector(pick(run()))
            m = job.timing
            if info:
                m.update(info[0]())
        except Exception as e:
            job.fail(e, case)
            out.append((job.rec, None))
            continue
        out.append((dict(job.rec, status="ok", detail="", **m), value))
    return out


def check_agreement(records, values, rtol=1e-6):
    """Flag results that differ from the value most other methods agree with."""
    ok = [(r, v) for r, v in zip(records, values) if v is not None]
    if len(ok) < 2:
        return

    def close(a, b):
        return a.shape == b.shape and np.linalg.norm(a - b) <= rtol * max(np.linalg.norm(b),
                                                                           1e-300)
    votes = [sum(close(v, w) for _, w in ok) for _, v in ok]
    ref_rec, ref = ok[int(np.argmax(votes))]
    for r, v in ok:
        r["agrees"] = bool(close(v, ref))
        if not r["agrees"]:
            err = (np.linalg.norm(v - ref) / max(np.linalg.norm(ref), 1e-300)
                   if v.shape == ref.shape else float("nan"))
            r["detail"] = (f"result differs from {ref_rec['column']}'s (relative error "
                           f"{err:.2g})")


def run_cases(opts, log):
    missing = {f: why for f in opts.frameworks if (why := fw.available(f))}
    results = []
    for name in opts.cases:
        case = CASES[name]
        rng = np.random.default_rng(opts.seed)
        args = case.make_inputs(rng)
        dirs = _directions(args, case.argnums, rng)
        log(f"{name}: timing")
        primal, left_out = None, {}
        for m in fw.PRIMALS:
            if m.framework not in opts.frameworks and m.column != "NumPy":
                continue
            r, _ = run_method(m, case, args, dirs, opts.budget, missing)
            results.append(r)
            if m.column == "NumPy" and r["status"] == "ok":
                primal = r["median_s"]
            if opts.quick and r["status"] == "ok" and r["median_s"] > QUICK_SLOW_PRIMAL_S \
                    and m.framework != "mooncake_py":
                left_out[m.framework] = (
                    f"left out by --quick: {m.column} runs this case's primal in "
                    f"{format_time(r['median_s'])} (op by op), so its derivatives (and a "
                    "compile of the whole loop) would take most of the quick run")
            _log_result(log, r)
        # every cell of the case (all quantities, both thread settings) in one round-robin:
        # the ratios the summary takes between cells then see the same spells of the machine
        jobs = [(m, default) for q in opts.quantities for m in fw.METHODS
                if m.quantity == q and m.framework in opts.frameworks
                for default in ((False, True) if opts.compare_threading
                                and m.framework == "mooncake_py" else (False,))]
        done = run_methods(jobs, case, args, dirs, opts.budget, missing, opts.rounds,
                           left_out)
        for q in opts.quantities:
            pairs = [(r, v) for r, v in done if r["quantity"] == q]
            recs, vals = [r for r, _ in pairs], [v for _, v in pairs]
            for r in recs:
                if r["status"] == "ok" and primal:
                    r["ratio"] = r["median_s"] / primal
            check_agreement(recs, vals)
            for r in recs:
                _log_result(log, r)
            results.extend(recs)
    return results, missing


def merge_passes(passes):
    """One record per cell from several passes of :func:`run_cases`: the successful one with
    the lowest median (its ``pass_medians_s`` lists every pass's), ratios recomputed against
    the merged primal. A cell that failed or disagreed in any pass keeps that pass's record:
    a failure is never hidden by a pass that happened to work.

    Example:
        >>> a = [{"case": "c", "quantity": "primal", "column": "NumPy", "status": "ok",
        ...       "median_s": 2.0}, {"case": "c", "quantity": "gradient", "column": "g",
        ...       "status": "ok", "median_s": 8.0}]
        >>> b = [dict(a[0], median_s=1.0), dict(a[1], median_s=6.0)]
        >>> m = merge_passes([a, b])
        >>> m[1]["median_s"], m[1]["ratio"], m[1]["pass_medians_s"]
        (6.0, 6.0, [8.0, 6.0])
    """
    merged = []
    for recs in zip(*passes):
        bad = [r for r in recs if r["status"] != "ok" or r.get("agrees", True) is False]
        if bad:
            merged.append(bad[0])
            continue
        best = dict(min(recs, key=lambda r: r["median_s"]))
        best["pass_medians_s"] = [r["median_s"] for r in recs]
        merged.append(best)
    primal = {r["case"]: r["median_s"] for r in merged
              if r["quantity"] == "primal" and r["column"] == "NumPy" and r["status"] == "ok"}
    for r in merged:
        if r["quantity"] != "primal" and r["status"] == "ok" and r["case"] in primal:
            r["ratio"] = r["median_s"] / primal[r["case"]]
    return merged


def _log_result(log, r):
    """One progress line per cell: case, quantity, column, then its time or why it has none
    (``log`` adds the elapsed seconds)."""
    head = f"{r['case']:26s} {r['quantity']:8s} {r['column']:26s}"
    if r["status"] == "ok":
        ratio = f"  ratio {r['ratio']:.3g}" if r.get("ratio") is not None else ""
        bad = "" if r.get("agrees", True) else f"  WRONG: {r['detail']}"
        first = r.get("first_call_s") or 0.0
        first = f"  (first call {first:.1f} s)" if first > 1.0 else ""
        log(f"{head} {format_time(r['median_s']):>10s}{ratio}{bad}{first}")
    else:
        log(f"{head} {r['status']}: {r['detail'][:90]}")


def tune_allocator():
    """Call ``mooncake_py.tune_allocator()`` once, before anything is timed, and return the
    state it reports. glibc's malloc settings are process-wide, so every framework of the run
    (NumPy primal, mooncake_py, autograd, torch, jax) is timed under the same allocator."""
    try:
        import mooncake_py as mp
        return mp.tune_allocator()
    except (ImportError, AttributeError):  # an older mooncake_py, which tuned at import
        from mooncake_py import allocator
        return allocator.state()


def progress_log(started):
    """A logger for the terminal: every line starts with the seconds since ``started``."""
    def log(msg):
        print(f"[{time.time() - started:6.1f} s] {msg}", file=sys.stderr, flush=True)
    return log


def main(argv=None):
    opts = parse_args(argv)
    started = time.time()
    log = progress_log(started)
    malloc = tune_allocator()
    fw.QUICK = opts.quick and not opts.compile
    threads = limit_threads(opts.threads, opts.frameworks)
    passes = []
    for k in range(opts.passes):
        if opts.passes > 1:
            log(f"pass {k + 1} of {opts.passes}")
        results, missing = run_cases(opts, log)
        passes.append(results)
    if opts.passes > 1:
        results = merge_passes(passes)
    scaling = None
    if not opts.no_hessian:
        log("hessian scaling")
        scaling = hessian_scaling.run(opts.hessian_sizes, opts.frameworks,
                                      budget=min(opts.budget, 0.3), seed=opts.seed, log=log)
    floor = None
    floor_cases = [c for c in hvp_floor.CASES if c in opts.cases]
    if floor_cases and not opts.no_floor and "mooncake_py" in opts.frameworks \
            and {"gradient", "hvp"} <= set(opts.quantities):
        log("hvp floor")
        floor = hvp_floor.run(min(opts.budget, 0.3), rounds=max(2, opts.passes),
                              seed=opts.seed, cases=floor_cases, echo=log)
    versions = {f: fw.version(f) for f in opts.frameworks if f not in missing}
    machine = machine_info(versions)
    config = {"quick": opts.quick, "cases": opts.cases, "frameworks": opts.frameworks,
              "quantities": opts.quantities, "budget_s": opts.budget, "passes": opts.passes,
              "rounds": opts.rounds, "seed": opts.seed, "threads": threads, "malloc": malloc,
              "kernel_load_s": fw.kernel_load_times(),
              "missing": missing, "started": time.strftime("%Y-%m-%d %H:%M:%S",
                                                           time.localtime(started)),
              "wall_s": round(time.time() - started, 1)}
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    report.write_json(out / "results.json", machine, config, results, scaling, floor)
    md = report.markdown(machine, config, results, scaling, floor)
    (out / "results.md").write_text(md)
    if not opts.no_plot:
        msg = report.plot(out, results, scaling)
        log(msg)
    print(md)
    log(f"wrote {os.path.join(out, 'results.json')} and results.md in {config['wall_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
