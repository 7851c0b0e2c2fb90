#!/usr/bin/env python3
"""bench/peers/torch_results_report.py — the tables and the loss plot of a PyTorch drop-in results
run (bench/peers/torch_results.sh; results/torch-dropin/README.md).

  torch_results_report.py DIR [--plot curves.png] [--no-plot]

DIR holds one folder per arm with status.json (the arm's summary line or its failure) and
metrics.jsonl (per step {step, loss, ms, tokens_per_s}, per evaluation {step, val_loss}): the
run's work folder, or its metrics.tgz unpacked. Prints two Markdown tables: per single-GPU arm the
training loss (mean of the last 10 steps), the last validation loss and its gap to the bf16 arm,
the median tokens/s and its ratio to bf16; and the data-parallel run's tokens/s against the
one-GPU octet-matched arm. The plot is `octet plot` of the single-GPU arms (gnuplot; the CLI from
$OCTET_BIN, else build/release/octet, else build/octet).
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load(arm_dir):
    status = json.loads((arm_dir / "status.json").read_text())
    steps, evals = [], []
    metrics = arm_dir / "metrics.jsonl"
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            r = json.loads(line)
            (evals if "val_loss" in r else steps).append(r)
    return status, steps, evals


def fmt(v, spec, unit=""):
    return "n/a" if v is None else format(v, spec) + unit


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--plot", default="", help="PNG path (default DIR/curves.png)")
    ap.add_argument("--no-plot", action="store_true")
    a = ap.parse_args()
    root = pathlib.Path(a.dir)
    arms = {d.name: load(d) for d in sorted(root.iterdir()) if (d / "status.json").exists()}
    if not arms:
        sys.exit(f"{root}: no <arm>/status.json")
    base = arms.get("bf16", ({}, [], []))
    base_val = base[2][-1]["val_loss"] if base[2] else None
    base_tps = base[0].get("tokens_per_s")
    print("| arm | attention | linears | train loss (last 10) | val loss | vs bf16 | tokens/s | vs bf16 |")
    print("|---|---|---|---|---|---|---|---|")
    ddp = []
    for name, (st, steps, evals) in arms.items():
        if name.startswith("ddp-"):
            ddp.append((name, st))
            continue
        if st.get("status") != "ok":
            print(f"| {name} | {st.get('status')}: {st.get('why', 'rc ' + str(st.get('rc')))} |||||||")
            continue
        train = statistics.mean(r["loss"] for r in steps[-10:]) if steps else None
        val = evals[-1]["val_loss"] if evals else None
        gap = 100 * (val / base_val - 1) if val is not None and base_val else None
        tps = st["tokens_per_s"]
        linears = f"fp8 {st['recipe']} {st['format']}" if st["linears"] == "fp8" else st["linears"]
        print(f"| {name} | {st['attention']} | {linears} | "
              f"{fmt(train, '.4f')} | {fmt(val, '.4f')} | {fmt(gap, '+.2f', '%')} | {tps:,.0f} | "
              f"{fmt(tps / base_tps if base_tps else None, '.2f', 'x')} |")
    if ddp:
        one = arms.get("octet-matched", ({}, [], []))[0].get("tokens_per_s")
        print("\n| data parallel | GPUs | tokens/s | vs 1 GPU (octet-matched) |\n|---|---|---|---|")
        for name, st in ddp:
            if st.get("status") != "ok":
                print(f"| {name} | {st.get('status')}: {st.get('why', 'rc ' + str(st.get('rc')))} |||")
                continue
            print(f"| {name} | {st['world_size']} | {st['tokens_per_s']:,.0f} | "
                  f"{fmt(st['tokens_per_s'] / one if one else None, '.2f', 'x')} |")
    if a.no_plot:
        return
    runs = [str(root / n) for n, (st, steps, _) in arms.items() if steps and not n.startswith("ddp-")]
    cli = os.environ.get("OCTET_BIN") or next(
        (str(p) for p in (ROOT / "build/release/octet", ROOT / "build/octet") if p.exists()), "octet")
    png = a.plot or str(root / "curves.png")
    subprocess.run([cli, "plot", *runs, "--out", png, "--title",
                    "GPT-2-small, bytes of the default corpus: PyTorch + octet / torchao"], check=True)


if __name__ == "__main__":
    main()
