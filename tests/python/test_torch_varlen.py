"""octet.torch.attention_varlen (python/octet/torch/varlen.py, docs/pytorch.md) on the CPU:
packed sequences in FlashAttention's varlen form equal each sequence's own dense call (bit for
bit: the same calls), and through the FP64 oracle a float64 SDPA per sequence (1e-12), gradients
included; GQA, causal with len_q != len_k, a zero-length sequence, one with queries and no keys
(0 rows), and backward through a batch in which no sequence has keys; bad offsets raise naming
the argument."""
import pytest
import torch

from octet_torch_util import sdpa
import octet.torch as ot

LENS_Q = [5, 0, 9, 1, 3]
LENS_K = [7, 0, 9, 1, 0]


def packed(lens, heads, d, gen, dtype):
    return torch.randn(sum(lens), heads, d, generator=gen, dtype=dtype).requires_grad_()


def cu(lens):
    return torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)


@pytest.mark.parametrize("causal", [False, True])
def test_equals_dense_calls_and_fp64_reference(causal):
    gen = torch.Generator().manual_seed(3)
    q = packed(LENS_Q, 4, 16, gen, torch.float64)
    k, v = packed(LENS_K, 2, 16, gen, torch.float64), packed(LENS_K, 2, 16, gen, torch.float64)
    d_o = torch.randn(q.shape, generator=gen, dtype=torch.float64)
    o = ot.attention_varlen(q, k, v, cu(LENS_Q), cu(LENS_K), max(LENS_Q), max(LENS_K), causal=causal,
                            precision="fp64")
    o.backward(d_o)
    got = [o.detach(), q.grad, k.grad, v.grad]
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    outs = []
    cq, ck = cu(LENS_Q).tolist(), cu(LENS_K).tolist()
    for s in range(len(LENS_Q)):
        if LENS_Q[s] == 0:
            continue
        if LENS_K[s] == 0:
            outs.append(torch.zeros(LENS_Q[s], 4, 16, dtype=torch.float64))
            continue
        qs, ks, vs = q2[None, cq[s]:cq[s + 1]], k2[None, ck[s]:ck[s + 1]], v2[None, ck[s]:ck[s + 1]]
        outs.append(sdpa(qs, ks, vs, causal)[0])
    ref = torch.cat(outs)
    ref.backward(d_o)
    for x, y in zip(got, [ref.detach(), q2.grad, k2.grad, v2.grad]):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)
    assert torch.count_nonzero(got[0][-3:]) == 0  # the sequence with queries and no keys


def test_fp8_equals_the_same_dense_calls():
    gen = torch.Generator().manual_seed(4)
    q = packed(LENS_Q, 4, 16, gen, torch.float32).detach()
    k, v = packed(LENS_K, 4, 16, gen, torch.float32).detach(), packed(LENS_K, 4, 16, gen, torch.float32).detach()
    o = ot.attention_varlen(q, k, v, cu(LENS_Q), cu(LENS_K), 9, 9, causal=True)
    first = ot.attention(q[None, :5], k[None, :7], v[None, :7], causal=True)[0]
    assert torch.equal(o[:5], first)


def test_no_sequence_with_keys_still_backpropagates():
    q = torch.randn(3, 2, 16, requires_grad=True)
    k = torch.randn(0, 2, 16, requires_grad=True)
    v = torch.randn(0, 2, 16, requires_grad=True)
    with torch.no_grad():
        q[0, 0, 0] = float("inf")  # zeros whatever q holds, and a zero gradient (no 0·inf)
    o = ot.attention_varlen(q, k, v, cu([3]), cu([0]), 3, 0, causal=True)
    assert torch.equal(o, torch.zeros(3, 2, 16))
    o.sum().backward()
    assert torch.equal(q.grad, torch.zeros_like(q))


def test_bad_offsets_raise():
    q = torch.randn(6, 2, 16)
    k = v = torch.randn(6, 1, 16)
    good = torch.tensor([0, 6], dtype=torch.int32)
    with pytest.raises(TypeError, match="cu_seqlens_q must be an int32 or int64"):
        ot.attention_varlen(q, k, v, good.float(), good, 6, 6)
    with pytest.raises(ValueError, match="rise from 0"):
        ot.attention_varlen(q, k, v, torch.tensor([0, 4, 3, 6]), torch.tensor([0, 2, 4, 6]), 6, 6)
    with pytest.raises(ValueError, match="rise from 0 to the 6"):
        ot.attention_varlen(q, k, v, torch.tensor([0, 5]), good, 6, 6)
    with pytest.raises(ValueError, match="max_seqlen"):
        ot.attention_varlen(q, k, v, good, good, 4, 6)
    with pytest.raises(ValueError, match="2 sequences"):
        ot.attention_varlen(q, k, v, torch.tensor([0, 3, 6]), good, 6, 6)
    with pytest.raises(ValueError, match="3-D"):
        ot.attention_varlen(q[None], k, v, good, good, 6, 6)
