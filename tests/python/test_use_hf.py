"""`octet sample / eval / export` against independent references: a tiny run trained
here, exported to a Hugging Face folder and loaded with `transformers` (LlamaForCausalLM,
AutoTokenizer): the tokenizer gives octet's ids, the logits on a prompt equal octet's FP32 forward
(FP32 export: FP32 tolerance; BF16 export: BF16 tolerance), greedy generation gives the same
tokens; `octet eval` equals the trainer's logged validation loss; bad input gives one line, exit 2."""
import json
import math
import random
import shutil

import numpy as np
import pytest

from cli_util import assert_bad_input, octet, sets

import torch
import transformers

WORDS = ("the driver frees a buffer before queue stops when each device reports its state and "
         "kernel memory pages are mapped into user space while interrupts wait").split()
PROMPTS = ["the driver frees", "  indented line\nthe queue", "a\n\nb c\n", "héllo wörld ✓ 42", "x"]


def corpus_text(seed=0, lines=600):
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        n = rng.randint(3, 12)
        indent = " " * rng.choice([0, 0, 0, 2, 4])
        out.append(indent + " ".join(rng.choice(WORDS) for _ in range(n)) + rng.choice([".", "", ",", " 12."]))
        if rng.random() < 0.1:
            out.append("")
    return "\n".join(out) + "\n"


def model_sets(tmp, tokenizer, vocab, extra=()):
    return sets(f"data.path={tmp / 'corpus.txt'}", f"data.tokenizer={tokenizer}", f"data.cache_dir={tmp / 'cache'}",
                f"model.vocab_size={vocab}", "model.n_layer=2", "model.d_model=32", "model.n_head=4",
                "model.n_kv_head=2", "model.d_ff=48", "model.seq_len=32", "train.batch_size=4", "train.steps=12",
                "train.eval_every=6", "train.eval_batches=2", "train.warmup_steps=2", *extra)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("use")
    (tmp / "corpus.txt").write_text(corpus_text())
    out = {}
    for name, tok, vocab, extra in [("bpe_tied", "bpe", 320, ()),
                                    ("byte_untied", "byte", 256, ("model.tied_embeddings=false",))]:
        r = octet("train", *model_sets(tmp, tok, vocab, extra), "--arm", "bf16", "--out", tmp / name)
        assert r.returncode == 0, r.stderr
        out[name] = tmp / name
    out["tmp"] = tmp
    return out


def sample_json(run, prompt, *args):
    r = octet("sample", "--run", run, "--prompt", prompt, "--precision", "fp32", "--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def export(run, out, dtype):
    r = octet("export", "--run", run, "--format", "hf", "--out", out, "--dtype", dtype)
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.parametrize("name", ["bpe_tied", "byte_untied"])
def test_fp32_export_matches_octet(runs, name):
    hf = export(runs[name], runs["tmp"] / f"hf32_{name}", "fp32")
    tok = transformers.AutoTokenizer.from_pretrained(hf)
    model = transformers.AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
    assert type(model).__name__ == "LlamaForCausalLM"
    for prompt in PROMPTS:
        o = sample_json(runs[name], prompt, "--temperature", "0", "--max-new-tokens", "8")
        ids = tok(prompt, add_special_tokens=False)["input_ids"]
        assert ids == o["prompt_ids"], prompt
        assert tok.decode(ids) == prompt, prompt  # decoding gives octet's text back, line by line
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1].double().numpy()
        want = np.array(o["last_logits"], dtype=np.float64)
        np.testing.assert_allclose(logits, want, rtol=0, atol=1e-4 * max(1.0, np.abs(want).max()), err_msg=prompt)
        # Greedy generation: the same tokens (up to the context).
        gen = model.generate(torch.tensor([ids]), max_new_tokens=len(o["ids"]), do_sample=False, pad_token_id=0,
                             eos_token_id=None)
        assert gen[0, len(ids):].tolist() == o["ids"], prompt


# Piece names typed as text: octet reads them as text (they round-trip) and the exported tokenizer
# gives octet's ids for them (neither "<nl>" as a newline nor "<unk>" as the unknown piece).
LITERALS = ["<nl>", "<unk>", "a <nl> b<unk>c", "<nl>\n<unk>", "x <0x0A> <s></s>", "  <nl>"]


@pytest.mark.parametrize("name", ["bpe_tied", "byte_untied"])
def test_literal_piece_names_round_trip_and_match_hf(runs, name):
    tok = transformers.AutoTokenizer.from_pretrained(export(runs[name], runs["tmp"] / f"hf_lit_{name}", "fp32"))
    for text in LITERALS:
        o = sample_json(runs[name], text, "--temperature", "0", "--max-new-tokens", "1")
        assert tok(text, add_special_tokens=False)["input_ids"] == o["prompt_ids"], text
        assert tok.decode(o["prompt_ids"]) == text, text
        # octet's own decoding: the streamed output starts with the prompt as decoded from its ids
        r = octet("sample", "--run", runs[name], "--prompt", text, "--max-new-tokens", "1", "--temperature", "0")
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(text), (text, r.stdout)


def test_config_json_carries_the_configured_floats(runs):
    """config.json holds the values as configured (1e-05), not the float widened to double."""
    hf = export(runs["bpe_tied"], runs["tmp"] / "hf_floats", "bf16")
    cfg = json.loads((hf / "config.json").read_text())
    toml = (runs["bpe_tied"] / "config.toml").read_text()
    assert "norm_eps = 1e-05" in toml and "init_std = 0.02" in toml
    assert cfg["rms_norm_eps"] == 1e-05
    assert cfg["initializer_range"] == 0.02
    assert cfg["rope_theta"] == 10000.0 and cfg["rope_parameters"]["rope_theta"] == 10000.0
    assert "9.99999974" not in (hf / "config.json").read_text()


def test_sample_json_last_logits_is_what_its_help_says(runs):
    """--help names the position, that the logits are raw (before temperature and top-k/top-p) and
    their length; the values agree: the same for any sampling setting, vocab_size floats, and the
    greedy first token is their argmax."""
    h = octet("sample", "--help").stdout
    flat = " ".join(h.split())
    for words in ("last_logits", "prompt's last position", "before temperature, top-k, top-p", "vocab_size floats"):
        assert words in flat, (words, h)
    run = runs["bpe_tied"]
    greedy = sample_json(run, PROMPTS[0], "--temperature", "0", "--max-new-tokens", "1")
    hot = sample_json(run, PROMPTS[0], "--temperature", "2", "--top-k", "3", "--top-p", "0.5", "--max-new-tokens", "1")
    assert len(greedy["last_logits"]) == 320
    assert hot["last_logits"] == greedy["last_logits"]
    assert greedy["ids"][0] == int(np.argmax(greedy["last_logits"]))


def test_bf16_export_within_bf16_tolerance(runs):
    hf = export(runs["bpe_tied"], runs["tmp"] / "hf16", "bf16")
    model = transformers.AutoModelForCausalLM.from_pretrained(hf, dtype=torch.bfloat16).eval()
    assert model.model.embed_tokens.weight.dtype == torch.bfloat16
    o = sample_json(runs["bpe_tied"], PROMPTS[0])
    with torch.no_grad():
        logits = model(torch.tensor([o["prompt_ids"]])).logits[0, -1].double().numpy()
    want = np.array(o["last_logits"])
    # BF16 keeps 8 significant bits: weights and every activation rounded, a few roundings deep.
    assert np.abs(logits - want).max() <= 0.05 * np.abs(want).max() + 0.05


def last_val_loss(run):
    return [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines() if "val_loss" in l][-1]["val_loss"]


def test_eval_equals_trainer_validation_loss(runs):
    run = runs["bpe_tied"]
    r = octet("eval", "--run", run, "--json")
    assert r.returncode == 0, r.stderr
    e = json.loads(r.stdout)
    assert e["loss"] == pytest.approx(last_val_loss(run), rel=1e-6)
    assert e["perplexity"] == pytest.approx(math.exp(e["loss"]), rel=1e-9)
    text = runs["tmp"] / "other.txt"
    text.write_text(corpus_text(seed=5, lines=40))
    r = octet("eval", "--run", run, "--data", text, "--json")
    assert r.returncode == 0, r.stderr
    e = json.loads(r.stdout)
    assert e["bytes"] == len(text.read_bytes())
    # bits per byte = summed nats / ln 2 / bytes
    assert e["bits_per_byte"] == pytest.approx(e["loss"] * e["tokens"] / math.log(2) / e["bytes"], rel=1e-9)
    assert 0 < e["loss"] < math.log(320)  # trained: better than uniform


def test_eval_of_a_directory_does_not_score_the_file_separator(runs):
    """--data DIR reads the files joined by a newline: that newline is context, not text: one token
    fewer is scored than for the same text in one file (where the newline is the file's), and the
    bytes are the files' bytes."""
    tmp, run = runs["tmp"], runs["bpe_tied"]
    a, b = corpus_text(seed=7, lines=20).rstrip("\n"), corpus_text(seed=8, lines=20)
    d = tmp / "two_files"
    d.mkdir()
    (d / "a.txt").write_text(a)
    (d / "b.txt").write_text(b)
    (tmp / "joined.txt").write_text(a + "\n" + b)
    def ev(path):
        r = octet("eval", "--run", run, "--data", path, "--json")
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)
    both, joined = ev(d), ev(tmp / "joined.txt")
    assert both["bytes"] == len(a.encode()) + len(b.encode()) == joined["bytes"] - 1
    assert both["tokens"] == joined["tokens"] - 1
    # the scored tokens are the joined text's minus the separator's prediction: the sums differ by
    # one token's loss, which is positive
    assert both["loss"] * both["tokens"] < joined["loss"] * joined["tokens"]


def test_fp8_run_eval_and_the_trainers_sample(runs):
    """An FP8 arm (stateless recipe): eval in a new process equals the logged validation loss; with
    train.sample_tokens the trainer prints one greedy sample per evaluation."""
    tmp = runs["tmp"]
    run = tmp / "fp8"
    r = octet("train", *model_sets(tmp, "byte", 256, ("precision.recipe=tensor-current", "train.sample_tokens=6")),
              "--arm", "fp8-matched", "--out", run)
    assert r.returncode == 0, r.stderr
    assert sum(l.startswith("sample: ") for l in r.stdout.splitlines()) == 2, r.stdout  # eval_every=6 of 12 steps
    e = json.loads(octet("eval", "--run", run, "--json").stdout)
    assert e["arm"] == "fp8-matched"
    assert e["loss"] == pytest.approx(last_val_loss(run), rel=1e-6)


def test_bad_input(runs):
    tmp, run = runs["tmp"], runs["bpe_tied"]
    assert_bad_input(octet("sample", "--run", tmp / "nope", "--prompt", "x"), "no run")
    assert_bad_input(octet("eval", "--run", tmp / "nope"), "no run")
    assert_bad_input(octet("export", "--run", tmp / "nope", "--out", tmp / "x1"), "no run")
    assert_bad_input(octet("sample", "--run", run, "--prompt", "the " * 40), "context")
    assert_bad_input(octet("sample", "--run", run, "--prompt", "x", "--top-p", "0"), "top_p")
    # A configuration with no Llama equivalent (same parameters, post-norm): refused, nothing written.
    post = tmp / "post"
    shutil.copytree(run, post)
    cfg = (post / "config.toml").read_text()
    assert 'norm_placement = "pre"' in cfg
    (post / "config.toml").write_text(cfg.replace('norm_placement = "pre"', 'norm_placement = "post"'))
    assert_bad_input(octet("export", "--run", post, "--out", tmp / "x2"), "model.norm_placement")
    assert not (tmp / "x2").exists()
    # Never overwrite a non-empty --out; an unwritable one is one line.
    full = tmp / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    assert_bad_input(octet("export", "--run", run, "--out", full), "not an empty directory")
    assert (full / "keep.txt").read_text() == "mine"
    assert_bad_input(octet("export", "--run", run, "--out", full / "keep.txt" / "sub"), "--out")
    assert_bad_input(octet("export", "--run", run, "--out", tmp / "x3", "--dtype", "fp8"), "dtype")
