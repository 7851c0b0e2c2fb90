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
  --fsdp                       under torchrun: PyTorch FSDP2 (fully_shard per decoder layer, then
                               the model) over the job's ranks (NCCL on CUDA, gloo on the CPU)
  --checkpoint-dir DIR         resume from DIR's newest complete checkpoint if it has one, and with
                               --checkpoint-every N > 0 write one every N optimizer steps
                               (torch.distributed.checkpoint: dcp_checkpoint.py; the row's losses
                               then include the steps before the resume)
  --profile                    one more step after the timed ones under torch.profiler: the row's
                               "profile" holds that step's GPU kernel time by category (attention,
                               gemm, cast, optimizer, other) and its 25 costliest kernels
  --packed MEAN                packed training: each micro-batch's batch·seq tokens as one row of
                               documents of MEAN tokens on average (batch·seq // MEAN of them,
                               random cut points drawn per micro-batch), position_ids restarting
                               per document and each document's first token not a target, as
                               DataCollatorWithFlattening makes them; octet's arms also get
                               cu_seq_lens_q/k (return_flash_attn_kwargs=True: one attention_varlen
                               call per layer), SDPA gets the position_ids only (transformers builds
                               the block-diagonal mask). TFLOP/s and MFU still count attention as
                               if unpacked (the same formula for every arm).

Under --fsdp with W ranks, rank r's micro-batch n is the global micro-batch n·W + r of the same
stream, so W ranks see, per optimizer step, exactly the micro-batches of one process run with
--grad-accum A·W: the two runs' losses are comparable step by step (the row's loss is the mean
over ranks, tokens/s counts every rank's tokens, TFLOP/s and MFU are per GPU).

--seq-cycle K cuts step s's micro-batches to seq − 128·(s mod K) tokens: with K >= 2 the length
changes from step to step, as with per-batch padding, and torch.compile switches to dynamic shapes
after the first change; tokens/s is then the timed steps' tokens over their time. The row counts
the graphs Dynamo compiled and its graph breaks in either case.

BF16 autocast over FP32 parameters, fused AdamW (lr --lr, betas 0.9/0.95, weight decay 0.1 on
matrices), clip 1.0, torch.compile of the whole model unless --no-compile. One JSON line: tokens/s of
the median timed step, TFLOP/s by the PaLM formula (6·N_matmul + 12·L·T·H·head_dim per token), MFU,
the peak GPU memory of torch's allocator, the losses and validation losses.
"""
import argparse
import datetime
import json
import os
import pathlib
import statistics
import sys
import time

import torch
import torch.distributed as dist

from gpt2_octet_torch import batches
from gpt2_torch import to_float8

try:
    import octet
except ImportError:  # run from the checkout without installing the package
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
    import octet
import octet.hf
import octet.torch as ot

import dcp_checkpoint  # noqa: E402  (imports octet.torch: after the path above)

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


def rank_batches(batch_of, world, rank):
    """This rank's micro-batch n: the global micro-batch n·world + rank of batch_of's stream (a
    stateful stream with --data: the other ranks' draws are made and dropped)."""
    drawn = -1

    def get(n):
        nonlocal drawn
        j = n * world + rank
        while drawn < j - 1:
            drawn += 1
            batch_of(drawn)
        drawn = j
        return batch_of(j)
    return get


def shard(model, dev):
    """FSDP2 over the torchrun job: each decoder layer its own unit, then the rest. Returns
    (world, rank)."""
    from torch.distributed.fsdp import fully_shard
    dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    return dist.get_world_size(), dist.get_rank()


def packing(n, total, mean, device):
    """Micro-batch n's packing of `total` tokens into total // mean documents (at least one): the
    model's keyword arguments (position_ids; cu_seq_lens_q/k and max_length_q/k, which only
    attention implementations with a varlen path read) and the document starts."""
    docs = max(1, total // mean)
    gen = torch.Generator().manual_seed(10_000 + n)
    cuts = torch.randperm(total - 1, generator=gen)[:docs - 1].add(1).sort().values
    cu = torch.cat([torch.tensor([0]), cuts, torch.tensor([total])])
    starts = torch.repeat_interleave(cu[:-1], cu.diff())
    position_ids = (torch.arange(total) - starts)[None]
    cu = cu.to(device=device, dtype=torch.int32)
    # max_length: the token count bounds every document, the same every micro-batch (no recompile)
    return {"position_ids": position_ids.to(device), "cu_seq_lens_q": cu, "cu_seq_lens_k": cu,
            "max_length_q": total, "max_length_k": total}, cu[:-1]


# kernel name → category for --profile's breakdown (first match wins; names of PyTorch, cuDNN,
# cuBLAS(Lt), Triton (torch.compile) and octet's kernels)
CATEGORIES = [("attention", ("flash", "fmha", "attention", "attn", "sdpa", "cudnn")),
              ("gemm", ("gemm", "nvjet", "cutlass", "xmma", "wgmma", "_mm_", "sm90_", "aten::mm", "addmm", "bmm")),
              ("cast", ("amax", "quantiz", "pack", "fp8", "float8", "scale", "cast")),
              ("optimizer", ("adam", "multi_tensor", "foreach", "norm_kernel"))]


def kernel_profile(prof, dev):
    """One profiled step's GPU kernels (on the CPU, for the script's test: its operators' self
    time): total milliseconds per category (CATEGORIES) and the 25 costliest kernels (name cut to
    120 characters, ms, calls)."""
    rows, cuda = [], dev.type == "cuda"
    for e in prof.key_averages():
        us = e.self_device_time_total if cuda else e.self_cpu_time_total
        kind = torch.autograd.DeviceType.CUDA if cuda else torch.autograd.DeviceType.CPU
        if us > 0 and e.device_type == kind:
            rows.append((e.key, us / 1e3, e.count))
    by = {}
    for name, ms, _ in rows:
        low = name.lower()
        cat = next((c for c, keys in CATEGORIES if any(k in low for k in keys)), "other")
        by[cat] = by.get(cat, 0.0) + ms
    rows.sort(key=lambda r: -r[1])
    return {"kernel_ms": sum(r[1] for r in rows), "by_category_ms": by,
            "top": [{"name": n[:120], "ms": ms, "calls": c} for n, ms, c in rows[:25]]}


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
    ap.add_argument("--fsdp", action="store_true", help="FSDP2 over the torchrun job's ranks")
    ap.add_argument("--packed", type=int, default=0, metavar="MEAN",
                    help="one row of documents of MEAN tokens on average per micro-batch")
    ap.add_argument("--seq-cycle", type=int, default=1, metavar="K",
                    help="step s runs seq - 128*(s mod K) tokens per sequence (1: always seq)")
    ap.add_argument("--profile", action="store_true",
                    help="profile one step after the timed ones (the row's \"profile\")")
    ap.add_argument("--checkpoint-dir", default="", help="resume from and write checkpoints here")
    ap.add_argument("--checkpoint-every", type=int, default=0, metavar="N",
                    help="write a checkpoint every N optimizer steps (0: never)")
    a = ap.parse_args()
    if a.data:
        a.vocab = 256
    if min(a.batch, a.grad_accum, a.seq, a.steps, a.warmup) < 1:
        sys.exit("--batch, --grad-accum, --seq, --steps and --warmup must be >= 1")
    if a.checkpoint_every < 0 or (a.checkpoint_every and not a.checkpoint_dir):
        sys.exit("--checkpoint-every must be >= 0 and needs --checkpoint-dir")
    if a.packed < 0 or a.packed > a.batch * a.seq:
        sys.exit(f"--packed must be a mean document length from 1 to batch·seq = {a.batch * a.seq} "
                 f"(0: not packed), got {a.packed}")
    if a.seq_cycle < 1 or a.seq - 128 * (a.seq_cycle - 1) < 1 or (a.seq_cycle > 1 and a.packed):
        sys.exit(f"--seq-cycle must be >= 1 with seq - 128*(K-1) >= 1 ({a.seq} tokens: K <= "
                 f"{(a.seq - 1) // 128 + 1}), and is not taken with --packed; got {a.seq_cycle}")
    if a.fsdp and "LOCAL_RANK" not in os.environ:
        sys.exit("--fsdp runs under torchrun (torchrun --nproc-per-node N hf_llama.py --fsdp ...)")
    if a.fsdp and a.linears == "fp8" and a.recipe == "tensor-delayed":
        sys.exit("--fsdp: recipe tensor-delayed keeps an amax history per rank, which nothing "
                 "reduces across the ranks; use tensor-current, row or block")
    dev = torch.device(a.device)
    if a.fsdp and dev.type == "cuda":
        dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(dev)
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
    world, rank = shard(model, dev) if a.fsdp else (1, 0)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=dev.type == "cuda")
    start, losses, val_losses = 0, [], []
    # what a resume must repeat (not --steps or --warmup, which set the timed window, nor
    # --checkpoint-every)
    settings = {k: getattr(a, k) for k in ("model", "attention", "linears", "recipe", "data", "eval_every",
                                           "eval_batches", "batch", "grad_accum", "seq", "vocab", "lr",
                                           "packed")}
    settings["world"] = world
    if a.checkpoint_dir:
        start, folder = dcp_checkpoint.latest(a.checkpoint_dir)
        if folder is not None:
            try:
                meta = dcp_checkpoint.load(folder, model, opt, settings)
            except Exception as e:  # noqa: BLE001  (DCP raises its own types for damaged shards)
                sys.exit(f"--checkpoint-dir {a.checkpoint_dir}: cannot resume from {folder}: {e}")
            losses, val_losses = meta["losses"], [tuple(v) for v in meta["val_losses"]]
    step_model = model if a.no_compile else torch.compile(model)
    batch_of, val = batches(a, dev, 0)
    batch_of = rank_batches(batch_of, world, rank)
    ms, timed_tokens, timed_flops, prof, profile = [], 0, 0.0, None, None
    last = a.warmup + a.steps  # with --profile, step `last` is the profiled one (not timed, no loss)
    sync()
    for s in range(start, last + (1 if a.profile else 0)):
        if s == last:
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA
                                                      if dev.type == "cuda" else
                                                      torch.profiler.ProfilerActivity.CPU])
            prof.__enter__()
        t0 = time.perf_counter()
        step_loss = 0.0
        seq = a.seq - 128 * (s % a.seq_cycle)
        for m in range(a.grad_accum):
            ids = batch_of(s * a.grad_accum + m)[:, :-1][:, :seq]
            labels, extra = ids, {}
            if a.packed:
                ids = ids.reshape(1, -1)
                extra, starts = packing((s * a.grad_accum + m) * world + rank, ids.shape[1],
                                        a.packed, dev)
                labels = ids.clone()
                labels[0, starts[1:]] = -100  # a document's first token is not predicted
                if a.attention == "sdpa":  # no varlen path: the mask comes from position_ids
                    extra = {"position_ids": extra["position_ids"]}
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                loss = step_model(input_ids=ids, labels=labels, **extra).loss / a.grad_accum
            loss.backward()
            step_loss = step_loss + loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        ot.update_scales(model)
        if world > 1:  # the step's loss over the global batch
            step_loss = step_loss.clone()
            dist.all_reduce(step_loss)
            step_loss = step_loss / world
        if s == last:
            sync()
            prof.__exit__(None, None, None)
            profile = kernel_profile(prof, dev)
            break
        losses.append(float(step_loss))
        sync()
        if s >= a.warmup:
            ms.append((time.perf_counter() - t0) * 1e3)
            step_tokens = a.batch * seq * a.grad_accum * world
            timed_tokens += step_tokens
            timed_flops += flops_per_token(a.model, a.vocab, seq)[0] * step_tokens
        if val and ((s + 1) % a.eval_every == 0 or s + 1 == a.warmup + a.steps):
            model.eval()
            with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16):
                v = sum(float(model(input_ids=w[:, :-1], labels=w[:, :-1]).loss) for w in val) / len(val)
            model.train()
            val_losses.append((s + 1, v))
        if a.checkpoint_every and (s + 1) % a.checkpoint_every == 0:
            # the evaluations of the schedule only: a run that stops between two also evaluated
            # its last step, which the run that resumes it does not
            kept = [v for v in val_losses if v[0] % a.eval_every == 0]
            dcp_checkpoint.save(a.checkpoint_dir, s + 1, model, opt, settings,
                                {"losses": losses, "val_losses": kept})
    fpt, matmul = flops_per_token(a.model, a.vocab, a.seq)
    tokens = a.batch * a.seq * a.grad_accum * world
    step_ms = statistics.median(ms) if ms else None  # none when resumed past the timed steps
    if a.seq_cycle > 1:  # steps of different lengths: the timed tokens and FLOPs over the time
        tps = timed_tokens / (sum(ms) * 1e-3) if ms else None
        fpt = timed_flops / timed_tokens if ms else None  # each step's FLOPs at its own length
        tokens = None  # no one step size
    else:
        tps = tokens / (step_ms * 1e-3) if ms else None
    from torch._dynamo.utils import counters
    graphs = counters["stats"]["unique_graphs"]
    graph_breaks = sum(counters["graph_break"].values())
    if a.fsdp:
        dist.barrier()  # every rank past its last collective before the group goes
        dist.destroy_process_group()
    if rank != 0:
        return
    import transformers
    row = {"bench": "train", "impl": "hf-" + ("compile" if not a.no_compile else "eager"),
           "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
           "torch": torch.__version__, "transformers": transformers.__version__,
           "octet_library": octet.library_path() if a.attention != "sdpa" or a.linears == "fp8" else None,
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "model": a.model, "attention": a.attention, "linears": a.linears,
           "arm": f"{a.linears}+{a.attention}", "recipe": a.recipe if a.linears == "fp8" else a.linears[8:],
           "fp8_linears": fp8_linears, "n_params": n_params, "n_matmul_params": matmul,
           "seq_len": a.seq, "seq_cycle": a.seq_cycle, "timed_tokens": timed_tokens, "graphs_compiled": graphs,
           "graph_breaks": graph_breaks, "vocab_size": a.vocab, "batch": a.batch, "grad_accum": a.grad_accum,
           "fsdp": a.fsdp, "world": world, "tokens_per_step": tokens, "warmup": a.warmup,
           "steps": a.steps, "step_ms_median": step_ms, "tokens_per_s": tps, "flops_per_token": fpt,
           "tflops": fpt * tps / world / 1e12 if ms else None,
           "mfu": fpt * tps / world / 1e12 / a.peak_tflops if ms else None, "resumed_from": start,
           "loss_first": losses[0], "loss_last": losses[-1], "losses": losses,
           "val_losses": val_losses, "data": a.data or "uniform", "packed_mean_tokens": a.packed,
           # the most GPU memory torch's allocator held for tensors at once in this process (rank
           # 0's under --fsdp); None on the CPU
           "peak_memory_gib": torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else None,
           "profile": profile}
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
