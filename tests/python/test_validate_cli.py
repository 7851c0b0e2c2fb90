"""Validate before writing: every subcommand that writes checks its whole input
first. A bad config, arm or option gives exit code 2, one line on stderr naming the problem (and,
for a name, every valid choice), and creates nothing: not the run directory, not config.toml, not an
empty metrics.jsonl. Choices come from the one name table (octet/names.h)."""

import pytest

from cli_util import TINY_MODEL, assert_one_line_error, octet, sets

TINY = TINY_MODEL + ["train.steps=2", "train.eval_every=2"]


@pytest.fixture()
def corpus(tmp_path):
    text = "".join(f"the queue drains buffer {i % 13} before it stops.\n" for i in range(200))
    (tmp_path / "c.txt").write_text(text)
    return tmp_path


def cache(corpus):
    return f"data.cache_dir={corpus / 'cache'}"


@pytest.mark.parametrize("override,words", [
    ("precision.p_scale=512", ["precision.p_scale", "[1, 256]", "512"]),
    ("precision.p_scale=100", ["precision.p_scale", "power of two"]),
    ("precision.p_scale=0.5", ["precision.p_scale"]),
    ("precision.margin=40", ["precision.margin"]),
    ("precision.amax_history_len=0", ["precision.amax_history_len"]),
    ("precision.qkv_scaling=row", ["qkv scaling 'row'", "tensor", "head-block"]),
    ("model.norm=batchnorm", ["'batchnorm'", "rmsnorm", "layernorm"]),
])
def test_train_rejects_a_bad_config_before_writing(corpus, override, words):
    out = corpus / "D"
    r = octet("train", *sets(*TINY, f"data.path={corpus / 'c.txt'}", cache(corpus), override), "--out", out)
    assert_one_line_error(r, *words)
    assert r.stdout == "", "nothing printed before the error"
    assert not out.exists()


def test_train_arm_choices_come_from_the_table(corpus):
    out = corpus / "D"
    r = octet("train", *sets(*TINY, f"data.path={corpus / 'c.txt'}"), "--arm", "fp4", "--out", out)
    line = assert_one_line_error(r, "'fp4'")
    for arm in ("bf16", "fp8-linear", "fp8-stale", "fp8-matched", "fp32"):
        assert arm in line
    assert not out.exists()
    help_text = octet("train", "--help").stdout
    assert "bf16 | fp8-linear | fp8-stale | fp8-matched | fp32" in help_text


def test_dump_grads_rejects_before_writing(corpus):
    d = corpus / "grads"
    r = octet("train", *sets(*TINY, f"data.path={corpus / 'c.txt'}", cache(corpus), "precision.p_scale=512"),
              "--dump-grads", d)
    assert_one_line_error(r, "precision.p_scale")
    assert not d.exists()


def test_compare_validates_every_arm_before_the_first(corpus):
    out = corpus / "cmp"
    (corpus / "c.toml").write_text(f'[data]\npath = "{corpus / "c.txt"}"\ntokenizer = "byte"\n'
                                   f'cache_dir = "{corpus / "cache"}"\n')
    r = octet("compare", "--config", corpus / "c.toml", *sets(*TINY, "precision.p_scale=512"),
              "--arms", "bf16,fp8-matched", "--out", out)
    assert_one_line_error(r, "precision.p_scale")
    assert r.stdout == ""
    assert not out.exists()
    r = octet("compare", "--config", corpus / "c.toml", *sets(*TINY), "--arms", "bf16,fp8-mached", "--out", out)
    assert_one_line_error(r, "'fp8-mached'", "fp8-matched")
    assert not out.exists()
    r = octet("compare", "--config", corpus / "c.toml", *sets(*TINY, f"data.path={corpus / 'none.txt'}"),
              "--arms", "bf16", "--out", out)
    assert_one_line_error(r, "none.txt")
    assert not out.exists()


def test_attention_check_options():
    r = octet("attention-check", "--heads", "1", "--seq", "8", "--dim", "16", "--p-scale", "512")
    assert_one_line_error(r, "--p-scale", "[1, 256]")
    r = octet("attention-check", "--heads", "1", "--seq", "8", "--dim", "16", "--delta", "fresh")
    assert_one_line_error(r, "'fresh'", "stale", "matched")
    r = octet("attention-check", "--heads", "1", "--seq", "8", "--dim", "16", "--p-scale", "256", "--json")
    assert r.returncode == 0, r.stderr


def test_quantize_and_cast_choices():
    r = octet("quantize", "--recipe", "blockwise", "--shape", "4x4")
    assert_one_line_error(r, "'blockwise'", "tensor-delayed", "mx", "unit")
    r = octet("quantize", "--recipe", "row", "--shape", "4x4", "--role", "bias")
    assert_one_line_error(r, "'bias'", "activation", "weight", "gradient")
    r = octet("quantize", "--recipe", "row", "--shape", "4x4", "--margin", "99")
    assert_one_line_error(r, "margin")
    r = octet("cast", "--format", "e3m4", "1.0")
    assert_one_line_error(r, "'e3m4'", "e4m3", "e5m2")
