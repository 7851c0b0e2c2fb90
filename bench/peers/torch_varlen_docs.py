#!/usr/bin/env python3
"""bench/peers/torch_varlen_docs.py — packed documents through octet.torch.attention_varlen.

The case of LLM pretraining on packed data: `rows` rows of `row_len` tokens, each filled with
documents whose lengths are drawn (fixed seed) from a log-normal around `doc_mean` tokens and cut
at the row's end, every document its own causal sequence (FlashAttention's varlen form, one
offset per document). Times forward and forward + backward on one GPU, in one process, of:
  octet-torch-varlen-<delta>  attention_varlen over the documents (CUDA offsets, BF16): the
                              library's 128-row buckets of documents (c_api.h);
  octet-torch-varlen<tag>-<delta>  with --tag T, the same with T in the name: another build of
                              the library (OCTET_LIBRARY), e.g. the one dense call per document
                              of the library before buckets, timed in another process (its
                              varlen rows only);
  octet-torch-dense-<delta>   octet.torch.attention on the same tokens as [rows, row_len] causal
                              rows, documents ignored: the call a packing-unaware model makes (more
                              FLOPs: every token sees its whole row's prefix);
  torch-varlen-bf16           torch.nn.attention.varlen.varlen_attn on the documents, where this
                              PyTorch has it (BF16).
Method as bench/peers/torch_attention.py (CUDA events, warm-up, the median). FLOPs are the
documents' (forward 4·H·L²·D/2 summed over documents; backward 2.5× that) for every row, so that
TFLOP/s compares useful work. One JSON object per line (--json) with the GPU, versions, date, the
packing (documents, distinct lengths) and the ratios to torch-varlen-bf16 and to the dense call.
"""
import argparse
import datetime
import inspect
import json
import math
import random

import torch

from octet import _lib
from octet.torch import attention as octet_attention, attention_varlen
from sdpa import emit, time_ms  # bench/peers/sdpa.py: CUDA events, warm-up, the median; a row


def doc_lengths(rows, row_len, doc_mean, seed):
    """Each row's document lengths (log-normal, sigma 1, median doc_mean / e^0.5; >= 1; the last
    cut at the row's end): a list of lists that sum to row_len each."""
    rng = random.Random(seed)
    mu = math.log(doc_mean) - 0.5
    out = []
    for _ in range(rows):
        left, row = row_len, []
        while left > 0:
            n = max(1, min(left, int(rng.lognormvariate(mu, 1.0))))
            row.append(n)
            left -= n
        out.append(row)
    return out


def run(a, env):
    dev = torch.device("cuda")
    h, g, d = a.heads, a.kv_heads, a.head_dim
    lens = [n for row in doc_lengths(a.rows, a.row_len, a.doc_mean, a.seed) for n in row]
    total = a.rows * a.row_len
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device=dev)
    gen = torch.Generator(device=dev).manual_seed(0)

    def rand(*sh):
        return torch.randn(*sh, device=dev, dtype=torch.bfloat16, generator=gen)

    q, k, v, do = rand(total, h, d), rand(total, g, d), rand(total, g, d), rand(total, h, d)
    fwd_flop = sum(4 * h * n * n * d * 0.5 for n in lens)
    rows = []

    def add(impl, fwd_ms, total_ms):
        rows.append({"bench": "torch-varlen-docs", "impl": impl, "rows": a.rows,
                     "row_len": a.row_len, "docs": len(lens), "distinct_lengths": len(set(lens)),
                     "doc_mean": a.doc_mean, "longest": max(lens), "heads": h, "kv_heads": g,
                     "head_dim": d, "fwd_ms": fwd_ms, "fwd_bwd_ms": total_ms,
                     "fwd_tflops": fwd_flop / fwd_ms / 1e9,
                     "fwd_bwd_tflops": 3.5 * fwd_flop / total_ms / 1e9, "reps": a.reps, **env})

    for delta in ("matched", "stale"):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]

        def fwd():
            return attention_varlen(*leaves, cu, cu, max(lens), max(lens), causal=True, delta=delta)

        add(f"octet-torch-varlen{a.tag}-{delta}", time_ms(fwd, a.warmup, a.reps),
            time_ms(lambda: fwd().backward(do), a.warmup, a.reps))
        if a.tag:  # another build's varlen rows only: the peers are this build's run's
            continue
        dense = [t.reshape(a.rows, a.row_len, *t.shape[1:]).clone().requires_grad_() for t in (q, k, v)]
        do_dense = do.reshape(a.rows, a.row_len, h, d)

        def fwd_dense():
            return octet_attention(*dense, causal=True, delta=delta)

        add(f"octet-torch-dense-{delta}", time_ms(fwd_dense, a.warmup, a.reps),
            time_ms(lambda: fwd_dense().backward(do_dense), a.warmup, a.reps))
        del leaves, dense
    try:
        if a.tag:
            return rows
        from torch.nn.attention.varlen import varlen_attn
    except ImportError as e:
        print(json.dumps({"bench": "torch-varlen-docs", "impl": "torch-varlen-bf16",
                          "error": str(e), **env}))
    else:
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        params = inspect.signature(varlen_attn).parameters  # causal: is_causal, or a window (later)
        causal = {"is_causal": True} if "is_causal" in params else {"window_size": (-1, 0)}
        if g != h and "enable_gqa" in params:
            causal["enable_gqa"] = True

        def fwd_torch():
            return varlen_attn(*leaves, cu, cu, max(lens), max(lens), **causal)

        try:
            add("torch-varlen-bf16", time_ms(fwd_torch, a.warmup, a.reps),
                time_ms(lambda: fwd_torch().backward(do), a.warmup, a.reps))
        except (RuntimeError, TypeError) as e:  # refused (GQA, head_dim...): said, not fatal
            print(json.dumps({"bench": "torch-varlen-docs", "impl": "torch-varlen-bf16",
                              "error": str(e).splitlines()[0], **env}))
    by = {r["impl"]: r for r in rows}
    for r in rows:
        delta = r["impl"].rsplit("-", 1)[-1]
        for peer in ("torch-varlen-bf16", f"octet-torch-dense-{delta}"):
            if peer in by and peer != r["impl"]:
                r[f"fwd_bwd_vs_{peer}"] = by[peer]["fwd_bwd_ms"] / r["fwd_bwd_ms"]
                r[f"fwd_vs_{peer}"] = by[peer]["fwd_ms"] / r["fwd_ms"]
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--row-len", type=int, default=4096)
    ap.add_argument("--doc-mean", type=int, default=600, help="mean document length, tokens")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=16)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--tag", default="", help="inserted into the octet-torch-varlen rows' names")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    env = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "torch_cuda": torch.version.cuda, "octet_c_abi": _lib.lib().octet_c_api_version(),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    for r in run(a, env):
        emit(r, a.json, f"{r['impl']:30} docs {r['docs']:4}")


if __name__ == "__main__":
    main()
