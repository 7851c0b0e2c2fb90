"""`octet train / compare / plot` on bad input: one line on stderr naming the problem, exit code 2,
and nothing created or overwritten (issue: missing or empty corpus, unreadable files, invalid UTF-8,
truncated or corrupt checkpoints, unknown config keys, out-of-range values)."""
import os
import shutil

import pytest

from cli_util import TINY_MODEL, assert_bad_input, octet, sets

TINY = TINY_MODEL + ["train.steps=3", "train.eval_every=3"]


@pytest.fixture()
def corpus(tmp_path):
    text = "".join(f"the driver frees buffer {i % 17} before the queue stops.\n" for i in range(200))
    (tmp_path / "c.txt").write_text(text)
    return tmp_path


@pytest.mark.parametrize("override,word", [
    ("model.n_layers=2", "model.n_layers"),
    ("model.n_head=3", "n_head"),
    ("model.n_kv_head=3", "n_kv_head"),
    ("model.seq_len=0", "seq_len"),
    ("train.lr=abc", "train.lr"),
    ("precision.recipe=fancy", "fancy"),
])
def test_bad_config_values(corpus, override, word):
    out = corpus / "run"
    r = octet("train", *sets(*TINY, f"data.path={corpus / 'c.txt'}", override), "--out", out)
    assert_bad_input(r, word)
    assert not out.exists()


def test_missing_empty_and_unreadable_corpus(corpus):
    out = corpus / "run"
    assert_bad_input(octet("train", *sets(*TINY, f"data.path={corpus / 'nope.txt'}"), "--out", out), "not found")
    (corpus / "empty.txt").write_text("")
    assert_bad_input(octet("train", *sets(*TINY, f"data.path={corpus / 'empty.txt'}"), "--out", out), "empty")
    assert_bad_input(octet("train", *sets(*TINY, "data.path=" + str(corpus / "*.none")), "--out", out), "glob")
    (corpus / "tiny.txt").write_text("abc")
    assert_bad_input(octet("train", *sets(*TINY, f"data.path={corpus / 'tiny.txt'}"), "--out", out), "too small")
    if os.geteuid() != 0:
        (corpus / "locked.txt").write_text("secret")
        (corpus / "locked.txt").chmod(0)
        assert_bad_input(octet("train", *sets(*TINY, f"data.path={corpus / 'locked.txt'}"), "--out", out), "cannot read")
    assert not out.exists()


def test_invalid_utf8_is_accepted_as_bytes(corpus):
    raw = (corpus / "c.txt").read_bytes()
    (corpus / "bad.txt").write_bytes(raw[:2000] + b"\xff\xfe\xc0\xaf" + raw[2000:])
    out = corpus / "run"
    r = octet("train", *sets(*TINY, f"data.path={corpus / 'bad.txt'}"), "--out", out)
    assert r.returncode == 0, r.stderr
    assert "(4 invalid UTF-8)" in r.stdout


def test_resume_rejects_corrupt_checkpoint_and_keeps_it(corpus):
    out = corpus / "run"
    r = octet("train", *sets(*TINY, f"data.path={corpus / 'c.txt'}"), "--out", out)
    assert r.returncode == 0, r.stderr
    ck = out / "checkpoint.safetensors"
    good = ck.read_bytes()
    ck.write_bytes(good[: len(good) // 2])  # truncated
    assert_bad_input(octet("train", "--resume", out), "checkpoint.safetensors")
    assert ck.read_bytes() == good[: len(good) // 2], "nothing overwritten"
    bad = bytearray(good)
    bad[-50] ^= 0xFF  # corrupt
    ck.write_bytes(bytes(bad))
    assert_bad_input(octet("train", "--resume", out), "checksum")
    # A run directory is never silently overwritten by a fresh run.
    assert_bad_input(octet("train", *sets(*TINY, f"data.path={corpus / 'c.txt'}"), "--out", out), "--resume")
    ck.write_bytes(good)
    r = octet("train", "--resume", out, "--set", "train.steps=4")
    assert r.returncode == 0, r.stderr
    assert "resuming" in r.stdout


def test_compare_and_plot_bad_input(corpus):
    out = corpus / "cmp"
    assert_bad_input(octet("compare", "--config", corpus / "none.toml", "--out", out), "none.toml")
    (corpus / "c.toml").write_text(f'[data]\npath = "{corpus / "c.txt"}"\ntokenizer = "byte"\n')
    assert_bad_input(octet("compare", "--config", corpus / "c.toml", "--arms", "bf16,fp7", "--out", out), "fp7")
    assert not out.exists()
    assert_bad_input(octet("plot", corpus / "no-such-run"), "metrics")
    shutil.rmtree(corpus / "cache", ignore_errors=True)
