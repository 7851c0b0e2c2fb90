"""Shared by the tests of the PyTorch package (test_torch_*.py): makes the checkout's python/
importable (the tests never install it), and gives the float64 references they compare with —
torch's scaled_dot_product_attention in [B, T, H, D] with GQA by repeated KV heads and octet's
bottom-right causal mask, and a naive FP8 attention (the "naive implementation in the same low
precision" of FlashAttention-3's test rule, docs/pytorch.md "Tests"), and the error bound of an
FP8 GEMM that the Float8Linear tests hold octet to.
"""
import contextlib
import os
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))


@contextlib.contextmanager
def compiling(backend):
    """Inductor's C++ compiler subprocesses must not inherit an ASan LD_PRELOAD (this process
    already has the runtime loaded; the compiler is not instrumented)."""
    preload = os.environ.get("LD_PRELOAD") if backend == "inductor" else None
    if preload:
        del os.environ["LD_PRELOAD"]
    try:
        yield
    finally:
        if preload:
            os.environ["LD_PRELOAD"] = preload


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


# E4M3 / E5M2: unit roundoff u = 2^-(mantissa bits + 1), largest finite value, subnormal spacing.
FP8_FORMATS = {"e4m3": (2.0 ** -4, 448.0, 2.0 ** -9), "e5m2": (2.0 ** -3, 57344.0, 2.0 ** -16)}


def gemm_bound(a, b, fa, fb):
    """Elementwise bound of |A Bᵀ − Â B̂ᵀ| (a [M, K], b [N, K], float64) when A and B are rounded
    to FP8 formats fa, fb with amax scaling (tensor, row or block: a block's amax is at most the
    tensor's). Round to nearest has relative error <= u above the smallest normal; below it the
    absolute error is at most half the subnormal spacing at the scale, Δ <= amax / fp8_max ·
    spacing / 2. So each product a_k b_k is off by at most (u_a + u_b + u_a u_b)|a_k b_k| +
    |b_k| Δ_a + |a_k| Δ_b + Δ_a Δ_b, summed over k; plus 1e-5 relative for FP32 accumulation."""
    (ua, ma, sa), (ub, mb, sb) = FP8_FORMATS[fa], FP8_FORMATS[fb]
    da = a.abs().max() / ma * sa / 2
    db = b.abs().max() / mb * sb / 2
    aa, bb = a.abs(), b.abs()
    bound = (ua + ub + ua * ub) * aa @ bb.T + da * bb.sum(1)[None, :] + db * aa.sum(1)[:, None]
    return bound + a.shape[1] * da * db + 1e-5 * (aa @ bb.T)


def check_linear_bound(lin, x, dy, fmt):
    """Runs Float8Linear `lin` forward and backward on x [M, K] and dy [M, N] (on lin's device)
    and asserts Y, dX and dW against float64 within gemm_bound (format policy fmt: dY in E5M2
    under "hybrid"), and that FP8 really ran (not exact), and dbias = Σ dy."""
    xg = x.clone().requires_grad_()
    y = lin(xg)
    y.backward(dy)
    w, b = lin.weight.detach().double().cpu(), lin.bias.detach().double().cpu()
    xd, dyd = x.double().cpu(), dy.double().cpu()
    g = "e5m2" if fmt == "hybrid" else "e4m3"
    checks = [("y", y.detach().cpu() - b, xd @ w.T, gemm_bound(xd, w, "e4m3", "e4m3")),
              ("dx", xg.grad.cpu(), dyd @ w, gemm_bound(dyd, w.T, g, "e4m3")),
              ("dw", lin.weight.grad.cpu(), dyd.T @ xd, gemm_bound(dyd.T, xd.T, g, "e4m3"))]
    for name, got, want, bound in checks:
        err = (got.double() - want).abs()
        assert bool((err <= bound).all()), (name, float((err / bound).max()))
        assert rel(got, want) > 0, name  # an FP32 GEMM would be exact here
    torch.testing.assert_close(lin.bias.grad.cpu(), dy.sum(0).cpu(), rtol=1e-5, atol=1e-5)


def run_grads(fn, qkv, d_o):
    """(o, dq, dk, dv) of o = fn(q, k, v) with output gradient d_o, detached."""
    o = fn(*qkv)
    return (o.detach(), *torch.autograd.grad(o, qkv, d_o.to(o.dtype)))


def check_checkpointing_is_bitwise(fn, qkv, d_o):
    """fn(q, k, v) under torch.utils.checkpoint gives the output and gradients of the plain call,
    bit for bit (the recomputed forward is the same call)."""
    qkv = [t.detach().requires_grad_() for t in qkv]
    plain = run_grads(fn, qkv, d_o)
    ckpt = run_grads(lambda *t: torch.utils.checkpoint.checkpoint(fn, *t, use_reentrant=False), qkv,
                     d_o)
    for name, a, b in zip(("o", "dq", "dk", "dv"), plain, ckpt):
        assert torch.equal(a, b), name


def check_attention_rule(fn, qkv, d_o, causal):
    """FlashAttention-3's test rule for o = fn(q, k, v) (layouts [B, T, H, D], any device and
    dtype; fn must be differentiable): for O, dQ, dK, dV, the relative error against float64 SDPA
    is at most twice a naive FP8 attention's (NaiveFp8) plus 1e-3. Returns the errors by name."""
    ref_in = [t.detach().double().cpu().requires_grad_() for t in qkv]
    d_o64 = d_o.double().cpu()
    ref = run_grads(lambda q, k, v: sdpa(q, k, v, causal), ref_in, d_o64)
    naive = run_grads(lambda q, k, v: sdpa(q, k, v, causal, NaiveFp8), ref_in, d_o64)
    got = run_grads(fn, qkv, d_o)
    errs = {}
    for name, x, n, r in zip(("o", "dq", "dk", "dv"), got, naive, ref):
        assert x.dtype == qkv[0].dtype, name
        errs[name] = rel(x.cpu(), r)
        assert errs[name] <= 2 * rel(n, r) + 1e-3, (name, errs[name], rel(n, r))
    return errs
