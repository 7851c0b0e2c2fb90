#!/usr/bin/env python3
"""bench/peers/gpt2_torch.py — PyTorch training of the same GPT-2 as `octet bench train`: BF16, or
torchao float8 linears.

The peer of src/bench/bench_train.cpp: the same architectures (MODELS = bench_model_config(); GPT-2's
block: LayerNorm pre-norm with bias, learned positions, GELU-tanh MLP, tied embeddings, no biases on
the linears, causal attention), the same synthetic tokens (uniform ids, 4 batches cycled), the same
step (forward, backward, global-norm clip to 1, AdamW lr 3e-4, betas 0.9/0.95, weight decay 0.1 on
matrices and embeddings), written the way a PyTorch user would make it fast: FP32 master parameters
with BF16 autocast, scaled_dot_product_attention (is_causal), fused AdamW, torch.compile of the model.
--fp8 tensorwise|rowwise converts the blocks' nn.Linear with torchao's convert_to_float8_training
(torchao.float8, the recipe of that name; the tied LM head stays BF16 as in octet's arms) — the FP8
training a PyTorch user would pick.
Timing as octet's: warm-up steps (compilation happens there), then timed steps, each between two
torch.cuda.synchronize() calls on the host wall clock; the median step gives tokens/s. FLOPs per
token by the same formula (PaLM, octet/bench.h): 6·N_matmul + 6·L·2·T·d; MFU against the dense BF16
peak (mfu, mfu_bf16) and the dense FP8 peak (mfu_fp8). Memory: peak_mem_gib is
torch.cuda.max_memory_allocated over the model's steps (reset per model), device_mem_gib the device's
used memory (cudaMemGetInfo: total − free) after the last step; null on the CPU.
Batch per model: --model-batch NAME=N, else --tokens-per-step / --seq, else --batch (as octet's
bench_batch()). Prints the same JSON keys as octet's rows (impl "torch-compile" or "torch-eager";
arm "bf16-autocast", "torchao-tensorwise" or "torchao-rowwise"), so bench/summarize.py reads both.
"""
import argparse
import datetime
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

MODELS = {  # name: (n_layer, d_model, n_head, d_ff), as bench_model_config() in bench_train.cpp
    "gpt2-small": (12, 768, 12, 3072),
    "350m": (24, 1024, 16, 4096),     # GPT-2 medium
    "760m": (36, 1280, 20, 5120),     # GPT-2 large, head_dim 64
    "1.3b": (24, 2048, 16, 8192),     # GPT-3 XL width and depth, 16 heads of 128
    "2.7b": (32, 2560, 20, 10240),    # GPT-3 2.7B width and depth, 20 heads of 128
    "tiny": (2, 64, 2, 256),
}
BF16_PEAK, FP8_PEAK = 989.0, 1979.0  # dense TFLOP/s, H100/H200 SXM datasheet (octet/bench.h)
FP8_RECIPES = ("tensorwise", "rowwise")


class Block(nn.Module):
    # The attention of q, k, v [B, H, T, D]; bench/peers/gpt2_octet_torch.py swaps in octet's.
    attend = staticmethod(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))

    def __init__(self, d, h, f):
        super().__init__()
        self.h = h
        self.ln1 = nn.LayerNorm(d, eps=1e-5)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.ln2 = nn.LayerNorm(d, eps=1e-5)
        self.fc1 = nn.Linear(d, f, bias=False)
        self.fc2 = nn.Linear(f, d, bias=False)

    def forward(self, x):
        B, T, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (t.view(B, T, self.h, d // self.h).transpose(1, 2) for t in (q, k, v))
        y = self.attend(q, k, v)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, n_layer, d, h, f, vocab, seq):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, h, f) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d, eps=1e-5)
        for name, p in self.named_parameters():  # GPT-2 init, residual projections scaled
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith(("proj.weight", "fc2.weight")) else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, ids, targets):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.wte(ids) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        return self.head_loss(x, targets)

    def head_loss(self, x, targets):
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied LM head
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


def compiled(model, mode):
    """The module a step calls: torch.compile of the whole model ("model"), of each block and of
    the head + loss ("blocks": one compiled graph serves every block, so compile time does not
    grow with depth, as torchtitan does it), or the model as it is ("none")."""
    if mode == "model":
        return torch.compile(model)
    if mode == "blocks":
        for b in model.blocks:
            b.compile()
        model.head_loss = torch.compile(model.head_loss)
    return model


def matmul_params(n_layer, d, f, vocab):
    return n_layer * (3 * d * d + d * d + 2 * d * f) + vocab * d


def model_batch(spec, name):
    """N of NAME=N in a comma-separated --model-batch spec, or None."""
    for item in filter(None, spec.split(",")):
        key, sep, n = item.partition("=")
        if not sep or not n.isdigit() or int(n) < 1:
            sys.exit(f"--model-batch: expected NAME=N with N >= 1, got '{item}'")
        if key == name:
            return int(n)
    return None


def batch_for(a, name):
    """Sequences per micro-batch of model NAME: --model-batch, else --tokens-per-step / (--seq x
    --grad-accum), else --batch (octet's bench_batch)."""
    b = model_batch(a.model_batch, name)
    if b is not None:
        return b
    if a.tokens_per_step:
        micro = a.seq * a.grad_accum
        if a.tokens_per_step % micro:
            sys.exit(f"--tokens-per-step {a.tokens_per_step} is not a multiple of --seq x --grad-accum "
                     f"({a.seq} x {a.grad_accum})")
        return a.tokens_per_step // micro
    return a.batch


def to_float8(model, recipe):
    """torchao float8 training on the blocks' nn.Linear (recipe tensorwise | rowwise); the tied LM
    head is F.linear and stays BF16. Needs torchao importable (else exits naming it). Returns the
    number of converted linears."""
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        from torchao.float8.float8_linear import Float8Linear
    except ImportError as e:
        raise SystemExit(f"the torchao-{recipe} arm needs torchao's float8 training (pip install "
                         f"torchao; on the GPU machine bench/peers/install_wheels.sh): {e}") from e
    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(recipe),
                               module_filter_fn=lambda m, fqn: m.in_features % 16 == 0 and m.out_features % 16 == 0)
    return sum(isinstance(m, Float8Linear) for m in model.modules())


def throughput(shape, vocab, seq, tokens, ms, world=1, peak_bf16=BF16_PEAK, peak_fp8=FP8_PEAK):
    """The speed fields of a row from the timed step times `ms` (tokens per step over every rank):
    FLOPs per token by the PaLM formula, tokens/s of the median step, TFLOP/s per GPU, MFU."""
    L, d, h, f = shape
    flops_per_token = 6.0 * matmul_params(L, d, f, vocab) + 6.0 * L * 2 * seq * d
    step_ms = statistics.median(ms)
    tps = tokens / (step_ms * 1e-3)
    tflops = flops_per_token * tps / 1e12 / world
    return dict(n_layer=L, d_model=d, n_head=h, d_ff=f, seq_len=seq, vocab_size=vocab,
                tokens_per_step=tokens, n_matmul_params=matmul_params(L, d, f, vocab),
                flops_per_token=flops_per_token, step_ms_median=step_ms,
                step_ms_mean=statistics.mean(ms), tokens_per_s=tps, tflops=tflops,
                mfu=tflops / peak_bf16, mfu_bf16=tflops / peak_bf16, mfu_fp8=tflops / peak_fp8,
                peak_tflops=peak_bf16, peak_tflops_fp8=peak_fp8)


def memory_fields(dev):
    """peak_mem_gib (max allocated since the last reset) and device_mem_gib (total − free), GiB."""
    if dev.type != "cuda":
        return dict(peak_mem_gib=None, device_mem_gib=None)
    free, total = torch.cuda.mem_get_info(dev)
    return dict(peak_mem_gib=torch.cuda.max_memory_allocated(dev) / 2**30, device_mem_gib=(total - free) / 2**30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gpt2-small,350m")
    ap.add_argument("--batch", type=int, default=8, help="sequences per micro-batch")
    ap.add_argument("--tokens-per-step", type=int, default=0,
                    help="tokens per optimizer step: batch = this / (--seq x --grad-accum) (overrides --batch)")
    ap.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    ap.add_argument("--model-batch", default="", help="NAME=N,...: a model's batch (overrides both)")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--peak-tflops", type=float, default=BF16_PEAK, help="dense BF16 peak (mfu, mfu_bf16)")
    ap.add_argument("--peak-tflops-fp8", type=float, default=FP8_PEAK, help="dense FP8 peak (mfu_fp8)")
    ap.add_argument("--fp8", choices=("none",) + FP8_RECIPES, default="none",
                    help="torchao float8 linears with this recipe (default: BF16 autocast)")
    ap.add_argument("--compile", choices=("model", "blocks", "none"), default="model",
                    help="torch.compile the whole model, each block (and the head), or nothing")
    ap.add_argument("--no-compile", action="store_true", help="= --compile none")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--device", default="cuda", help="cuda (cpu only to test the script)")
    a = ap.parse_args()
    if a.no_compile:
        a.compile = "none"
    if a.grad_accum < 1:
        sys.exit(f"--grad-accum must be >= 1, got {a.grad_accum}")
    for name in a.models.split(","):
        if name not in MODELS:
            sys.exit(f"unknown model '{name}' (expected {', '.join(MODELS)})")
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    torch.backends.cuda.matmul.allow_tf32 = True
    env = {
        "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if a.fp8 != "none":
        import torchao
        env["torchao"] = torchao.__version__
    arm = "bf16-autocast" if a.fp8 == "none" else "torchao-" + a.fp8
    for name in a.models.split(","):
        L, d, h, f = MODELS[name]
        batch = batch_for(a, name)
        torch.manual_seed(1234)
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        model = GPT(L, d, h, f, a.vocab, a.seq).to(dev)
        fp8_linears = to_float8(model, a.fp8) if a.fp8 != "none" else 0
        n_params = sum(p.numel() for p in model.parameters())
        decay = [p for p in model.parameters() if p.dim() == 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=dev.type == "cuda")
        step_model = compiled(model, a.compile)
        g = torch.Generator(device=dev).manual_seed(1234)
        stream = [torch.randint(0, a.vocab, (batch, a.seq + 1), device=dev, generator=g) for _ in range(4)]
        ms, losses = [], []
        sync()
        t_start, warmup_s = time.perf_counter(), 0.0
        for s in range(a.warmup + a.steps):
            t0 = time.perf_counter()
            step_loss = 0.0
            for m in range(a.grad_accum):  # micro-batches; the gradient is their mean, as octet's
                ids = stream[(s * a.grad_accum + m) % 4]
                with torch.autocast(dev.type, dtype=torch.bfloat16):
                    loss = step_model(ids[:, :-1], ids[:, 1:]) / a.grad_accum
                loss.backward()
                step_loss = step_loss + loss.detach()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(float(step_loss))  # synchronizes, as octet's step returns its loss to the host
            sync()
            if s >= a.warmup:
                ms.append((time.perf_counter() - t0) * 1e3)
            if s + 1 == a.warmup:
                warmup_s = time.perf_counter() - t_start  # compilation happens here
        row = dict(env, bench="train", impl="torch-compile" if a.compile != "none" else "torch-eager",
                   compile=a.compile, warmup_s=warmup_s, model=name, arm=arm, recipe="" if a.fp8 == "none" else a.fp8, fp8_linears=fp8_linears, batch=batch, grad_accum=a.grad_accum,
                   n_params=n_params, warmup=a.warmup, steps=a.steps, loss_first=losses[0],
                   loss_last=losses[-1])
        row.update(throughput(MODELS[name], a.vocab, a.seq, batch * a.seq * a.grad_accum, ms, 1, a.peak_tflops,
                              a.peak_tflops_fp8))
        row.update(memory_fields(dev))
        if a.json:
            print(json.dumps(row), flush=True)
        else:
            mem = f"{row['peak_mem_gib']:6.1f}" if row["peak_mem_gib"] is not None else "     -"
            print(f"{row['impl']:22} {name:11} {arm:18} {batch:5} {n_params:10} {row['step_ms_median']:9.2f} "
                  f"{row['tokens_per_s']:11.0f} {row['tflops']:8.1f} {100 * row['mfu_bf16']:5.1f}% "
                  f"{100 * row['mfu_fp8']:5.1f}% {mem} {losses[-1]:8.4f}", flush=True)
        del model, step_model, opt, stream
        if dev.type == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
