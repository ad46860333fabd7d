"""The benchmark harness runs end to end and writes valid JSON and Markdown (no time is checked)."""
import json
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import frameworks, run, suite

ROOT = Path(__file__).resolve().parents[1]
CASES = ["sum_1000", "broadcast_sin_cos_exp", "_sum_1000"]  # the last: a plan that compiles


def test_cli_quick_run_writes_json_and_markdown(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--compile", "--cases", ",".join(CASES),
         "--frameworks", "mooncake_py", "--hessian-sizes", "5", "--no-plot",
         "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((tmp_path / "results.json").read_text())
    assert {"machine", "config", "results", "hessian_scaling"} <= set(data)
    assert {r["case"] for r in data["results"]} == set(CASES)
    assert {r["framework"] for r in data["results"]} == {"mooncake_py"}
    statuses = {"ok", "missing", "n/a", "unsupported", "error"}
    assert all(r["status"] in statuses for r in data["results"])
    grad = [r for r in data["results"] if r["quantity"] == "gradient"
            and r["column"] == "mooncake_py"]
    assert len(grad) == len(CASES) and all(r["status"] == "ok" and r["median_s"] > 0 for r in grad)
    md = (tmp_path / "results.md").read_text()
    assert "## Gradient" in md and "| Case | Primal (NumPy) | mooncake_py" in md
    for case in CASES:
        assert f"| {case} |" in md
    assert md.strip() == proc.stdout.strip()
    assert "applies to every framework in these tables alike" in md
    assert data["config"]["malloc"]
    # a progress line per cell: elapsed seconds, case, quantity, column
    assert any(line.startswith("[") and " s] _sum_1000 " in line and "hvp" in line
               and "mooncake_py (prepared)" in line for line in proc.stderr.splitlines())
    _check_cache_columns(data, md)


def test_quick_leaves_out_uncached_compiled_columns(tmp_path, monkeypatch):
    """--quick does not compile the replay kernels: without them on disk the compiled columns
    are n/a with a note saying how to get them."""
    monkeypatch.setattr(frameworks, "kernel_on_disk", lambda kind: False)
    run.main(["--quick", "--cases", "_sum_1000", "--frameworks", "mooncake_py",
              "--quantities", "gradient", "--no-hessian", "--no-plot", "--no-floor",
              "--out", str(tmp_path)])
    data = json.loads((tmp_path / "results.json").read_text())
    by = {r["column"]: r for r in data["results"] if r["quantity"] == "gradient"}
    assert by["mooncake_py (compiled)"]["status"] == "n/a"
    assert "left out by --quick" in by["mooncake_py (compiled)"]["detail"]
    assert by["mooncake_py (prepared)"]["status"] == "ok"
    assert data["config"]["rounds"] == 1


def test_figures_per_quantity(tmp_path):
    """One figure per quantity and one for Hessian scaling (skipped without matplotlib)."""
    pytest.importorskip("matplotlib")
    from benchmarks import report
    rs = [_rec(c, q, col, 1e-3, ratio=r) for c in ("a", "b")
          for q in ("gradient", "hvp") for col, r in (("mooncake_py", 2.0), ("x", 30.0))]
    scaling = [dict(function="dense", n=n, column="mooncake_py", framework="mooncake_py",
                    status="ok", median_s=1e-5 * n) for n in (10, 30)]
    msg = report.plot(tmp_path, rs, scaling)
    assert {p.name for p in tmp_path.iterdir()} == {"gradient.png", "hvp.png",
                                                    "hessian_scaling.png"}, msg


def _check_cache_columns(data, md):
    """The prepared and compiled columns exist for gradient and HVP, the compiled rows say
    whether their plan compiled, and the compile-time table and the summary are written."""
    by = {(r["case"], r["quantity"], r["column"]): r for r in data["results"]}
    for q in ("gradient", "hvp"):
        for case in CASES:
            assert by[(case, q, "mooncake_py (prepared)")]["status"] == "ok"
            assert by[(case, q, "mooncake_py (prepared)")]["first_call_s"] > 0
            assert (case, q, "mooncake_py (compiled)") in by
    loop = by[("_sum_1000", "gradient", "mooncake_py (compiled)")]
    assert loop["status"] == "ok" and loop["compiled"] is True and loop["agrees"] is True
    whole = by[("sum_1000", "gradient", "mooncake_py (compiled)")]
    assert whole["status"] == "ok" and whole["compiled"] is False  # np.sum: no scalar plan
    hvp = by[("_sum_1000", "hvp", "mooncake_py (compiled)")]
    assert (hvp["status"], hvp.get("compiled"), hvp.get("agrees")) == ("ok", True, True) or \
        (hvp["status"], hvp["detail"]) == ("n/a", "this version has no compiled HVP")
    assert data["config"]["kernel_load_s"]["load_s"] > 0
    assert "(not compiled" in md
    assert "## Preparation and compile time" in md and "| _sum_1000 |" in md
    assert "## Summary: speed targets" in md
    assert "prepared (or compiled, where it compiled) gradient ≤ 10× primal |" in md


def test_missing_peer_is_reported_not_raised(tmp_path, monkeypatch):
    real = frameworks.available
    monkeypatch.setattr(frameworks, "available",
                        lambda f: "not installed (jax)" if f == "jax" else real(f))
    run.main(["--quick", "--cases", "sum_1000", "--frameworks", "mooncake_py,jax",
              "--quantities", "gradient", "--no-hessian", "--no-plot", "--threads", "0",
              "--out", str(tmp_path)])
    data = json.loads((tmp_path / "results.json").read_text())
    jax = [r for r in data["results"] if r["framework"] == "jax"]
    assert jax and all(r["status"] == "missing" for r in jax)
    assert "missing" in (tmp_path / "results.md").read_text()


def test_mutation_case_is_reported_not_raised():
    case = suite.CASES["naive_map_sin_cos_exp"]
    method = next(m for m in frameworks.METHODS
                  if m.column == "mooncake_py" and m.quantity == "gradient")
    args = case.make_inputs(np.random.default_rng(0))
    r, value = run.run_method(method, case, args, (np.ones((10, 10)),), 0.001, {})
    assert r["status"] in ("unsupported", "ok")
    if r["status"] == "unsupported":
        assert "not yet supported" in r["detail"] and value is None


def test_disagreeing_result_is_flagged():
    recs = [{"column": c, "median_s": 1e-6} for c in "abc"]
    vals = [np.ones(3), np.ones(3), np.array([1.0, 2.0, 1.0])]
    run.check_agreement(recs, vals)
    assert [r["agrees"] for r in recs] == [True, True, False]
    assert "differs" in recs[2]["detail"]


def test_wrong_compiled_result_is_flagged(tmp_path, monkeypatch):
    """The derivative check covers the compiled column: a compiled cache whose gradient is off
    by a little is marked wrong in the JSON and in the table."""
    def skewed(build):
        def wrapped(case, args, dirs):
            run_, pick, *info = build(case, args, dirs)
            return (run_, lambda out: fw_vector(pick(out)) * (1 + 1e-4), *info)
        return wrapped
    fw_vector = frameworks.as_vector
    methods = [frameworks.Method(m.column, m.framework, m.quantity, skewed(m.build))
               if m.column == "mooncake_py (compiled)" else m for m in frameworks.METHODS]
    monkeypatch.setattr(frameworks, "METHODS", methods)
    run.main(["--quick", "--cases", "_sum_1000", "--frameworks", "mooncake_py",
              "--quantities", "gradient", "--no-hessian", "--no-plot", "--out", str(tmp_path)])
    data = json.loads((tmp_path / "results.json").read_text())
    by = {r["column"]: r for r in data["results"] if r["quantity"] == "gradient"}
    assert by["mooncake_py (compiled)"]["agrees"] is False
    assert by["mooncake_py (prepared)"]["agrees"] is True
    md = (tmp_path / "results.md").read_text()
    assert "(wrong [" in md and "result differs" in md
    # a wrong result does not count as meeting a target
    assert "_sum_1000 (wrong result)" in md


def test_cells_say_whether_the_plan_compiled():
    from benchmarks import report
    base = dict(case="c", quantity="gradient", column="mooncake_py (compiled)",
                framework="mooncake_py", status="ok", median_s=1e-3, ratio=2.0)
    notes = report._Notes()
    assert report._cell(dict(base, compiled=True, partly_compiled=False), notes) == "2"
    assert "(not compiled [" in report._cell(dict(base, compiled=False), notes)
    assert "(partly compiled [" in report._cell(
        dict(base, compiled=False, partly_compiled=True), notes)
    assert len(notes.items) == 2


def _rec(case, quantity, column, median, framework="mooncake_py", **kw):
    return dict(case=case, quantity=quantity, column=column, framework=framework,
                status="ok", median_s=median, **kw)


def test_summary_counts_targets_from_medians():
    from benchmarks import summary
    rs = [_rec("a", "primal", "NumPy", 1.0), _rec("b", "primal", "NumPy", 1.0),
          # a: prepared 20× misses, but its compiled plan (5×) meets; b: compiled did not
          # compile, so its 2× is not counted and the prepared 12× misses
          _rec("a", "gradient", "mooncake_py (prepared)", 20.0),
          _rec("a", "gradient", "mooncake_py (compiled)", 5.0, compiled=True),
          _rec("b", "gradient", "mooncake_py (prepared)", 12.0),
          _rec("b", "gradient", "mooncake_py (compiled)", 2.0, compiled=False),
          _rec("a", "gradient", "mooncake_py", 3.0), _rec("b", "gradient", "mooncake_py", 3.0),
          _rec("a", "gradient", "torch", 4.0, framework="torch"),
          _rec("b", "gradient", "torch", 2.0, framework="torch"),
          _rec("a", "hvp", "mooncake_py (prepared)", 60.0),
          _rec("b", "hvp", "mooncake_py (prepared)", 30.0, agrees=False),
          _rec("a", "hvp", "mooncake_py (compiled)", 16.0, compiled=True),
          _rec("b", "hvp", "mooncake_py (compiled)", 1.0, compiled=False)]
    got = {name: (n, ok, misses) for name, n, ok, misses in summary.targets(rs)}
    assert got["prepared (or compiled, where it compiled) gradient ≤ 10× primal"] == \
        (2, 1, ["b (12×)"])
    assert got["prepared HVP ≤ 3× prepared gradient"] == (2, 1, ["b (wrong result)"])
    assert got["compiled HVP ≤ 3× compiled gradient (rows where both compiled)"] == \
        (1, 0, ["a (3.2×)"])
    assert got["unprepared mooncake_py ≤ torch eager, gradient"] == (2, 1, ["b (1.5×)"])
    assert got["unprepared mooncake_py ≤ torch eager, hvp"] == (0, 0, [])  # no torch HVP rows
    assert got["compiled gradient faster than the NumPy primal (rows whose plan compiled)"] == \
        (1, 0, ["a (5×)"])
    md = "\n".join(summary.markdown(rs))
    assert "| prepared HVP ≤ 3× prepared gradient | 1 / 2 | b (wrong result) |" in md
    assert "torch eager, hvp" not in md  # a target with no rows is left out
    # the hand-written floor is shown beside a miss of the HVP/gradient target, nowhere else
    floor = {"b": {"hand gradient": 1.0, "hand HVP": 3.5}, "a": {"hand gradient": 1.0,
                                                                "hand HVP": 2.0}}
    rs[-3] = _rec("b", "hvp", "mooncake_py (prepared)", 48.0)
    md = "\n".join(summary.markdown(rs, floor))
    assert "| prepared HVP ≤ 3× prepared gradient | 1 / 2 | b (4×; hand-written NumPy 3.5×) |" \
        in md
    assert "a (3.2×) |" in md  # (the compiled row: no floor there)


def test_summary_compares_the_faster_of_prepared_and_compiled_with_jit():
    from benchmarks import summary
    rs = [_rec("a", "gradient", "mooncake_py (prepared)", 3.0),
          _rec("a", "gradient", "mooncake_py (compiled)", 1.5, compiled=True),
          _rec("a", "gradient", "jax.jit", 2.0, framework="jax"),
          _rec("b", "gradient", "mooncake_py (prepared)", 3.0),
          _rec("b", "gradient", "jax.jit", 2.0, framework="jax"),
          # the kron rows are not counted; nor a row whose jit result failed
          _rec("kron_sum", "gradient", "mooncake_py (prepared)", 9.0),
          _rec("kron_sum", "gradient", "jax.jit", 1.0, framework="jax"),
          _rec("c", "hvp", "mooncake_py (prepared)", 3.0),
          dict(_rec("c", "hvp", "jax.jit", 1.0, framework="jax"), status="failed")]
    got = {name: (n, ok, misses) for name, n, ok, misses in summary.targets(rs)}
    assert got["prepared or compiled mooncake_py ≤ jax.jit, gradient (not the kron rows)"] == \
        (2, 1, ["b (1.5×)"])
    assert got["prepared or compiled mooncake_py ≤ jax.jit, hvp (not the kron rows)"] == \
        (0, 0, [])


@pytest.mark.parametrize("name", list(suite.CASES))
def test_case_inputs_are_float64(name):
    args = suite.CASES[name].make_inputs(np.random.default_rng(0))
    assert all(np.asarray(a).dtype == np.float64 for a in args)


@pytest.mark.parametrize("framework", ["autograd", "torch", "jax"])
def test_cases_compute_the_same_value_in_every_namespace(framework):
    pytest.importorskip(framework)
    from benchmarks.frameworks import namespace, _torch_args, _jax_args
    convert = {"torch": _torch_args, "jax": _jax_args}.get(framework, lambda a: a)
    xp, ref = namespace(framework), namespace("mooncake_py")
    for name, case in suite.CASES.items():
        if framework in case.unsupported:
            continue
        args = case.make_inputs(np.random.default_rng(0))
        want = float(case.fn(ref, *args))
        got = float(case.fn(xp, *convert(args)))
        assert got == pytest.approx(want, rel=1e-12), name


def test_passes_keep_each_cells_lowest_median_and_every_failure():
    from benchmarks.run import merge_passes
    prim = {"case": "c", "quantity": "primal", "column": "NumPy", "status": "ok"}
    grad = {"case": "c", "quantity": "gradient", "column": "g", "status": "ok"}
    hvp = {"case": "c", "quantity": "hvp", "column": "h", "status": "ok"}
    one = [dict(prim, median_s=2.0), dict(grad, median_s=4.0), dict(hvp, median_s=9.0)]
    two = [dict(prim, median_s=4.0), dict(grad, median_s=6.0),
           dict(hvp, status="error", detail="boom")]
    m = merge_passes([one, two])
    assert m[0]["median_s"] == 2.0 and m[0]["pass_medians_s"] == [2.0, 4.0]
    assert m[1]["median_s"] == 4.0 and m[1]["ratio"] == 2.0
    assert m[2]["status"] == "error"  # a pass that worked does not hide one that failed
    wrong = dict(grad, median_s=1.0, agrees=False)
    assert merge_passes([[one[1]], [wrong]])[0]["agrees"] is False


def test_hvp_floor_hand_code_is_the_derivative_and_runs():
    """The hand-written gradient and HVP the floor benchmark times are mooncake_py's (a wrong
    hand formula would make the floor meaningless), and one tiny run reports every cell."""
    import mooncake_py as mp
    from benchmarks import hvp_floor
    from benchmarks.suite import simple_mlp

    args, dirs = hvp_floor.mlp_inputs(np.random.default_rng(3), scale=0.1)
    f = lambda *a: simple_mlp(np, *a)  # noqa: E731
    _, g, hv = mp.value_and_hvp(mp.prepare_hvp_cache(f, *args), f, dirs, *args)
    hg, hhv = hvp_floor.mlp_hvp(args, dirs)
    for ours, hand in zip(g + hv, hg + hhv):
        np.testing.assert_allclose(hand, ours, rtol=1e-12, atol=1e-12)
    for ours, hand in zip(g, hvp_floor.mlp_gradient(*args)):
        np.testing.assert_allclose(hand, ours, rtol=1e-12, atol=1e-12)
    lines = []
    out = hvp_floor.run(budget=0.001, rounds=1, echo=lines.append)
    assert set(out["simple_mlp"]) == {"hand gradient", "hand HVP", "prepared gradient",
                                      "prepared HVP"}
    assert any("hand HVP / hand gradient" in line for line in lines)


def test_cells_of_a_case_are_timed_round_robin():
    """With rounds, every cell gets samples in every round and the rounds interleave the cells
    (a slow spell then falls on all of them); failures and n/a keep their records."""
    from types import SimpleNamespace
    calls = []

    def method(name, fail=False, na=False):
        def build(case, args, dirs):
            if na:
                raise frameworks.NotApplicable("no such thing")

            def run():
                calls.append(name)
                if fail and len(calls) > 6:
                    raise RuntimeError("broke in a later round")
                return np.ones(2)
            return run, (lambda v: v)
        return SimpleNamespace(framework="x", quantity="gradient", column=name, build=build)
    case = suite.CASES["sum_1000"]
    jobs = [(method("a"), False), (method("b"), False), (method("c", na=True), False),
            (method("d", fail=True), False)]
    out = run.run_methods(jobs, case, (), (), 0.003, {}, rounds=3)
    assert [r["column"] for r, _ in out] == ["a", "b", "c", "d"]
    (ra, va), (rb, _), (rc, vc), (rd, vd) = out
    assert ra["status"] == rb["status"] == "ok" and np.array_equal(va, np.ones(2))
    assert rc["status"] == "n/a" and vc is None
    assert rd["status"] == "error" and "broke" in rd["detail"] and vd is None
    # a's calls are not one block: b ran between a's first and last
    first_a, last_a = calls.index("a"), len(calls) - 1 - calls[::-1].index("a")
    assert "b" in calls[first_a:last_a]
    assert len(ra["samples_s"]) >= 3 and ra["median_s"] == statistics.median(ra["samples_s"])
