"""Writing results: Markdown tables, the raw JSON, and figures (if matplotlib is installed).

A result is a dict with ``case``, ``quantity``, ``column``, ``framework``, ``status`` (``"ok"``,
``"missing"``, ``"n/a"``, ``"unsupported"``, ``"error"``), ``detail`` (why, when not ok) and,
when ok, the timing fields of :func:`benchmarks.timing.measure` plus ``ratio`` (median time /
median NumPy primal time) and ``agrees`` (False when its derivative differs from the other
frameworks'). A prepared cache's result also has ``prepare_s`` and ``plan`` (the class of the
plan it ran), and a compiled cache's ``compiled`` (whether that plan ran on the kernel) and
``partly_compiled`` (compiled segments between Python-replayed steps).
"""
import json

from . import summary
from .timing import format_time

TITLES = {
    "gradient": "Gradient (reverse mode)",
    "forward": "Forward mode (one JVP in a random direction)",
    "hvp": "Hessian-vector product",
}


def _columns(results, quantity):
    cols = []
    for r in results:
        if r["quantity"] == quantity and r["column"] not in cols:
            cols.append(r["column"])
    return cols


def _cases(results):
    out = []
    for r in results:
        if r["case"] not in out:
            out.append(r["case"])
    return out


class _Notes:
    """Footnotes shared by all tables: one number per distinct (column, detail), so a reason
    shared by many cases ("no forward mode") is one note."""

    def __init__(self):
        self.items = []

    def ref(self, text):
        if text not in self.items:
            self.items.append(text)
        return self.items.index(text) + 1


def _cell(r, notes):
    if r is None:
        return ""
    st = r["status"]
    if st == "ok":
        text = f"{r['ratio']:.3g}" if r.get("ratio") is not None else format_time(r["median_s"])
        if r.get("agrees") is False:  # fast but wrong: say so next to the number
            n = notes.ref(f"{r['column']} on {r['case']}: {r['detail']}")
            text += f" (wrong [{n}])"
        if r.get("partly_compiled"):
            n = notes.ref(f"{r['column']}: the plan runs compiled segments between steps "
                          "replayed as generated source or in Python (not counted as compiled in "
                          "the summary)")
            text += f" (partly compiled [{n}])"
        elif r.get("compiled") is False:
            n = notes.ref(f"{r['column']}: the plan did not run on the compiled kernel (it "
                          "replayed as generated source, as the default prepared cache does, or in "
                          "Python, or recorded; its class is in results.json)")
            text += f" (not compiled [{n}])"
        return text
    if st == "missing":
        return "missing"
    if st == "unsupported":  # mooncake_py's own known gaps, spelled out in the cell
        return r["detail"]
    n = notes.ref(f"{r['column']}: {r['detail']}")
    return f"{st} [{n}]"


def _table(header, rows):
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def quantity_table(results, quantity, notes):
    """Markdown lines: one row per case, primal time then one ratio column per method."""
    cols = _columns(results, quantity)
    if not cols:
        return []
    by = {(r["case"], r["column"]): r for r in results if r["quantity"] == quantity}
    prim = {r["case"]: r for r in results if r["quantity"] == "primal" and r["column"] == "NumPy"}
    rows = []
    for case in _cases(results):
        p = prim.get(case)
        rows.append([case, format_time(p["median_s"]) if p and p["status"] == "ok" else "?"]
                    + [_cell(by.get((case, c)), notes) for c in cols])
    return [f"## {TITLES[quantity]}", "",
            "Ratio: median time / median NumPy primal time (lower is better).", ""] + \
        _table(["Case", "Primal (NumPy)"] + cols, rows) + [""]


def primal_table(results, notes):
    """Markdown lines: each framework's own primal time per case (context for the ratios)."""
    cols = _columns(results, "primal")
    by = {(r["case"], r["column"]): r for r in results if r["quantity"] == "primal"}
    rows = []
    for case in _cases(results):
        rows.append([case] + [_cell(dict(by[(case, c)], ratio=None), notes)
                              if (case, c) in by else "" for c in cols])
    return ["## Primal time per framework", "",
            "Absolute times of the function itself (no derivative), for context.", ""] + \
        _table(["Case"] + cols, rows) + [""]


def _cache_columns(results):
    """``(quantity, column)`` of every prepared or compiled cache column (pinned threads)."""
    cols = []
    for r in results:
        key = (r["quantity"], r["column"])
        if ("(prepared)" in key[1] or "(compiled)" in key[1]) and \
                not key[1].endswith(summary.DEFAULT_THREADS) and key not in cols:
            cols.append(key)
    return cols


def _compile_cell(r, notes):
    if r is None:
        return ""
    if r["status"] != "ok":
        return _cell(r, notes)
    text = " / ".join(format_time(r[k]) for k in ("first_call_s", "second_call_s", "median_s"))
    if r.get("partly_compiled"):
        return text + " (partly compiled)"
    return text + (" (not compiled)" if r.get("compiled") is False else "")


def kernel_load_line(config):
    """One sentence on the compiled-replay kernels' load time in this run (or ``None``)."""
    times = config.get("kernel_load_s") or {}
    names = {"load_s": "gradient kernel", "hvp_load_s": "HVP kernel"}
    # other kernels (segments...) under their own key: "segment_load_s" -> "segment kernel"
    parts = [f"{names.get(k, k.replace('_load_s', '') + ' kernel')} {format_time(t)}"
             for k, t in times.items()]
    if not parts:
        return None
    return ("Kernel load, once per process before the first compiled call (numba import "
            "counted in the first; from numba's on-disk cache when warm, else compiled): "
            + ", ".join(parts) + ".")


def compile_table(results, config, notes):
    """Markdown lines: per case, the first, second and median call of each prepared and
    compiled cache (the first records, plans and, for a compiled cache, encodes for the
    kernel), and the kernels' load time."""
    cols = _cache_columns(results)
    if not cols:
        return []
    by = {(r["case"], r["quantity"], r["column"]): r for r in results}
    rows = [[case] + [_compile_cell(by.get((case, q, c)), notes) for q, c in cols]
            for case in _cases(results) if any((case, q, c) in by for q, c in cols)]
    load = kernel_load_line(config)
    return ["## Preparation and compile time", "",
            "Each cell: first call / second call / median of later calls. The first call of a "
            "prepared cache records the function and makes its plan; a compiled cache also "
            "encodes the plan for the kernel. (The prepare_*_cache call itself is prepare_s "
            "in results.json.)", ""] + ([load, ""] if load else []) + \
        _table(["Case"] + [f"{q}: {c}" for q, c in cols], rows) + [""]


def hessian_table(scaling):
    """Markdown lines for the Hessian-scaling section (absolute times)."""
    if not scaling:
        return []
    if isinstance(scaling, str):
        return ["## Hessian scaling", "", scaling, ""]
    cols = []
    for r in scaling:
        if r["column"] not in cols:
            cols.append(r["column"])
    keys = []
    for r in scaling:
        if (r["function"], r["n"]) not in keys:
            keys.append((r["function"], r["n"]))
    by = {(r["function"], r["n"], r["column"]): r for r in scaling}
    rows = []
    for fn, n in keys:
        cells = []
        for c in cols:
            r = by.get((fn, n, c))
            if r is None:
                cells.append("")
            elif r["status"] == "ok":
                cells.append(format_time(r["median_s"]))
            else:
                cells.append(r["status"] if r["status"] == "missing" else
                             f"{r['status']}: {r['detail'][:60]}")
        rows.append([fn, str(n)] + cells)
    return ["## Hessian scaling", "", "Median time of one full n×n Hessian.", ""] + \
        _table(["Function", "n"] + cols, rows) + [""]


def header_lines(machine, config):
    fw = machine.get("frameworks", {})
    versions = ", ".join(f"{k} {v}" for k, v in fw.items())
    blas = machine.get("blas")
    if isinstance(blas, list):
        blas = "; ".join(f"{b.get('internal_api')} {b.get('version')} "
                         f"({b.get('num_threads')} threads)" for b in blas)
    return ["# mooncake_py benchmarks", "",
            f"- Machine: {machine.get('cpu')}, {machine.get('cpu_count')} cores, "
            f"{machine.get('platform')}",
            f"- Python {machine.get('python')}, NumPy {machine.get('numpy')}, BLAS: {blas}",
            "- Allocator: " + _malloc_line(config.get("malloc") or machine.get("malloc")),
            f"- Frameworks: {versions or 'none'}; threads: {config.get('threads')}",
            f"- Timing: one warm-up call, then samples for about {config.get('budget_s')} s per "
            "measurement; medians" + _rounds_note(config.get("rounds", 1))
            + _passes_note(config.get("passes", 1))
            + ". Results are approximate.", ""]


def _malloc_line(state):
    """The header's allocator line: one setting, the same for every framework of the run."""
    if state is None:
        return "unknown"
    return (f"malloc {state} (mooncake_py.tune_allocator(), called once before anything "
            "was timed; the setting is process-wide, so it applies to every framework in "
            "these tables alike)")


def _rounds_note(rounds):
    if rounds <= 1:
        return ""
    return (f", the cells of each case timed round-robin in {rounds} rounds (so that the ratios "
            "between them see the same state of the machine)")


def _passes_note(passes):
    if passes <= 1:
        return ""
    return (f", each cell timed in {passes} passes over the whole suite and the lowest of its "
            f"{passes} medians kept (every pass's median is in results.json)")


def floor_table(floor):
    """Markdown lines for the HVP/gradient floor (benchmarks/hvp_floor.py), if it ran."""
    if not floor:
        return []
    rows = []
    for case, t in floor.items():
        rows.append([case, format_time(t["hand gradient"]), format_time(t["hand HVP"]),
                     f"{t['hand HVP'] / t['hand gradient']:.2f}",
                     format_time(t["prepared gradient"]), format_time(t["prepared HVP"]),
                     f"{t['prepared HVP'] / t['prepared gradient']:.2f}"])
    return ["## HVP/gradient floor", "",
            "Hand-written NumPy gradient and HVP (gradient included, no AD) beside mooncake_py's "
            "prepared caches, timed interleaved in this process (lowest median over the "
            "rounds). The hand code runs the same matrix products an AD tool must (the gradient's, and "
            "the HVP's three per product of the gradient), so its ratio is the floor of any "
            "tool's on this machine.", ""] + \
        _table(["Case", "hand gradient", "hand HVP", "hand ratio", "prepared gradient",
                "prepared HVP", "prepared ratio"], rows) + [""]


def markdown(machine, config, results, scaling=None, floor=None):
    """The whole report as one Markdown string."""
    notes = _Notes()
    lines = header_lines(machine, config)
    for q in ("gradient", "forward", "hvp"):
        lines += quantity_table(results, q, notes)
    if any(r["quantity"] == "primal" for r in results):
        lines += primal_table(results, notes)
    lines += compile_table(results, config, notes)
    lines += hessian_table(scaling)
    lines += floor_table(floor)
    lines += summary.markdown(results, floor)
    if notes.items:
        lines += ["## Notes", ""] + [f"{i}. {t}" for i, t in enumerate(notes.items, 1)] + [""]
    return "\n".join(lines)


def write_json(path, machine, config, results, scaling=None, floor=None):
    with open(path, "w") as f:
        json.dump({"machine": machine, "config": config, "results": results,
                   "hessian_scaling": scaling, "hvp_floor": floor}, f, indent=1, default=str)


FIGURES = {"gradient": "gradient.png", "forward": "forward.png", "hvp": "hvp.png"}
_COLORS = {"mooncake_py": "C0", "autograd": "C1", "torch": "C2", "jax": "C3"}
_MARKERS = "osD^v<>pP*Xh"


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def plot_quantity(plt, path, results, quantity):
    """One figure: every column's ratio to the NumPy primal, per case, on a log axis (the
    columns of a framework share a colour and differ by marker). False if nothing to plot."""
    cases, cols = _cases(results), _columns(results, quantity)
    ok = [r for r in results if r["quantity"] == quantity and r["status"] == "ok"
          and r.get("ratio")]
    if not ok:
        return False
    fig, ax = plt.subplots(figsize=(10, 4.4))
    seen = {}
    for j, col in enumerate(cols):
        dx = 0.5 * (j - (len(cols) - 1) / 2) / len(cols)  # side by side, not on top
        pts = [(cases.index(r["case"]) + dx, r["ratio"]) for r in ok if r["column"] == col]
        if not pts:
            continue
        fw = next(r["framework"] for r in ok if r["column"] == col)
        k = seen[fw] = seen.get(fw, -1) + 1
        xs, ys = zip(*pts)
        ax.plot(xs, ys, linestyle="none", marker=_MARKERS[k % len(_MARKERS)],
                color=_COLORS.get(fw), label=col, alpha=0.85, markersize=5)
    ax.axhline(1.0, color="0.5", linewidth=0.8, linestyle=":")
    ax.set_yscale("log")
    ax.set_ylabel("time / NumPy primal time")
    ax.set_title(f"{TITLES[quantity]} (lower is better)")
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels(cases, rotation=35, ha="right", fontsize=8)
    ax.grid(True, which="major", axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return True


def plot_scaling(plt, path, scaling):
    """The Hessian-scaling figure: time per full Hessian against n, log-log, one panel per
    function, one line per column. False if nothing to plot."""
    ok = [r for r in scaling or () if isinstance(r, dict) and r["status"] == "ok"]
    if not ok:
        return False
    functions = list(dict.fromkeys(r["function"] for r in ok))
    fig, axes = plt.subplots(1, len(functions), figsize=(10, 4), squeeze=False)
    for ax, fn in zip(axes[0], functions):
        seen = {}
        for col in dict.fromkeys(r["column"] for r in ok):
            rs = sorted((r for r in ok if r["function"] == fn and r["column"] == col),
                        key=lambda r: r["n"])
            if not rs:
                continue
            fw = rs[0]["framework"]
            k = seen[fw] = seen.get(fw, -1) + 1
            ax.plot([r["n"] for r in rs], [r["median_s"] for r in rs], label=col,
                    marker=_MARKERS[k % len(_MARKERS)], color=_COLORS.get(fw),
                    linestyle="-" if k == 0 else "--", markersize=4)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("n")
        ax.set_ylabel("seconds per n×n Hessian")
        ax.set_title(f"Hessian scaling: {fn}")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return True


def plot(out, results, scaling=None):
    """Write one figure per quantity into the folder ``out`` (``gradient.png``, ``forward.png``,
    ``hvp.png``: ratios to the primal per case on a log axis; ``hessian_scaling.png``: time
    per Hessian against n). Returns a line saying what was written, or why nothing was."""
    plt = _pyplot()
    if plt is None:
        return "matplotlib is not installed (pip install -e '.[bench]'): no figures written"
    written = [name for q, name in FIGURES.items()
               if plot_quantity(plt, f"{out}/{name}", results, q)]
    if plot_scaling(plt, f"{out}/hessian_scaling.png", scaling):
        written.append("hessian_scaling.png")
    if not written:
        return "no successful measurement to plot: no figures written"
    return f"figures: {', '.join(written)} in {out}"
