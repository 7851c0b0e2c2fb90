"""The CLI's edges, paths and messages (docs/cli.md): one line per error with
no source location unless --verbose, I/O errors that name their cause, "did you mean" for a
misspelled command, attention-check's memory/time budget, options that reject what they used to
wrap or reinterpret silently, and the default corpus and tokenizer cache found from any directory."""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from cli_util import OCTET, TINY_MODEL, assert_one_line_error, octet, octet_at, sets

LOCATION = re.compile(r"\b\w+\.(cpp|h|cu|cuh):\d+")


def one_line_error(r, code=2):
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


# --- messages ------------------------------------------------------------------------------------

@pytest.mark.parametrize("typed,meant", [("trian", "train"), ("compar", "compare"),
                                         ("atention-check", "attention-check"), ("cats", "cast")])
def test_misspelled_command_suggests_the_closest(typed, meant):
    line = one_line_error(octet(typed, "--help"))
    assert f"unknown command '{typed}'" in line and f"did you mean '{meant}'" in line, line


@pytest.mark.parametrize("typed,meant", [("attenton", "attention"), ("trian", "train")])
def test_misspelled_bench_subcommand_suggests_the_closest(typed, meant):
    line = one_line_error(octet("bench", typed))
    assert f"unknown command 'bench {typed}'" in line and f"did you mean 'bench {meant}'" in line, line


def test_unrelated_command_lists_the_commands():
    line = one_line_error(octet("frobnicate"))
    assert "did you mean" not in line
    for c in ("train", "compare", "attention-check", "cast", "quantize"):
        assert c in line


def test_errors_carry_no_source_location_unless_verbose():
    bad = ["attention-check", "--seq", "8", "--heads", "3", "--kv-heads", "2"]
    line = one_line_error(octet(*bad))
    assert "must divide heads" in line and not LOCATION.search(line), line
    for args in (["--verbose", *bad], [*bad, "--verbose"]):
        line = one_line_error(octet(*args))
        assert "must divide heads" in line and LOCATION.search(line), line


def test_set_without_a_config_points_at_one(tmp_path):
    # The built-in defaults are no whole run (a BPE tokenizer with the byte vocabulary): the error
    # says so and names a config to start from; nothing is written.
    line = one_line_error(octet_at(tmp_path, "train", "--set", "train.steps=2", "--out", "r"))
    assert "vocab_size" in line and "--config " in line, line
    config = line.rsplit("--config ", 1)[1].rstrip(")")
    assert config.endswith("/configs/tiny.toml") and Path(config).is_file(), line  # from any directory
    assert not (tmp_path / "r").exists()


def test_io_error_names_its_cause(tmp_path):
    (tmp_path / "c.txt").write_text("".join(f"word{i % 37} and more text\n" for i in range(400)))
    (tmp_path / "blocker").write_text("a file where a directory should be")
    r = octet("train", *sets(*TINY_MODEL, "data.tokenizer=bpe", "model.vocab_size=300", "train.steps=1",
                             f"data.path={tmp_path / 'c.txt'}", f"data.cache_dir={tmp_path / 'blocker' / 'cache'}"),
              "--out", tmp_path / "run")
    line = one_line_error(r)
    assert f"cannot create cache directory {tmp_path / 'blocker' / 'cache'}: Not a directory" in line, line


def test_a_diverged_run_fails_with_its_own_message(tmp_path):
    (tmp_path / "c.txt").write_text("".join(f"the queue drains buffer {i % 13} before it stops.\n" for i in range(200)))
    r = octet("train", *sets(*TINY_MODEL, f"data.path={tmp_path / 'c.txt'}", "train.steps=5", "train.lr=1e30",
                             "train.grad_clip=0", "train.max_bad_steps=1"), "--out", tmp_path / "run")
    assert r.returncode == 1, (r.returncode, r.stderr)
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("octet: failed:") and "max_bad_steps" in last and "internal" not in last, last


def test_a_short_run_that_ends_non_finite_fails(tmp_path):
    # fewer skipped steps than max_bad_steps: the run reaches its end, with a NaN model
    (tmp_path / "c.txt").write_text("".join(f"the queue drains buffer {i % 13} before it stops.\n" for i in range(200)))
    r = octet("train", *sets(*TINY_MODEL, f"data.path={tmp_path / 'c.txt'}", "train.steps=3", "train.lr=1e30",
                             "train.grad_clip=0", "train.max_bad_steps=100"), "--out", tmp_path / "run")
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("octet: failed: the final validation loss is") and "diverged" in last, last
    assert (tmp_path / "run" / "metrics.jsonl").exists()  # kept for inspection


# --- attention-check: memory and time first --------------------------------------------------------

def test_attention_check_refuses_what_memory_cannot_hold():
    line = one_line_error(octet("attention-check", "--seq", "99999999999"))
    assert "needs about" in line and "GB" in line and "--force" in line, line
    assert "bad_alloc" not in line


def test_attention_check_refuses_a_run_of_hours():
    # ~15 GB and ~50 h on 2 cores: refused for its memory or its time, whichever binds here.
    line = one_line_error(octet("attention-check", "--seq", "100000"))
    assert "--force" in line and ("would take about" in line or "needs about" in line), line


def test_forced_out_of_memory_is_one_line_not_an_exception_name():
    r = octet_at(None, "attention-check", "--seq", "99999999999", "--force",
                 env={"ASAN_OPTIONS": "allocator_may_return_null=1:detect_leaks=0"})
    if "AddressSanitizer" in r.stderr:
        pytest.skip("an ASan build's operator new reports out-of-memory itself instead of throwing")
    line = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert line.startswith("octet: failed: out of memory"), line
    assert "std::" not in r.stderr and "bad_alloc" not in r.stderr


def test_attention_check_reports_progress():
    r = octet("attention-check", "--seq", "16", "--heads", "2", "--dim", "8", "--progress", "--json")
    assert r.returncode == 0, r.stderr
    json.loads(r.stdout)  # stdout stays one JSON object
    phases = [l for l in r.stderr.splitlines() if l.startswith("attention-check:")]
    assert [p.split(":")[1].split(" done")[0].strip() for p in phases] == ["forward", "backward", "FP64 oracle"]


# --- edges ---------------------------------------------------------------------------------------

def test_cast_takes_values_after_a_double_dash():
    r = octet("cast", "--format", "e4m3", "--json", "--", "-1", "-inf", "3")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(l) for l in r.stdout.splitlines()]
    assert [row["input"] for row in rows] == ["-1", "-inf", "3"]
    expect = np.array([-1.0, -np.inf, 3.0], dtype=np.float32).astype(ml_dtypes.float8_e4m3fn)
    # saturating: -inf becomes -448 (0xfe), as OFP8 v1.0's saturating conversion
    expect[1] = np.float32(-448.0).astype(ml_dtypes.float8_e4m3fn)
    assert [int(row["code"], 16) for row in rows] == list(expect.view(np.uint8))


def test_only_cast_takes_arguments_after_a_double_dash():
    line = one_line_error(octet("quantize", "--recipe", "row", "--shape", "2x2", "--", "3"))
    assert "not expected: 3" in line, line


@pytest.mark.parametrize("margin", ["1000", "33", "-33"])
def test_quantize_margin_follows_the_trainers_rule(margin):
    line = one_line_error(octet("quantize", "--recipe", "tensor-current", "--shape", "4x4", "--margin", margin))
    assert "margin must be in [-32, 32]" in line and margin in line, line


def test_quantize_margin_at_the_limit_keeps_a_scale():
    r = octet("quantize", "--recipe", "tensor-current", "--shape", "8x8", "--margin", "32", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert 0 < j["scale_min"] < np.inf and j["rel_err"] is not None


@pytest.mark.parametrize("args,option,value", [
    (["attention-check", "--seq", "8", "--kv-heads", "0"], "--kv-heads", "0"),
    (["attention-check", "--seq", "8", "--kv-seq", "0"], "--kv-seq", "0"),
    (["attention-check", "--seq", "8", "--seed", "-1"], "--seed", "-1"),
    (["quantize", "--recipe", "row", "--shape", "2x2", "--seed", "-1"], "--seed", "-1"),
])
def test_counts_and_seeds_reject_zero_and_negatives(args, option, value):
    line = one_line_error(octet(*args))
    assert option in line and f"got '{value}'" in line, line


@pytest.mark.parametrize("args,option,value", [
    (["sample", "--run", "r", "--prompt", "x", "--max-new-tokens"], "--max-new-tokens", "18446744073709551617"),
    (["sample", "--run", "r", "--prompt", "x", "--top-k"], "--top-k", "99999999999999999999"),
    (["sample", "--run", "r", "--prompt", "x", "--max-new-tokens"], "--max-new-tokens", "-9223372036854775809"),
    (["compare", "--config", "c", "--out", "o", "--seeds"], "--seeds", "99999999999999999999"),
    (["attention-check", "--seq"], "--seq", "9223372036854775808"),
    (["attention-check", "--seed"], "--seed", "18446744073709551616"),
    (["sample", "--run", "r", "--prompt", "x", "--top-k"], "--top-k", "0x1ffffffffffffffff"),  # hexadecimal
    (["attention-check", "--heads"], "--heads", "0x1ffffffffffffffff"),
])
def test_integers_beyond_their_type_are_refused_as_typed(args, option, value):
    # CLI11 would store such a value as the type's limit and run on
    line = one_line_error(octet(*args, value))
    assert option in line and f"got '{value}'" in line, line


def test_a_seed_past_64_bits_is_called_too_large():
    line = one_line_error(octet("attention-check", "--seed", "18446744073709551616"))
    assert line == "octet: error: --seed: must be a whole number >= 0 that fits 64 bits, got '18446744073709551616'", line


@pytest.mark.parametrize("items", ["bf16,", ",bf16", "bf16,,fp8-matched", ","])
@pytest.mark.parametrize("command,option", [
    (["compare", "--config", "c", "--out", "o"], "--arms"), (["bench", "train", "--device", "cpu"], "--arms"),
    (["bench", "train", "--device", "cpu"], "--models"), (["bench", "gemm"], "--modes"),
    (["bench", "comm"], "--ops")])
def test_an_empty_item_in_a_list_option_is_refused(command, option, items):
    # CLI11's list splitting drops empty items, so "--arms bf16," used to run one arm without a word
    for args in ([option, items], [f"{option}={items}"]):
        line = one_line_error(octet(*command, *args))
        assert line == f"octet: error: {option}: an empty item in '{items}' (items are separated by single commas)", line


@pytest.mark.parametrize("rows,says", [("octet-fp8-flsh", "unknown row 'octet-fp8-flsh'"),
                                       ("cudnn-bf16,", "empty item"),
                                       ("cudnn-bf16,cudnn-bf16", "'cudnn-bf16' twice")])
def test_bench_attention_rows_are_checked_on_any_build(rows, says):
    # checked before the CUDA backend is needed, so a typo is named even where no GPU runs
    line = one_line_error(octet("bench", "attention", "--rows", rows))
    assert says in line and "--rows" in line, line


def test_quantize_e5m2_is_the_gradient_format():
    line = one_line_error(octet("quantize", "--recipe", "row", "--shape", "2x2", "--format", "e5m2",
                                "--role", "activation"))
    assert "e5m2" in line and "--role activation" in line, line
    for extra in ([], ["--role", "gradient"]):
        r = octet("quantize", "--recipe", "row", "--shape", "2x2", "--format", "e5m2", "--json", *extra)
        assert r.returncode == 0, r.stderr
        j = json.loads(r.stdout)
        assert (j["format"], j["role"]) == ("e5m2", "gradient")


# --- paths: octet's home --------------------------------------------------------------------------

def test_default_corpus_and_cache_live_in_octet_home_from_any_directory(tmp_path):
    home, cwd = tmp_path / "home", tmp_path / "elsewhere"
    (home / "data" / "linux-docs" / "sub").mkdir(parents=True)
    cwd.mkdir()
    words = ["kernel", "queue", "driver", "buffer", "module", "process", "memory", "device", "signal"]
    text = "".join(f"the {words[i % 9]} {words[(i * 7) % 9]} of line {i % 23} waits.\n" for i in range(600))
    (home / "data" / "linux-docs" / "sub" / "a.rst").write_text(text)
    r = octet_at(cwd, "train", *sets(*TINY_MODEL, "data.tokenizer=bpe", "model.vocab_size=300",
                                     "train.steps=1", "train.eval_every=1"),
                 "--out", "run", env={"OCTET_HOME": str(home)})
    assert r.returncode == 0, r.stderr
    assert str(home / "data" / "linux-docs") in r.stdout + r.stderr
    assert list((home / ".cache" / "octet").glob("spm-*.model")), "tokenizer cached in the home"
    assert not (cwd / ".cache").exists(), "nothing cached where the user stands"
    assert (cwd / "run" / "metrics.jsonl").exists()
    # the run records the default corpus and cache as absolute paths (a later home cannot swap them)
    conf = (cwd / "run" / "config.toml").read_text()
    assert f'path = "{home / "data" / "linux-docs"}"' in conf, conf
    assert f'cache_dir = "{home / ".cache" / "octet"}"' in conf, conf
    # sample and eval --data from another home: the run's own tokenizer.model
    (cwd / "note.txt").write_text(text[:2000])
    for args in (["sample", "--run", "run", "--prompt", "the kernel", "--max-new-tokens", "4", "--json"],
                 ["eval", "--run", "run", "--data", "note.txt", "--json"]):
        r = octet_at(cwd, *args, env={"OCTET_HOME": str(tmp_path / "another-home")})
        assert r.returncode == 0, (args, r.stderr)


def test_missing_default_corpus_says_how_to_get_it(tmp_path):
    r = octet_at(tmp_path, "train", *sets(*TINY_MODEL, "train.steps=1"), "--out", "run",
                 env={"OCTET_HOME": str(tmp_path / "empty-home")})
    line = one_line_error(r)
    assert f"default corpus not found: {tmp_path / 'empty-home' / 'data' / 'linux-docs'}" in line, line
    assert "./dev demo" in line and "OCTET_HOME" in line and "data.path" in line


def test_home_is_the_binarys_repository_without_octet_home(tmp_path):
    exe = Path(OCTET).resolve()
    repo = next(d for d in exe.parents if (d / "configs" / "demo.toml").is_file())
    env = {k: v for k, v in os.environ.items() if k != "OCTET_HOME"}
    r = subprocess.run([OCTET, "train", *sets(*TINY_MODEL, "train.steps=1", "train.eval_every=1",
                                              "data.max_bytes=20000"), "--out", "run"],
                       capture_output=True, text=True, cwd=tmp_path, env=env)
    # Either the repository holds the corpus (the run starts on it) or the error names where it looked.
    assert str(repo / "data" / "linux-docs") in r.stdout + r.stderr, (r.stdout, r.stderr)
    assert not (tmp_path / ".cache").exists()


def test_home_falls_back_to_xdg_data_home_outside_a_repository(tmp_path):
    exe = tmp_path / "bin" / "octet"
    exe.parent.mkdir()
    shutil.copy(OCTET, exe)
    env = {k: v for k, v in os.environ.items() if k != "OCTET_HOME"}
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    r = subprocess.run([str(exe), "train", *sets(*TINY_MODEL, "train.steps=1"), "--out", "run"],
                       capture_output=True, text=True, cwd=tmp_path, env=env)
    line = one_line_error(r)
    assert f"default corpus not found: {tmp_path / 'xdg' / 'octet' / 'data' / 'linux-docs'}" in line, line


def test_config_directory_eval_batches_beyond_validation_and_negative_sample_seed(tmp_path):
    """Found by a review as a new user: each is one line, exit 2, nothing written."""
    (tmp_path / "d").mkdir()
    r = octet_at(tmp_path, "train", "--config", "d", *sets(*TINY_MODEL), "--out", "o1")
    assert_one_line_error(r, "--config", "is a directory")
    assert not (tmp_path / "o1").exists()
    corpus = tmp_path / "c.txt"
    corpus.write_text("the queue waits for the driver.\n" * 200)
    r = octet_at(tmp_path, "train", *sets(*TINY_MODEL, f"data.path={corpus}", "train.steps=1",
                                          "train.eval_batches=100000"), "--out", "o2")
    assert_one_line_error(r, "train.eval_batches", "validation split")
    assert not (tmp_path / "o2").exists()
    r = octet_at(tmp_path, "train", *sets(*TINY_MODEL, f"data.path={corpus}", "train.steps=1",
                                          "train.eval_every=1"), "--out", "run")
    assert r.returncode == 0, r.stderr
    r = octet_at(tmp_path, "sample", "--run", "run", "--prompt", "the", "--seed", "-1")
    assert_one_line_error(r, "--seed")


def test_compare_resume_refuses_a_learning_rate_change(tmp_path):
    """A resumed comparison may not train its arms under different schedules (review finding)."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("the queue waits for the driver.\n" * 200)
    (tmp_path / "empty.toml").write_text("")
    base = ["--config", "empty.toml", *sets(*TINY_MODEL, f"data.path={corpus}", "train.steps=2", "train.eval_every=2")]
    r = octet_at(tmp_path, "compare", *base, "--arms", "bf16,fp8-matched", "--out", "c")
    assert r.returncode == 0, r.stderr
    r = octet_at(tmp_path, "compare", *base, "--set", "train.lr=0.001", "--arms", "bf16,fp8-matched,fp8-stale",
                 "--out", "c", "--resume")
    assert_one_line_error(r, "train.lr", "--overwrite")
    assert not (tmp_path / "c" / "fp8-stale").exists()


def test_a_run_directory_in_use_is_refused(tmp_path):
    """Two octet processes never train one run directory (review finding): the second is refused."""
    import time
    corpus = tmp_path / "c.txt"
    corpus.write_text("the queue waits for the driver.\n" * 200)
    base = sets(*TINY_MODEL, f"data.path={corpus}", "train.eval_every=1000000", "train.checkpoint_every=1000000")
    r = octet_at(tmp_path, "train", *base, *sets("train.steps=2"), "--out", "run")
    assert r.returncode == 0, r.stderr
    first = subprocess.Popen([OCTET, "train", "--resume", "run", *sets("train.steps=100000000")], cwd=tmp_path,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(100):  # until the first one trains (it logs a resume event first)
            if "resume" in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1]:
                break
            time.sleep(0.05)
        time.sleep(0.2)
        r = octet_at(tmp_path, "train", "--resume", "run", *sets("train.steps=100000000"))
        assert first.poll() is None, first.stderr.read()
        assert_one_line_error(r, "in use")
    finally:
        first.kill()
        first.wait()


@pytest.mark.parametrize("scale", ["1e-50", "1e39", "-1", "nan"])
def test_attention_check_scale_outside_fp32_is_refused(scale):
    """--scale is read in double and refused unless 0 or an FP32 normal number: FP32 would round
    1e-50 to 0, which means the default 1/sqrt(dim), and 1e39 to infinity."""
    r = octet("attention-check", "--seq", "16", "--dim", "16", "--heads", "2", "--scale", scale)
    assert_one_line_error(r, "--scale", "FP32 normal")


# --- nothing overwritten -------------------------------------------------------------------------

def test_files_named_on_the_command_line_are_not_overwritten(tmp_path):
    """--dump and plot --out refuse an existing path before any work (and leave no <path>.tmp);
    --dump-grads refuses a non-empty directory, as train/export --out do."""
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    r = octet("attention-check", "--seq", "16", "--dim", "16", "--heads", "2", "--dump", precious)
    assert_one_line_error(r, "--dump", "exists; not overwritten")
    r = octet("attention-check", "--seq", "16", "--dim", "16", "--heads", "2", "--dump", tmp_path)
    assert_one_line_error(r, "--dump", "exists; not overwritten")
    r = octet("plot", tmp_path, "--out", precious)
    assert_one_line_error(r, "--out", "exists; not overwritten")
    (tmp_path / "c.txt").write_text("".join(f"the queue drains buffer {i % 13} before it stops.\n" for i in range(200)))
    r = octet("train", *sets(*TINY_MODEL, f"data.path={tmp_path / 'c.txt'}"), "--dump-grads", tmp_path)
    assert_one_line_error(r, "--dump-grads", "not an empty directory")
    # --dump-grads writes no run: an --out or --resume beside it is refused, not ignored
    r = octet("train", *sets(*TINY_MODEL, f"data.path={tmp_path / 'c.txt'}"), "--dump-grads", tmp_path / "g",
              "--out", tmp_path / "run")
    assert_one_line_error(r, "--dump-grads", "drop --out")
    r = octet("train", "--resume", tmp_path, "--dump-grads", tmp_path / "g")
    assert_one_line_error(r, "--dump-grads", "drop --resume")
    assert precious.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.txt", "precious.txt"]


def test_running_out_of_host_memory_is_a_failed_run(tmp_path):
    """Memory that runs out is a run that failed (exit 1, 'octet: failed: out of memory (...)'),
    not bad input."""
    (tmp_path / "c.txt").write_text("".join(f"the queue drains buffer {i % 13} before it stops.\n" for i in range(200)))
    # under AddressSanitizer (the CI's build) a huge allocation aborts unless it may return null
    asan = ":".join(filter(None, [os.environ.get("ASAN_OPTIONS"), "allocator_may_return_null=1"]))
    r = octet_at(tmp_path, "train", *sets(*TINY_MODEL, f"data.path={tmp_path / 'c.txt'}", "model.d_model=1048576",
                                          "model.d_ff=1048576"), "--out", tmp_path / "run",
                 env={"ASAN_OPTIONS": asan})
    assert r.returncode == 1, (r.returncode, r.stderr)
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("octet: failed: out of memory ("), last


def test_train_out_that_holds_other_files_is_refused(tmp_path):
    """A new run's --out must be new or empty: a folder holding anything else (a config.toml of the
    user's, a model.safetensors from elsewhere) is not written into."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(f"the queue drains buffer {i % 13} before it stops.\n" for i in range(200)))
    out = tmp_path / "mine"
    out.mkdir()
    (out / "config.toml").write_text("# my notes\n")
    r = octet("train", *sets(*TINY_MODEL, f"data.path={corpus}", "train.steps=1"), "--out", out)
    assert_one_line_error(r, "--out", "not an empty directory")
    assert (out / "config.toml").read_text() == "# my notes\n" and sorted(p.name for p in out.iterdir()) == ["config.toml"]


def test_load_refuses_a_config_edited_against_its_checkpoint(tmp_path):
    """sample, eval and export check config.toml's meaning keys against the checkpoint's record, as
    --resume does: an edited arm or rope_theta would run the weights as another model."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(f"the queue drains buffer {i % 13} before it stops.\n" for i in range(200)))
    run = tmp_path / "run"
    r = octet("train", *sets(*TINY_MODEL, f"data.path={corpus}", "train.steps=2"), "--out", run)
    assert r.returncode == 0, r.stderr
    cfg = (run / "config.toml").read_text()
    assert "rope_theta" in cfg
    (run / "config.toml").write_text(re.sub(r"(?m)^rope_theta = .*$", "rope_theta = 500.0", cfg))
    for args in (("eval", "--run", run), ("sample", "--run", run, "--prompt", "the", "--max-new-tokens", "2"),
                 ("export", "--run", run, "--out", tmp_path / "hf")):
        r = octet(*args)
        assert_one_line_error(r, f"cannot load {run}", "model.rope_theta")
    assert not (tmp_path / "hf").exists()


def test_output_that_cannot_be_written_fails(tmp_path):
    """A full disk behind stdout is a failed command (exit 1, the system's cause), not exit 0 with a
    truncated result."""
    with open("/dev/full", "w") as full:
        r = subprocess.run([OCTET, "attention-check", "--seq", "16", "--dim", "16", "--heads", "2", "--json"],
                           stdout=full, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip().splitlines()[-1] == "octet: failed: cannot write standard output: No space left on device"


def test_bpe_corpus_and_vocab_failures_are_said_in_octets_terms(tmp_path):
    one_line = tmp_path / "one.txt"
    one_line.write_text(" ".join(f"word{i} and more words" for i in range(2000)))  # one line > 16 KiB
    tiny = list(TINY_MODEL)
    tiny[tiny.index("data.tokenizer=byte")] = "data.tokenizer=bpe"
    r = octet("train", *sets(*tiny, f"data.path={one_line}", f"data.cache_dir={tmp_path / 'c1'}",
                             "model.vocab_size=512", "train.steps=1"), "--out", tmp_path / "r1")
    assert_one_line_error(r, "BPE tokenizer: the corpus has no line", "data.tokenizer")
    small = tmp_path / "small.txt"
    small.write_text("".join(chr(c) for c in range(0x4E00, 0x4E00 + 300)) + "\nabc\n")  # 300 distinct characters
    r = octet("train", *sets(*tiny, f"data.path={small}", f"data.cache_dir={tmp_path / 'c2'}",
                             "model.vocab_size=300", "train.steps=1"), "--out", tmp_path / "r2")
    assert_one_line_error(r, "BPE tokenizer: model.vocab_size 300 is below the", "raise model.vocab_size")
