"""bench/peers/hf_llama.py --fsdp (docs/pytorch.md) under torchrun on CPU ranks (gloo), a tiny
Llama with octet's FP8 attention and linears:

- two ranks equal one process with --grad-accum 2 bit for bit, step by step, validation included;
- a rank killed mid-run ends the whole job within seconds, with a non-zero exit and torchrun's
  report naming the killed rank's signal (no rank left waiting in a collective), and the job's
  newest complete checkpoint resumes;
- a run resumed from a checkpoint (torch.distributed.checkpoint, dcp_checkpoint.py) gives the
  uninterrupted run's losses bit for bit;
- --fsdp without torchrun exits with a message.
"""
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

import octet_torch_util  # noqa: F401  (puts the checkout's python/ on sys.path)

pytest.importorskip("transformers")

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "bench" / "peers" / "hf_llama.py"


def bench_args(tmp_path, steps):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"line {i}: the queue stops after buffer {i % 13} is freed.\n"
                              for i in range(600)))
    return ["--model", "tiny", "--device", "cpu", "--no-compile", "--seq", "64", "--batch", "2",
            "--warmup", "1", "--steps", str(steps), "--data", str(corpus), "--eval-every", "2",
            "--attention", "octet", "--linears", "fp8"]


def run_row(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=SCRIPT.parent)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert len(lines) == 1, r.stdout  # rank 0 prints, the others do not
    return json.loads(lines[0])


def checkpoints(root):
    return sorted(p.name for p in pathlib.Path(root).iterdir())


def torchrun(tmp_path, ranks=2):
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
            str(ranks), "--log-dir", str(tmp_path / "logs"), str(SCRIPT)]


def test_fsdp_equals_grad_accumulation(tmp_path):
    args = bench_args(tmp_path, 3)

    one = run_row([sys.executable, str(SCRIPT), *args, "--grad-accum", "2"])
    two = run_row([*torchrun(tmp_path), *args, "--fsdp"])
    assert (one["world"], two["world"], two["fsdp"]) == (1, 2, True)
    assert one["tokens_per_step"] == two["tokens_per_step"] == 2 * 64 * 2
    # Bit for bit: both add the same two micro-batches' gradients (a + b either way), each halved
    # exactly (1/grad_accum on the loss; FSDP's average over 2 ranks).
    assert one["losses"] == two["losses"] and one["val_losses"] == two["val_losses"], (one, two)
    assert len(two["losses"]) == 4 and [s for s, _ in two["val_losses"]] == [2, 4]
    r = subprocess.run([sys.executable, str(SCRIPT), *args, "--fsdp"], capture_output=True,
                       text=True, cwd=SCRIPT.parent)
    assert r.returncode != 0 and "runs under torchrun" in r.stderr, r.stderr


def test_a_resumed_run_equals_the_uninterrupted_one(tmp_path):
    whole = run_row([*torchrun(tmp_path), *bench_args(tmp_path, 4), "--fsdp",
                     "--checkpoint-dir", tmp_path / "a", "--checkpoint-every", "2"])
    assert checkpoints(tmp_path / "a") == ["step-4"], "the older checkpoint (step 2) is removed"
    cut = run_row([*torchrun(tmp_path), *bench_args(tmp_path, 2), "--fsdp",
                   "--checkpoint-dir", tmp_path / "b", "--checkpoint-every", "2"])
    assert checkpoints(tmp_path / "b") == ["step-2"] and cut["resumed_from"] == 0
    rest = run_row([*torchrun(tmp_path), *bench_args(tmp_path, 4), "--fsdp",
                    "--checkpoint-dir", tmp_path / "b", "--checkpoint-every", "2"])
    assert rest["resumed_from"] == 2
    # the model, the optimizer and the data stream continue exactly: the same bits
    assert rest["losses"] == whole["losses"] and rest["val_losses"] == whole["val_losses"], (rest, whole)
    assert len(whole["losses"]) == 5 and rest["losses"][:3] == cut["losses"]


def test_a_delayed_run_resumes_and_a_changed_run_is_refused(tmp_path):
    # one process, tensor-delayed scaling: its Float8Linear state (a history that grows step by
    # step) resumes exactly; stopped at step 3, between two evaluations (every 2 steps)
    args = [*bench_args(tmp_path, 1), "--recipe", "tensor-delayed"]
    steps_at = args.index("--steps")
    args = args[:steps_at] + args[steps_at + 2:]  # --steps given per run below
    run = lambda steps, d, *extra: [sys.executable, str(SCRIPT), *args, "--steps", str(steps),
                                    "--checkpoint-dir", d, *extra]
    whole = run_row(run(4, tmp_path / "a", "--checkpoint-every", "1"))
    cut = run_row(run(2, tmp_path / "b", "--checkpoint-every", "3"))
    assert checkpoints(tmp_path / "b") == ["step-3"]
    assert [v[0] for v in cut["val_losses"]] == [2, 3]  # the stopped run's last step evaluated too
    rest = run_row(run(4, tmp_path / "b", "--checkpoint-every", "1"))
    assert rest["resumed_from"] == 3
    assert rest["losses"] == whole["losses"] and rest["val_losses"] == whole["val_losses"], (rest, whole)
    # another batch, or a damaged checkpoint: one line naming it, no traceback
    r = subprocess.run(run(6, tmp_path / "b", "--batch", "4"), capture_output=True, text=True, cwd=SCRIPT.parent)
    assert r.returncode != 0 and "written with batch = 2; this run has 4" in r.stderr, r.stderr[-2000:]
    (tmp_path / "b" / "step-5" / "meta.json").write_text("{")
    r = subprocess.run(run(6, tmp_path / "b"), capture_output=True, text=True, cwd=SCRIPT.parent)
    assert r.returncode != 0 and "meta.json is not a checkpoint's" in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr


def rank_pids(parent):
    """{RANK: pid} of the workers below `parent` (the torchrun process), read from /proc."""
    found, todo = {}, [parent]
    while todo:
        pid = todo.pop()
        try:
            children = pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            todo.append(child)
            try:
                env = pathlib.Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            for kv in env:
                if kv.startswith(b"RANK="):
                    found[int(kv[5:])] = child
    return found


@pytest.mark.skipif(not pathlib.Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists(),
                    reason="finds the ranks through /proc/PID/task/PID/children")
def test_a_killed_rank_ends_the_job(tmp_path):
    ckpt = tmp_path / "ckpt"
    job = subprocess.Popen([*torchrun(tmp_path), *bench_args(tmp_path, 100000), "--fsdp",
                            "--checkpoint-dir", ckpt, "--checkpoint-every", "1"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           cwd=SCRIPT.parent)
    try:
        deadline = time.monotonic() + 120
        pids = {}
        while len(pids) < 2 and time.monotonic() < deadline and job.poll() is None:
            time.sleep(0.2)
            pids = rank_pids(job.pid)
        assert len(pids) == 2, f"the two ranks did not start: {pids}"
        # into the steps (100000 of them: never done), past the first complete checkpoint (a
        # loaded machine takes longer than an idle one to get there)
        sys.path.insert(0, str(SCRIPT.parent))
        import dcp_checkpoint
        while dcp_checkpoint.latest(ckpt)[1] is None and time.monotonic() < deadline + 120 \
                and job.poll() is None:
            time.sleep(0.2)
        assert job.poll() is None, job.stderr.read()[-3000:]
        os.kill(pids[1], signal.SIGKILL)
        killed = time.monotonic()
        _, err = job.communicate(timeout=60)
        took = time.monotonic() - killed
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert job.returncode != 0
    assert took < 30, f"the job took {took:.1f} s to end after rank 1 was killed"
    # torchrun's report: the root cause is rank 1, killed by signal 9
    assert re.search(r"Root Cause.*?rank\s*:\s*1\b.*?SIGKILL", err, re.S), err[-3000:]
    for pid in pids.values():
        assert not pathlib.Path(f"/proc/{pid}").exists() or \
            pathlib.Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z", f"rank pid {pid} lives"
    # the newest complete checkpoint resumes (a half-written one is a .tmp folder, never read)
    step, folder = dcp_checkpoint.latest(ckpt)
    assert folder is not None and step >= 1, checkpoints(ckpt)
    row = run_row([*torchrun(tmp_path), *bench_args(tmp_path, step), "--fsdp",
                   "--checkpoint-dir", ckpt, "--checkpoint-every", "1"])
    assert row["resumed_from"] == step and len(row["losses"]) == step + 1
