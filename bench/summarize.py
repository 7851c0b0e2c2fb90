#!/usr/bin/env python3
"""bench/summarize.py — prints the tables of `octet bench gemm|attention --json` results.

  python3 bench/summarize.py bench/results/<file>.jsonl [...]

gemm: per d_model and mode, the total time of the 12 GEMMs of one layer (QKV, out-proj, MLP up and
down; forward, dgrad, wgrad) and the speed-up over BF16, then the per-GEMM TFLOP/s; attention:
forward and backward time and TFLOP/s per implementation (octet's and the PyTorch SDPA peer's);
ops: the memory-bound kernels alone (time, GB/s); train: per model (and sequence length) and arm,
octet's and the PyTorch peers' (BF16 + torch.compile, torchao float8 tensorwise / rowwise), step
time, tokens/s, TFLOP/s, MFU against the dense BF16 and FP8 peaks, peak memory, and each row's
tokens/s relative to the PyTorch BF16 peer's on the same model and shape ("vs torch bf16").
Markdown output, ready for docs/cuda.md.
"""
import json
import sys


def main(paths):
    rows = [json.loads(l) for p in paths for l in open(p) if l.strip().startswith("{")]
    summ = [r for r in rows if r.get("bench") == "gemm-summary"]
    gemm = [r for r in rows if r.get("bench") == "gemm"]
    attn = [r for r in rows if r.get("bench") == "attention"]
    quant = [r for r in rows if r.get("bench") == "quantize"]
    ops = [r for r in rows if r.get("bench") == "ops"]
    train = [r for r in rows if r.get("bench") == "train"]
    if rows:
        r = rows[0]
        print(f"GPU {r.get('gpu')}, CUDA runtime {r.get('cuda_runtime')}, driver {r.get('cuda_driver')}, "
              f"cuBLASLt {r.get('cublaslt')}, {r.get('date')}\n")
    if summ:
        print("| d_model | mode | 12 GEMMs (ms) | BF16 (ms) | speed-up |\n|---|---|---|---|---|")
        for r in summ:
            print(f"| {r['d_model']} | {r['mode']} | {r['total_ms']:.3f} | {r['bf16_total_ms']:.3f} | "
                  f"{r['speedup_vs_bf16']:.2f}x |")
        print()
    if gemm:
        modes = sorted({r["mode"] for r in gemm}, key=["bf16", "fp8-tensor", "fp8-block"].index)
        print("| d_model | GEMM | M x N x K | " + " | ".join(f"{m} TFLOP/s" for m in modes) + " |")
        print("|---|---|---|" + "---|" * len(modes))
        keys = []
        for r in gemm:
            k = (r["d_model"], r["layer"], r["pass"])
            if k not in keys:
                keys.append(k)
        for k in keys:
            by = {r["mode"]: r for r in gemm if (r["d_model"], r["layer"], r["pass"]) == k}
            any_r = next(iter(by.values()))
            cells = []
            for m in modes:
                r = by.get(m)
                cells.append("" if r is None else f"{r['tflops']:.0f}" + (" (fallback)" if r.get("fallback") else ""))
            print(f"| {k[0]} | {k[1]} {k[2]} | {any_r['M']}x{any_r['N']}x{any_r['K']} | " + " | ".join(cells) + " |")
        print()
    if quant:
        print("| recipe | role | source | kernel | rows x cols | us | GB/s (source read + 2 FP8 copies) |\n"
              "|---|---|---|---|---|---|---|")
        for r in quant:
            print(f"| {r['recipe']} | {r['role']} | {r.get('dtype', 'f32')} | {r.get('kernel', 'auto')} | "
                  f"{r['rows']}x{r['cols']} | {1e3 * r['ms_median']:.1f} | {r['gbps']:.0f} |")
        print()
    if ops:
        print("| op | model | rows x cols | us | GB/s (fewest bytes) |\n|---|---|---|---|---|")
        for r in ops:
            print(f"| {r['op']} | {r['model']} | {r['rows']}x{r['cols']} | {1e3 * r['ms_median']:.1f} | {r['gbps']:.0f} |")
        print()
    if attn:
        print("| impl | input | case | fwd ms | fwd TFLOP/s | bwd ms | bwd TFLOP/s | fwd / bwd vs cuDNN BF16 "
              "| fwd / bwd vs cuDNN FP8 | err O / dQ vs FP64 |\n|---|---|---|---|---|---|---|---|---|---|")
        num = lambda v, f: "—" if v is None else format(v, f)  # null: not measured
        for r in attn:
            case = r.get("case") or f"b{r['batch']}-h{r['heads']}-d{r['head_dim']}-s{r['seq']}" + (
                "-causal" if r.get("causal") else "")
            if "error" in r:
                print(f"| {r['impl']} | | {case} | unavailable: {r['error']} |||||||")
                continue
            impl = r["impl"] + (f" ({r['bwd_kernel']} bwd)" if r.get("bwd_kernel") else "") + (
                f" ({r['pack_kernel']} pack)" if r.get("pack_kernel") else "")
            print(f"| {impl} | {r.get('input_dtype', '')} | {case} | {num(r['fwd_ms'], '.3f')} | "
                  f"{num(r['fwd_tflops'], '.1f')} | {num(r.get('bwd_ms'), '.3f')} | {num(r.get('bwd_tflops'), '.1f')} | "
                  f"{num(r.get('fwd_vs_cudnn_bf16'), '.2f')} / {num(r.get('bwd_vs_cudnn_bf16'), '.2f')} | "
                  f"{num(r.get('fwd_vs_cudnn_fp8'), '.2f')} / {num(r.get('bwd_vs_cudnn_fp8'), '.2f')} | "
                  f"{num(r.get('err_o_vs_fp64'), '.1e')} / {num(r.get('err_dq_vs_fp64'), '.1e')} |")
    if train:
        print_train(train)


def pct(x):
    return "" if x is None else f"{100 * x:.1f}%"


def print_train(train):
    """The training-throughput table; older rows without mfu_fp8 or memory leave those cells empty."""
    shape = lambda r: (r["model"], r["seq_len"], r["batch"])
    peer = {shape(r): r["tokens_per_s"] for r in train
            if r["impl"].startswith("torch") and r["arm"] == "bf16-autocast"}
    print("| impl | model | arm | params | batch x seq | step ms | tokens/s | TFLOP/s | MFU bf16 | MFU fp8 "
          "| peak GiB | vs torch bf16 |\n|---|---|---|---|---|---|---|---|---|---|---|---|")
    order = {m: i for i, m in enumerate(dict.fromkeys(r["model"] for r in train))}
    for r in sorted(train, key=lambda r: (order[r["model"]], r["seq_len"], r["impl"] != "octet")):
        ratio = f"{r['tokens_per_s'] / peer[shape(r)]:.3f}x" if shape(r) in peer else "—"  # no peer row
        impl = r["impl"] + (" (blocks)" if r.get("compile") == "blocks" else "")
        arm = r["arm"] + (" + activation checkpointing" if r.get("activation_checkpointing") else "")
        mem = r.get("peak_mem_gib")
        print(f"| {impl} | {r['model']} | {arm} | {r['n_params'] / 1e6:.1f}M | "
              f"{r['batch']}x{r['seq_len']} | {r['step_ms_median']:.1f} | {r['tokens_per_s']:.0f} | "
              f"{r['tflops']:.1f} | {pct(r.get('mfu_bf16', r['mfu']))} | {pct(r.get('mfu_fp8'))} | "
              f"{'' if mem is None else f'{mem:.1f}'} | {ratio} |")

if __name__ == "__main__":
    main(sys.argv[1:])
