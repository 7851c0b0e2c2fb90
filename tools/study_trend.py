#!/usr/bin/env python3
"""tools/study_trend.py — the stale-delta study's trend with model size, and the matched arm's gap bounded.

Two reports from `octet compare` folders (plain, or members of a study's runs.tar.xz: the same
NAME=DIR arguments as tools/study_report.py):

  size NAME=DIR...   the dQ bias along the mean key (each evaluation's mean over the attention
                     layers; docs/delta-matching.md §"The dQ bias along the mean key") of one arm
                     (--arm, default fp8-stale) against the model's size N (the block matrices:
                     n_layer · (d·(H+2G)·d_head + H·d_head·d + k·d·d_ff), k = 3 for SwiGLU, 2 for GELU;
                     embeddings, norms and the LM head left out) and the tokens T seen at the evaluation:
                       * per evaluation step: log10 b = a + α log10 N over every run (OLS), α with its
                         standard error and 95 % interval (Student t, n - 2 degrees of freedom), R²;
                       * jointly: log10 b = a + α log10 N + β log10 T over every (run, evaluation);
                       * for each --threshold STEP=LEVEL: the size N* at which the step's fit reaches
                         LEVEL, with Fieller's 95 % interval (the sizes whose fitted mean is not
                         distinguishable from LEVEL; unbounded when the slope itself is not
                         distinguishable from 0) and the range of N* over the refits that take one
                         seed per condition (every such choice up to 4096, said when capped).
                     Writes trend.md and trend.csv (condition, seed, N, step, tokens, bias) to --out,
                     and trend.png (every run's bias at each step against N, log-log, with the fits)
                     where gnuplot is installed.
  gaps NAME=DIR...   per condition, each FP8 arm's final validation loss against bf16: the mean
                     difference over the seeds with its Welch 95 % interval, and the mean of the
                     per-seed differences over the seeds both arms ran (the arms of one seed share
                     the initialization and data order) with its paired t interval, both also in %
                     of bf16; over the conditions, the mean of the relative Welch gaps with a t
                     interval across conditions (each condition one observation). A run whose final
                     validation loss is not finite (diverged) is counted and left out of the means.
                     Writes gaps.md and gaps.csv to --out.

The runs are each condition's <arm>/seed-<seed>/ (or <arm>/) folders with metrics.jsonl and
config.toml. Standard library only. Usage:
  tools/study_trend.py size --out DIR [--arm fp8-stale] [--threshold 50=0.87 ...] NAME=DIR ...
  tools/study_trend.py gaps --out DIR NAME=DIR ...
"""
import argparse
import csv
import itertools
import math
import sys
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from study_report import (dq_bias_by_step, eval_records, fail, gnuplot, mean_std, parse_conditions, q,  # noqa: E402
                          run_dirs, student_t_quantile, welch_ci)

MAX_SEED_CHOICES = 4096  # refits over one-seed-per-condition choices (every choice below this many)


def run_config(run):
    """The run's config.toml as a dict (octet writes it beside metrics.jsonl)."""
    p = run / "config.toml"
    if not p.exists():
        fail(f"{run} has no config.toml (the size and tokens per step come from it)")
    try:
        return tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        fail(f"{p} is not valid TOML ({e})")


def block_params(cfg):
    """The block matrices' parameter count of an attention-only model config (see the module doc)."""
    m = cfg.get("model", {})
    try:
        L, d, H, G, ff = (int(m[k]) for k in ("n_layer", "d_model", "n_head", "n_kv_head", "d_ff"))
    except KeyError as e:
        fail(f"config lacks model.{e.args[0]}")
    except (TypeError, ValueError) as e:
        fail(f"config's model shape is not integers ({e})")
    if m.get("mixer", "attention") != "attention":
        fail(f"model.mixer = {m.get('mixer')}: the size trend counts attention-only models")
    if H <= 0 or d % H:
        fail(f"model.n_head {H} does not divide model.d_model {d}")
    hd = d // H
    k = 3 if m.get("mlp", "swiglu") == "swiglu" else 2
    return L * (d * (H + 2 * G) * hd + H * hd * d + k * d * ff)


def tokens_per_step(cfg):
    t, m = cfg.get("train", {}), cfg.get("model", {})
    try:
        return int(t.get("batch_size", 1)) * int(t.get("grad_accum", 1)) * int(m.get("seq_len", 1))
    except (TypeError, ValueError) as e:
        fail(f"config's batch_size, grad_accum or seq_len is not an integer ({e})")


def ols(xs, ys):
    """Simple least squares y = a + b x: dict with a, b, their variances and covariance, the residual
    variance s2, R² and n (n ≥ 3 and distinct xs)."""
    n = len(xs)
    if n < 3:
        fail(f"a fit needs at least 3 points, got {n}")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        fail("a fit needs at least two different sizes")
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    rss = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys))
    tss = sum((y - my) ** 2 for y in ys)
    s2 = rss / (n - 2)
    return {"a": a, "b": b, "var_b": s2 / sxx, "var_a": s2 * (1 / n + mx * mx / sxx), "cov_ab": -mx * s2 / sxx,
            "s2": s2, "r2": 1 - rss / tss if tss > 0 else 1.0, "n": n}


def solve(m, v):
    """Gaussian elimination with partial pivoting: m x = v (m square, small)."""
    k = len(v)
    a = [list(row) + [v[i]] for i, row in enumerate(m)]
    for c in range(k):
        p = max(range(c, k), key=lambda r: abs(a[r][c]))
        if abs(a[p][c]) < 1e-300:
            return None
        a[c], a[p] = a[p], a[c]
        for r in range(k):
            if r != c:
                f = a[r][c] / a[c][c]
                a[r] = [x - f * y for x, y in zip(a[r], a[c])]
    return [a[i][k] / a[i][i] for i in range(k)]


def ols_multi(rows, ys):
    """Least squares y = Σ c_j x_j (rows hold the x_j, a column of ones included): coefficients and
    their standard errors (residual variance over n - p degrees of freedom)."""
    n, p = len(rows), len(rows[0])
    if n <= p:
        fail(f"the joint fit needs more than {p} points, got {n}")
    xtx = [[sum(r[i] * r[j] for r in rows) for j in range(p)] for i in range(p)]
    xty = [sum(r[i] * y for r, y in zip(rows, ys)) for i in range(p)]
    coef = solve(xtx, xty)
    if coef is None:
        fail("the joint fit is singular (every run at one size, or every evaluation at one step?)")
    rss = sum((y - sum(c * x for c, x in zip(coef, r))) ** 2 for r, y in zip(rows, ys))
    s2 = rss / (n - p)
    se = []
    for j in range(p):  # diagonal of (XᵀX)⁻¹ by solving for each unit vector
        col = solve(xtx, [1.0 if i == j else 0.0 for i in range(p)])
        se.append(math.sqrt(max(s2 * col[j], 0.0)))
    return coef, se, n


def crossing(fit, level, t):
    """log10 N at which the fit a + α log10 N reaches log10(level), and Fieller's interval at the
    Student-t quantile t: the x with (a + α x − y)² ≤ t² Var(a + α x) (Fieller 1954; the standard
    interval of an inverse regression). (x, low, high); low/high None when the interval is not
    bounded (α not distinguishable from 0 at that level); x None when α <= 0 (no crossing)."""
    y = math.log10(level)
    a, b = fit["a"], fit["b"]
    if b <= 0:
        return None, None, None
    x = (y - a) / b
    t2 = t * t
    qa = b * b - t2 * fit["var_b"]
    qb = 2 * (b * (a - y) - t2 * fit["cov_ab"])
    qc = (a - y) ** 2 - t2 * fit["var_a"]
    disc = qb * qb - 4 * qa * qc
    if qa <= 0 or disc < 0:
        return x, None, None
    r = math.sqrt(disc)
    return x, (-qb - r) / (2 * qa), (-qb + r) / (2 * qa)


def size_points(conds, arm):
    """Every (condition, seed, N, step, tokens, bias) of the arm's runs; bias > 0 only (log fit)."""
    pts, dropped = [], 0
    for name, d in conds:
        runs = run_dirs(d, arm)
        if not runs:
            fail(f"{d} holds no {arm} run (<arm>/seed-*/metrics.jsonl)")
        for r in runs:
            cfg = run_config(r)
            n, tps = block_params(cfg), tokens_per_step(cfg)
            seed = cfg.get("train", {}).get("seed")
            try:
                got = dq_bias_by_step(r)
            except KeyError as e:
                fail(f"{r / 'metrics.jsonl'}: an evaluation record lacks {e}")
            if not got:
                fail(f"{r} has no dQ bias in its evaluations (a run made before the diagnostic?)")
            for step, b in got:
                if b > 0:
                    pts.append({"condition": name, "seed": seed, "n": n, "step": step, "tokens": step * tps, "bias": b})
                else:
                    dropped += 1
        if not any(p["condition"] == name for p in pts):
            fail(f"{d}: no positive dQ bias in any {arm} evaluation (a log fit needs b > 0)")
    if dropped:
        print(f"study_trend: {dropped} evaluation(s) with a dQ bias <= 0 left out of the log fits", file=sys.stderr)
    return pts


def fmt_n(n):
    if not math.isfinite(n) or n >= 1e15:
        return "> 1e15"
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.0f}M" if n >= 1e6 else f"{n:.3g}"


def size_report(conds, arm, thresholds, out):
    pts = size_points(conds, arm)
    sizes = sorted({p["n"] for p in pts})
    if len(sizes) < 2:
        fail("the size trend needs conditions of at least two sizes")
    steps = sorted({p["step"] for p in pts})
    lines = [f"# The {arm} dQ bias against model size", "",
             "Mean over the attention layers of ||τ r k̄|| / ||dQ|| at each evaluation; N = the block matrices'",
             "parameters (tools/study_trend.py). Per condition: the mean over its seeds (min-max).", "",
             "| condition | N | seeds | " + " | ".join(f"step {s}" for s in steps) + " |",
             "|---|---|---|" + "---|" * len(steps)]
    for name, _ in conds:
        mine = [p for p in pts if p["condition"] == name]
        cells = []
        for s in steps:
            v = [p["bias"] for p in mine if p["step"] == s]
            cells.append(f"{mean_std(v)[0]:.3f} ({min(v):.3f}-{max(v):.3f})" if v else "—")
        seeds = sorted({p["seed"] for p in mine}, key=str)
        lines.append(f"| {name} | {fmt_n(mine[0]['n'])} | {len(seeds)} | " + " | ".join(cells) + " |")
    lines += ["", "## Per evaluation step: log10 b = a + α log10 N", "",
              "| step | tokens seen | points | α | 95 % interval of α | R² | b at 1B (fit) |", "|---|---|---|---|---|---|---|"]
    fits = {}
    for s in steps:
        at = [p for p in pts if p["step"] == s]
        if len({p["n"] for p in at}) < 2 or len(at) < 3:
            continue
        f = ols([math.log10(p["n"]) for p in at], [math.log10(p["bias"]) for p in at])
        fits[s] = f
        half = student_t_quantile(0.95, f["n"] - 2) * math.sqrt(f["var_b"])
        tokens = sorted({p["tokens"] for p in at})
        lines.append(f"| {s} | {tokens[0] / 1e6:.2f}M | {f['n']} | {f['b']:.3f} | {f['b'] - half:.3f} to {f['b'] + half:.3f} | "
                     f"{f['r2']:.3f} | {10 ** (f['a'] + 9 * f['b']):.3f} |")
    rows = [[1.0, math.log10(p["n"]), math.log10(p["tokens"])] for p in pts]
    coef, se, n = ols_multi(rows, [math.log10(p["bias"]) for p in pts])
    lines += ["", "## Jointly: log10 b = a + α log10 N + β log10 T", "",
              f"Over {n} (run, evaluation) points: α = {coef[1]:.3f} ± {se[1]:.3f}, β = {coef[2]:.3f} ± {se[2]:.3f} "
              f"(standard errors that treat the evaluations of one run as independent: too small by how much they "
              f"are not), a = {coef[0]:.3f}."]
    if thresholds:
        lines += ["", "## Where the fit reaches a level", "",
                  "| step | level | N* (fit) | Fieller's 95 % interval | range over one-seed-per-condition refits |",
                  "|---|---|---|---|---|"]
    for s, level in thresholds:
        if s not in fits:
            fail(f"--threshold {s}={level}: no evaluation at step {s} in every size (steps: {steps})")
        f = fits[s]
        x, lo, hi = crossing(f, level, student_t_quantile(0.95, f["n"] - 2))
        if x is None:
            lines.append(f"| {s} | {level} | — (the fit does not grow with size) | — | — |")
            continue
        by_cond = {}
        for p in pts:
            if p["step"] == s:
                by_cond.setdefault(p["condition"], []).append(p)
        total = math.prod(len(v) for v in by_cond.values())
        refits = []
        for pick in itertools.islice(itertools.product(*by_cond.values()), MAX_SEED_CHOICES):
            if len({p["n"] for p in pick}) >= 2 and len(pick) >= 3:
                g = ols([math.log10(p["n"]) for p in pick], [math.log10(p["bias"]) for p in pick])
                gx = crossing(g, level, 1.0)[0]
                if gx is not None:
                    refits.append(gx)
        capped = f", the first {MAX_SEED_CHOICES} of {total}" if total > MAX_SEED_CHOICES else ""
        rng = f"{fmt_n(10 ** min(refits))} to {fmt_n(10 ** max(refits))} ({len(refits)} refits{capped})" if refits else "—"
        interval = f"{fmt_n(10 ** lo)} to {fmt_n(10 ** hi)}" if lo is not None else "unbounded (α not distinguishable from 0)"
        lines.append(f"| {s} | {level} | {fmt_n(10 ** x)} | {interval} | {rng} |")
    out.mkdir(parents=True, exist_ok=True)
    (out / "trend.md").write_text("\n".join(lines) + "\n")
    with open(out / "trend.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["condition", "seed", "n_params", "step", "tokens", "dq_bias"])
        for p in pts:
            w.writerow([p["condition"], p["seed"], p["n"], p["step"], p["tokens"], f"{p['bias']:.6g}"])
    trend_plot(pts, fits, arm, out)
    print(f"study_trend: {len(conds)} condition(s), {len(pts)} points -> {out}/trend.md, trend.csv")


def trend_plot(pts, fits, arm, out):
    """trend.png: the bias of every run against N per evaluation step (points) and each step's fit (lines)."""
    steps = sorted(fits)
    data = out / "trend.dat"
    data.write_text("\n\n\n".join("\n".join(f"{p['n']!r} {p['bias']!r}" for p in pts if p["step"] == s) for s in steps) + "\n")
    series = []
    for i, s in enumerate(steps):
        f = fits[s]
        series.append(f"{q(data)} index {i} using 1:2 with points lc {i + 1} pt 7 title {q(f'step {s}')}")
        series.append(f"10**({f['a']!r} + {f['b']!r}*log10(x)) with lines lc {i + 1} notitle")
    ok = gnuplot("set terminal pngcairo size 900,600 noenhanced\n"
                 f"set output {q(out / 'trend.png')}\nset logscale xy\nset xrange [5e7:2e10]\nset yrange [0.01:1.5]\n"
                 f"set title {q(arm + ': dQ bias along the mean key (mean over layers) against size, per evaluation step')}\n"
                 "set xlabel 'N (block matrices)'\nset ylabel 'dQ bias'\nset key top left\n"
                 f"plot {', '.join(series)}\n", data)
    data.unlink()
    if not ok:
        (out / "trend.png").unlink(missing_ok=True)  # no stale plot beside new numbers
        print("study_trend: no trend.png (gnuplot missing or failed)", file=sys.stderr)


def final_losses(d, arm):
    """{seed: final validation loss} of the arm's runs with a finite one, and how many ended non-finite."""
    vals, bad = {}, 0
    for r in run_dirs(d, arm):
        ev = eval_records(r)
        if not ev:
            continue
        v = ev[-1].get("val_loss")
        if isinstance(v, (int, float)) and math.isfinite(v):
            vals[run_config(r).get("train", {}).get("seed", r.name)] = float(v)
        else:
            bad += 1
    return vals, bad


def t_interval(xs):
    """Mean of xs and its 95 % Student-t interval (n − 1 degrees of freedom); None below 2 values."""
    m, sd, n = mean_std(xs)
    if n < 2:
        return None
    half = student_t_quantile(0.95, n - 1) * sd / math.sqrt(n)
    return m, m - half, m + half


def fmt_ci(ci, scale=1.0, pct=False):
    if ci is None:
        return "—", "—"
    f = (lambda v: f"{100 * v / scale:+.2f} %") if pct else (lambda v: f"{v:+.4f}")
    return f(ci[0]), f"{f(ci[1])} to {f(ci[2])}"


def gaps_report(conds, out):
    lines = ["# Each FP8 arm's final validation loss against bf16", "",
             "Welch: the difference of the means over the seeds (arm − bf16) and Welch's 95 % interval. Paired: the",
             "mean of the per-seed differences over the seeds both arms ran (shared initialization and data order)",
             "and its t interval. Both also in % of bf16's mean. A diverged run (non-finite final loss) is counted, not averaged.", "",
             "| condition | arm | seeds (arm / bf16) | Welch gap | 95 % interval | in % | paired gap % | paired 95 % interval % |",
             "|---|---|---|---|---|---|---|---|"]
    rows, pooled = [], {}
    for name, d in conds:
        base, base_bad = final_losses(d, "bf16")
        if not base:
            fail(f"{d} holds no bf16 run with a finite final loss to compare against")
        bm = mean_std(list(base.values()))[0]
        arms = sorted(p.name for p in d.iterdir() if p.is_dir() and p.name != "bf16" and run_dirs(d, p.name))
        for arm in arms:
            vals, bad = final_losses(d, arm)
            seeds = f"{len(vals)} / {len(base)}" + (f" (+{bad} / +{base_bad} diverged)" if bad or base_bad else "")
            if not vals:
                lines.append(f"| {name} | {arm} | {seeds} | — | — | — | — | — |")
                rows.append([name, arm, 0, len(base), bad] + [""] * 9)
                continue
            w = welch_ci(list(vals.values()), list(base.values()))
            diff = mean_std(list(vals.values()))[0] - bm
            welch_abs = fmt_ci(w) if w else (f"{diff:+.4f}", "—")
            welch_pct = fmt_ci(w, bm, pct=True)[0] if w else f"{100 * diff / bm:+.2f} %"
            paired = t_interval([vals[k] - base[k] for k in vals if k in base])
            pp = fmt_ci(paired, bm, pct=True)
            lines.append(f"| {name} | {arm} | {seeds} | {welch_abs[0]} | {welch_abs[1]} | {welch_pct} | {pp[0]} | {pp[1]} |")
            cells = [w[0], w[1], w[2], 100 * w[0] / bm, 100 * w[1] / bm, 100 * w[2] / bm] if w else [diff, "", "", 100 * diff / bm, "", ""]
            cells += [100 * paired[0] / bm, 100 * paired[1] / bm, 100 * paired[2] / bm] if paired else ["", "", ""]
            rows.append([name, arm, len(vals), len(base), bad] + cells)
            pooled.setdefault(arm, []).append(100 * diff / bm)
    if pooled:
        lines += ["", "## Over the conditions", "",
                  "The mean of the conditions' relative gaps (% of bf16) with its 95 % t interval across conditions (each",
                  "condition one observation: the interval covers how the gap varies between conditions and seeds alike).", "",
                  "| arm | conditions | mean gap % | 95 % interval % |", "|---|---|---|---|"]
        for arm, g in sorted(pooled.items()):
            ci = t_interval(g)
            lines.append(f"| {arm} | {len(g)} | " + (f"{ci[0]:+.2f} % | {ci[1]:+.2f} to {ci[2]:+.2f} % |" if ci else f"{g[0]:+.2f} % | — |"))
        lines += ["", "(For an arm whose gap differs between conditions, as the stale arm's does, the mean says little:",
                  "read the per-condition rows.)"]
    out.mkdir(parents=True, exist_ok=True)
    (out / "gaps.md").write_text("\n".join(lines) + "\n")
    with open(out / "gaps.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["condition", "arm", "seeds", "bf16_seeds", "diverged", "gap", "gap_low", "gap_high", "gap_pct",
                    "gap_pct_low", "gap_pct_high", "paired_pct", "paired_pct_low", "paired_pct_high"])
        for r in rows:
            w.writerow([f"{x:.6g}" if isinstance(x, float) else x for x in r])
    print(f"study_trend: {len(conds)} condition(s) -> {out}/gaps.md, gaps.csv")


def parse_threshold(spec):
    step, _, level = spec.partition("=")
    try:
        s, v = int(step), float(level)
    except ValueError:
        fail(f"--threshold '{spec}': expected STEP=LEVEL, e.g. 300=0.5")
    if s <= 0 or not 0 < v < 1:
        fail(f"--threshold '{spec}': STEP must be > 0 and LEVEL in (0, 1)")
    return s, v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="report", required=True)
    sz = sub.add_parser("size", help="the dQ bias against model size")
    sz.add_argument("conditions", nargs="+", help="compare --out folders, or NAME=DIR")
    sz.add_argument("--arm", default="fp8-stale")
    sz.add_argument("--threshold", action="append", default=[], help="STEP=LEVEL: the size at which the step's fit reaches LEVEL")
    sz.add_argument("--out", required=True, help="where trend.md, trend.csv and trend.png go")
    gp = sub.add_parser("gaps", help="each FP8 arm's validation-loss gap to bf16 with its interval")
    gp.add_argument("conditions", nargs="+", help="compare --out folders, or NAME=DIR")
    gp.add_argument("--out", required=True, help="where gaps.md and gaps.csv go")
    args = ap.parse_args()
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        fail(f"--out {out} exists and is not a folder")
    thresholds = [parse_threshold(t) for t in args.threshold] if args.report == "size" else []
    conds = parse_conditions(args.conditions)
    try:
        if args.report == "size":
            size_report(conds, args.arm, thresholds, out)
        else:
            gaps_report(conds, out)
    except OSError as e:  # --out under a file, a folder that cannot be written
        fail(f"cannot write to --out {out}: {e.strerror or e}")


if __name__ == "__main__":
    main()
