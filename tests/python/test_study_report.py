"""The stale-delta study's reporting end to end (docs/training.md §Output): a tiny
`octet compare --seeds 2` writes per-layer diagnostics into every run's metrics.jsonl and summary.json,
and tools/study_report.py turns the folder into tables and CSVs whose numbers are the files' own
(checked here against values read independently from metrics.jsonl and summary.json)."""
import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from cli_util import ROOT, TINY_MODEL, octet, sets

REPORT = ROOT / "tools" / "study_report.py"
TINY = TINY_MODEL + ["train.steps=4", "train.eval_every=2", "train.warmup_steps=1", "model.n_layer=2"]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    d = tmp_path_factory.mktemp("study")
    (d / "c.txt").write_text("".join(f"the queue drains buffer {i % 13} before it stops.\n" for i in range(200)))
    (d / "c.toml").write_text('[data]\npath = "c.txt"\ncache_dir = "cache"\n')
    r = octet("compare", "--config", d / "c.toml", *sets(*TINY), "--arms", "bf16,fp8-stale,fp8-matched",
              "--seeds", "2", "--out", d / "cmp")
    assert r.returncode == 0, r.stderr
    assert "per layer at the final evaluation" in r.stdout
    return d


def evals(run):
    return [j for j in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "val_loss" in j]


def test_metrics_hold_the_per_layer_array(study):
    for arm in ("bf16", "fp8-stale", "fp8-matched"):
        for run in sorted((study / "cmp" / arm).glob("seed-*")):
            ev = evals(run)
            assert len(ev) == 2
            for e in ev:
                assert [l["layer"] for l in e["layers"]] == [0, 1]
                for l in e["layers"]:
                    assert l["mixer"] == "attention"
                    assert set(l["dq_bias"]) == {"mean", "max", "norm", "row_residual_mean", "rows"}
                    assert l["dq_bias"]["rows"] > 0
                    assert l["kurtosis_max"] == max(l["kurtosis"].values())
                    assert (l["amax"] is None) == (arm == "bf16")
                    if arm == "fp8-matched":
                        assert l["row_residual_max"] <= 1e-6 and l["dq_bias"]["norm"] < 1e-4


def test_report_tables_and_csvs_are_the_files_numbers(study):
    out = study / "report"
    r = subprocess.run([sys.executable, REPORT, "--out", out, f"probe={study / 'cmp'}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    summary = json.loads((study / "cmp" / "summary.json").read_text())
    tables = (out / "tables.md").read_text()
    for a in summary:
        assert f"| {a['arm']} | {a['delta']} | 2 | {a['val_loss']:.4f} ± {a['val_loss_std']:.4f} |" in tables
    # val_loss.csv: mean and std over the seeds at each evaluation, from each run's metrics.jsonl
    rows = list(csv.DictReader(open(out / "val_loss.csv")))
    assert len(rows) == 3 * 2  # arms x evaluations
    for row in rows:
        vals = [e["val_loss"] for run in sorted((study / "cmp" / row["arm"]).glob("seed-*"))
                for e in evals(run) if e["step"] == int(row["step"])]
        m = sum(vals) / 2
        assert math.isclose(float(row["mean"]), m, rel_tol=1e-12)
        assert math.isclose(float(row["std"]), math.sqrt(sum((v - m) ** 2 for v in vals)), rel_tol=1e-9, abs_tol=1e-15)
    final = {a["arm"]: a for a in summary}
    for row in csv.DictReader(open(out / "layers.csv")):
        want = final[row["arm"]]["layers"][int(row["layer"])]
        for k in ("row_residual_mean", "dq_bias_norm", "kurtosis_max"):
            assert float(row[k]) == want[k]
        # summary's per-layer value is the mean of the two seeds' final evaluations
        seeds = [evals(run)[-1]["layers"][int(row["layer"])] for run in sorted((study / "cmp" / row["arm"]).glob("seed-*"))]
        assert math.isclose(float(row["dq_bias_norm"]), sum(s["dq_bias"]["norm"] for s in seeds) / 2, rel_tol=1e-12)
    # dq_bias.csv: at each evaluation, the mean over the seeds of each run's mean over its layers
    bias = list(csv.DictReader(open(out / "dq_bias.csv")))
    assert len(bias) == 3 * 2  # arms x evaluations
    for row in bias:
        per_run = []
        for run in sorted((study / "cmp" / row["arm"]).glob("seed-*")):
            for e in evals(run):
                if e["step"] == int(row["step"]):
                    v = [l["dq_bias"]["norm"] for l in e["layers"]]
                    per_run.append(sum(v) / len(v))
        assert int(row["n"]) == 2
        assert math.isclose(float(row["mean"]), sum(per_run) / 2, rel_tol=1e-12)
    assert "| step | bf16 bias | bf16 loss |" in tables
    stale = [r for r in csv.DictReader(open(out / "layers.csv")) if r["arm"] == "fp8-stale"]
    matched = [r for r in csv.DictReader(open(out / "layers.csv")) if r["arm"] == "fp8-matched"]
    for s, m in zip(stale, matched):
        assert float(s["dq_bias_norm"]) > 100 * float(m["dq_bias_norm"])


def test_report_refuses_a_folder_that_is_not_a_compare(tmp_path):
    r = subprocess.run([sys.executable, REPORT, "--out", tmp_path / "o", tmp_path], capture_output=True, text=True)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "summary.json" in r.stderr
    assert not (tmp_path / "o").exists()


def test_report_of_runs_without_a_summary_recomputes_compares_numbers(study, tmp_path):
    """A condition assembled from separate compare runs has no summary.json: the report computes the
    mean, the gap and Welch's p from the runs' metrics.jsonl itself — the same numbers compare wrote."""
    import shutil
    runs = tmp_path / "runs"
    shutil.copytree(study / "cmp", runs, ignore=shutil.ignore_patterns("summary.json", "*.safetensors"))
    r = subprocess.run([sys.executable, REPORT, "--out", tmp_path / "o", f"c={runs}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[1:-1]]
            for line in (tmp_path / "o" / "tables.md").read_text().splitlines()
            if line.startswith("| fp8-") or line.startswith("| bf16 ")}
    for a in json.loads((study / "cmp" / "summary.json").read_text()):
        cells = rows[a["arm"]]
        assert float(cells[3].split("±")[0]) == pytest.approx(a["val_loss"], abs=1e-4)
        if a["arm"] != "bf16" and (a.get("test") or {}).get("p") is not None:
            assert float(cells[5]) == pytest.approx(a["test"]["p"], rel=1e-2)
