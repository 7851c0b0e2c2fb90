"""results/'s per-step files live in one runs.tar.xz per study (tools/results_archive.py); the report
(tools/study_report.py) reads a packed folder as it reads a plain one, and the committed tables come
out of the committed archive byte for byte."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools"
REPORT = TOOLS / "study_report.py"
ARCHIVE = TOOLS / "results_archive.py"
sys.path.insert(0, str(TOOLS))
import results_archive  # noqa: E402

STUDY = ROOT / "results" / "stale-delta-study"
# the order of tables.md's sections
CONDITIONS = ["tiled-lr6e-3", "tiled-lr3e-3", "default-lr6e-4", "small-lr6e-3", "m150-lr6e-3", "m150-lr3e-3",
              "m150-lr6e-4", "m310-lr6e-3", "len4096-lr6e-3", "qknorm-tiled-lr6e-3", "nope-tiled-lr6e-3",
              "hybrid-lr6e-3", "whole-lr6e-3", "whole-nope-lr6e-3", "whole-qknorm-lr6e-3", "size124m-lr6e-4",
              "size350m-lr6e-4", "size760m-lr6e-4", "size1300m-lr6e-4", "hybrid350m-lr6e-3"]
OUTPUTS = ["tables.md", "val_loss.csv", "layers.csv", "dq_bias.csv"]
# results/README.md's tools/study_trend.py commands: the size sweep and the conditions of the gaps table
SIZES = ["size124m", "size350m", "size760m", "size1300m"]
GAPS = ["size124m-lr6e-4", "size350m-lr6e-4", "size760m-lr6e-4", "size1300m-lr6e-4", "hybrid350m-lr6e-3",
        "default-lr6e-4", "m150-lr6e-4", "tiled-lr3e-3", "m150-lr3e-3", "tiled-lr6e-3", "small-lr6e-3", "m150-lr6e-3",
        "m310-lr6e-3", "len4096-lr6e-3", "qknorm-tiled-lr6e-3", "nope-tiled-lr6e-3", "hybrid-lr6e-3", "whole-lr6e-3"]


def fake_condition(d, arms=("bf16", "fp8-stale", "fp8-matched"), seeds=(1234, 1235)):
    """A condition folder of separate runs (no summary.json), as results/stale-delta-study/runs/<cond>."""
    for k, arm in enumerate(arms):
        for s in seeds:
            run = d / arm / f"seed-{s}"
            run.mkdir(parents=True)
            lines = []
            for step in (1, 2, 3, 4):
                lines.append({"step": step, "loss": 5.0 - 0.1 * step})
                if step % 2 == 0:
                    lines.append({"step": step, "seed": s, "val_loss": 4.0 + 0.1 * k + 0.01 * (s - 1234) - 0.05 * step,
                                  "row_residual_mean": 1e-3 * k, "kurtosis_max": 3.0 + k,
                                  "layers": [{"layer": l, "row_residual_mean": 1e-4 * (l + k), "kurtosis_max": 2.0 + l,
                                              "dq_bias": {"norm": 1e-3 * (k + 1) * (l + 1)}} for l in (0, 1)]})
            (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
            (run / "config.toml").write_text(f"[train]\nseed = {s}\n")
    return d


def report(out, *specs, cwd=None, extra=()):
    return subprocess.run([sys.executable, str(REPORT), "--out", str(out), *extra, *specs],
                          capture_output=True, text=True, cwd=cwd)


def test_pack_is_reproducible_and_check_finds_every_file(tmp_path):
    fake_condition(tmp_path / "runs" / "c1")
    a = tmp_path / "runs.tar.xz"
    names = results_archive.pack(a, [tmp_path / "runs"])
    assert names == sorted(names) and all(n.startswith("runs/c1/") for n in names)
    first = a.read_bytes()
    results_archive.pack(a, [tmp_path / "runs"])
    assert a.read_bytes() == first
    assert results_archive.check(a, [tmp_path / "runs"]) == []
    (tmp_path / "runs" / "c1" / "bf16" / "seed-1234" / "metrics.jsonl").write_text("changed\n")
    assert results_archive.check(a, [tmp_path / "runs"]) == ["runs/c1/bf16/seed-1234/metrics.jsonl"]
    r = subprocess.run([sys.executable, str(ARCHIVE), "pack", str(a), "/etc/hostname"], capture_output=True, text=True)
    assert r.returncode != 0 and "is not under" in r.stderr


def test_report_reads_a_packed_folder_as_the_plain_one(tmp_path):
    plain = tmp_path / "plain"
    fake_condition(plain / "runs" / "c1")
    fake_condition(plain / "runs" / "c2", seeds=(1234, 1235, 1236))
    packed = tmp_path / "packed"
    shutil.copytree(plain, packed)
    results_archive.pack(packed / "runs.tar.xz", [packed / "runs"])
    shutil.rmtree(packed / "runs")
    # the same relative paths, once on disk and once only in runs.tar.xz: identical outputs
    specs = ["c1=study/runs/c1", "c2=study/runs/c2"]
    for d in (plain, packed):
        (tmp_path / "study").unlink(missing_ok=True)
        (tmp_path / "study").symlink_to(d)
        r = report(tmp_path / f"out-{d.name}", *specs, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    for f in OUTPUTS:
        assert (tmp_path / "out-plain" / f).read_text() == (tmp_path / "out-packed" / f).read_text(), f
    assert "Folder: `study/runs/c1`" in (tmp_path / "out-packed" / "tables.md").read_text()
    # written through the archive: the same numbers, the folder named as given
    r = report(tmp_path / "out-through", f"c1={packed}/runs.tar.xz/runs/c1", f"c2={packed}/runs.tar.xz/runs/c2")
    assert r.returncode == 0, r.stderr
    for f in OUTPUTS[1:]:
        assert (tmp_path / "out-through" / f).read_text() == (tmp_path / "out-plain" / f).read_text(), f
    # a folder neither on disk nor in the archive is refused as before
    r = report(tmp_path / "o", f"x={packed}/runs/nothing")
    assert r.returncode == 2 and "is not a folder" in r.stderr


def test_octet_plot_gets_packed_runs_as_real_folders(tmp_path):
    d = tmp_path / "s"
    fake_condition(d / "runs" / "c1")
    results_archive.pack(d / "runs.tar.xz", [d / "runs"])
    shutil.rmtree(d / "runs")
    fake = tmp_path / "octet"
    log = tmp_path / "plot.log"
    fake.write_text(f"#!/bin/sh\npwd > {log}\nfor a; do echo \"$a\"; [ -f \"$a/metrics.jsonl\" ] && echo has-metrics; done >> {log}\n")
    fake.chmod(0o755)
    r = report(tmp_path / "out", "c1=s/runs/c1", cwd=tmp_path, extra=("--octet", str(fake)))
    assert r.returncode == 0, r.stderr
    got = log.read_text().splitlines()
    assert "s/runs/c1/bf16/seed-1234" in got and got.count("has-metrics") == 6


@pytest.mark.skipif(not (STUDY / "runs.tar.xz").exists(), reason="no results/stale-delta-study/runs.tar.xz")
def test_committed_study_tables_come_out_of_the_archive_unchanged(tmp_path):
    """results/README.md's command, into a scratch folder: the committed tables and CSVs, byte for byte."""
    assert not (STUDY / "runs").exists(), "the runs are packed: results/stale-delta-study/runs.tar.xz"
    specs = [f"{c}=results/stale-delta-study/runs/{c}" for c in CONDITIONS]
    env = dict(os.environ, PATH="/nonexistent")  # no gnuplot: tables and CSVs only
    r = subprocess.run([sys.executable, str(REPORT), "--out", str(tmp_path), *specs], cwd=ROOT,
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    for f in OUTPUTS:
        assert (tmp_path / f).read_bytes() == (STUDY / f).read_bytes(), f
    assert "study_report.py" in (ROOT / "results" / "README.md").read_text()


@pytest.mark.skipif(not (STUDY / "runs.tar.xz").exists(), reason="no results/stale-delta-study/runs.tar.xz")
def test_committed_trend_and_gaps_come_out_of_the_archive_unchanged(tmp_path):
    """results/README.md's tools/study_trend.py commands, into a scratch folder: trend.md, trend.csv, gaps.md
    and gaps.csv byte for byte."""
    runs = "results/stale-delta-study/runs"
    env = dict(os.environ, PATH="/nonexistent")  # no gnuplot: no trend.png
    trend = [sys.executable, str(TOOLS / "study_trend.py")]
    thresholds = ["--threshold", "50=0.87", "--threshold", "50=0.93", "--threshold", "300=0.5", "--threshold", "300=0.76"]
    for args in (["size", *thresholds, "--out", str(tmp_path), *(f"{c}={runs}/{c}-lr6e-4" for c in SIZES)],
                 ["gaps", "--out", str(tmp_path), *(f"{c}={runs}/{c}" for c in GAPS)]):
        r = subprocess.run([*trend, *args], cwd=ROOT, capture_output=True, text=True, env=env)
        assert r.returncode == 0, r.stderr
    for f in ("trend.md", "trend.csv", "gaps.md", "gaps.csv"):
        assert (tmp_path / f).read_bytes() == (STUDY / f).read_bytes(), f
    readme = (ROOT / "results" / "README.md").read_text()
    assert "300=0.76" in readme and "whole-lr6e-3; do echo" in readme  # the README runs these arguments
