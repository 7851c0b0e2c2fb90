"""tools/study_trend.py: the size fit recovers a known power law exactly, its parameter count is
octet's own, the gaps report is Welch's interval, and bad input gets one clear error."""
import csv
import json
import math
import re
import subprocess
import sys

import pytest

from cli_util import ROOT, TINY_MODEL, octet, sets

TREND = ROOT / "tools" / "study_trend.py"
sys.path.insert(0, str(ROOT / "tools"))
import study_trend  # noqa: E402

# GPT-2-family shapes (head_dim 64): N = n_layer·(4·d² + 3·d·d_ff) for H = G
SHAPES = {"s1": (4, 256, 4, 704), "s2": (8, 512, 8, 1408), "s3": (12, 768, 12, 2048), "s4": (24, 1024, 16, 2816)}
ALPHA, BETA, C = 0.6, -0.7, 2e-3  # bias = C · (N / 1e6)^ALPHA · (T / 1e6)^BETA, times e^{±0.1} per seed
TOKENS_PER_STEP = 8192


def n_blocks(L, d, H, ff):
    return L * (4 * d * d + 3 * d * ff)


def truth(n, tokens):
    return C * (n / 1e6) ** ALPHA * (tokens / 1e6) ** BETA


def write_run(d, shape, seed, biases, losses, mixer="attention"):
    L, dm, H, ff = shape
    d.mkdir(parents=True)
    (d / "config.toml").write_text(
        f'[model]\nn_layer = {L}\nd_model = {dm}\nn_head = {H}\nn_kv_head = {H}\nd_ff = {ff}\nseq_len = 1024\n'
        f'mlp = "swiglu"\nmixer = "{mixer}"\n[train]\nbatch_size = 8\ngrad_accum = 1\nseed = {seed}\n')
    lines = []
    for (step, b), loss in zip(biases, losses):
        layers = [{"layer": i, "dq_bias": {"norm": b * f}} for i, f in enumerate((0.5, 1.5))]  # mean b
        lines.append(json.dumps({"step": step, "val_loss": loss, "layers": layers}))
    (d / "metrics.jsonl").write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    for name, shape in SHAPES.items():
        n = n_blocks(*shape)
        for seed, eps in ((1234, 0.1), (1235, -0.1)):
            for arm in ("bf16", "fp8-stale"):
                biases = [(s, truth(n, s * TOKENS_PER_STEP) * math.exp(eps)) for s in (50, 100, 150)]
                write_run(root / name / arm / f"seed-{seed}", shape, seed, biases, [3.0 + eps] * 3)
    return root


def run(*args):
    return subprocess.run([sys.executable, TREND, *map(str, args)], capture_output=True, text=True)


def test_size_fit_recovers_the_power_law(sweep, tmp_path):
    r = run("size", "--threshold", "100=0.5", "--out", tmp_path, *(f"{k}={sweep / k}" for k in SHAPES))
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "trend.md").read_text()
    # per step: symmetric seed noise in log space, so OLS gives the exponent exactly
    for step in (50, 100, 150):
        row = next(l for l in md.splitlines() if l.startswith(f"| {step} |"))
        assert float(row.split("|")[4]) == pytest.approx(ALPHA, abs=5e-4)
    m = re.search(r"α = (-?[\d.]+) ± [\d.]+, β = (-?[\d.]+)", md)
    assert float(m.group(1)) == pytest.approx(ALPHA, abs=5e-4) and float(m.group(2)) == pytest.approx(BETA, abs=5e-4)
    # the crossing: C (N*/1e6)^α (T/1e6)^β = 0.5 at step 100
    t = 100 * TOKENS_PER_STEP / 1e6
    n_star = 1e6 * (0.5 / (C * t ** BETA)) ** (1 / ALPHA)
    row = next(l for l in md.splitlines() if l.startswith("| 100 | 0.5 |"))
    got = row.split("|")[3].strip()
    val = float(got[:-1]) * (1e9 if got.endswith("B") else 1e6)
    assert val == pytest.approx(n_star, rel=0.01)
    assert "(16 refits)" in row  # 2 seeds per size, 4 sizes
    with open(tmp_path / "trend.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 4 * 2 * 3
    for x in rows:
        assert float(x["dq_bias"]) == pytest.approx(truth(int(x["n_params"]), int(x["tokens"])) * math.exp(
            0.1 if x["seed"] == "1234" else -0.1), rel=1e-5)


def test_block_params_is_octets_own_count(tmp_path):
    (tmp_path / "c.txt").write_text("the block count must match what the trainer reports.\n" * 40)
    extra = ["model.n_layer=2", "model.n_kv_head=1", "train.steps=1", "train.eval_every=1", f"data.path={tmp_path / 'c.txt'}"]
    r = octet("train", *sets(*TINY_MODEL, *extra), "--out", tmp_path / "run")
    assert r.returncode == 0, r.stderr
    total = int(re.search(r"\| parameters \| (\d+) \|", r.stdout).group(1))
    import tomllib
    cfg = tomllib.loads((tmp_path / "run" / "config.toml").read_text())
    m = cfg["model"]
    d, L = m["d_model"], m["n_layer"]
    embeddings = m["vocab_size"] * d * (1 if m.get("tied_embeddings", True) else 2)
    norms = (2 * L + 1) * d * (2 if m.get("norm") == "layernorm" else 1)
    assert study_trend.block_params(cfg) + embeddings + norms == total


def test_fieller_interval_is_the_set_where_the_fit_is_not_distinguishable_from_the_level():
    xs = [8.0, 8.0, 8.5, 8.5, 9.0, 9.0]
    ys = [-1.0, -0.9, -0.7, -0.65, -0.45, -0.35]
    f = study_trend.ols(xs, ys)
    t = 2.7764451  # t(0.975, 4)
    x, lo, hi = study_trend.crossing(f, 10 ** -0.2, t)
    assert lo < x < hi
    for edge in (lo, hi):  # at each end: |a + b x - y| = t · sd of the fitted mean
        sd = math.sqrt(f["var_a"] + edge * edge * f["var_b"] + 2 * edge * f["cov_ab"])
        assert abs(f["a"] + f["b"] * edge + 0.2) == pytest.approx(t * sd, rel=1e-9)
    # a slope not distinguishable from 0: no bounded interval; a falling fit: no crossing at all
    flat = study_trend.ols(xs, [-1.0, -0.5, -0.9, -0.6, -0.8, -0.7])
    assert study_trend.crossing(flat, 0.5, t)[1] is None
    assert study_trend.crossing(study_trend.ols(xs, [-y for y in ys]), 0.5, t) == (None, None, None)


def test_gaps_count_a_diverged_run_and_pair_by_seed(sweep, tmp_path):
    import shutil
    cond = tmp_path / "c"
    shutil.copytree(sweep / "s2", cond)
    write_run(cond / "fp8-stale" / "seed-1236", SHAPES["s2"], 1236, [(50, 0.1)], [float("nan")])
    write_run(cond / "bf16" / "seed-1236", SHAPES["s2"], 1236, [(50, 0.1)], [3.0])
    r = run("gaps", "--out", tmp_path / "o", f"c={cond}")
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "o" / "gaps.md").read_text()
    assert "| c | fp8-stale | 2 / 3 (+1 / +0 diverged) |" in md
    with open(tmp_path / "o" / "gaps.csv") as fh:
        (row,) = list(csv.DictReader(fh))
    assert row["diverged"] == "1"
    # paired by seed: the arms' losses are equal seed by seed, so the paired gap and interval are 0
    assert float(row["paired_pct"]) == 0 and float(row["paired_pct_low"]) == 0 and float(row["paired_pct_high"]) == 0


def test_gaps_report_is_welchs_interval(sweep, tmp_path):
    r = run("gaps", "--out", tmp_path, f"s1={sweep / 's1'}")
    assert r.returncode == 0, r.stderr
    with open(tmp_path / "gaps.csv") as fh:
        (row,) = list(csv.DictReader(fh))
    # the same losses per seed in both arms: gap 0; each side {3.1, 2.9}: se = sqrt(2 · 0.02 / 2) = 0.1414,
    # Welch df = 2, t(0.975, 2) = 4.303
    assert row["arm"] == "fp8-stale" and float(row["gap"]) == pytest.approx(0.0, abs=1e-12)
    assert float(row["gap_high"]) == pytest.approx(4.302653 * math.sqrt(0.02), rel=1e-5)
    assert "| fp8-stale | 1 |" in (tmp_path / "gaps.md").read_text()  # the pooled row


@pytest.mark.parametrize("args,msg", [
    (["size", "--threshold", "100=2"], "LEVEL in (0, 1)"),
    (["size", "--threshold", "oops"], "expected STEP=LEVEL"),
    (["size", "--threshold", "75=0.5"], "no evaluation at step 75"),
    (["size", "--arm", "fp8-matched"], "holds no fp8-matched run"),
    (["size", "--out", "/dev/null/x"], "cannot write to --out /dev/null/x"),
])
def test_bad_input_gets_one_clear_error(sweep, tmp_path, args, msg):
    out = [] if "--out" in args else ["--out", tmp_path]
    r = run(*args, *out, *(f"{k}={sweep / k}" for k in SHAPES))
    assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("study_trend: ")


def test_out_is_required(sweep):
    r = run("gaps", f"s1={sweep / 's1'}")
    assert r.returncode == 2 and "--out" in r.stderr


def test_one_size_and_a_hybrid_are_refused(sweep, tmp_path):
    r = run("size", "--out", tmp_path, f"a={sweep / 's1'}")
    assert r.returncode == 2 and "at least two sizes" in r.stderr
    write_run(tmp_path / "h" / "fp8-stale" / "seed-1", SHAPES["s1"], 1, [(50, 0.1)], [3.0], mixer="hybrid")
    r = run("size", "--out", tmp_path / "o", f"h={tmp_path / 'h'}", f"b={sweep / 's2'}")
    assert r.returncode == 2 and "attention-only" in r.stderr
