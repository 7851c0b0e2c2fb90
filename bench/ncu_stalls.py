#!/usr/bin/env python3
"""bench/ncu_stalls.py — where a kernel's warps wait, from Nsight Compute's source page:
`ncu --import R.ncu-rep --page source --csv --print-source sass` (a report collected with the
SourceCounters section) lists every SASS instruction with its warp-state samples. This prints the
samples summed by opcode (the instruction's first word after any predicate, e.g. BAR, RED,
WARPGROUP.DEPBAR, MUFU.EX2), then the instructions with the most samples, each with its share of
the kernel's samples and, where the CSV has them, its leading stall reasons.

Usage: bench/ncu_stalls.py SASS.csv [--top N]   (bench/gpu_run.sh ncu-attention, OCTET_NCU_SOURCE=1)
A CSV without a recognizable header is an error naming what was looked for.
"""
import argparse
import collections
import csv
import io
import re
import sys

ALL = re.compile(r"warp stall sampling \(all", re.I)
REASON = re.compile(r"stall", re.I)


def opcode(sass):
    """The opcode of one SASS line: 'RED.E.ADD.F32...' -> 'RED', '@!P0 BRA ...' -> 'BRA';
    the dotted suffixes kept for the wgmma family and MUFU (WARPGROUP.DEPBAR.LE -> WARPGROUP.DEPBAR)."""
    words = sass.strip().rstrip(";").split()
    if words and words[0].startswith("@"):
        words = words[1:]
    if not words:
        return "?"
    parts = words[0].split(".")
    return ".".join(parts[:2]) if parts[0] in ("WARPGROUP", "MUFU", "HGMMA", "QGMMA") else parts[0]


def number(text):
    """A sample count, or None for text that is not one (an empty cell counts 0)."""
    text = text.replace(",", "").strip()
    if not text:
        return 0.0
    try:
        return float(text)
    except ValueError:
        return None


def parse(text):
    """(rows, reason_columns): rows as dicts {sass, samples, reasons: {name: samples}}."""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if "Source" in l and ALL.search(l)), None)
    if start is None:
        raise ValueError("no header with 'Source' and 'Warp Stall Sampling (All Samples)' "
                         "(was the report collected with --section SourceCounters?)")
    reader = csv.reader(io.StringIO("\n".join(lines[start:])))
    header = next(reader)
    if "Source" not in header:
        raise ValueError(f"the header has no column named exactly 'Source': {header[:6]}")
    src = header.index("Source")
    all_col = next(i for i, h in enumerate(header) if ALL.search(h))
    aggregate = re.compile(r"warp stall sampling \((all|not-issued) samples\)", re.I)
    reason_cols = [i for i, h in enumerate(header)
                   if i != all_col and REASON.search(h) and not aggregate.fullmatch(h.strip())]
    rows = []
    for r in reader:
        if len(r) <= max(src, all_col):
            continue
        samples = number(r[all_col])
        if samples is None:
            raise ValueError(f"'{r[all_col]}' in column '{header[all_col]}' is not a sample count "
                             f"(instruction '{r[src].strip()}')")
        rows.append({"sass": r[src], "samples": samples,
                     "reasons": {header[i]: number(r[i]) or 0.0 for i in reason_cols if i < len(r)}})
    return rows, [header[i] for i in reason_cols]


def report(rows, top):
    total = sum(r["samples"] for r in rows)
    if total <= 0:
        return "no warp-state samples in the CSV"
    out = [f"{len(rows)} SASS instructions, {total:.0f} warp-state samples"]
    by_op = collections.Counter()
    for r in rows:
        by_op[opcode(r["sass"])] += r["samples"]
    out.append("by opcode (share of samples):")
    for op, n in by_op.most_common(25):
        out.append(f"  {op:<22} {100 * n / total:6.2f} %")
    out.append(f"the {top} instructions with the most samples:")
    for r in sorted(rows, key=lambda r: -r["samples"])[:top]:
        lead = sorted(((v, k) for k, v in r["reasons"].items() if v > 0), reverse=True)[:3]
        why = ", ".join(f"{k} {100 * v / r['samples']:.0f}%" for v, k in lead) if r["samples"] else ""
        out.append(f"  {100 * r['samples'] / total:6.2f} %  {r['sass'].strip()[:70]:<70} {why}")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    try:
        with open(a.csv, encoding="utf-8", errors="replace") as f:
            rows, _ = parse(f.read())
    except (OSError, ValueError) as e:
        sys.exit(f"ncu_stalls.py: {a.csv}: {e}")
    print(report(rows, a.top))


if __name__ == "__main__":
    main()
