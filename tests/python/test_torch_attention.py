"""octet.torch.attention on the CPU (python/octet, docs/pytorch.md) against independent references.

- gradcheck: the float64 path (precision "fp64", octet's FP64 oracle through liboctet_c) has the
  gradients of its own forward by finite differences (torch.autograd.gradcheck), causal and GQA.
- FP8 against torch's float64 SDPA, under FlashAttention-3's test rule (docs/pytorch.md "Tests"):
  for O, dQ, dK, dV the relative L2 error is at most twice that of a naive FP8 attention (per-tensor
  E4M3 Q, K, V, P; E5M2 dO, dS) plus 1e-3, for the stale and the matched delta, causal with
  seq_q != seq_k, GQA; the matched delta's dQ is closer than the stale one's (keys with a mean).
- The matched row residual (return_residual) is <= 1e-6; the stale one is far larger.
- GQA equals attention over repeated KV heads; strided inputs equal contiguous ones; the output
  keeps the input dtype (bfloat16, float16).
- Bad input raises a Python exception naming the problem (never a crash).
"""
import pytest
import torch

from octet_torch_util import check_attention_rule, rel, run_grads, sdpa
import octet
import octet.torch as ot


def inputs(b, tq, tk, h, g, d, seed, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, tq, h, d, generator=gen, dtype=dtype)
    k = torch.randn(b, tk, g, d, generator=gen, dtype=dtype) + 0.5  # keys with a mean
    v = torch.randn(b, tk, g, d, generator=gen, dtype=dtype)
    d_o = torch.randn(b, tq, h, d, generator=gen, dtype=dtype)
    return [t.requires_grad_() for t in (q, k, v)], d_o


@pytest.mark.parametrize("causal,g", [(False, 2), (True, 1), (True, 2)])
def test_gradcheck_fp64(causal, g):
    (q, k, v), _ = inputs(1, 5, 7, 2, g, 4, seed=1)
    fn = lambda q, k, v: ot.attention(q, k, v, causal=causal, precision="fp64")
    assert torch.autograd.gradcheck(fn, (q, k, v), eps=1e-6, atol=1e-8, rtol=1e-6)


SHAPES = [  # b, tq, tk, h, g, d, causal
    (2, 33, 33, 4, 2, 16, True),
    (1, 20, 45, 8, 2, 32, True),   # seq_q < seq_k: bottom-right causal
    (2, 40, 17, 2, 1, 24, False),
]


@pytest.mark.parametrize("b,tq,tk,h,g,d,causal", SHAPES)
def test_fp8_within_reference_rule(b, tq, tk, h, g, d, causal):
    qkv, d_o = inputs(b, tq, tk, h, g, d, seed=tq)
    errs = {delta: check_attention_rule(
        lambda q, k, v: ot.attention(q, k, v, causal=causal, delta=delta), qkv, d_o, causal)
        for delta in ("stale", "matched")}
    assert errs["matched"]["dq"] < errs["stale"]["dq"]


def test_matched_row_residual():
    (q, k, v), d_o = inputs(2, 64, 64, 4, 2, 32, seed=5)
    res = {}
    for delta in ("stale", "matched"):
        o, residual = ot.attention(q, k, v, causal=True, delta=delta, return_residual=True)
        assert residual.tolist() == [0.0, 0.0]  # filled by the backward
        o.backward(d_o)
        res[delta] = residual.tolist()
    assert 0 < res["matched"][0] <= 1e-6 and res["matched"][1] <= res["matched"][0]
    assert res["stale"][1] > 100 * res["matched"][1]


def test_gqa_equals_repeated_kv_heads():
    (q, k, v), d_o = inputs(1, 24, 24, 4, 2, 16, seed=9, dtype=torch.float32)
    got = run_grads(lambda q, k, v: ot.attention(q, k, v, causal=True), (q, k, v), d_o)
    rep = lambda t: t.repeat_interleave(2, dim=2)
    want = run_grads(lambda q, k, v: ot.attention(q, rep(k), rep(v), causal=True), (q, k, v), d_o)
    for x, y in zip(got, want):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)


def test_strided_inputs_equal_contiguous():
    (q, k, v), d_o = inputs(2, 16, 16, 2, 2, 8, seed=3, dtype=torch.float32)
    # [B, H, T, D] storage seen as [B, T, H, D]: what a fused QKV projection often hands over
    qs, ks, vs = (t.detach().transpose(1, 2).contiguous().transpose(1, 2).requires_grad_()
                  for t in (q, k, v))
    assert not qs.is_contiguous()
    a = run_grads(lambda q, k, v: ot.attention(q, k, v), (q, k, v), d_o)
    b = run_grads(lambda q, k, v: ot.attention(q, k, v), (qs, ks, vs), d_o)
    for x, y in zip(a, b):
        assert torch.equal(x, y)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_keeps_dtype(dtype):
    (q, k, v), d_o = inputs(1, 8, 8, 2, 1, 16, seed=4, dtype=dtype)
    o = ot.attention(q, k, v)
    o.backward(d_o)
    assert o.dtype == dtype and q.grad.dtype == dtype and k.grad.dtype == dtype
    ref = sdpa(*(t.detach().double() for t in (q, k, v)), False)
    assert rel(o.detach(), ref) < 0.1


def test_autocast_casts_like_sdpa():
    # Inside torch.autocast q, k, v of mixed float32 / bfloat16 (Hugging Face's RoPE output beside a
    # projection's) run in autocast's dtype, as SDPA does: the same o as all-bfloat16 inputs.
    (q, k, v), _ = inputs(1, 8, 8, 2, 1, 16, seed=6, dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        o = ot.attention(q, k, v.bfloat16(), causal=True)
        ref = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.bfloat16().transpose(1, 2), is_causal=True)
    assert o.dtype == ref.dtype == torch.bfloat16
    same = ot.attention(*(t.detach().bfloat16() for t in (q, k, v)), causal=True)
    assert torch.equal(o.detach(), same)
    o.float().sum().backward()
    assert q.grad.dtype == torch.float32 and torch.isfinite(q.grad).all()
    with pytest.raises(TypeError, match="one dtype"):  # outside autocast: still refused
        ot.attention(q, k, v.bfloat16())


def test_numpy_bool_causal_is_a_bool():
    np = pytest.importorskip("numpy")
    torch.manual_seed(3)
    q, k, v = (torch.randn(1, 8, 2, 16) for _ in range(3))
    assert torch.equal(ot.attention(q, k, v, causal=np.bool_(True)), ot.attention(q, k, v, causal=True))
    assert torch.equal(ot.attention(q, k, v, causal=np.bool_(False)), ot.attention(q, k, v))


def test_bad_input_raises():
    q = torch.randn(1, 8, 2, 16)
    k = v = torch.randn(1, 8, 1, 16)
    with pytest.raises(TypeError, match="dtype torch.int32"):
        ot.attention(q.int(), k.int(), v.int())
    with pytest.raises(TypeError, match="one dtype"):
        ot.attention(q, k.double(), v)
    with pytest.raises(ValueError, match="one device"):
        ot.attention(q, k.to("meta"), v)
    with pytest.raises(ValueError, match="4 dims"):
        ot.attention(q[0], k, v)
    with pytest.raises(ValueError, match="head_dim"):
        ot.attention(q, k[..., :8], v[..., :8])
    with pytest.raises(ValueError, match="divide"):
        ot.attention(torch.randn(1, 8, 3, 16), torch.randn(1, 8, 2, 16), torch.randn(1, 8, 2, 16))
    with pytest.raises(ValueError, match="k and v"):
        ot.attention(q, k, torch.randn(1, 9, 1, 16))
    with pytest.raises(ValueError, match="softmax_scale"):
        ot.attention(q, k, v, softmax_scale=float("nan"))
    with pytest.raises(TypeError, match="softmax_scale must be a real number"):
        ot.attention(q, k, v, softmax_scale="x")
    with pytest.raises(ValueError, match="beyond FP32's range"):
        ot.attention(q, k, v, softmax_scale=10**400)
    import numpy as np  # a NumPy float is a real number: the same call as with a Python float
    assert torch.equal(ot.attention(q, k, v, softmax_scale=np.float32(0.25)),
                       ot.attention(q, k, v, softmax_scale=0.25))
    # FP32 would make 1e-50 a 0 (the default scale) and 1e39 infinite: refused, not substituted
    for scale in (1e-50, 1e-39, 1e39):
        with pytest.raises(ValueError, match="outside FP32's normal range"):
            ot.attention(q, k, v, softmax_scale=scale)
    # the ops called directly take the scale as the library does (0: the default): a scale that
    # FP32 would turn into 0 (the default), a subnormal or an infinity is refused there too
    empty = torch.empty(0, dtype=torch.float64)
    dense = torch.ops.octet.attention_forward
    packed = torch.ops.octet.attention_varlen_forward
    offsets = torch.tensor([0, 8], dtype=torch.int32)
    for scale in (1e-300, 1e-39, -0.5, 1e39, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="softmax_scale must be 0 .* or within FP32's normal"):
            dense(q, k, v, empty, False, scale, "matched", "fp8", "hybrid", "bshd")
        with pytest.raises(ValueError, match="softmax_scale must be 0 .* or within FP32's normal"):
            packed(q[0], k[0], v[0], offsets, offsets, 8, 8, False, scale, "matched", "fp8", "hybrid")
    assert torch.equal(dense(q, k, v, empty, False, 0.25, "matched", "fp8", "hybrid", "bshd")[0],
                       ot.attention(q, k, v, softmax_scale=0.25))
    with pytest.raises(TypeError, match="causal must be a bool, got builtins.str"):
        ot.attention(q, k, v, causal="yes")
    for empty in ((0, 8, 2, 16), (1, 0, 2, 16), (1, 8, 0, 16)):  # batch, seq, heads of size 0
        with pytest.raises(ValueError, match=r"q .* has a size 0"):
            ot.attention(torch.randn(empty), k, v)
        with pytest.raises(ValueError, match=r"k .* has a size 0"):
            ot.attention(q, torch.randn(empty), torch.randn(empty))
    with pytest.raises(octet.OctetError, match="unknown delta mode 'fresh'"):
        ot.attention(q, k, v, delta="fresh")
    with pytest.raises(octet.OctetError, match="unknown attention precision"):
        ot.attention(q, k, v, precision="fp4")
