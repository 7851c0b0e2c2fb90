"""`octet bench train` on the CPU and its PyTorch peer bench/peers/gpt2_torch.py on the CPU: the JSON
fields of a row (MFU against both peaks, peak memory, the batch), the same shapes and FLOP formula on
both sides, and the torchao float8 arms where torchao is importable (skipped otherwise)."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_util import OCTET, ROOT, assert_one_line_error, octet

PEER = ROOT / "bench" / "peers" / "gpt2_torch.py"
SMALL = ["--models", "tiny", "--seq", "32", "--vocab", "256", "--warmup", "1", "--steps", "2"]
ROW_KEYS = {"bench", "impl", "model", "arm", "batch", "seq_len", "tokens_per_step", "n_params",
            "n_matmul_params", "flops_per_token", "step_ms_median", "tokens_per_s", "tflops", "mfu",
            "mfu_bf16", "mfu_fp8", "peak_tflops", "peak_tflops_fp8", "peak_mem_gib", "device_mem_gib",
            "loss_first", "loss_last", "grad_accum"}


def rows(stdout):
    return [json.loads(l) for l in stdout.splitlines() if l.startswith("{")]


def peer(*args, env=None):
    return subprocess.run([sys.executable, str(PEER), "--device", "cpu", "--no-compile", "--json", *args],
                          capture_output=True, text=True, env=env)


def check_speed_fields(r, peak_bf16, peak_fp8):
    assert ROW_KEYS <= set(r), ROW_KEYS - set(r)
    assert r["tokens_per_step"] == r["batch"] * r["seq_len"] * r["grad_accum"]
    assert r["tokens_per_s"] == pytest.approx(r["tokens_per_step"] / (r["step_ms_median"] * 1e-3), rel=1e-9)
    assert r["tflops"] == pytest.approx(r["flops_per_token"] * r["tokens_per_s"] / 1e12, rel=1e-9)
    assert r["mfu_bf16"] == pytest.approx(r["tflops"] / peak_bf16, rel=1e-9)
    assert r["mfu_fp8"] == pytest.approx(r["tflops"] / peak_fp8, rel=1e-9)
    assert r["mfu"] == r["mfu_bf16"]
    assert (r["peak_tflops"], r["peak_tflops_fp8"]) == (peak_bf16, peak_fp8)
    assert r["peak_mem_gib"] is None and r["device_mem_gib"] is None  # no memory figure on the CPU


def test_octet_rows_carry_both_mfus_and_memory():
    r = octet("bench", "train", "--device", "cpu", *SMALL, "--arms", "bf16,fp8-linear", "--model-batch",
              "tiny=3", "--tokens-per-step", "64", "--peak-tflops", "100", "--peak-tflops-fp8", "300", "--json")
    assert r.returncode == 0, r.stderr
    out = rows(r.stdout)
    assert [x["arm"] for x in out] == ["bf16", "fp8-linear"]
    for x in out:
        check_speed_fields(x, 100.0, 300.0)
        assert x["batch"] == 3  # --model-batch wins over --tokens-per-step
        assert x["impl"] == "octet"


def test_octet_tokens_per_step_and_bad_batches():
    r = octet("bench", "train", "--device", "cpu", *SMALL, "--arms", "bf16", "--tokens-per-step", "128", "--json")
    assert r.returncode == 0, r.stderr
    assert rows(r.stdout)[0]["batch"] == 4
    assert_one_line_error(octet("bench", "train", "--device", "cpu", *SMALL, "--tokens-per-step", "100"),
                          "100", "multiple")
    assert_one_line_error(octet("bench", "train", "--device", "cpu", *SMALL, "--model-batch", "tiny"),
                          "--model-batch", "NAME=N")
    assert_one_line_error(octet("bench", "train", "--device", "cpu", *SMALL, "--model-batch", "1.3b=2"),
                          "1.3b", "not among")
    assert_one_line_error(octet("bench", "train", "--device", "cpu", *SMALL[2:], "--models", "7b"),
                          "7b", "760m", "2.7b")
    for bad in ("0", "-64"):  # not silently the default batch
        assert_one_line_error(octet("bench", "train", "--device", "cpu", *SMALL, "--tokens-per-step", bad),
                              "--tokens-per-step", bad)
    assert_one_line_error(octet("bench", "train", "--device", "cpu", *SMALL, "--model-batch", "tiny=1,tiny=2"),
                          "tiny", "twice")
    assert_one_line_error(octet("bench", "train", "--device", "cpu", *SMALL, "--peak-tflops-fp8", "0"),
                          "--peak-tflops-fp8")


def test_gradient_accumulation_on_both_sides():
    """--grad-accum N: N micro-batches of --batch per optimizer step on octet's side and the peer's;
    --tokens-per-step counts the optimizer step's tokens; the rows say both."""
    args = (*SMALL, "--tokens-per-step", "256", "--grad-accum", "4")
    mine = rows(octet("bench", "train", "--device", "cpu", *args, "--arms", "bf16", "--json").stdout)
    theirs = rows(peer(*args).stdout)
    for r in (mine[0], theirs[0]):
        check_speed_fields(r, r["peak_tflops"], r["peak_tflops_fp8"])
        assert (r["batch"], r["grad_accum"], r["tokens_per_step"]) == (2, 4, 256)
        assert abs(r["loss_first"] - 5.545) < 0.3  # log(256): the mean over the micro-batches
    assert_one_line_error(octet("bench", "train", "--device", "cpu", *SMALL, "--tokens-per-step", "96",
                                "--grad-accum", "2"), "96", "32 x 2")
    assert_one_line_error(octet("bench", "train", "--device", "cpu", *SMALL, "--grad-accum", "0"), "--grad-accum")
    r = peer(*SMALL, "--grad-accum", "0")
    assert r.returncode != 0 and "--grad-accum" in r.stderr


def test_octet_rejected_options_print_no_table():
    """A rejected option ends before anything reaches stdout (the table's header comes with the first row)."""
    r = octet("bench", "train", "--device", "cpu", *SMALL, "--tokens-per-step", "100")
    assert r.returncode != 0 and r.stdout == "", r.stdout
    r = octet("bench", "train", "--device", "cpu", *SMALL, "--arms", "bf16")
    assert r.returncode == 0 and r.stdout.splitlines()[0].split()[:3] == ["impl", "model", "arm"], r.stdout
    for option, names, what in (("--arms", "bf16,fp8-linear,bf16", "arm 'bf16'"),
                                ("--models", "tiny,tiny", "model 'tiny'"),
                                ("--peer-arms", "bf16,bf16", "peer arm 'bf16'")):
        r = octet("bench", "train", "--device", "cpu", *SMALL, option, names)
        assert_one_line_error(r, what, "given twice")
        assert r.stdout == "", r.stdout


def test_study_driver_refuses_a_file_without_conditions(tmp_path):
    """bench/study.sh: no condition in the file is an error before anything runs (no warm-up run, no folder)."""
    conditions = tmp_path / "conditions.txt"
    conditions.write_text("# only a comment\n\n")
    env = dict(os.environ, OCTET_BIN=OCTET, STUDY_CONDITIONS=str(conditions), OUT=str(tmp_path / "out"),
               STUDY_RUNS=str(tmp_path / "runs"), STUDY_DEVICE="cpu")
    r = subprocess.run(["bash", str(ROOT / "bench" / "study.sh")], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "no conditions" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs").exists()


def test_study_driver_warms_each_corpus_and_keeps_no_weights(tmp_path):
    """bench/study.sh: conditions on two corpora get one BPE model each (the warm-up per (vocab, corpus)
    pair), every condition completes, and train.save_weights=false leaves metrics and no weights."""
    words = "the queue drains every buffer before it stops while kernels schedule threads on cores".split()
    for i, name in enumerate(("a.txt", "b.txt")):
        (tmp_path / name).write_text("\n".join(" ".join(words[(j * 7 + k * (3 + i)) % len(words)] for k in range(12))
                                               for j in range(300)) + "\n")
    (tmp_path / "base.toml").write_text(
        "[model]\nn_layer = 1\nd_model = 16\nn_head = 2\nn_kv_head = 2\nd_ff = 32\nvocab_size = 300\nseq_len = 16\n"
        "[train]\nbatch_size = 2\neval_batches = 1\nsteps = 2\neval_every = 1\nwarmup_steps = 1\n"
        '[data]\ntokenizer = "bpe"\n')
    (tmp_path / "conditions.txt").write_text("".join(
        f"{n} model.vocab_size=300 data.path={tmp_path / c} train.save_weights=false{extra}\n"
        for n, c, extra in (("ca", "a.txt", ""), ("cb", "b.txt", ""), ("cc", "a.txt", " train.seed=7"))))
    env = dict(os.environ, OCTET_BIN=OCTET, STUDY_CONFIG=str(tmp_path / "base.toml"),
               STUDY_CONDITIONS=str(tmp_path / "conditions.txt"), OUT=str(tmp_path / "out"),
               STUDY_RUNS=str(tmp_path / "runs"), STUDY_DEVICE="cpu", STUDY_SEEDS="1", STUDY_ARMS="bf16,fp8-matched",
               STUDY_SET=f"data.cache_dir={tmp_path / 'cache'}")
    r = subprocess.run(["bash", str(ROOT / "bench" / "study.sh")], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(list((tmp_path / "cache").glob("spm-*.model"))) == 2  # one per corpus at vocab 300
    for n in ("ca", "cb", "cc"):
        assert (tmp_path / "runs" / n / "summary.json").exists()
        for arm in ("bf16", "fp8-matched"):
            assert (tmp_path / "runs" / n / arm / "metrics.jsonl").exists()
    assert not list((tmp_path / "runs").rglob("*.safetensors"))


def peer_module():
    sys.path.insert(0, str(PEER.parent))
    try:
        import gpt2_torch
    finally:
        sys.path.pop(0)
    return gpt2_torch


def test_peer_shapes_flops_and_batches():
    g = peer_module()
    # The same literal shapes as bench_model_config() (tests/bench/bench_train_test.cpp).
    assert g.MODELS["gpt2-small"] == (12, 768, 12, 3072)
    assert g.MODELS["350m"] == (24, 1024, 16, 4096)
    assert g.MODELS["760m"] == (36, 1280, 20, 5120)
    assert g.MODELS["2.7b"] == (32, 2560, 20, 10240)
    assert g.MODELS["1.3b"] == (24, 2048, 16, 8192)
    assert g.matmul_params(24, 2048, 8192, 50304) == 1310982144
    t = g.throughput(g.MODELS["1.3b"], 50304, 2048, 8192, [100.0, 200.0, 300.0])
    assert t["flops_per_token"] == 6.0 * 1310982144 + 12.0 * 24 * 2048 * 2048
    assert t["tokens_per_s"] == pytest.approx(8192 / 0.2)
    # batches: --model-batch, else --tokens-per-step / --seq, else --batch (octet's bench_batch)
    args = lambda **kw: type("A", (), dict(dict(batch=8, tokens_per_step=0, model_batch="", seq=1024, grad_accum=1),
                                           **kw))
    assert g.batch_for(args(), "1.3b") == 8
    assert g.batch_for(args(tokens_per_step=8192, seq=4096), "1.3b") == 2
    assert g.batch_for(args(tokens_per_step=8192, model_batch="760m=3,1.3b=1"), "1.3b") == 1
    assert g.batch_for(args(tokens_per_step=262144, seq=1024, grad_accum=32), "1.3b") == 8
    for bad in (args(tokens_per_step=1000), args(model_batch="1.3b"), args(model_batch="1.3b=0")):
        with pytest.raises(SystemExit):
            g.batch_for(bad, "1.3b")


def test_peer_row_matches_octets_on_cpu():
    r = peer(*SMALL, "--tokens-per-step", "64", "--peak-tflops", "50", "--peak-tflops-fp8", "200")
    assert r.returncode == 0, r.stderr
    theirs = rows(r.stdout)[0]
    check_speed_fields(theirs, 50.0, 200.0)
    assert (theirs["impl"], theirs["arm"], theirs["batch"], theirs["fp8_linears"]) == \
        ("torch-eager", "bf16-autocast", 2, 0)
    # octet's tiny row: the same parameter count, matmul weights and FLOPs per token
    mine = rows(octet("bench", "train", "--device", "cpu", *SMALL, "--arms", "bf16", "--json").stdout)[0]
    for k in ("n_params", "n_matmul_params", "flops_per_token", "n_layer", "d_model", "n_head", "d_ff"):
        assert mine[k] == theirs[k], k


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao is not importable")
@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_peer_torchao_arms_on_cpu(recipe):
    r = peer(*SMALL, "--batch", "2", "--steps", "1", "--fp8", recipe, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert r.returncode == 0, r.stderr
    x = rows(r.stdout)[0]
    check_speed_fields(x, 989.0, 1979.0)
    assert (x["arm"], x["recipe"]) == (f"torchao-{recipe}", recipe)
    assert x["fp8_linears"] == 8  # qkv, proj, fc1, fc2 of both layers; the tied LM head stays BF16
    assert abs(x["loss_first"] - 5.545) < 0.3  # log(256) at init: the converted model still trains


def test_summarize_ratios_against_the_torch_bf16_peer(tmp_path):
    base = dict(bench="train", n_params=1e6, seq_len=1024, batch=8, step_ms_median=10.0, tflops=1.0, mfu=0.1)
    lines = [dict(base, impl="octet", model="m", arm="fp8-matched", tokens_per_s=300.0, mfu_bf16=0.1,
                  mfu_fp8=0.05, peak_mem_gib=3.25),
             dict(base, impl="torch-compile", model="m", arm="bf16-autocast", tokens_per_s=200.0),  # an older row
             dict(base, impl="torch-compile", model="m", arm="torchao-rowwise", tokens_per_s=250.0, compile="blocks"),
             dict(base, impl="octet", model="m", arm="bf16", tokens_per_s=100.0, batch=2, seq_len=4096,
                  activation_checkpointing=True)]
    f = tmp_path / "rows.jsonl"
    f.write_text("".join(json.dumps(l) + "\n" for l in lines))
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "summarize.py"), str(f)],
                         capture_output=True, text=True, check=True).stdout
    table = [l for l in out.splitlines() if l.startswith("| ") and "---" not in l][1:]
    assert "| 1.500x |" in table[0] and "| 5.0% |" in table[0] and "| 3.2 |" in table[0]
    assert "| 1.000x |" in table[1]
    assert table[2].startswith("| torch-compile (blocks) |") and "| 1.250x |" in table[2]
    assert table[3].endswith("| — |")  # no peer at 2x4096
    assert "| bf16 + activation checkpointing |" in table[3]
