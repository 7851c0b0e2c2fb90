"""Shared by the tests of the PyTorch package (test_torch_*.py): makes the checkout's python/
importable (the tests never install it), and gives the float64 references they compare with —
torch's scaled_dot_product_attention in [B, T, H, D] with GQA by repeated KV heads and octet's
bottom-right causal mask, and a naive FP8 attention (the "naive implementation in the same low
precision" of FlashAttention-3's test rule, docs/pytorch.md "Tests").
"""
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))


def sdpa(q, k, v, causal, quant=None):
    """Attention in q's dtype; layouts [B, T, H, D]. quant (optional): the naive FP8 rounding —
    quant(x, fmt) rounds a tensor to E4M3/E5M2 with one amax scale, applied to Q, K, V and P in
    the forward and to dO and dS in the backward (straight-through elsewhere)."""
    group = q.shape[2] // k.shape[2]
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
    kh, vh = kh.repeat_interleave(group, 1), vh.repeat_interleave(group, 1)
    if quant is not None:
        qh, kh, vh = (quant.forward(t, "e4m3") for t in (qh, kh, vh))
    tau = float(torch.tensor(1.0, dtype=torch.float32) / torch.tensor(q.shape[3]).float().sqrt())
    s = tau * qh @ kh.transpose(-1, -2)
    if causal:  # query i sees keys j <= i + tk - tq
        tq, tk = s.shape[-2], s.shape[-1]
        i, j = torch.arange(tq)[:, None], torch.arange(tk)[None, :]
        s = s.masked_fill(j > i + (tk - tq), float("-inf"))
    if quant is not None:
        s = quant.backward(s, "e5m2")
    p = torch.softmax(s, dim=-1)
    if quant is not None:
        p = quant.forward(p, "e4m3", scale=256.0)
    o = p @ vh
    if quant is not None:
        o = quant.backward(o, "e5m2")
    return o.transpose(1, 2)


class NaiveFp8:
    """Quantize-dequantize to FP8 with one scale per tensor (amax → the format's largest value),
    straight-through for the gradient; `backward` leaves the forward alone and rounds the
    gradient flowing back instead."""
    MAX = {"e4m3": 448.0, "e5m2": 57344.0}
    DTYPE = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}

    @classmethod
    def round(cls, x, fmt, scale=None):
        if scale is None:
            amax = x.detach().abs().max()
            scale = cls.MAX[fmt] / amax if amax > 0 else 1.0
        return (x * scale).clamp(-cls.MAX[fmt], cls.MAX[fmt]).to(cls.DTYPE[fmt]).to(x.dtype) / scale

    @classmethod
    def forward(cls, x, fmt, scale=None):
        return x + (cls.round(x.detach(), fmt, scale) - x.detach())

    @classmethod
    def backward(cls, x, fmt):
        if x.requires_grad:
            x.register_hook(lambda g: cls.round(g, fmt))
        return x


def rel(x, ref):
    """||x − ref||₂ / ||ref||₂."""
    return float((x.double() - ref).norm() / ref.norm())
