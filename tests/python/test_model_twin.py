"""octet's transformer against its PyTorch float64 twin (below): `octet train --dump-grads`
writes the initial weights (safetensors), one batch and octet's loss and gradients in the fp32
reference arm (FP32 GEMMs, FP64 attention); the twin loads the same safetensors and must give the
same loss (relative 1e-5) and the same gradient for every parameter (error <= 1e-3 of the tensor's
largest gradient + 1e-6 absolute: FP32 against FP64 over a 2-layer model). Covers pre/post/output
(FOG) norm placement, RMSNorm/LayerNorm, RoPE/learned/NoPE, SwiGLU/GELU, tied/untied, QK-norm
(trainable and fixed), GQA and unit scaling.

The twin of octet's transformer (include/octet/model.h), written from the documented
architecture, not from octet's code: float64 throughout, so it is an independent oracle for the
loss and every parameter gradient that `octet train --dump-grads` writes (fp32 reference arm).

Conventions it relies on (all stated in octet's public headers): parameter names and shapes of
model.h / layout.h; qkv columns = [q heads | k heads | v heads] (backend.h split_qkv); RoPE
rotate-half pairs (i, i + D/2) rotated by t * theta^(-2i/D) (backend.h); SwiGLU h = [gate | up];
GELU tanh approximation; RMSNorm x * rsqrt(mean(x^2) + eps) * w; LayerNorm with biased variance;
causal attention with scale 1/sqrt(head_dim), GQA head h -> kv head h // (H / G).
"""
import math
import os
import subprocess
import tomllib
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file


# ---- the twin ------------------------------------------------------------


def rmsnorm(x, w, eps):
    y = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)
    return y if w is None else y * w


def layernorm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) * torch.rsqrt(var + eps) * w + b


def rope(x, theta):
    # x [B, H, T, D]
    T, D = x.shape[2], x.shape[3]
    half = D // 2
    i = torch.arange(half, dtype=torch.float64)
    inv = theta ** (-2.0 * i / D)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cos(ang), torch.sin(ang)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward_loss(cfg, P, ids, targets):
    """cfg: the [model] table of octet's config.toml; P: name -> float64 tensor (requires_grad)."""
    L, d, H, G = cfg["n_layer"], cfg["d_model"], cfg["n_head"], cfg["n_kv_head"]
    Dh, Fd, eps = d // H, cfg["d_ff"], cfg["norm_eps"]
    B, T = ids.shape
    unit = cfg["unit_scaling"]
    tau = cfg["residual_tau"]
    ra, rb = (math.sqrt(1 - tau), math.sqrt(tau)) if unit else (1.0, 1.0)

    def lin(x, name):
        w = P[name]
        y = x @ w.T
        return y / math.sqrt(w.shape[1]) if unit else y

    def norm(x, prefix):
        if cfg["norm"] == "rmsnorm":
            return rmsnorm(x, P[prefix + ".weight"], eps)
        return layernorm(x, P[prefix + ".weight"], P[prefix + ".bias"], eps)

    def attention(u, h):
        qkv = lin(u, h + ".attn.qkv.weight")  # [B, T, (H+2G)Dh]
        q = qkv[..., : H * Dh].reshape(B, T, H, Dh).transpose(1, 2)
        k = qkv[..., H * Dh: (H + G) * Dh].reshape(B, T, G, Dh).transpose(1, 2)
        v = qkv[..., (H + G) * Dh:].reshape(B, T, G, Dh).transpose(1, 2)
        if cfg["qk_norm"]:
            trainable = cfg["qk_norm_trainable"]
            q = rmsnorm(q, P[h + ".attn.q_norm.weight"] if trainable else None, eps)
            k = rmsnorm(k, P[h + ".attn.k_norm.weight"] if trainable else None, eps)
        if cfg["positions"] == "rope":
            q, k = rope(q, cfg["rope_theta"]), rope(k, cfg["rope_theta"])
        rep = H // G
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(Dh)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        s = s.masked_fill(~mask, float("-inf"))
        o = torch.softmax(s, dim=-1) @ v  # [B, H, T, Dh]
        return lin(o.transpose(1, 2).reshape(B, T, H * Dh), h + ".attn.proj.weight")

    def mlp(u, h):
        a = lin(u, h + ".mlp.fc1.weight")
        if cfg["mlp"] == "swiglu":
            a = F.silu(a[..., :Fd]) * a[..., Fd:]
        else:
            a = gelu_tanh(a)
        return lin(a, h + ".mlp.fc2.weight")

    x = P["wte"][ids]
    if cfg["positions"] == "learned":
        x = x + P["wpe"][None, :T]
    place = cfg["norm_placement"]
    for l in range(L):
        h = f"h.{l}"
        for k, sub in ((1, attention), (2, mlp)):
            pre = f"{h}.norm{k}"
            u = norm(x, pre) if place == "pre" else x
            g = sub(u, h)
            if place == "output":
                g = norm(g, pre)
            x = ra * x + rb * g
            if place == "post":
                x = norm(x, pre)
    x = norm(x, "norm_f")
    head = P["wte"] if cfg["tied_embeddings"] else P["lm_head.weight"]
    logits = x @ head.T
    if unit:
        logits = logits / math.sqrt(d)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long())


# ---- the test ------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
OCTET = os.environ.get("OCTET_BIN", str(ROOT / "build" / "octet"))

BASE = [
    "data.tokenizer=byte", "model.n_layer=2", "model.d_model=32", "model.n_head=4",
    "model.n_kv_head=2", "model.d_ff=48", "model.vocab_size=256", "model.seq_len=16",
    "model.init_std=0.1", "train.batch_size=2", "precision.arm=fp32",
]
VARIANTS = {
    "pre_rms_rope_swiglu_tied_gqa": [],
    "post_layernorm_learned_gelu_untied": [
        "model.norm_placement=post", "model.norm=layernorm", "model.positions=learned",
        "model.mlp=gelu", "model.tied_embeddings=false"],
    "fog_output_norm_fixed_qknorm": [
        "model.norm_placement=output", "model.qk_norm=true", "model.qk_norm_trainable=false"],
    "unit_scaling_nope_trainable_qknorm": [
        "model.unit_scaling=true", "model.residual_tau=0.25", "model.positions=nope",
        "model.qk_norm=true", "model.n_kv_head=1"],
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("twin")
    text = "".join(f"line {i}: the scheduler maps page {i * 7 % 13} of the device.\n" for i in range(300))
    (d / "corpus.txt").write_text(text)
    return d


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_twin_matches_loss_and_gradients(corpus, name):
    out = corpus / name
    sets = BASE + VARIANTS[name] + [f"data.path={corpus / 'corpus.txt'}", f"data.cache_dir={corpus / 'cache'}"]
    cmd = [OCTET, "train", "--dump-grads", str(out)]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    cfg = tomllib.loads((out / "config.toml").read_text())["model"]
    weights = load_file(str(out / "model.safetensors"))
    batch = load_file(str(out / "batch.safetensors"))
    grads = load_file(str(out / "grads.safetensors"))
    with safe_open(str(out / "grads.safetensors"), "pt") as f:
        octet_loss = float(f.metadata()["loss"])

    P = {k: v.double().requires_grad_(True) for k, v in weights.items()}
    loss = forward_loss(cfg, P, batch["ids"].long(), batch["targets"])
    loss.backward()
    assert abs(loss.item() - octet_loss) <= 1e-5 * abs(loss.item()), (loss.item(), octet_loss)
    assert set(grads) == set(P)
    for k, p in P.items():
        g_ref = p.grad
        g = grads[k].double()
        scale = g_ref.abs().max().item()
        err = (g - g_ref).abs().max().item()
        assert err <= 1e-3 * scale + 1e-6, f"{name}: {k}: max error {err:.3e}, max |grad| {scale:.3e}"
        assert scale > 0 or k.endswith(".bias"), f"{k}: all-zero gradient"
