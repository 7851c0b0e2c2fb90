#!/usr/bin/env python3
"""bench/peers/hf_llama.py — a Hugging Face LlamaForCausalLM trained as a lab would drop octet in
(docs/pytorch.md "Hugging Face transformers"): octet's attention through octet.hf.register and
octet's FP8 linears through convert_to_float8, against SDPA BF16 and torchao's float8 linears, in
one loop (gpt2_octet_torch.py's data, step and timing).

  --model llama-1b | tiny      Llama-3.2-1B's shape (d 2048, 16 layers, 32 heads / 8 KV heads of 64,
                               d_ff 8192, tied embedding) or a 2-layer one for tests
  --attention sdpa | octet | octet-stale
  --linears bf16 | fp8 | torchao-tensorwise | torchao-rowwise
                               every projection but the LM head (octet.hf.float8_filter)
  --data PATH                  bytes of a file or directory as tokens (vocab 256), the last 10 %
                               held out; without it uniform tokens
  --grad-accum A               micro-batches per optimizer step

BF16 autocast over FP32 parameters, fused AdamW (lr --lr, betas 0.9/0.95, weight decay 0.1 on
matrices), clip 1.0, torch.compile of the whole model unless --no-compile. One JSON line: tokens/s of
the median timed step, TFLOP/s by the PaLM formula (6·N_matmul + 12·L·T·H·head_dim per token), MFU,
the losses and validation losses.
"""
import argparse
import datetime
import json
import pathlib
import statistics
import sys
import time

import torch

from gpt2_octet_torch import batches
from gpt2_torch import to_float8

try:
    import octet
except ImportError:  # run from the checkout without installing the package
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
    import octet
import octet.hf
import octet.torch as ot

# name: hidden, layers, heads, kv heads, head_dim, d_ff
SHAPES = {"llama-1b": (2048, 16, 32, 8, 64, 8192), "tiny": (64, 2, 4, 2, 16, 128)}


def make_model(name, vocab, seq, attention):
    from transformers import LlamaConfig, LlamaForCausalLM
    d, L, h, g, hd, f = SHAPES[name]
    config = LlamaConfig(vocab_size=vocab, hidden_size=d, num_hidden_layers=L, num_attention_heads=h,
                         num_key_value_heads=g, head_dim=hd, intermediate_size=f,
                         max_position_embeddings=seq, tie_word_embeddings=True, rope_theta=500000.0,
                         attention_dropout=0.0, use_cache=False)  # training: no KV cache
    model = LlamaForCausalLM(config)
    model.set_attn_implementation(attention)
    return model


def flops_per_token(name, vocab, seq):
    """PaLM's appendix B: 6 x the matmul parameters (projections and the tied LM head) + the
    attention's 6·L·2·T·(H·head_dim)."""
    d, L, h, g, hd, f = SHAPES[name]
    per_layer = d * h * hd + 2 * d * g * hd + h * hd * d + 3 * d * f
    matmul = L * per_layer + vocab * d
    return 6.0 * matmul + 6.0 * L * 2 * seq * h * hd, matmul


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(SHAPES), default="llama-1b")
    ap.add_argument("--attention", choices=["sdpa", "octet", "octet-stale"], default="octet")
    ap.add_argument("--linears", choices=["bf16", "fp8", "torchao-tensorwise", "torchao-rowwise"],
                    default="fp8")
    ap.add_argument("--recipe", default="tensor-current")
    ap.add_argument("--data", default="", help="a text file or directory (bytes are tokens, vocab 256)")
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-batches", type=int, default=4)
    ap.add_argument("--batch", type=int, default=2, help="sequences per micro-batch")
    ap.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="dense BF16 peak (mfu)")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--device", default="cuda", help="cuda (cpu only to test the script)")
    a = ap.parse_args()
    if a.data:
        a.vocab = 256
    if min(a.batch, a.grad_accum, a.seq, a.steps, a.warmup) < 1:
        sys.exit("--batch, --grad-accum, --seq, --steps and --warmup must be >= 1")
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    if a.attention != "sdpa":
        octet.hf.register()
    torch.manual_seed(1234)
    model = make_model(a.model, a.vocab, a.seq, a.attention).to(dev)
    if a.linears == "fp8":
        ot.convert_to_float8(model, recipe=a.recipe, module_filter=octet.hf.float8_filter)
    elif a.linears.startswith("torchao-"):
        to_float8(model, a.linears.split("-", 1)[1])
    fp8_linears = sum(isinstance(m, ot.Float8Linear) for m in model.modules())
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=dev.type == "cuda")
    step_model = model if a.no_compile else torch.compile(model)
    batch_of, val = batches(a, dev, 0)
    ms, losses, val_losses = [], [], []
    sync()
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        step_loss = 0.0
        for m in range(a.grad_accum):
            ids = batch_of(s * a.grad_accum + m)
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                loss = step_model(input_ids=ids[:, :-1], labels=ids[:, :-1]).loss / a.grad_accum
            loss.backward()
            step_loss = step_loss + loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        ot.update_scales(model)
        losses.append(float(step_loss))
        sync()
        if s >= a.warmup:
            ms.append((time.perf_counter() - t0) * 1e3)
        if val and ((s + 1) % a.eval_every == 0 or s + 1 == a.warmup + a.steps):
            model.eval()
            with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16):
                v = sum(float(model(input_ids=w[:, :-1], labels=w[:, :-1]).loss) for w in val) / len(val)
            model.train()
            val_losses.append((s + 1, v))
    fpt, matmul = flops_per_token(a.model, a.vocab, a.seq)
    tokens = a.batch * a.seq * a.grad_accum
    step_ms = statistics.median(ms)
    tps = tokens / (step_ms * 1e-3)
    import transformers
    row = {"bench": "train", "impl": "hf-" + ("compile" if not a.no_compile else "eager"),
           "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
           "torch": torch.__version__, "transformers": transformers.__version__,
           "octet_library": octet.library_path() if a.attention != "sdpa" or a.linears == "fp8" else None,
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "model": a.model, "attention": a.attention, "linears": a.linears,
           "arm": f"{a.linears}+{a.attention}", "recipe": a.recipe if a.linears == "fp8" else a.linears[8:],
           "fp8_linears": fp8_linears, "n_params": n_params, "n_matmul_params": matmul,
           "seq_len": a.seq, "vocab_size": a.vocab, "batch": a.batch, "grad_accum": a.grad_accum,
           "tokens_per_step": tokens, "warmup": a.warmup, "steps": a.steps,
           "step_ms_median": step_ms, "tokens_per_s": tps, "flops_per_token": fpt,
           "tflops": fpt * tps / 1e12, "mfu": fpt * tps / 1e12 / a.peak_tflops,
           "loss_first": losses[0], "loss_last": losses[-1], "losses": losses,
           "val_losses": val_losses, "data": a.data or "uniform"}
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
