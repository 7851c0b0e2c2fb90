#!/usr/bin/env python3
"""tools/study_report.py — tables and plots of the stale-delta study from `octet compare` folders.

Reads one or more `octet compare --out` folders (one per study condition; `NAME=DIR` names a
condition, else the folder's name is used) and writes, from their files only:

  tables.md           per condition: validation loss per arm (mean ± std over seeds, gap to bf16,
                      Welch's t-test as compare computed it: summary.json) and, per layer and arm at the
                      final evaluation (mean over seeds), the row residual and the dQ bias along the
                      mean key (summary.json "layers"; docs/training.md §Output)
  val_loss.csv        condition, arm, step, n, mean, std: the validation loss at each evaluation over
                      the seeds (each run's metrics.jsonl)
  layers.csv          condition, arm, layer and every per-layer field of summary.json
  dq_bias.csv         condition, arm, step, n, mean, std: the dQ bias along the mean key at each
                      evaluation (each run's mean over its attention layers, then over the seeds; runs
                      made before the diagnostic existed have none) — its trajectory over training
  val_loss_<condition>.png, layers_<condition>.png   with gnuplot, if installed (else skipped, said
                      on stderr): loss per arm (mean ± std bars) and residual / dQ bias per layer (log y)
  curves_<condition>.png   `octet plot` of every run's train/validation curves, if --octet is given

A DIR may be a plain folder (a fresh `octet compare --out`) or a folder packed into an archive
(tools/results_archive.py): results/<study>/runs.tar.xz is read in place — a DIR that is not on disk
is looked up in the runs.tar.xz of the nearest folder above it (results/stale-delta-study/runs/<cond>
is the member runs/<cond> of results/stale-delta-study/runs.tar.xz), or written through an archive
(results/stale-delta-study/runs.tar.xz/runs/<cond>, or a bench/study.sh study.tgz/<cond>); tables.md
names the DIR as given either way.

No number is computed here that is not in the files or a mean/std of them. Standard library only,
so it runs on the GPU machine's python3 as well. Usage:
  tools/study_report.py [--out results/stale-delta-study] [--octet build/octet] COND_DIR|NAME=DIR ...
"""
import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_archive import ArchivePath, node  # noqa: E402  (tools/results_archive.py)

LAYER_FIELDS = ["row_residual_mean", "row_residual_max", "dq_bias_norm", "dq_bias_mean", "dq_bias_max",
                "kurtosis_max", "amax_x", "amax_w", "amax_dy"]


def fail(msg):
    """One error line named by the running tool (this one, or tools/study_trend.py that imports it), exit 2."""
    print(f"{Path(sys.argv[0]).stem or 'study_report'}: {msg}", file=sys.stderr)
    sys.exit(2)


def mean_std(xs):
    """Mean and sample std (n - 1; 0 for one value) of the finite values; (nan, nan) if none."""
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    if not xs:
        return math.nan, math.nan, 0
    m = sum(xs) / len(xs)
    s = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, s, len(xs)


def run_dirs(cond_dir, arm):
    """The runs of an arm: <arm>/seed-<seed>/ (compare --seeds N > 1) or <arm>/ itself."""
    d = node(cond_dir / arm)  # on disk, or in the study's archive
    seeds = sorted(p for p in d.glob("seed-*") if (p / "metrics.jsonl").exists())
    return seeds or ([d] if (d / "metrics.jsonl").exists() else [])


def eval_records(run):
    """Every evaluation record of run/metrics.jsonl (a torn line is skipped)."""
    out = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        try:
            j = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "val_loss" in j:
            out.append(j)
    return out


def evaluations(run):
    """(step, val_loss) of every evaluation in run/metrics.jsonl."""
    return [(j["step"], j["val_loss"]) for j in eval_records(run)]


def dq_bias_by_step(run):
    """(step, mean over the attention layers of the dQ bias norm) of every evaluation that has one."""
    out = []
    for j in eval_records(run):
        v = [(l.get("dq_bias") or {}).get("norm") for l in j.get("layers") or []]
        v = [x for x in v if isinstance(x, (int, float)) and math.isfinite(x)]
        if v:
            out.append((j["step"], sum(v) / len(v)))
    return out


def student_t_p(t, df):
    """Two-sided tail probability P(|T| >= |t|) of Student's t with df degrees of freedom:
    I_{df/(df+t²)}(df/2, 1/2), the regularized incomplete beta function by its continued fraction
    (Lentz's method; Numerical Recipes §6.4)."""
    def betacf(a_, b_, x):
        c, d = 1.0, 1.0 - (a_ + b_) * x / (a_ + 1.0)
        d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
        h = d
        for m in range(1, 300):
            for num in (m * (b_ - m) * x / ((a_ + 2 * m - 1) * (a_ + 2 * m)),
                        -(a_ + m) * (a_ + b_ + m) * x / ((a_ + 2 * m) * (a_ + 2 * m + 1))):
                d = 1.0 + num * d
                d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
                c = 1.0 + num / c
                c = c if abs(c) > 1e-300 else 1e-300
                h *= d * c
            if abs(d * c - 1.0) < 1e-15:
                break
        return h

    x, a_, b_ = df / (df + t * t), df / 2.0, 0.5
    if x <= 0.0:
        return 0.0
    if x >= 1.0:  # t = 0
        return 1.0
    front = math.exp(math.lgamma(a_ + b_) - math.lgamma(a_) - math.lgamma(b_) + a_ * math.log(x) + b_ * math.log1p(-x))
    if x < (a_ + 1.0) / (a_ + b_ + 2.0):
        return front * betacf(a_, b_, x) / a_
    return 1.0 - front * betacf(b_, a_, 1.0 - x) / b_


def student_t_quantile(level, df):
    """The t with P(|T| <= t) = level for Student's t with df degrees of freedom (bisection on
    student_t_p; e.g. level 0.95, df 1 -> 12.706)."""
    lo, hi = 0.0, 1.0
    while student_t_p(hi, df) > 1.0 - level:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if student_t_p(mid, df) > 1.0 - level else (lo, mid)
    return 0.5 * (lo + hi)


def welch(a, b):
    """Welch's statistics of mean(a) - mean(b): (difference, its standard error, Welch-Satterthwaite
    degrees of freedom); None below 2 values a side or with no spread at all."""
    (ma, sa, na), (mb, sb, nb) = mean_std(a), mean_std(b)
    if na < 2 or nb < 2:
        return None
    va, vb = sa * sa / na, sb * sb / nb
    if va + vb == 0:
        return None
    df = (va + vb) ** 2 / (va * va / (na - 1) + vb * vb / (nb - 1))
    return ma - mb, math.sqrt(va + vb), df


def welch_p(a, b):
    """Two-sided p of Welch's t-test of mean(a) = mean(b) (docs/training.md §"Several seeds", the
    test compare applies). None below 2 values a side."""
    w = welch(a, b)
    return None if w is None else student_t_p(w[0] / w[1], w[2])


def welch_ci(a, b, level=0.95):
    """mean(a) - mean(b) and its Welch confidence interval at `level`: (diff, low, high); None below
    2 values a side."""
    w = welch(a, b)
    if w is None:
        return None
    half = student_t_quantile(level, w[2]) * w[1]
    return w[0], w[0] - half, w[0] + half


def condition_from_runs(cond_dir):
    """A condition assembled from separate compare runs (no summary.json): the arms found as
    <arm>/seed-<seed>/metrics.jsonl, each run's final evaluation, mean ± std over the seeds, the gap
    to bf16 and Welch's p computed here (the same test compare applies). Runs that did not reach the
    condition's last step are not in the folder (results/stale-delta-study/partial-runs)."""
    entries = []
    for d in sorted(p for p in cond_dir.iterdir() if p.is_dir()):
        finals, peaks = [], {"row_residual_mean": [], "kurtosis_max": []}
        for r in run_dirs(cond_dir, d.name):
            recs = [json.loads(l) for l in (r / "metrics.jsonl").read_text().splitlines() if '"val_loss"' in l]
            if recs:
                finals.append(recs[-1])
                for k in peaks:  # compare's arm value: the largest over evaluations (and seeds)
                    peaks[k] += [x[k] for x in recs if isinstance(x.get(k), (int, float))]
        if finals:
            entries.append((d.name, finals, peaks))
    if not entries:
        fail(f"{cond_dir} holds neither a summary.json nor <arm>/seed-*/metrics.jsonl runs")
    base = next((f for a, f, _ in entries if a == "bf16"), None)
    base_losses = [r["val_loss"] for r in base] if base else []
    out = []
    for arm, finals, peaks in entries:
        losses = [r["val_loss"] for r in finals]
        m, s, n = mean_std(losses)
        bm = mean_std(base_losses)[0] if base else math.nan
        p = welch_p(losses, base_losses) if base and arm != "bf16" else None
        layers = {}
        for r in finals:
            for l in r.get("layers", []):
                e = layers.setdefault(l["layer"], {"row_residual_mean": [], "kurtosis_max": [], "dq_bias_norm": []})
                e["row_residual_mean"].append(l.get("row_residual_mean"))
                k = l.get("kurtosis_max", max(l.get("kurtosis", {}).values(), default=None))
                e["kurtosis_max"].append(k)
                e["dq_bias_norm"].append((l.get("dq_bias") or {}).get("norm"))
        out.append({
            "arm": arm, "seeds": [r.get("seed") for r in finals], "val_loss": m, "val_loss_std": s,
            "gap_pct": 100.0 * (m / bm - 1.0) if base else None,
            "test": None if p is None else {"p": p, "vs_bf16": "outside noise" if p < 0.05 else "inside noise"},
            # the arm's delta rule by its name (octet's arms: fp8-stale, fp8-matched; none for the others)
            "delta": {"fp8-stale": "stale", "fp8-matched": "matched"}.get(arm),
            "row_residual_mean": max(peaks["row_residual_mean"], default=None),
            "kurtosis_max": max(peaks["kurtosis_max"], default=None),
            "layers": [{"layer": k, **{f: mean_std(v)[0] if any(x is not None for x in v) else None
                                      for f, v in e.items()}} for k, e in sorted(layers.items())],
        })
    return out


def load_condition(name, cond_dir):
    summary_path = cond_dir / "summary.json"
    if summary_path.exists():
        try:
            summary = json.loads(summary_path.read_text())
        except json.JSONDecodeError as e:
            fail(f"{summary_path} is not valid JSON ({e.msg} at line {e.lineno})")
        if not isinstance(summary, list) or not summary or not all(
                isinstance(a, dict) and isinstance(a.get("arm"), str) for a in summary):
            fail(f"{summary_path} is not a compare summary (a non-empty list of per-arm objects with 'arm')")
    else:
        summary = condition_from_runs(cond_dir)
    arms = []
    for a in summary:
        runs = run_dirs(cond_dir, a["arm"])
        curves, bias = {}, {}  # step -> values over the runs
        for r in runs:
            for step, v in evaluations(r):
                curves.setdefault(step, []).append(v)
            for step, v in dq_bias_by_step(r):
                bias.setdefault(step, []).append(v)
        arms.append({
            "arm": a["arm"], "seeds": len(a.get("seeds", [])) or 1, "val_loss": a.get("val_loss"),
            "val_loss_std": a.get("val_loss_std", 0.0 if "seeds" not in a else None),
            "gap_pct": a.get("gap_pct"), "test": a.get("test"), "delta": a.get("delta"),
            "row_residual_mean": a.get("row_residual_mean"), "kurtosis_max": a.get("kurtosis_max"),
            "layers": a.get("layers", []), "curves": curves, "dq_bias": bias, "runs": runs,
        })
    return {"name": name, "dir": cond_dir, "arms": arms}


def fmt(v, spec):
    return "—" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def tables_md(conds):
    out = ["# Stale-delta study: tables", "",
           "Written by tools/study_report.py from the compare folders below; every number is read from",
           "their summary.json / metrics.jsonl (docs/training.md §Output, §\"Several seeds\").", ""]
    for c in conds:
        out += [f"## {c['name']}", "", f"Folder: `{c['dir']}`", "",
                "| arm | delta | seeds | val loss (mean ± std) | gap to bf16 | p (Welch) | vs bf16 at 95% "
                "| attn row residual (mean over rows; max over evaluations, seeds) | max kurtosis |",
                "|---|---|---|---|---|---|---|---|---|"]
        for a in c["arms"]:
            t = a["test"] or {}
            verdict = t.get("vs_bf16", "(baseline)" if a["arm"] == "bf16" else "untested")
            std = fmt(a['val_loss_std'], '.4f') if a['seeds'] > 1 else "—"
            out.append(f"| {a['arm']} | {a['delta'] or '—'} | {a['seeds']} | {fmt(a['val_loss'], '.4f')} ± "
                       f"{std} | {fmt(a['gap_pct'], '+.2f')}% | {fmt(t.get('p'), '.3g')} "
                       f"| {verdict} | {fmt(a['row_residual_mean'], '.3e')} | {fmt(a['kurtosis_max'], '.2f')} |")
        layers = sorted({l["layer"] for a in c["arms"] for l in a["layers"]})
        if layers:
            arms = [a["arm"] for a in c["arms"]]
            for field, title in (("row_residual_mean", "mean attention row residual"),
                                 ("dq_bias_norm", "dQ bias along the mean key, ||τ r k̄|| / ||dQ|| (norm)"),
                                 ("kurtosis_max", "max activation kurtosis")):
                out += ["", f"Per layer at the final evaluation, mean over seeds: {title}", "",
                        "| layer | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
                for l in layers:
                    cells = []
                    for a in c["arms"]:
                        v = next((x.get(field) for x in a["layers"] if x["layer"] == l), None)
                        cells.append(fmt(v, ".2f" if field == "kurtosis_max" else ".3e"))
                    out.append(f"| {l} | " + " | ".join(cells) + " |")
        steps = sorted({st for a in c["arms"] for st in a["dq_bias"]})
        if steps:
            out += ["", "Per evaluation, mean over seeds: dQ bias along the mean key (mean over the attention "
                    "layers) and the validation loss", "",
                    "| step | " + " | ".join(f"{a['arm']} bias | {a['arm']} loss" for a in c["arms"]) + " |",
                    "|---|" + "---|---|" * len(c["arms"])]
            for st in steps:
                cells = []
                for a in c["arms"]:
                    cells += [fmt(mean_std(a["dq_bias"].get(st, []))[0], ".3e"),
                              fmt(mean_std(a["curves"].get(st, []))[0], ".4f")]
                out.append(f"| {st} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out) + "\n"


def write_csvs(conds, out):
    for name, key in (("val_loss.csv", "curves"), ("dq_bias.csv", "dq_bias")):  # step -> values per arm
        with open(out / name, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["condition", "arm", "step", "n", "mean", "std"])
            for c in conds:
                for a in c["arms"]:
                    for step in sorted(a[key]):
                        m, s, n = mean_std(a[key][step])
                        w.writerow([c["name"], a["arm"], step, n, repr(m), repr(s)])
    with open(out / "layers.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["condition", "arm", "layer"] + LAYER_FIELDS)
        for c in conds:
            for a in c["arms"]:
                for l in a["layers"]:
                    w.writerow([c["name"], a["arm"], l["layer"]] + ["" if l.get(k) is None else repr(l[k])
                                                                    for k in LAYER_FIELDS])


def gnuplot(script, log):
    """Runs gnuplot on `script` (no shell); False if gnuplot is missing or fails."""
    if not shutil.which("gnuplot"):
        return False
    r = subprocess.run(["gnuplot"], input=script, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"study_report: gnuplot failed for {log}: {r.stderr.strip()}", file=sys.stderr)
    return r.returncode == 0


def q(s):
    """A gnuplot single-quoted string."""
    return "'" + str(s).replace("'", "''") + "'"


def plots(conds, out):
    if not shutil.which("gnuplot"):
        print("study_report: gnuplot not found: no PNGs (the CSVs hold the numbers)", file=sys.stderr)
        return
    for c in conds:
        name = c["name"]
        data = out / f"val_loss_{name}.dat"
        blocks, titles = [], []
        for a in c["arms"]:
            rows = [(st, *mean_std(a["curves"][st])[:2]) for st in sorted(a["curves"])]
            blocks.append("\n".join(f"{st} {m!r} {s!r}" for st, m, s in rows if math.isfinite(m)))
            titles.append(a["arm"])
        data.write_text("\n\n\n".join(blocks) + "\n")
        series = ", ".join(f"{q(data)} index {i} using 1:2:3 with yerrorlines title {q(t)}"
                           for i, t in enumerate(titles))
        gnuplot(f"set terminal pngcairo size 900,600 noenhanced\nset output {q(out / f'val_loss_{name}.png')}\n"
                f"set title {q(name + ': validation loss per arm (mean ± std over seeds)')}\n"
                f"set xlabel 'step'\nset ylabel 'validation loss (nats/token)'\nset key top right\n"
                f"plot {series}\n", data)
        data.unlink()
        layers = sorted({l["layer"] for a in c["arms"] for l in a["layers"]})
        if not layers:
            continue
        data = out / f"layers_{name}.dat"
        blocks = []
        for a in c["arms"]:
            rows = []
            for l in a["layers"]:
                vals = [l.get("row_residual_mean"), l.get("dq_bias_norm")]
                rows.append(f"{l['layer']} " + " ".join("nan" if v is None or not v > 0 else repr(v) for v in vals))
            blocks.append("\n".join(rows))
        data.write_text("\n\n\n".join(blocks) + "\n")
        series = []
        for i, a in enumerate(c["arms"]):
            series.append(f"{q(data)} index {i} using 1:2 with linespoints title {q(a['arm'] + ' row residual')}")
            series.append(f"{q(data)} index {i} using 1:3 with linespoints dashtype 2 "
                          f"title {q(a['arm'] + ' dQ bias (norm)')}")
        gnuplot(f"set terminal pngcairo size 900,600 noenhanced\nset output {q(out / f'layers_{name}.png')}\n"
                f"set title {q(name + ': per layer at the final evaluation (mean over seeds)')}\n"
                f"set xlabel 'layer'\nset xtics 1\nset logscale y\nset format y '%.0e'\nset key outside right\n"
                f"set datafile missing 'nan'\nplot {', '.join(series)}\n", data)
        data.unlink()


def octet_curves(conds, out, octet):
    for c in conds:
        runs = [r for a in c["arms"] for r in a["runs"]]
        with tempfile.TemporaryDirectory(prefix="study_report-") as tmp:
            cwd = None
            if any(isinstance(r, ArchivePath) for r in runs):
                # `octet plot` reads folders: packed runs are written out under the same relative path
                # (so the curves carry the same names), in a scratch folder it runs in
                cwd = tmp
                args = []
                for r in runs:
                    if isinstance(r, ArchivePath):
                        rel = Path(str(r))
                        rel = rel.relative_to(rel.anchor) if rel.is_absolute() else rel
                        r.extract_to(Path(tmp) / rel)
                        args.append(str(rel))
                    else:
                        args.append(str(Path(r).resolve()))
            else:
                args = [str(r) for r in runs]
            png = (out / f"curves_{c['name']}.png").resolve()
            png.unlink(missing_ok=True)  # this report's own plot, redrawn (`octet plot --out` never replaces a file)
            r = subprocess.run([str(Path(octet).resolve()), "plot", *args, "--out", str(png),
                                "--title", f"{c['name']}: train (thin) and validation (thick) loss"],
                               capture_output=True, text=True, cwd=cwd)
        if r.returncode != 0:
            print(f"study_report: octet plot failed for {c['name']}: {r.stderr.strip()}", file=sys.stderr)


def parse_conditions(specs):
    """NAME=DIR (or DIR) arguments -> [(name, folder)], each folder on disk or in a study's archive
    (node); one error for a missing folder, a name that cannot name a file, or a name given twice."""
    out, names = [], set()
    for spec in specs:
        name, _, path = spec.partition("=") if "=" in spec else ("", "", spec)
        if not path:
            fail(f"'{spec}': NAME=DIR needs a folder after '='")
        d = node(path)  # a folder, or the same path in a study's archive
        name = name or Path(path).resolve().name
        if not d.is_dir():
            fail(f"{d} is not a folder (nor one in an archive: tools/results_archive.py)")
        if not name or any(c in name for c in '/\\') or name in (".", ".."):
            fail(f"condition name '{name}' must not be empty or hold a path separator (it names plot files)")
        if name in names:
            fail(f"condition {name} is given twice (name them NAME=DIR)")
        names.add(name)
        out.append((name, d))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("conditions", nargs="+", help="compare --out folders, or NAME=DIR")
    ap.add_argument("--out", default="results/stale-delta-study", help="where tables, CSVs and plots go")
    ap.add_argument("--octet", help="an octet binary: also draw every run's curves with `octet plot`")
    args = ap.parse_args()
    conds = [load_condition(name, d) for name, d in parse_conditions(args.conditions)]
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        fail(f"--out {out} exists and is not a folder")
    if args.octet and not (Path(args.octet).is_file() and os.access(args.octet, os.X_OK)):
        fail(f"--octet {args.octet} is not an executable file")
    out.mkdir(parents=True, exist_ok=True)
    (out / "tables.md").write_text(tables_md(conds))
    write_csvs(conds, out)
    plots(conds, out)
    if args.octet:
        octet_curves(conds, out, args.octet)
    print(f"study_report: {len(conds)} condition(s) -> {out}/tables.md, val_loss.csv, dq_bias.csv, layers.csv")


if __name__ == "__main__":
    main()
