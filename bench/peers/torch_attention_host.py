#!/usr/bin/env python3
"""bench/peers/torch_attention_host.py — the host time of octet.torch.attention per call.

For each shape: 5 warm-up forward + backward calls, then 50 forward calls and 50 forward +
backward calls timed with time.perf_counter without a synchronize inside the loop ("host": what
the Python thread spends issuing the work) and with the synchronize after the loop ("sync": the
wall time). When host ≥ sync, the call is host-bound: the GPU waits for Python, autograd, the
ctypes call and the library's launches. Then the library alone ("library alone"): the C ABI's
forward and backward through ctypes with one params struct made once (liboctet_c's host code and
its CUDA runtime calls), so that the two shares can be told apart; then each layer of the call
timed alone (breakdown: the C ABI with fresh outputs, the op's body, the autograd.Function,
attention() itself, the backward's body, forward + backward through .backward() and through
torch.autograd.grad). For the shapes named by
--profile-shape, also a cProfile
of 20 forward + backward calls (Python time per function) and a torch.profiler table (CPU-side
CUDA runtime calls). Plain-text output; bench/results/2026-12-04-h200-torch-attention-host.log is
one run. Needs liboctet_c (OCTET_LIBRARY) and python/ on PYTHONPATH.
"""
import argparse
import cProfile
import ctypes
import importlib
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


def library_host(q, k, v, do, causal, n):
    """The library's own share: one c_api.h params struct per direction, made once, and the C
    function called n times without a sync (liboctet_c's host code and the CUDA runtime calls it
    makes; no Python tensor work, no autograd). Returns (fwd host, fwd sync, bwd host, bwd sync)
    in ms per call."""
    A = importlib.import_module("octet.torch.attention")  # the module (the package exports the function)
    from octet import _lib
    from octet.torch._backend import backend_for
    config = (causal, 0.0, "matched", "fp8", "hybrid", "bshd")
    empty = torch.zeros(0, dtype=torch.float64, device=q.device)
    o, lse, saved = A._forward_body(q, k, v, empty, *config)
    dims = A._dims(q, k, "bshd")
    pf = A._params(*dims, q.dtype, *config)
    pf.q, pf.k, pf.v, pf.o, pf.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
    pf.saved, pf.saved_size = saved.data_ptr(), saved.numel()
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    pb = A._params(*dims, q.dtype, *config)
    pb.o, pb.lse, pb.saved, pb.saved_size = o.data_ptr(), lse.data_ptr(), saved.data_ptr(), saved.numel()
    pb.d_o, pb.dq, pb.dk, pb.dv = do.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
    be, lib = backend_for(q.device), _lib.lib()
    out = []
    for fn, prm in ((lib.octet_attention_forward, pf), (lib.octet_attention_backward, pb)):
        ref = ctypes.byref(prm)
        _lib.check(fn(be, ref))  # warm
        sync(q.device)
        t0 = time.perf_counter()
        for _ in range(n):
            fn(be, ref)
        t1 = time.perf_counter()
        sync(q.device)
        t2 = time.perf_counter()
        out += [1e3 * (t1 - t0) / n, 1e3 * (t2 - t0) / n]
    return out


def timed(fn, dev, n):
    """fn() n times: (host ms per call, sync ms per call)."""
    fn()
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    sync(dev)
    t2 = time.perf_counter()
    return 1e3 * (t1 - t0) / n, 1e3 * (t2 - t0) / n


def breakdown(q, k, v, do, causal, n):
    """The forward's and backward's host time layer by layer, each layer timed alone (host ms per
    call, sync ms): the library through ctypes with fresh output tensors per call, the op's body
    (_forward_body / _backward_body: tensors, params, the C call), the autograd.Function
    (_Eager.apply), attention() itself; the backward through autograd (.backward with
    accumulation into q/k/v.grad, and torch.autograd.grad without it)."""
    A = importlib.import_module("octet.torch.attention")
    from octet import _lib
    from octet.torch._backend import backend_for
    config = (causal, 0.0, "matched", "fp8", "hybrid", "bshd")
    empty = torch.empty(0, dtype=torch.float64, device=q.device)
    qd, kd, vd = (t.detach() for t in (q, k, v))
    o, lse, saved = A._forward_body(qd, kd, vd, empty, *config)
    dims = A._dims(qd, kd, "bshd")
    lib = _lib.lib()

    def lib_fresh():
        o2, lse2 = torch.empty_like(o), torch.empty_like(lse)
        s2 = torch.empty(saved.numel(), dtype=torch.uint8, device=q.device)
        p = A._params(*dims, qd.dtype, *config)
        p.q, p.k, p.v, p.o, p.lse = qd.data_ptr(), kd.data_ptr(), vd.data_ptr(), o2.data_ptr(), lse2.data_ptr()
        p.saved, p.saved_size = s2.data_ptr(), s2.numel()
        lib.octet_attention_forward(backend_for(q.device), p)

    rows = [
        ("fwd: library, fresh outputs", lib_fresh),
        ("fwd: _forward_body", lambda: A._forward_body(qd, kd, vd, empty, *config)),
        ("fwd: _Eager.apply (grad)", lambda: A._Eager.apply(q, k, v, empty, *config)),
        ("fwd: attention()", lambda: attention(q, k, v, causal=causal)),
        ("bwd: _backward_body", lambda: A._backward_body(o, lse, saved, do, empty, kd.shape[2], kd.shape[1],
                                                         *config)),
    ]
    for name, fn in rows:
        h, s = timed(fn, q.device, n)
        print(f"  {name:34s} host {h:.3f} ms (sync {s:.3f})", flush=True)
    for name, run in (("fwd+bwd: .backward", lambda o: o.backward(do)),
                      ("fwd+bwd: autograd.grad", lambda o: torch.autograd.grad(o, (q, k, v), do))):
        h, s = timed(lambda: run(attention(q, k, v, causal=causal)), q.device, n)
        print(f"  {name:34s} host {h:.3f} ms (sync {s:.3f})", flush=True)


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
        lf, lfs, lb, lbs = library_host(*(t.detach() for t in (q, k, v)), do, causal, n)
        print(f"{name}: library alone: fwd host {lf:.3f} ms/call (sync {lfs:.3f}); bwd host {lb:.3f} "
              f"(sync {lbs:.3f})", flush=True)
        breakdown(q, k, v, do, causal, n)
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
