#!/usr/bin/env python3
"""bench/peers/gpt2_octet_torch.py — the PyTorch GPT-2 peer (gpt2_torch.py's model, step and
timing) trained with octet's kernels through the PyTorch package (docs/pytorch.md), or with
torchao's float8 linears, in the same loop.

  --attention octet-matched | octet-stale | sdpa     octet.torch.attention (FP8, Delta-Matching or
                                                     the stale delta) or PyTorch's SDPA
  --linears fp8 | bf16 | torchao-tensorwise | torchao-rowwise
                                                     octet's convert_to_float8 on the blocks'
                                                     nn.Linear (--recipe, --format), autocast BF16,
                                                     or torchao's convert_to_float8_training with
                                                     that recipe (torchao must be importable)
  --data PATH                                        train on the bytes of a text file or of every
                                                     file under a directory (e.g. data/linux-docs;
                                                     vocab 256); the last 10 % of the bytes is the
                                                     validation split, evaluated every --eval-every
                                                     steps on --eval-batches fixed windows
  --log-dir DIR                                      DIR/metrics.jsonl: one line per step {step,
                                                     loss, ms, tokens_per_s} and per evaluation
                                                     {step, val_loss} (what `octet plot DIR` reads),
                                                     DIR/summary.json: the JSON line below
  torchrun --nproc-per-node 2 ... --ddp              data-parallel: NCCL, DistributedDataParallel,
                                                     each rank its own batches; rank 0 prints
The LM head (tied embedding) stays BF16, as in octet's arms. Tensor-delayed scales are updated after
every optimizer step (octet.torch.update_scales). One JSON line per model with gpt2_torch.py's keys
plus attention, linears, recipe, format, world_size, losses and val_losses; tokens/s counts every
rank's tokens. Evaluations run the uncompiled model under no_grad, outside the timed steps.
"""
import argparse
import datetime
import json
import os
import pathlib
import sys
import time

import torch
import torch.distributed as dist

from gpt2_torch import GPT, MODELS, Block, throughput, to_float8

try:
    import octet
except ImportError:  # run from the checkout without installing the package
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
    import octet
import octet.torch as ot


def octet_attend(delta):
    """Block.attend with octet's attention: [B, H, T, D] in and out (octet takes [B, T, H, D])."""
    def attend(q, k, v):
        t = lambda x: x.transpose(1, 2)
        return t(ot.attention(t(q), t(k), t(v), causal=True, delta=delta))
    return staticmethod(attend)


def corpus_bytes(path):
    """The bytes of a text file, or of every file under a directory (sorted by path)."""
    src = pathlib.Path(path)
    files = sorted(f for f in src.rglob("*") if f.is_file()) if src.is_dir() else [src]
    return torch.frombuffer(bytearray(b"".join(f.read_bytes() for f in files)), dtype=torch.uint8)


def batches(a, dev, rank):
    """(train, val): train(step) -> ids [batch, seq + 1], uniform tokens (4 batches cycled, as the
    peer) or random windows of the first 90 % of --data's bytes, different on every rank; val: a
    list of --eval-batches fixed windows of the last 10 % (empty without --data)."""
    g = torch.Generator(device="cpu").manual_seed(1234 + rank)
    if not a.data:
        fixed = [torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=g).to(dev) for _ in range(4)]
        return (lambda s: fixed[s % 4]), []
    data = corpus_bytes(a.data)
    split = int(data.numel() * 0.9)
    train, held = data[:split], data[split:]
    if min(train.numel(), held.numel()) <= a.seq + 1:
        sys.exit(f"--data {a.data}: needs more than {10 * (a.seq + 1)} bytes")

    def windows(src, gen):
        start = torch.randint(0, src.numel() - a.seq - 1, (a.batch,), generator=gen)
        return torch.stack([src[i:i + a.seq + 1] for i in start.tolist()]).long().to(dev)
    g_val = torch.Generator(device="cpu").manual_seed(99)
    return (lambda _: windows(train, g)), [windows(held, g_val) for _ in range(a.eval_batches)]


def convert_linears(model, a):
    """The blocks' nn.Linear in the --linears arm (the tied LM head is F.linear: left in BF16)."""
    if a.linears == "fp8":
        ot.convert_to_float8(model, recipe=a.recipe, format=a.format)
    elif a.linears.startswith("torchao-"):
        to_float8(model, a.linears.split("-", 1)[1])


def evaluate(model, val, dev):
    """Mean loss of the uncompiled model over the validation windows (BF16 autocast, no grad)."""
    model.eval()
    with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16):
        loss = sum(model(ids[:, :-1], ids[:, 1:]).item() for ids in val) / len(val)
    model.train()
    return loss


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gpt2-small")
    ap.add_argument("--attention", choices=["octet-matched", "octet-stale", "sdpa"], default="octet-matched")
    ap.add_argument("--linears", choices=["fp8", "bf16", "torchao-tensorwise", "torchao-rowwise"],
                    default="fp8")
    ap.add_argument("--recipe", default="tensor-current")
    ap.add_argument("--format", default="hybrid")
    ap.add_argument("--data", default="", help="a text file or directory (bytes are tokens, vocab 256)")
    ap.add_argument("--eval-every", type=int, default=50, help="with --data: steps between evaluations")
    ap.add_argument("--eval-batches", type=int, default=4)
    ap.add_argument("--log-dir", default="", help="metrics.jsonl and summary.json (rank 0)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--ddp", action="store_true", help="under torchrun: one GPU per rank, NCCL")
    ap.add_argument("--device", default="cuda", help="cuda (cpu only to test the script)")
    a = ap.parse_args()
    if a.data:
        a.vocab = 256
    if a.log_dir and len(a.models.split(",")) > 1:
        sys.exit("--log-dir takes one model (--models NAME)")
    rank, world = 0, 1
    if a.ddp:
        dist.init_process_group("nccl")
        rank, world = dist.get_rank(), dist.get_world_size()
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dev = torch.device("cuda", torch.cuda.current_device())
    else:
        dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    if a.attention != "sdpa":
        Block.attend = octet_attend(a.attention.split("-")[1])
    env = {"gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
           "torch": torch.__version__, "torch_cuda": torch.version.cuda,
           "octet_library": octet.library_path(),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    for name in a.models.split(","):
        L, d, h, f = MODELS[name]
        torch.manual_seed(1234)
        model = GPT(L, d, h, f, a.vocab, a.seq).to(dev)
        convert_linears(model, a)
        n_params = sum(p.numel() for p in model.parameters())
        decay = [p for p in model.parameters() if p.dim() == 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=dev.type == "cuda")
        step_model = model
        if a.ddp:
            step_model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index])
        if not a.no_compile:
            step_model = torch.compile(step_model)
        batch_of, val = batches(a, dev, rank)
        log = None
        if a.log_dir and rank == 0:
            pathlib.Path(a.log_dir).mkdir(parents=True, exist_ok=True)
            log = open(pathlib.Path(a.log_dir, "metrics.jsonl"), "w")
        ms, losses, val_losses = [], [], []
        sync()
        for s in range(a.warmup + a.steps):
            t0 = time.perf_counter()
            ids = batch_of(s)
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                loss = step_model(ids[:, :-1], ids[:, 1:])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            ot.update_scales(model)
            losses.append(loss.item())
            sync()
            step_ms = (time.perf_counter() - t0) * 1e3
            if s >= a.warmup:
                ms.append(step_ms)
            if log:
                log.write(json.dumps({"step": s + 1, "loss": losses[-1], "ms": step_ms,
                                      "tokens_per_s": a.batch * a.seq * world / (step_ms * 1e-3)}) + "\n")
            if val and ((s + 1) % a.eval_every == 0 or s + 1 == a.warmup + a.steps):
                val_losses.append((s + 1, evaluate(model, val, dev)))
                if log:
                    log.write(json.dumps({"step": s + 1, "val_loss": val_losses[-1][1]}) + "\n")
                    log.flush()
        impl = ("torchao" if a.linears.startswith("torchao") else
                "torch" if (a.linears, a.attention) == ("bf16", "sdpa") else "torch-octet")
        row = dict(env, bench="train", impl=impl + ("-compile" if not a.no_compile else ""),
                   model=name, arm=f"{a.linears}+{a.attention}", attention=a.attention,
                   linears=a.linears, recipe=a.recipe if a.linears == "fp8" else a.linears[8:],
                   format=a.format if a.linears == "fp8" else "", world_size=world,
                   batch=a.batch, n_params=n_params, warmup=a.warmup, steps=a.steps,
                   loss_first=losses[0], loss_last=losses[-1], losses=losses,
                   val_loss_last=val_losses[-1][1] if val_losses else None,
                   val_losses=val_losses, data=a.data or "uniform")
        row.update(throughput(MODELS[name], a.vocab, a.seq, a.batch * a.seq * world, ms, world, a.peak_tflops))
        if rank == 0:
            print(json.dumps(row), flush=True)
            if a.log_dir:
                log.close()
                pathlib.Path(a.log_dir, "summary.json").write_text(json.dumps(row) + "\n")
        del model, step_model, opt
    if a.ddp:
        dist.barrier()  # every rank past its last collective before the group goes
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
