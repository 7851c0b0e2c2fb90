#!/usr/bin/env python3
"""bench/peers/sdpa.py — PyTorch's scaled_dot_product_attention as the peer of `octet bench attention`.

Times torch.nn.functional.scaled_dot_product_attention in BF16 (PyTorch's SDPA takes no FP8
operands) with the cuDNN and the FlashAttention backends forced one at a time
(torch.nn.attention.sdpa_kernel), forward and backward, at the same B x H x S x D as octet's
benchmark. Method as octet's (include/octet/bench.h): CUDA events around each repetition, warm-up, the
median; FLOPs by FlashAttention's convention (forward 4·B·H·S²·D, halved if causal; backward 2.5x).
Prints one JSON object per line (--json) or a table. `octet bench attention` runs this script in
the same command so that both sets of numbers come from one machine and one moment.
"""
import argparse
import datetime
import json
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def time_ms(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def emit(row, as_json, label):
    """One result row: its JSON object (as_json), else a table line led by `label`."""
    if as_json:
        print(json.dumps(row), flush=True)
    else:
        print(f"{label} fwd {row['fwd_ms']:8.3f} ms {row['fwd_tflops']:6.0f} TF/s  "
              f"fwd+bwd {row['fwd_bwd_ms']:8.3f} ms {row['fwd_bwd_tflops']:6.0f} TF/s", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--seq", default="1024,4096", help="comma-separated sequence lengths")
    ap.add_argument("--causal", type=int, default=1)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    dev = torch.device("cuda")
    env = {
        "gpu": torch.cuda.get_device_name(dev),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    backends = [("torch-sdpa-cudnn-bf16", SDPBackend.CUDNN_ATTENTION),
                ("torch-sdpa-flash-bf16", SDPBackend.FLASH_ATTENTION)]
    if not a.json:
        print(f"{'impl':24} {'B':>3} {'H':>3} {'S':>6} {'D':>4} {'fwd ms':>9} {'fwd TF/s':>9} "
              f"{'bwd ms':>9} {'bwd TF/s':>9}")
    for S in (int(s) for s in a.seq.split(",")):
        shape = (a.batch, a.heads, S, a.head_dim)
        g = torch.Generator(device=dev).manual_seed(0)
        q, k, v = (torch.randn(shape, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
                   for _ in range(3))
        d_o = torch.randn(shape, device=dev, dtype=torch.bfloat16, generator=g) * 1e-3
        flop = 4.0 * a.batch * a.heads * S * S * a.head_dim * (0.5 if a.causal else 1.0)
        for name, backend in backends:
            row = dict(env, bench="attention", impl=name, batch=a.batch, heads=a.heads, seq=S,
                       head_dim=a.head_dim, causal=bool(a.causal), reps=a.reps)
            try:
                with sdpa_kernel([backend]):
                    fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(a.causal))
                    row["fwd_ms"] = time_ms(fwd, a.warmup, a.reps)
                    out = fwd()
                    bwd = lambda: torch.autograd.grad(out, (q, k, v), d_o, retain_graph=True)
                    row["bwd_ms"] = time_ms(bwd, a.warmup, a.reps)
                row["fwd_tflops"] = flop / (row["fwd_ms"] * 1e-3) / 1e12
                row["bwd_tflops"] = 2.5 * flop / (row["bwd_ms"] * 1e-3) / 1e12
            except RuntimeError as e:  # a backend that refuses the shape or is missing
                row["error"] = str(e).splitlines()[0]
            if a.json:
                print(json.dumps(row), flush=True)
            elif "error" in row:
                print(f"{name:24} {a.batch:3} {a.heads:3} {S:6} {a.head_dim:4}  unavailable: {row['error']}")
            else:
                print(f"{name:24} {a.batch:3} {a.heads:3} {S:6} {a.head_dim:4} {row['fwd_ms']:9.3f} "
                      f"{row['fwd_tflops']:9.1f} {row['bwd_ms']:9.3f} {row['bwd_tflops']:9.1f}", flush=True)


if __name__ == "__main__":
    main()
