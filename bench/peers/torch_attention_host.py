#!/usr/bin/env python3
"""bench/peers/torch_attention_host.py — the host time of octet.torch.attention per call.

For each shape: 5 warm-up forward + backward calls, then 50 forward calls and 50 forward +
backward calls timed with time.perf_counter without a synchronize inside the loop ("host": what
the Python thread spends issuing the work) and with the synchronize after the loop ("sync": the
wall time). When host ≥ sync, the call is host-bound: the GPU waits for Python, autograd, the
ctypes call and the library's launches. For the shapes named by --profile-shape, also a cProfile
of 20 forward + backward calls (Python time per function) and a torch.profiler table (CPU-side
CUDA runtime calls). Plain-text output; bench/results/2026-12-04-h200-torch-attention-host.log is
one run. Needs liboctet_c (OCTET_LIBRARY) and python/ on PYTHONPATH.
"""
import argparse
import cProfile
import io
import pstats
import time

import torch

from octet.torch import attention

SHAPES = {  # name: (batch, heads, seq, head_dim, causal)
    "b4-h16-s1024-d128": (4, 16, 1024, 128, False),
    "b8-h12-s1024-d64-causal": (8, 12, 1024, 64, True),
    "b4-h16-s1024-d128-causal": (4, 16, 1024, 128, True),
    "b8-h12-s1024-d128-causal": (8, 12, 1024, 128, True),
    "b4-h16-s1024-d64": (4, 16, 1024, 64, False),
}


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated names of " + ", ".join(SHAPES))
    ap.add_argument("--profile-shape", default="b8-h12-s1024-d64-causal")
    ap.add_argument("--calls", type=int, default=50)
    a = ap.parse_args()
    dev = torch.device(a.device)
    for name in a.shapes.split(","):
        if name not in SHAPES:
            raise SystemExit(f"torch_attention_host.py: unknown shape {name!r} (one of {', '.join(SHAPES)})")
        b, h, s, d, causal = SHAPES[name]
        q, k, v, do = (torch.randn(b, s, h, d, device=dev, dtype=torch.bfloat16) for _ in range(4))
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        for _ in range(5):
            attention(q, k, v, causal=causal).backward(do)
        sync(dev)
        n = a.calls
        t0 = time.perf_counter()
        for _ in range(n):
            attention(q, k, v, causal=causal)
        t1 = time.perf_counter()
        sync(dev)
        t2 = time.perf_counter()
        for _ in range(n):
            attention(q, k, v, causal=causal).backward(do)
        t3 = time.perf_counter()
        sync(dev)
        t4 = time.perf_counter()
        print(f"{name}: fwd host {1e3 * (t1 - t0) / n:.3f} ms/call (sync {1e3 * (t2 - t0) / n:.3f}); "
              f"fwd+bwd host {1e3 * (t3 - t2) / n:.3f} (sync {1e3 * (t4 - t2) / n:.3f})", flush=True)
        if name == a.profile_shape:
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(20):
                attention(q, k, v, causal=causal).backward(do)
            sync(dev)
            pr.disable()
            out = io.StringIO()
            pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(15)
            print(out.getvalue())
            acts = [torch.profiler.ProfilerActivity.CPU]
            if dev.type == "cuda":
                acts.append(torch.profiler.ProfilerActivity.CUDA)
            with torch.profiler.profile(activities=acts) as prof:
                for _ in range(5):
                    attention(q, k, v, causal=causal).backward(do)
                sync(dev)
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18))


if __name__ == "__main__":
    main()
