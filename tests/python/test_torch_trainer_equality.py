"""octet.torch against octet's own C++ trainer on one step (docs/pytorch.md, "Tests"): the same
tiny transformer built in PyTorch from octet.torch's building blocks — Float8Linear for the
layer linears with the trainer's recipe and format, octet.torch.attention with the arm's delta —
loads the initial weights that `octet train --dump-grads` writes, runs the dumped batch, and
must give the trainer's loss and every parameter gradient, in the fp8-matched and fp8-stale arms.

Why near-equality and not bitwise: both sides run the very same FP8 code (liboctet_c's Linear
and Attention are the trainer's, with the trainer's attention config), but the ops between them
— RMSNorm, SwiGLU, the BF16 LM head, the loss — are PyTorch's here and octet's in the trainer,
so they round differently at FP32's level (octet's CPU ops sum in double; on CUDA, atomics order
the fused attention backward's dQ sums), and now and then such a difference moves a value across
an FP8 rounding boundary (a code one E4M3/E5M2 step away). The tolerance is therefore relative to
the FP8 error itself: for the loss and each gradient, the distance between PyTorch and the
trainer must be at most RATIO (5 %) of the distance between the trainer's FP8 arm and its fp32
reference arm (dumped from the same seed: same weights and batch; on the CPU, where the fp32 arm
runs), plus an FP32 floor. On the CPU the loss comes out equal and the gradients ~3e-6 of that
distance apart; a twin with the other delta lands at ~0.7 of it, and the test checks that such a
twin is refused (so the check can fail).

Where the two sides differ in kind, not by rounding: the trainer keeps BF16 activations between
ops on CUDA (precision.activations = auto); this test sets f32 on both devices, so that the
PyTorch model, whose activations are FP32 tensors, computes the same thing. RoPE is left out
(learned positions): its cos/sin tables would add another FP32 difference upstream of FP8.

CPU in CI (the CLI next to liboctet_c); the cuda parametrization (the fused FP8 attention kernels
at head_dim 64, cuBLASLt FP8 GEMMs) is skipped without a GPU.
"""
import json
import os
import pathlib
import struct
import subprocess
import tomllib

import pytest
import torch
import torch.nn.functional as F

from octet_torch_util import rel  # noqa: F401  (also puts python/ on the path)
import octet
import octet.torch as ot

ROOT = pathlib.Path(__file__).resolve().parents[2]
RATIO = 0.05
MODEL = ["data.tokenizer=byte", "model.n_layer=2", "model.d_model=128", "model.n_head=2",
         "model.n_kv_head=1", "model.d_ff=128", "model.vocab_size=256", "model.seq_len=32",
         "model.positions=learned", "model.init_std=0.05", "train.batch_size=2",
         "precision.activations=f32", "precision.formats=hybrid"]
DELTA = {"fp8-matched": "matched", "fp8-stale": "stale"}


def octet_cli():
    """$OCTET_BIN, else the CLI beside the loaded liboctet_c (build/<preset>/octet, or ../bin/octet
    of an unpacked {bin,lib} tree), else build/octet of the checkout."""
    if os.environ.get("OCTET_BIN"):
        return os.environ["OCTET_BIN"]
    lib_dir = pathlib.Path(octet.library_path()).resolve().parent
    for c in (lib_dir / "octet", lib_dir.parent / "bin" / "octet", ROOT / "build" / "octet"):
        if c.is_file():
            return str(c)
    pytest.skip("no octet CLI found (set OCTET_BIN)")


# ---- the model, from octet.torch's building blocks --------------------------------------------


class RMSNorm(torch.nn.Module):
    """y = x · rstd · w with rstd = 1/sqrt(mean(x²) + eps) (include/octet/model.h), the row
    statistic in float64 as octet's CPU backend keeps it."""

    def __init__(self, dim, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        rstd = torch.rsqrt(x.double().square().mean(-1, keepdim=True) + self.eps).to(x.dtype)
        return x * rstd * self.weight


class Bf16Head(torch.autograd.Function):
    """The trainer's LM head in the FP8 arms (model.h head_precision: BF16): X, W and dY rounded
    to BF16, products accumulated in FP32, FP32 out."""

    @staticmethod
    def forward(ctx, x, w):  # x [N, d], w [V, d]
        xb, wb = x.bfloat16().float(), w.bfloat16().float()
        ctx.save_for_backward(xb, wb)
        return xb @ wb.T

    @staticmethod
    def backward(ctx, dy):
        xb, wb = ctx.saved_tensors
        dyb = dy.bfloat16().float()
        return dyb @ wb, dyb.T @ xb


class Layer(torch.nn.Module):
    """Pre-norm attention and SwiGLU units (h.{l}.* of model.h's parameter names)."""

    def __init__(self, m, delta, fmt):
        super().__init__()
        d, self.h, self.g, self.f = m["d_model"], m["n_head"], m["n_kv_head"], m["d_ff"]
        self.hd = d // self.h
        self.delta, self.fmt = delta, fmt
        self.norm1, self.norm2 = RMSNorm(d, m["norm_eps"]), RMSNorm(d, m["norm_eps"])
        self.attn = torch.nn.Module()
        self.attn.qkv = torch.nn.Linear(d, (self.h + 2 * self.g) * self.hd, bias=False)
        self.attn.proj = torch.nn.Linear(self.h * self.hd, d, bias=False)
        self.mlp = torch.nn.Module()
        self.mlp.fc1 = torch.nn.Linear(d, 2 * self.f, bias=False)  # [gate | up]
        self.mlp.fc2 = torch.nn.Linear(self.f, d, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.attn.qkv(self.norm1(x)).split(
            [self.h * self.hd, self.g * self.hd, self.g * self.hd], dim=-1)
        o = ot.attention(q.view(b, t, self.h, self.hd), k.view(b, t, self.g, self.hd),
                         v.view(b, t, self.g, self.hd), causal=True, delta=self.delta,
                         format=self.fmt)
        x = x + self.attn.proj(o.reshape(b, t, -1))
        gate, up = self.mlp.fc1(self.norm2(x)).split(self.f, dim=-1)
        a = (F.silu(gate.double()) * up.double()).to(x.dtype)  # octet computes it in double
        return x + self.mlp.fc2(a)


class Twin(torch.nn.Module):
    """octet's default transformer (pre-norm RMSNorm, learned positions, SwiGLU, tied
    embeddings) with state_dict keys equal to the trainer's parameter names."""

    def __init__(self, m, delta, fmt):
        super().__init__()
        self.wte = torch.nn.Parameter(torch.zeros(m["vocab_size"], m["d_model"]))
        self.wpe = torch.nn.Parameter(torch.zeros(m["seq_len"], m["d_model"]))
        self.h = torch.nn.ModuleList(Layer(m, delta, fmt) for _ in range(m["n_layer"]))
        self.norm_f = RMSNorm(m["d_model"], m["norm_eps"])

    def forward(self, ids, targets):
        x = self.wte[ids] + self.wpe[: ids.shape[1]]
        for layer in self.h:
            x = layer(x)
        logits = Bf16Head.apply(self.norm_f(x).reshape(-1, x.shape[-1]), self.wte)
        targets = targets.reshape(-1)
        keep = targets >= 0
        # The trainer's loss: summed in double, gradient scaled by 1/(batch · seq_len).
        ce = F.cross_entropy(logits[keep].double(), targets[keep].long(), reduction="sum")
        return ce * (1.0 / float(ids.numel())), int(keep.sum())


# ---- the test ----------------------------------------------------------------------------------


def read_safetensors(path):
    """(name -> tensor, metadata) of a safetensors file: the `safetensors` package where it is
    installed; else the format read directly (8-byte little-endian header size, a JSON header of
    dtype, shape and byte offsets, the data) — the GPU machine's python may lack the package."""
    try:
        from safetensors import safe_open
        from safetensors.torch import load_file
        with safe_open(str(path), "pt") as f:
            return load_file(str(path)), f.metadata() or {}
    except ImportError:
        raw = pathlib.Path(path).read_bytes()
        n = struct.unpack("<Q", raw[:8])[0]
        header = json.loads(raw[8:8 + n])
        dtypes = {"F32": torch.float32, "I32": torch.int32, "F64": torch.float64}
        out = {k: torch.frombuffer(bytearray(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]),
                                   dtype=dtypes[v["dtype"]]).reshape(v["shape"])
               for k, v in header.items() if k != "__metadata__"}
        return out, header.get("__metadata__", {})


def dump(tmp, corpus, arm, device):
    out = tmp / f"{arm}-{device}"
    cmd = [octet_cli(), "train", "--dump-grads", str(out), "--device", device, "--arm", arm]
    for s in MODEL + [f"data.path={corpus}", f"data.cache_dir={tmp / 'cache'}"]:
        cmd += ["--set", s]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    grads, meta = read_safetensors(out / "grads.safetensors")
    return (tomllib.loads((out / "config.toml").read_text()),
            read_safetensors(out / "model.safetensors")[0],
            read_safetensors(out / "batch.safetensors")[0], grads, float(meta["loss"]))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("trainer-equality")
    (d / "corpus.txt").write_text("".join(
        f"line {i}: the scheduler maps page {i * 7 % 13} of device {i % 5}.\n" for i in range(300)))
    return d


def twin_step(cfg, weights, batch, delta, device):
    """Loss and gradients (name -> float64 CPU tensor) of the PyTorch twin on the dumped step."""
    p = cfg["precision"]
    assert p["attn_form"] in ("whole", "flash") and p["qkv_scaling"] == "tensor" and \
        p["p_scale"] == 256.0 and not p["pow2_scales"], p  # the C ABI's attention/linear config
    model = Twin(cfg["model"], delta, p["formats"])
    model.load_state_dict(weights)
    ot.convert_to_float8(model, recipe=p["recipe"], format=p["formats"],
                         amax_history_len=p["amax_history_len"], amax_algo=p["amax_algo"],
                         margin=p["margin"])
    model.to(device)
    loss, counted = model(batch["ids"].long().to(device), batch["targets"].to(device))
    loss.backward()
    grads = {k: v.grad.detach().double().cpu() for k, v in model.named_parameters()}
    return loss.item() * batch["ids"].numel() / counted, grads


def device_param(name):
    marks = [] if name == "cpu" else [pytest.mark.skipif(not torch.cuda.is_available(),
                                                         reason="needs a CUDA GPU")]
    return pytest.param(name, marks=marks)


@pytest.mark.parametrize("device", [device_param("cpu"), device_param("cuda")])
@pytest.mark.parametrize("arm", sorted(DELTA))
def test_one_step_equals_trainer(tmp_path, corpus, arm, device):
    cfg, weights, batch, grads, loss = dump(tmp_path, corpus / "corpus.txt", arm, device)
    # The fp32 reference arm (FP64 attention) runs on the CPU only; the initial weights are made
    # on the host from the seed, so both devices start from the same ones.
    _, w_ref, b_ref, g_ref, loss_ref = dump(tmp_path, corpus / "corpus.txt", "fp32", "cpu")
    assert all(torch.equal(weights[k], w_ref[k]) for k in weights)  # same seed: same step
    assert all(torch.equal(batch[k], b_ref[k]) for k in batch)
    got_loss, got = twin_step(cfg, weights, batch, DELTA[arm], device)
    assert set(got) == set(grads)

    fp8_err = abs(loss - loss_ref)
    assert fp8_err > 0, "the FP8 arm equals the fp32 arm: FP8 did not run"
    assert abs(got_loss - loss) <= RATIO * fp8_err + 1e-6 * abs(loss), (got_loss, loss, loss_ref)

    def ratios(twin):  # per parameter: |twin - trainer| / |trainer fp8 - trainer fp32|
        out = {}
        for k, g in grads.items():
            g, r = g.double(), g_ref[k].double()
            out[k] = ((twin[k] - g).norm() / ((g - r).norm() + 1e-6 / RATIO * g.norm())).item()
        return out

    for k, ratio in ratios(got).items():
        assert ratio <= RATIO, f"{k}: |torch - trainer| is {ratio:.3e} of |trainer fp8 - fp32|"
    # The check can fail: the other delta (a wrong implementation with the right everything else)
    # is far outside it.
    other = {"matched": "stale", "stale": "matched"}[DELTA[arm]]
    assert max(ratios(twin_step(cfg, weights, batch, other, device)[1]).values()) > 4 * RATIO
