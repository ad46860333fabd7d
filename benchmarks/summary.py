"""The "Summary" block of results.md: how many rows of a run meet the project's speed targets.

Every figure comes from the run's own medians; nothing is assumed. A row whose result is
missing, failed or disagrees with the other frameworks counts as a miss (with the reason); a
row with nothing to compare against (no torch figure, no compiled plan) is not counted.

Example:
    >>> rs = [{"case": "c", "quantity": "primal", "column": "NumPy", "framework": "mooncake_py",
    ...        "status": "ok", "median_s": 1.0},
    ...       {"case": "c", "quantity": "gradient", "column": "mooncake_py (prepared)",
    ...        "framework": "mooncake_py", "status": "ok", "median_s": 4.0}]
    >>> name, counted, meeting, misses = targets(rs)[0]
    >>> name, counted, meeting, misses
    ('prepared (or compiled, where it compiled) gradient ≤ 10× primal', 1, 1, [])
"""
DEFAULT_THREADS = " (default threads)"
PREPARED, COMPILED = "mooncake_py (prepared)", "mooncake_py (compiled)"
JIT = "jax.jit"
# XLA rewrites sum(kron(a, b)) as sum(a) * sum(b) and never forms the product, so on these
# rows jax.jit measures another algorithm; they are left out of the comparison with it
NOT_VS_JIT = ("kron_sum", "kron_view_sum")


def _usable(r):
    return r is not None and r["status"] == "ok" and r.get("agrees", True) is not False


def _why(r):
    if r is None:
        return "not run"
    if r["status"] == "ok":
        return "wrong result"
    return r["status"]


def _best(records):
    """(smallest usable median, None) or (None, why the first record is not usable)."""
    good = [r["median_s"] for r in records if _usable(r)]
    if good:
        return min(good), None
    return None, _why(records[0] if records else None)


class _Index:
    def __init__(self, results):
        self.cases = []
        self.by = {}
        for r in results:
            if r["case"] not in self.cases:
                self.cases.append(r["case"])
            self.by.setdefault((r["case"], r["quantity"]), []).append(r)

    def get(self, case, quantity, column):
        return next((r for r in self.by.get((case, quantity), []) if r["column"] == column),
                    None)

    def where(self, case, quantity, keep):
        return [r for r in self.by.get((case, quantity), []) if keep(r)]


def _unprepared(suffix):
    def keep(r):
        c = r["column"]
        return (r["framework"] == "mooncake_py" and "(prepared)" not in c
                and "(compiled)" not in c
                and (c.endswith(suffix) if suffix else not c.endswith(DEFAULT_THREADS)))
    return keep


def _is_torch(r):
    return r["framework"] == "torch"


def _rows(idx, figure):
    """``[(case, value or None, why)]`` over the cases for which ``figure`` applies."""
    out = []
    for case in idx.cases:
        got = figure(idx, case)
        if got is not None:
            out.append((case,) + got)
    return out


def _ratio(num, den):
    """(num / den, None), or (None, why) when either side has no usable figure."""
    (a, why_a), (b, why_b) = num, den
    if a is None:
        return None, why_a
    if b is None:
        return None, f"reference {why_b}"
    return a / b, None


def _prepared_gradient(idx, case):
    recs = [idx.get(case, "gradient", PREPARED)]
    comp = idx.get(case, "gradient", COMPILED)
    if comp is not None and comp.get("compiled"):
        recs.append(comp)
    recs = [r for r in recs if r is not None]
    if not recs:
        return None
    return _ratio(_best(recs), _best([idx.get(case, "primal", "NumPy")]))


def _hvp_over_gradient(idx, case):
    h, g = idx.get(case, "hvp", PREPARED), idx.get(case, "gradient", PREPARED)
    if h is None or g is None:
        return None
    return _ratio(_best([h]), _best([g]))


def _compiled_hvp_over_gradient(idx, case):
    h, g = idx.get(case, "hvp", COMPILED), idx.get(case, "gradient", COMPILED)
    if not (h and g and h.get("compiled") and g.get("compiled")):
        return None
    return _ratio(_best([h]), _best([g]))


def _versus_torch(quantity, suffix):
    def figure(idx, case):
        ours = idx.where(case, quantity, _unprepared(suffix))
        torch = _best(idx.where(case, quantity, _is_torch))
        if not ours or torch[0] is None:  # nothing to compare with: not counted
            return None
        return _ratio(_best(ours), torch)
    return figure


def _versus_jit(quantity):
    def figure(idx, case):
        jit = idx.get(case, quantity, JIT)
        ours = [r for r in (idx.get(case, quantity, PREPARED), idx.get(case, quantity, COMPILED))
                if r is not None]
        if case in NOT_VS_JIT or jit is None or not _usable(jit) or not ours:
            return None
        return _ratio(_best(ours), _best([jit]))
    return figure


def _compiled_vs_primal(idx, case):
    comp = idx.get(case, "gradient", COMPILED)
    if comp is None or not comp.get("compiled"):
        return None
    return _ratio(_best([comp]), _best([idx.get(case, "primal", "NumPy")]))


def targets(results, floor=None):
    """``[(target, rows counted, rows meeting it, ["case (figure)" for each miss])]``; a miss of
    the prepared HVP/gradient target also shows the hand-written floor of that case when
    ``floor`` (benchmarks/hvp_floor.py's figures) has it."""
    idx = _Index(results)
    spec = [
        ("prepared (or compiled, where it compiled) gradient ≤ 10× primal",
         _prepared_gradient, lambda v: v <= 10),
        ("prepared HVP ≤ 3× prepared gradient", _hvp_over_gradient, lambda v: v <= 3),
        ("compiled HVP ≤ 3× compiled gradient (rows where both compiled)",
         _compiled_hvp_over_gradient, lambda v: v <= 3),
    ]
    suffixes = [""] + ([DEFAULT_THREADS] if any(r["column"].endswith(DEFAULT_THREADS)
                                                for r in results) else [])
    for q in ("gradient", "hvp"):
        for sfx in suffixes:
            spec.append((f"unprepared mooncake_py{sfx} ≤ torch eager, {q}",
                         _versus_torch(q, sfx), lambda v: v <= 1))
    for q in ("gradient", "hvp"):
        spec.append((f"prepared or compiled mooncake_py ≤ jax.jit, {q} (not the kron rows)",
                     _versus_jit(q), lambda v: v <= 1))
    spec.append(("compiled gradient faster than the NumPy primal (rows whose plan compiled)",
                 _compiled_vs_primal, lambda v: v < 1))
    out = []
    for name, figure, meets in spec:
        rows = _rows(idx, figure)
        hand = _hand_ratios(floor) if figure is _hvp_over_gradient else {}
        misses = [f"{case} ({'%.3g×' % v if v is not None else why}"
                  + (f"; hand-written NumPy {hand[case]:.3g}×" if case in hand else "") + ")"
                  for case, v, why in rows if v is None or not meets(v)]
        out.append((name, len(rows), len(rows) - len(misses), misses))
    return out


def _hand_ratios(floor):
    """``{case: hand HVP / hand gradient}`` from benchmarks/hvp_floor.py's figures."""
    return {case: t["hand HVP"] / t["hand gradient"] for case, t in (floor or {}).items()}


def markdown(results, floor=None):
    """Markdown lines of the summary table (empty when no target has a row)."""
    rows = [t for t in targets(results, floor) if t[1]]
    if not rows:
        return []
    lines = ["## Summary: speed targets", "",
             "Counted from this run's medians. Figures are ratios of medians: to the NumPy primal, "
             "to the prepared gradient, to the fastest torch column (PyTorch eager, at the "
             "run's thread setting), or to jax.jit; mooncake_py's unprepared figure is its "
             "fastest unprepared column, its figure against jax.jit the faster of prepared and "
             "compiled. A failed or wrong result is a miss; rows with nothing to compare with are "
             "not counted.", "",
             "| Target | Rows meeting it | Rows that miss (figure) |", "|:---|---:|:---|"]
    for name, n, ok, misses in rows:
        lines.append(f"| {name} | {ok} / {n} | {', '.join(misses) or '—'} |")
    return lines + [""]
