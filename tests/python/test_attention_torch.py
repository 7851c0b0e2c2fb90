"""octet's attention against PyTorch, an independent oracle (tests/python, run by ctest via pytest).

`octet attention-check --dump FILE` writes the generated inputs, octet's results and octet's FP64
oracle as safetensors. Here PyTorch's scaled_dot_product_attention runs on the same inputs in
float64 on the CPU (GQA by repeating KV heads; causal masking aligned to the bottom-right by an
explicit mask, since is_causal aligns to the top-left when Tq != Tk) and autograd gives the
gradients. Checked: octet's FP64 oracle equals PyTorch to ~1e-12; the fp64 precision run equals it
to FP32 storage; the fp8 matched run is closer to it than the fp8 stale run in dQ; and the CLI
rejects bad shapes with exit code 2 and one line.
"""
import os
import subprocess

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

OCTET = os.environ.get("OCTET_BIN", os.path.join(os.path.dirname(__file__), "../../build/octet"))


def run_check(tmp_path, *args):
    out = tmp_path / f"dump{len(list(tmp_path.glob('dump*.safetensors')))}.safetensors"  # --dump never overwrites
    cmd = [OCTET, "attention-check", "--json", "--dump", str(out), *args]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return load_file(str(out))


def torch_reference(d, causal):
    q = torch.tensor(d["q"], dtype=torch.float64, requires_grad=True)
    k = torch.tensor(d["k"], dtype=torch.float64, requires_grad=True)
    v = torch.tensor(d["v"], dtype=torch.float64, requires_grad=True)
    group = q.shape[1] // k.shape[1]
    kr, vr = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    tq, tk = q.shape[2], k.shape[2]
    mask = None
    if causal:  # query i sees keys j <= i + tk - tq
        i = torch.arange(tq)[:, None]
        j = torch.arange(tk)[None, :]
        mask = j <= i + (tk - tq)
    # octet's default τ is 1/sqrt(D) rounded to FP32 (AttentionShape::tau), the value both use.
    tau = float(np.float32(1.0) / np.sqrt(np.float32(q.shape[3])))
    o = torch.nn.functional.scaled_dot_product_attention(q, kr, vr, attn_mask=mask, scale=tau)
    o.backward(torch.tensor(d["d_o"], dtype=torch.float64))
    return o.detach().numpy(), q.grad.numpy(), k.grad.numpy(), v.grad.numpy()


def rel(x, ref):
    return float(np.linalg.norm((x - ref).ravel()) / np.linalg.norm(ref.ravel()))


SHAPES = [
    # (heads, kv_heads, seq, kv_seq, dim, causal, dist)
    (4, 2, 33, 33, 16, True, "normal"),
    (8, 2, 20, 45, 32, True, "sink"),
    (2, 1, 40, 17, 24, False, "heavy"),
]


@pytest.mark.parametrize("h,g,tq,tk,d,causal,dist", SHAPES)
def test_oracle_and_fp64_match_pytorch(tmp_path, h, g, tq, tk, d, causal, dist):
    args = ["--batch", "2", "--heads", str(h), "--kv-heads", str(g), "--seq", str(tq),
            "--kv-seq", str(tk), "--dim", str(d), "--dist", dist, "--precision", "fp64",
            "--form", "tiled", "--block-k", "16"] + (["--causal"] if causal else [])
    dump = run_check(tmp_path, *args)
    o, dq, dk, dv = torch_reference(dump, causal)
    for name, ref in (("o", o), ("dq", dq), ("dk", dk), ("dv", dv)):
        assert rel(dump["ref_" + name], ref) < 1e-12, name  # octet's FP64 oracle
        assert rel(dump[name].astype(np.float64), ref) < 1e-6, name  # fp64 precision, FP32 I/O


def test_fp8_matched_is_closer_to_pytorch_than_stale(tmp_path):
    base = ["--heads", "4", "--kv-heads", "2", "--seq", "128", "--dim", "64", "--causal",
            "--precision", "fp8", "--dist", "sink"]
    stale = run_check(tmp_path, *base, "--delta", "stale")
    matched = run_check(tmp_path, *base, "--delta", "matched")
    _, dq, _, _ = torch_reference(matched, True)
    assert rel(matched["dq"].astype(np.float64), dq) < rel(stale["dq"].astype(np.float64), dq)
    # The reported residual rows: matched at rounding level, stale not.
    assert matched["row_residual"].max() < 1e-5
    assert stale["row_residual"].mean() > 100 * matched["row_residual"].mean()


@pytest.mark.parametrize("bad", [["--heads", "6", "--kv-heads", "4"], ["--seq", "0"],
                                 ["--precision", "fp4"]])
def test_cli_rejects_bad_arguments(bad):
    r = subprocess.run([OCTET, "attention-check", "--seq", "8", "--dim", "8", *bad],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "error" in r.stderr
