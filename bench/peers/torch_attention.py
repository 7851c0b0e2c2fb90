#!/usr/bin/env python3
"""bench/peers/torch_attention.py — octet's attention as a PyTorch user calls it, beside SDPA.

Times, on one GPU and in one process, forward and forward + backward of:
  octet-torch-<delta>    octet.torch.attention on BF16 [batch, seq, heads, head_dim] tensors that
                         require grad (read where they lie: layout bshd; the custom ops, autograd);
  octet-torch-varlen-<delta>  octet.torch.attention_varlen on the same tokens packed as `batch`
                         sequences of `seq` ([batch·seq, heads, head_dim], CUDA offsets): the
                         library's per-sequence loop against the one batched call above;
  octet-capi-bshd-<delta>  the same kernels through liboctet_c's C ABI on the same [B, S, H, D]
                         BF16 tensors (OCTET_C_TOKENS_MAJOR), no autograd: the forward places its
                         saved state in a byte tensor and the backward reads it (what the PyTorch
                         op does underneath);
  octet-capi-<delta>     as octet-capi-bshd on contiguous [B, H, S, D] copies (heads-major);
  octet-capi-rerun-<delta>  as octet-capi, with the backward re-running the forward (the ABI's
                         call without `saved`: what the PyTorch op did before the saved state);
  torch-sdpa-cudnn-bf16, torch-sdpa-flash-bf16
                         torch.nn.functional.scaled_dot_product_attention with that backend.
Method as `octet bench attention` (include/octet/bench.h): CUDA events around each repetition,
warm-up, the median; FLOPs by FlashAttention's convention (forward 4·B·H·S²·D, halved if causal;
backward 2.5× that). One JSON object per line (--json) with the GPU, versions and date, and the
ratios to SDPA (cuDNN backend), to octet-capi-bshd and octet-capi, and (varlen rows) to
octet-torch in the same call.
"""
import argparse
import ctypes
import datetime
import json
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from octet import _lib
from octet.torch import attention as octet_attention, attention_varlen
from octet.torch._backend import backend_for, dtype_code
from sdpa import emit, time_ms  # bench/peers/sdpa.py: CUDA events, warm-up, the median; a row

CASES = {  # name: batch, heads, kv_heads, seq, head_dim, causal
    "b4-h16-d128-s1024": (4, 16, 16, 1024, 128, False),
    "b4-h16-d128-s4096": (4, 16, 16, 4096, 128, False),
    "b4-h16-d128-s4096-causal": (4, 16, 16, 4096, 128, True),
    "b4-h16-d128-s8192-causal": (4, 16, 16, 8192, 128, True),
    "b8-h12-d64-s1024-causal": (8, 12, 12, 1024, 64, True),
}


class CApi:
    """One attention shape through c_api.h on contiguous BF16 tensors: [B, H, S, D] (layout
    "bhsd") or [B, S, H, D] ("bshd", octet_c_layout's tokens-major)."""

    def __init__(self, q, k, v, d_o, causal, delta, layout):
        self.lib, self.be = _lib.lib(), backend_for(q.device)
        self.q, self.k, self.v, self.d_o = q, k, v, d_o
        self.o, self.dq = torch.empty_like(q), torch.empty_like(q)
        self.dk, self.dv = torch.empty_like(k), torch.empty_like(v)
        ha, ta = (1, 2) if layout == "bhsd" else (2, 1)
        self.lse = torch.empty(q.shape[0], q.shape[ha], q.shape[ta], dtype=torch.float32,
                               device=q.device)
        p = _lib.AttentionParams()
        p.batch, p.n_heads, p.seq_q, p.head_dim = q.shape[0], q.shape[ha], q.shape[ta], q.shape[3]
        p.n_kv_heads, p.seq_k = k.shape[ha], k.shape[ta]
        p.layout = _lib.LAYOUT_HEADS_MAJOR if layout == "bhsd" else _lib.LAYOUT_TOKENS_MAJOR
        p.causal, p.softmax_scale, p.dtype = int(causal), 0.0, dtype_code(q)
        p.precision, p.delta, p.formats = b"fp8", delta.encode(), b"hybrid"
        for name in ("q", "k", "v", "o", "lse", "d_o", "dq", "dk", "dv"):
            setattr(p, name, getattr(self, name).data_ptr())
        n = self.lib.octet_attention_saved_bytes(self.be, ctypes.byref(p))
        if n < 0:
            _lib.check(-1)
        self.saved = torch.empty(n, dtype=torch.uint8, device=q.device)
        self.p = p

    def forward(self, keep=True):
        self.p.saved, self.p.saved_size = (self.saved.data_ptr(), self.saved.numel()) if keep \
            else (None, 0)
        _lib.check(self.lib.octet_attention_forward(self.be, ctypes.byref(self.p)))

    def backward(self, rerun=False):
        self.p.saved, self.p.saved_size = (None, 0) if rerun \
            else (self.saved.data_ptr(), self.saved.numel())
        _lib.check(self.lib.octet_attention_backward(self.be, ctypes.byref(self.p)))


def run_case(name, shape, a, env):
    b, h, g, s, d, causal = shape
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)

    def rand(*sh):
        return torch.randn(*sh, device=dev, dtype=torch.bfloat16, generator=gen)

    q_bshd, k_bshd, v_bshd, do_bshd = rand(b, s, h, d), rand(b, s, g, d), rand(b, s, g, d), \
        rand(b, s, h, d)
    fwd_flop = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
    rows = []

    def add(impl, fwd_ms, total_ms):
        rows.append({"bench": "torch-attention", "case": name, "impl": impl, "batch": b,
                     "heads": h, "kv_heads": g, "seq": s, "head_dim": d, "causal": causal,
                     "fwd_ms": fwd_ms, "fwd_bwd_ms": total_ms,
                     "fwd_tflops": fwd_flop / fwd_ms / 1e9,
                     "fwd_bwd_tflops": 3.5 * fwd_flop / total_ms / 1e9, "reps": a.reps, **env})

    for delta in ("matched", "stale"):
        leaves = [t.clone().requires_grad_() for t in (q_bshd, k_bshd, v_bshd)]

        def fwd():
            return octet_attention(*leaves, causal=causal, delta=delta)

        def fwd_bwd():
            fwd().backward(do_bshd)

        add(f"octet-torch-{delta}", time_ms(lambda: fwd(), a.warmup, a.reps),
            time_ms(fwd_bwd, a.warmup, a.reps))
        packed = [t.reshape(b * s, *t.shape[2:]).clone().requires_grad_()
                  for t in (q_bshd, k_bshd, v_bshd)]
        cu = torch.arange(0, (b + 1) * s, s, device=dev, dtype=torch.int32)
        do_packed = do_bshd.reshape(b * s, h, d)

        def fwd_varlen():
            return attention_varlen(*packed, cu, cu, s, s, causal=causal, delta=delta)

        add(f"octet-torch-varlen-{delta}", time_ms(lambda: fwd_varlen(), a.warmup, a.reps),
            time_ms(lambda: fwd_varlen().backward(do_packed), a.warmup, a.reps))
        del leaves, packed
        c = CApi(q_bshd, k_bshd, v_bshd, do_bshd, causal, delta, "bshd")
        add(f"octet-capi-bshd-{delta}", time_ms(lambda: c.forward(), a.warmup, a.reps),
            time_ms(lambda: (c.forward(), c.backward()), a.warmup, a.reps))
        heads = [t.transpose(1, 2).contiguous() for t in (q_bshd, k_bshd, v_bshd, do_bshd)]
        c = CApi(*heads, causal, delta, "bhsd")
        add(f"octet-capi-{delta}", time_ms(lambda: c.forward(), a.warmup, a.reps),
            time_ms(lambda: (c.forward(), c.backward()), a.warmup, a.reps))
        add(f"octet-capi-rerun-{delta}", time_ms(lambda: c.forward(False), a.warmup, a.reps),
            time_ms(lambda: (c.forward(False), c.backward(rerun=True)), a.warmup, a.reps))
        del c, heads
    for impl, backend in (("torch-sdpa-cudnn-bf16", SDPBackend.CUDNN_ATTENTION),
                          ("torch-sdpa-flash-bf16", SDPBackend.FLASH_ATTENTION)):
        leaves = [t.transpose(1, 2).clone().requires_grad_() for t in (q_bshd, k_bshd, v_bshd)]
        do_bhsd = do_bshd.transpose(1, 2)
        try:
            with sdpa_kernel(backend):
                def fwd():
                    return F.scaled_dot_product_attention(*leaves, is_causal=causal,
                                                          enable_gqa=g != h)

                add(impl, time_ms(lambda: fwd(), a.warmup, a.reps),
                    time_ms(lambda: fwd().backward(do_bhsd), a.warmup, a.reps))
        except RuntimeError as e:  # the backend refuses the shape: said, not fatal
            print(json.dumps({"bench": "torch-attention", "case": name, "impl": impl,
                              "error": str(e).splitlines()[0], **env}))
        del leaves
    by = {r["impl"]: r for r in rows}
    for r in rows:
        delta = r["impl"].rsplit("-", 1)[-1]
        peers = ("torch-sdpa-cudnn-bf16", f"octet-capi-bshd-{delta}", f"octet-capi-{delta}")
        if "-varlen-" in r["impl"]:
            peers += (f"octet-torch-{delta}",)
        for peer in peers:
            if peer in by:
                r[f"fwd_bwd_vs_{peer}"] = by[peer]["fwd_bwd_ms"] / r["fwd_bwd_ms"]
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ",".join(CASES))
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    env = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "torch_cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
           "octet_c_abi": _lib.lib().octet_c_api_version(),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    for name in a.cases.split(","):
        if name not in CASES:
            raise SystemExit(f"torch_attention.py: unknown case {name!r} (known: {', '.join(CASES)})")
        for r in run_case(name, CASES[name], a, env):
            emit(r, a.json, f"{r['case']:26} {r['impl']:26}")
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
