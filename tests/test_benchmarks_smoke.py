"""The benchmark harness runs end to end and writes valid JSON and Markdown (no time is checked)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import frameworks, run, suite

ROOT = Path(__file__).resolve().parents[1]
CASES = ["sum_1000", "broadcast_sin_cos_exp"]


def test_cli_quick_run_writes_json_and_markdown(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--cases", ",".join(CASES),
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
    assert len(grad) == 2 and all(r["status"] == "ok" and r["median_s"] > 0 for r in grad)
    md = (tmp_path / "results.md").read_text()
    assert "## Gradient" in md and "| Case | Primal (NumPy) | mooncake_py" in md
    for case in CASES:
        assert f"| {case} |" in md
    assert md.strip() == proc.stdout.strip()


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
