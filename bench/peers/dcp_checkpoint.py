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
recipes) is saved per module name and restored with load_quant_state.
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


def save(root, step, model, opt, extra):
    """Writes checkpoint `step` under `root` (a collective: every rank calls it), then removes the
    older ones. `extra`: a JSON-serializable dict kept in meta.json (rank 0's)."""
    root = pathlib.Path(root)
    tmp, final = root / f"step-{step}.tmp", root / f"step-{step}"
    if _rank() == 0:
        shutil.rmtree(tmp, ignore_errors=True)  # a crashed earlier attempt at this step
        tmp.mkdir(parents=True)
    _barrier()
    model_sd, optim_sd = get_state_dict(model, opt)
    dcp.save({"model": model_sd, "optim": optim_sd, "octet_quant": _quant_states(model)},
             checkpoint_id=str(tmp))
    _barrier()  # every rank's shards and DCP's metadata are written
    if _rank() == 0:
        with open(tmp / "meta.json.tmp", "w") as f:
            json.dump({"step": step, **extra}, f)
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


def load(folder, model, opt):
    """Restores the checkpoint in `folder` into model and opt (a collective) and returns its
    meta.json. DCP raises if the checkpoint lacks a tensor the model or the optimizer has."""
    folder = pathlib.Path(folder)
    meta = json.loads((folder / "meta.json").read_text())
    model_sd, optim_sd = get_state_dict(model, opt)
    quant = _quant_states(model)
    state = {"model": model_sd, "optim": optim_sd, "octet_quant": quant}
    dcp.load(state, checkpoint_id=str(folder))
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    modules = dict(model.named_modules())
    for name, q in state["octet_quant"].items():
        modules[name].load_quant_state(q)
    return meta
