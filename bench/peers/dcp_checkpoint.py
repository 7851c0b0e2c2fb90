"""bench/peers/dcp_checkpoint.py — checkpoints of a PyTorch training loop (plain or FSDP2) through
torch.distributed.checkpoint (DCP), as a lab's loop would keep them, with octet's Float8Linear
scaling state beside the weights:

    <root>/step-<N>/      one complete checkpoint: DCP's shards and .metadata, and meta.json
    <root>/step-<N>.tmp/  a checkpoint being written (ignored: a crash leaves at most this)

Every rank writes its shards of the model and the optimizer (get_state_dict, so FSDP2's sharded
parameters stay sharded); rank 0 then writes meta.json (the step, and whatever the loop keeps in
`extra`, such as the losses so far) and renames the folder, and the older complete checkpoints go.
`latest` finds the newest complete one; `load` restores it in place. Float8Linear's scaling state
(quant_state(): the amax history and scales of tensor-delayed scaling, empty for the current-scaling
recipes; its length grows with the history) goes into meta.json per module name (rank 0's: under
FSDP2 only stateless recipes run) and is restored with load_quant_state. meta.json also keeps the
run's defining settings (`settings`), which a resume must repeat.
"""
import json
import os
import pathlib
import re
import shutil

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

import octet.torch as ot

STEP = re.compile(r"step-(\d+)")


def _rank():
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _barrier():
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _quant_states(model):
    return {name: m.quant_state() for name, m in model.named_modules() if isinstance(m, ot.Float8Linear)}


def latest(root):
    """(step, folder) of the newest complete checkpoint under `root`, or (0, None)."""
    root = pathlib.Path(root)
    done = [(int(m.group(1)), p) for p in root.glob("step-*")
            if (m := STEP.fullmatch(p.name)) and (p / "meta.json").is_file()] if root.is_dir() else []
    return max(done, default=(0, None))


def save(root, step, model, opt, settings, extra):
    """Writes checkpoint `step` under `root` (a collective: every rank calls it), then removes the
    older ones. `settings`: what defines the run (a dict a resume must match); `extra`: a
    JSON-serializable dict kept in meta.json (rank 0's)."""
    root = pathlib.Path(root)
    tmp, final = root / f"step-{step}.tmp", root / f"step-{step}"
    if _rank() == 0:
        shutil.rmtree(tmp, ignore_errors=True)  # a crashed earlier attempt at this step
        tmp.mkdir(parents=True)
    _barrier()
    model_sd, optim_sd = get_state_dict(model, opt)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(tmp))
    _barrier()  # every rank's shards and DCP's metadata are written
    if _rank() == 0:
        with open(tmp / "meta.json.tmp", "w") as f:
            quant = {name: q.tolist() for name, q in _quant_states(model).items()}
            json.dump({"step": step, "settings": settings, "octet_quant": quant, **extra}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp / "meta.json.tmp", tmp / "meta.json")
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        for p in root.glob("step-*"):
            m = STEP.fullmatch(p.name)
            if m and int(m.group(1)) < step:
                shutil.rmtree(p, ignore_errors=True)
    _barrier()


def load(folder, model, opt, settings):
    """Restores the checkpoint in `folder` into model and opt (a collective) and returns its
    meta.json. Raises ValueError naming the first setting that differs from `settings`, and for a
    folder that is not a whole checkpoint (DCP's own error for a missing or damaged shard)."""
    folder = pathlib.Path(folder)
    try:
        meta = json.loads((folder / "meta.json").read_text())
        saved, quant = meta["settings"], meta["octet_quant"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{folder}/meta.json is not a checkpoint's ({type(e).__name__}: {e})") from None
    for key, value in settings.items():
        if saved.get(key) != value:
            raise ValueError(f"the checkpoint in {folder} was written with {key} = {saved.get(key)!r}; "
                             f"this run has {value!r} (resume with the same settings)")
    modules = {name: m for name, m in model.named_modules() if isinstance(m, ot.Float8Linear)}
    if set(quant) != set(modules):
        raise ValueError(f"the checkpoint in {folder} holds the scaling state of "
                         f"{len(quant)} Float8Linear modules, the model has {len(modules)}")
    model_sd, optim_sd = get_state_dict(model, opt)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=str(folder))
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    for name, q in quant.items():
        modules[name].load_quant_state(q)
    return meta
