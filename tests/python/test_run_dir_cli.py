"""A run directory a user can trust (docs/training.md §Resume, §"Config
keys"): resume applies and persists schedule changes and refuses meaning changes with one line; a
finished run says so and writes nothing; a run cannot be shortened; metrics.jsonl is cut back through
a temporary file; relative paths in a config resolve against the config file's directory; the
settings table prints values as typed with their meaning; a device the build lacks creates nothing."""
import json
import math

import pytest

from cli_util import TINY_MODEL, assert_one_line_error, octet, octet_in, sets, snapshot

TINY = TINY_MODEL + ["train.steps=4", "train.eval_every=2", "train.checkpoint_every=2", "train.warmup_steps=1"]


@pytest.fixture()
def run(tmp_path):
    """A finished 4-step run in tmp_path/r."""
    text = "".join(f"the queue drains buffer {i % 13} before it stops.\n" for i in range(200))
    (tmp_path / "c.txt").write_text(text)
    r = octet("train", *sets(*TINY, f"data.path={tmp_path / 'c.txt'}", f"data.cache_dir={tmp_path / 'cache'}"),
              "--out", tmp_path / "r")
    assert r.returncode == 0, r.stderr
    return tmp_path / "r"


def metrics(d):
    return [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]


def test_resume_persists_schedule_changes(run):
    r = octet("train", "--resume", run, *sets("train.steps=6", "train.lr=0.01"))
    assert r.returncode == 0, r.stderr
    assert "resume: train.steps 4 -> 6 from step 4\n" in r.stdout
    assert "resume: train.lr 0.003 -> 0.01 from step 4\n" in r.stdout
    toml = (run / "config.toml").read_text()
    assert "steps = 6\n" in toml and "lr = 0.01\n" in toml
    events = [m for m in metrics(run) if "event" in m]
    assert events == [{"step": 4, "event": "resume", "changes": [
        {"key": "train.steps", "from": "4", "to": "6"}, {"key": "train.lr", "from": "0.003", "to": "0.01"}]}]
    assert [m["step"] for m in metrics(run) if "loss" in m] == [1, 2, 3, 4, 5, 6]
    # The new steps follow the new schedule (docs/training.md §Training: warmup 1 step, then cosine
    # from lr to lr * min_lr_ratio (0.1) at the last of 6 steps).
    lr5 = [m for m in metrics(run) if m.get("step") == 5 and "lr" in m][0]["lr"]
    progress = (4 - 1) / (6 - 1 - 1)
    assert lr5 == pytest.approx(0.001 + 0.5 * (0.01 - 0.001) * (1 + math.cos(math.pi * progress)), rel=1e-6)


def test_finished_run_says_so_and_writes_nothing(run):
    before = snapshot(run)
    r = octet("train", "--resume", run)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"run {run} is complete at step 4 of 4 (nothing to do; extend with --set train.steps=...)\n"
    assert snapshot(run) == before


def test_resume_cannot_shorten_or_change_meaning(run):
    before = snapshot(run)
    r = octet("train", "--resume", run, *sets("train.steps=2"))
    assert_one_line_error(r, "step 4", "train.steps = 2", "cannot be shortened")
    for override, key in [("model.n_layer=2", "model.n_layer"), ("train.seed=9", "train.seed"),
                          ("data.val_fraction=0.2", "data.val_fraction")]:
        r = octet("train", "--resume", run, *sets("train.steps=8", override))
        assert_one_line_error(r, key, "changes what the run is")
    r = octet("train", "--resume", run, "--arm", "fp8-matched", *sets("train.steps=8"))
    assert_one_line_error(r, "precision.arm")
    assert r.stdout == ""
    assert snapshot(run) == before


def test_metrics_cut_back_never_in_place(run):
    with open(run / "metrics.jsonl", "a") as f:  # a line of a step after the checkpoint (a crash)
        f.write(json.dumps({"step": 5, "loss": 9.0, "grad_norm": 1.0, "lr": 0.001, "tokens_per_s": 1.0,
                            "ms": 1.0}) + "\n")
    (run / "metrics.jsonl.tmp").mkdir()  # the temporary path is taken: the cut must fail cleanly
    before = snapshot(run)
    r = octet("train", "--resume", run, *sets("train.steps=6"))
    assert_one_line_error(r, "metrics.jsonl.tmp")
    assert snapshot(run) == before, "metrics.jsonl and config.toml unchanged"
    (run / "metrics.jsonl.tmp").rmdir()
    r = octet("train", "--resume", run, *sets("train.steps=6"))
    assert r.returncode == 0, r.stderr
    assert all(m.get("loss") != 9.0 for m in metrics(run))
    assert [m["step"] for m in metrics(run) if "loss" in m] == [1, 2, 3, 4, 5, 6]


def test_relative_paths_resolve_against_the_config_file(tmp_path):
    (tmp_path / "cfg" / "text").mkdir(parents=True)
    (tmp_path / "cfg" / "text" / "c.txt").write_text("a short corpus line that repeats.\n" * 300)
    (tmp_path / "cfg" / "run.toml").write_text('[data]\npath = "text/c.txt"\ncache_dir = "cache"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = octet_in(elsewhere, "train", "--config", tmp_path / "cfg" / "run.toml", *sets(*TINY), "--out", "r")
    assert r.returncode == 0, r.stderr
    toml = (elsewhere / "r" / "config.toml").read_text()
    assert f'path = "{tmp_path / "cfg" / "text" / "c.txt"}"' in toml, "config.toml holds absolute paths"
    assert f'cache_dir = "{tmp_path / "cfg" / "cache"}"' in toml
    # ... so the run resumes from any directory.
    r = octet_in(tmp_path, "train", "--resume", elsewhere / "r", *sets("train.steps=5"))
    assert r.returncode == 0, r.stderr


def test_settings_table_values_as_typed_with_meaning(run):
    r = octet("train", "--resume", run, *sets("train.steps=5"))
    assert r.returncode == 0, r.stderr
    assert "| parameter | value | meaning |\n" in r.stdout
    assert "| train.lr | 0.003 | peak learning rate |\n" in r.stdout
    assert "| train.eps | 1e-08 | AdamW epsilon |\n" in r.stdout


def test_device_the_build_lacks_creates_nothing(tmp_path):
    if "cuda" in octet("version").stdout:
        pytest.skip("this build has the CUDA backend")
    (tmp_path / "c.txt").write_text("a short corpus line that repeats.\n" * 300)
    (tmp_path / "c.toml").write_text(f'[data]\npath = "c.txt"\ncache_dir = "cache"\n')
    out = tmp_path / "D"
    r = octet("train", "--config", tmp_path / "c.toml", *sets(*TINY), "--device", "cuda", "--out", out)
    assert_one_line_error(r, "CUDA")
    r = octet("compare", "--config", tmp_path / "c.toml", *sets(*TINY), "--device", "cuda", "--arms", "bf16",
              "--out", out)
    assert_one_line_error(r, "CUDA")
    assert not out.exists()


def test_a_folder_left_with_only_a_temporary_config_trains_anew(tmp_path):
    # a run stopped while writing its first file leaves config.toml.tmp: that folder is new again,
    # while a folder with anything else in it is still refused
    (tmp_path / "c.txt").write_text("".join(f"the queue drains buffer {i % 13} before it stops.\n" for i in range(200)))
    args = sets(*TINY, f"data.path={tmp_path / 'c.txt'}", f"data.cache_dir={tmp_path / 'cache'}")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "config.toml.tmp").write_text("[model]\n")
    r = octet("train", *args, "--out", tmp_path / "r")
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "r" / "config.toml.tmp").exists() and (tmp_path / "r" / "checkpoint.safetensors").exists()
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "config.toml.tmp").write_text("[model]\n")
    (tmp_path / "s" / "notes.tmp").write_text("mine\n")
    assert_one_line_error(octet("train", *args, "--out", tmp_path / "s"), "not an empty directory")
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["config.toml.tmp", "notes.tmp"]


def test_a_folder_with_a_run_log_but_no_checkpoint_is_not_overwritten(run):
    """A run that ended before its first checkpoint leaves metrics.jsonl and no checkpoint: a new
    `octet train --out` there is refused, its files untouched (--resume needs a checkpoint)."""
    (run / "checkpoint.safetensors").unlink()
    before = snapshot(run)
    text_path = run.parent / "c.txt"
    r = octet("train", *sets(*TINY, f"data.path={text_path}", f"data.cache_dir={run.parent / 'cache'}"), "--out", run)
    assert_one_line_error(r, "metrics.jsonl", str(run))
    assert snapshot(run) == before


def test_a_bpe_run_keeps_its_tokenizer_whatever_becomes_of_the_corpus(tmp_path):
    corpus, cache = tmp_path / "c.txt", tmp_path / "cache"
    corpus.write_text("".join(f"the queue drains buffer {i % 13} before it stops.\n" for i in range(300)))
    bpe = [s for s in TINY if s != "data.tokenizer=byte"] + ["data.tokenizer=bpe", "model.vocab_size=300"]
    r = octet("train", *sets(*bpe, f"data.path={corpus}", f"data.cache_dir={cache}"), "--out", tmp_path / "r")
    assert r.returncode == 0, r.stderr
    own = (tmp_path / "r" / "tokenizer.model").read_bytes()
    assert own == next(cache.glob("spm-*.model")).read_bytes()
    ask = ["--prompt", "the queue drains", "--max-new-tokens", "6", "--json"]
    before = octet("sample", "--run", tmp_path / "r", *ask)
    assert before.returncode == 0, before.stderr
    val = octet("eval", "--run", tmp_path / "r", "--json")
    assert val.returncode == 0, val.stderr
    logged = [m["val_loss"] for m in metrics(tmp_path / "r") if "val_loss" in m][-1]
    assert json.loads(val.stdout)["loss"] == logged
    # no cache: sample and the validation split encode with the run's tokenizer.model, trained on
    # nothing again
    for m in cache.iterdir():
        m.unlink()
    assert json.loads(octet("eval", "--run", tmp_path / "r", "--json").stdout)["loss"] == logged
    assert not list(cache.glob("spm-*.model")), "nothing trained again"
    # another text at data.path: sample is the same, the validation split and a resume are refused
    # (the run's checkpoint records its tokens), and the run is left as it was
    corpus.write_text("".join(f"a different text with words {i % 7} in it.\n" for i in range(300)))
    after = octet("sample", "--run", tmp_path / "r", *ask)
    assert after.returncode == 0, after.stderr
    assert json.loads(after.stdout)["text"] == json.loads(before.stdout)["text"]
    kept = snapshot(tmp_path / "r")
    r = octet("eval", "--run", tmp_path / "r", "--json")
    assert_one_line_error(r, "gives other tokens than the run trained on", "score a text with --data")
    r = octet("train", "--resume", tmp_path / "r", *sets("train.steps=6"))
    assert_one_line_error(r, "gives other tokens than the run trained on", "restore the corpus")
    assert snapshot(tmp_path / "r") == kept
    # a run that keeps only its weights (shared without its checkpoint): model.safetensors records
    # the tokens too
    (tmp_path / "r" / "checkpoint.safetensors").unlink()
    r = octet("eval", "--run", tmp_path / "r", "--json")
    assert_one_line_error(r, "gives other tokens than the run trained on", "score a text with --data")


def test_a_moved_corpus_resumes_where_its_tokens_are_the_same(run, tmp_path):
    (tmp_path / "moved").mkdir()
    (tmp_path / "c.txt").rename(tmp_path / "moved" / "c.txt")
    r = octet("train", "--resume", run, *sets("train.steps=6"))
    assert_one_line_error(r, f"corpus not found: {tmp_path / 'c.txt'}", "--set data.path=")
    r = octet("train", "--resume", run, *sets("train.steps=6", f"data.path={tmp_path / 'nowhere.txt'}"))
    assert_one_line_error(r, f"corpus not found: {tmp_path / 'nowhere.txt'}")
    assert "--set data.path=" not in r.stderr  # it was given: no hint to give it
    (tmp_path / "other.txt").write_text("a different text with words in it.\n" * 200)
    kept = snapshot(run)
    r = octet("train", "--resume", run, *sets("train.steps=6", f"data.path={tmp_path / 'other.txt'}"))
    assert_one_line_error(r, "gives other tokens than the run trained on")
    assert snapshot(run) == kept
    r = octet("train", "--resume", run, *sets("train.steps=6", f"data.path={tmp_path / 'moved' / 'c.txt'}"))
    assert r.returncode == 0, r.stderr
    assert f"resume: data.path {tmp_path / 'c.txt'} -> {tmp_path / 'moved' / 'c.txt'} from step 4" in r.stdout
    assert f'path = "{tmp_path / "moved" / "c.txt"}"' in (run / "config.toml").read_text()
    r = octet("eval", "--run", run, "--json")  # the run's validation split, from the new place
    assert r.returncode == 0, r.stderr


def test_a_resume_refuses_an_edited_corpus(run, tmp_path):
    # a byte run: the tokenizer cannot change, the text can (one word)
    corpus = tmp_path / "c.txt"
    corpus.write_text(corpus.read_text().replace("drains", "drain", 1))
    kept = snapshot(run)
    r = octet("train", "--resume", run, *sets("train.steps=6"))
    assert_one_line_error(r, f"cannot resume {run}: the corpus of data.path gives other tokens", "")
    assert snapshot(run) == kept


def test_how_often_a_delayed_run_evaluates_changes_nothing_it_computes(tmp_path):
    # tensor-delayed FP8: an evaluation's amaxes stay out of the histories, so the step losses do
    # not depend on train.eval_every, and `octet eval` gives the logged validation loss bit for bit
    (tmp_path / "c.txt").write_text("".join(f"the queue drains buffer {i % 13} before it stops.\n"
                                            for i in range(300)))
    losses = {}
    for every in (5, 7, 1000):
        out = tmp_path / f"e{every}"
        r = octet("train", *sets(*TINY_MODEL, "train.steps=30", f"train.eval_every={every}",
                                 "precision.arm=fp8-linear", "precision.recipe=tensor-delayed",
                                 f"data.path={tmp_path / 'c.txt'}", f"data.cache_dir={tmp_path / 'cache'}"),
                  "--out", out)
        assert r.returncode == 0, r.stderr
        losses[every] = [m["loss"] for m in metrics(out) if "loss" in m and "val_loss" not in m]
    assert len(losses[5]) == 30 and losses[5] == losses[7] == losses[1000]
    r = octet("eval", "--run", tmp_path / "e5", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["loss"] == [m["val_loss"] for m in metrics(tmp_path / "e5") if "val_loss" in m][-1]
    # a copy of the checkpoint under another name loads as the checkpoint it is (its quantizer
    # histories too, so the same loss bit for bit), not as a weights file ("missing tensor wte")
    (tmp_path / "step30.safetensors").write_bytes((tmp_path / "e5" / "checkpoint.safetensors").read_bytes())
    copy = octet("eval", "--run", tmp_path / "e5", "--checkpoint", tmp_path / "step30.safetensors", "--json")
    assert copy.returncode == 0, copy.stderr
    assert json.loads(copy.stdout)["loss"] == json.loads(r.stdout)["loss"]


def test_checkpoint_option_names_what_it_was_given(run, tmp_path):
    r = octet("eval", "--run", run, "--checkpoint", run)  # a folder
    assert_one_line_error(r, f"{run} is not a file", "--run the run's folder")
    r = octet("export", "--run", run, "--out", tmp_path / "hf")
    assert r.returncode == 0, r.stderr
    r = octet("eval", "--run", run, "--checkpoint", tmp_path / "hf" / "model.safetensors")
    assert_one_line_error(r, "a Hugging Face model's weights", "load them with transformers")
    (tmp_path / "w.safetensors").write_bytes((run / "model.safetensors").read_bytes())
    r = octet("eval", "--run", run, "--checkpoint", tmp_path / "w.safetensors", "--json")
    assert r.returncode == 0, r.stderr


def test_a_checkpoint_from_another_run_is_checked_as_the_runs_own(run, tmp_path):
    """--checkpoint FILE: the meaning keys FILE records (a training checkpoint's state, a weights
    file's octet_meaning) must be the run's (another arm's file is refused by sample, eval and
    export; so is a run's own weights file after config.toml was edited), and eval of the
    validation split checks the tokens FILE trained on, not those of the run's own checkpoint."""
    base = [*TINY, f"data.cache_dir={tmp_path / 'cache'}"]
    r = octet("train", *sets(*base, f"data.path={tmp_path / 'c.txt'}", "precision.arm=fp8-matched"),
              "--out", tmp_path / "fp8")
    assert r.returncode == 0, r.stderr
    other = tmp_path / "fp8" / "checkpoint.safetensors"
    for cmd in (["eval", "--json"], ["sample", "--prompt", "the", "--max-new-tokens", "2"],
                ["export", "--out", tmp_path / "hf"]):
        r = octet(cmd[0], "--run", run, "--checkpoint", other, *cmd[1:])
        assert_one_line_error(r, f"cannot load {other} into {run}: it was trained with precision.arm = "
                              f"fp8-matched, and {run}'s config.toml has precision.arm = bf16")
        r = octet(cmd[0], "--run", run, "--checkpoint", tmp_path / "fp8" / "model.safetensors", *cmd[1:])
        assert_one_line_error(r, "trained with precision.arm = fp8-matched", "precision.arm = bf16")
    assert not (tmp_path / "hf").exists()
    # a run whose config.toml was edited to another arm: its own weights file says what it was
    toml = (run / "config.toml").read_text()
    (run / "config.toml").write_text(toml.replace('arm = "bf16"', 'arm = "fp8-linear"'))
    (run / "checkpoint.safetensors").rename(tmp_path / "ckpt.safetensors")
    assert_one_line_error(octet("eval", "--run", run, "--json"), "precision.arm = bf16")
    (tmp_path / "ckpt.safetensors").rename(run / "checkpoint.safetensors")
    (run / "config.toml").write_text(toml)
    (tmp_path / "d.txt").write_text("".join(f"a different text with words {i % 7} in it.\n" for i in range(300)))
    r = octet("train", *sets(*base, f"data.path={tmp_path / 'd.txt'}"), "--out", tmp_path / "d")
    assert r.returncode == 0, r.stderr
    r = octet("eval", "--run", run, "--checkpoint", tmp_path / "d" / "checkpoint.safetensors", "--json")
    assert_one_line_error(r, "gives other tokens than the run trained on")
    r = octet("eval", "--run", run, "--checkpoint", tmp_path / "d" / "model.safetensors", "--json")
    assert_one_line_error(r, "gives other tokens than the run trained on")
    r = octet("eval", "--run", run, "--checkpoint", run / "model.safetensors", "--json")
    assert r.returncode == 0, r.stderr


def test_a_run_whose_config_is_not_a_run_is_named(run):
    (run / "config.toml").write_text("")  # emptied: the built-in defaults, which are no whole run
    r = octet("eval", "--run", run)
    assert_one_line_error(r, f"{run / 'config.toml'}: ")


def test_a_cpu_run_beyond_the_hosts_memory_is_refused_before_its_folder(tmp_path):
    # 10^10 vocabulary rows: terabytes of parameters and AdamW state, far beyond any CI host. Linux
    # would not refuse the allocation but kill the run mid-step, leaving a folder that neither
    # resumes nor can be reused.
    (tmp_path / "c.txt").write_text("the queue drains.\n" * 400)
    r = octet("train", *sets(*TINY_MODEL, "model.vocab_size=10000000000", f"data.path={tmp_path / 'c.txt'}",
                             f"data.cache_dir={tmp_path / 'cache'}"), "--out", tmp_path / "r")
    assert r.returncode == 1, (r.returncode, r.stderr)  # a run that failed, as memory that runs out
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("octet: failed: out of memory (train on the cpu needs at least")
    assert "GB of memory is available" in lines[0] and "lower model.vocab_size" in lines[0]
    assert not (tmp_path / "r").exists()
