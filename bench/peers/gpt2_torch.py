#!/usr/bin/env python3
"""bench/peers/gpt2_torch.py — PyTorch BF16 training of the same GPT-2 as `octet bench train`.

The peer of src/train/bench_train.{h,cpp}: the same architecture (GPT-2's block: LayerNorm pre-norm
with bias, learned positions, GELU-tanh MLP of 4·d, tied embeddings, no biases on the linears, causal
attention), the same synthetic tokens (uniform ids, 4 batches cycled), the same step (forward,
backward, global-norm clip to 1, AdamW lr 3e-4, betas 0.9/0.95, weight decay 0.1 on matrices and
embeddings), written the way a PyTorch user would make it fast: FP32 master parameters with BF16
autocast, scaled_dot_product_attention (is_causal), fused AdamW, torch.compile of the model.
Timing as octet's: warm-up steps (compilation happens there), then timed steps, each between two
torch.cuda.synchronize() calls on the host wall clock; the median step gives tokens/s. FLOPs per
token by the same formula (PaLM): 6·N_matmul + 6·L·2·T·d. Prints the same JSON keys as octet's rows
(impl "torch-compile", arm "bf16-autocast"), so bench/summarize.py and the results table read both.
"""
import argparse
import datetime
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

MODELS = {  # name: (n_layer, d_model, n_head, d_ff), as bench_model_config() in bench_train.cpp
    "gpt2-small": (12, 768, 12, 3072),
    "350m": (24, 1024, 16, 4096),
    "tiny": (2, 64, 2, 256),
}


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
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied LM head
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


def matmul_params(n_layer, d, f, vocab):
    return n_layer * (3 * d * d + d * d + 2 * d * f) + vocab * d


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gpt2-small,350m")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--device", default="cuda", help="cuda (cpu only to test the script)")
    a = ap.parse_args()
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
    for name in a.models.split(","):
        L, d, h, f = MODELS[name]
        torch.manual_seed(1234)
        model = GPT(L, d, h, f, a.vocab, a.seq).to(dev)
        n_params = sum(p.numel() for p in model.parameters())
        decay = [p for p in model.parameters() if p.dim() == 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
        step_model = model if a.no_compile else torch.compile(model)
        g = torch.Generator(device=dev).manual_seed(1234)
        stream = [torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=dev, generator=g) for _ in range(4)]
        ms, losses = [], []
        sync()
        for s in range(a.warmup + a.steps):
            t0 = time.perf_counter()
            ids = stream[s % 4]
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                loss = step_model(ids[:, :-1], ids[:, 1:])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())  # synchronizes, as octet's step returns its loss to the host
            sync()
            if s >= a.warmup:
                ms.append((time.perf_counter() - t0) * 1e3)
        tokens = a.batch * a.seq
        flops_per_token = 6.0 * matmul_params(L, d, f, a.vocab) + 6.0 * L * 2 * a.seq * d
        step_ms = statistics.median(ms)
        tps = tokens / (step_ms * 1e-3)
        tflops = flops_per_token * tps / 1e12
        row = dict(env, bench="train", impl="torch-compile" if not a.no_compile else "torch-eager",
                   model=name, arm="bf16-autocast", recipe="", n_layer=L, d_model=d, n_head=h, d_ff=f,
                   seq_len=a.seq, vocab_size=a.vocab, batch=a.batch, tokens_per_step=tokens,
                   n_params=n_params, n_matmul_params=matmul_params(L, d, f, a.vocab),
                   flops_per_token=flops_per_token, warmup=a.warmup, steps=a.steps,
                   step_ms_median=step_ms, step_ms_mean=statistics.mean(ms), tokens_per_s=tps,
                   tflops=tflops, mfu=tflops / a.peak_tflops, peak_tflops=a.peak_tflops,
                   loss_first=losses[0], loss_last=losses[-1])
        if a.json:
            print(json.dumps(row), flush=True)
        else:
            print(f"{row['impl']:22} {name:11} {row['arm']:12} {a.batch:5} {n_params:10} {step_ms:9.2f} "
                  f"{tps:11.0f} {tflops:8.1f} {100 * row['mfu']:5.1f}% {losses[-1]:8.4f}", flush=True)
        del model, step_model, opt, stream
        if dev.type == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
