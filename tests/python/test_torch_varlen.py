"""octet.torch.attention_varlen (python/octet/torch/varlen.py, docs/pytorch.md) on the CPU:
packed sequences in FlashAttention's varlen form equal the library's dense calls (bit for bit,
gradients included: each sequence alone, or causal documents bucketed by length into a zero-padded
batch, groups()), and through the FP64 oracle a float64 SDPA per sequence (1e-12, buckets
included); GQA, causal with len_q != len_k, a zero-length
sequence, one with queries and no keys (0 rows, -inf LSE), one with keys and no queries (0
gradients), and backward through a batch in which no sequence has keys or none has queries (every
input's gradient 0, compiled too, the arguments still checked); the LSE blocks equal the
dense calls'; torch.compile(fullgraph=True) equals eager; bad offsets raise naming the argument,
eagerly and compiled; the backward op refuses a packing of another sequence count; opcheck on the
forward op; the backward op refuses saved state, totals and heads it would misread; activation
checkpointing is bitwise; the C ABI refuses packings it cannot read."""
import ctypes

import pytest
import torch

from octet_torch_util import check_checkpointing_is_bitwise, sdpa
import octet
import octet.torch as ot
from octet import _lib
from octet.torch._backend import backend_for

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


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("side", ["q", "k"])
def test_no_tokens_on_one_side_gives_every_input_a_zero_gradient(side, compiled):
    gen = torch.Generator().manual_seed(8)
    lens_q, lens_k = ([0, 0], [3, 2]) if side == "q" else ([3, 2], [0, 0])
    q = packed(lens_q, 2, 16, gen, torch.float32)
    k, v = packed(lens_k, 1, 16, gen, torch.float32), packed(lens_k, 1, 16, gen, torch.float32)
    f = lambda q, k, v: ot.attention_varlen(q, k, v, cu(lens_q), cu(lens_k), 3, 3, causal=True)
    if compiled:
        f = torch.compile(f, fullgraph=True, backend="aot_eager")
    o = f(q, k, v)
    assert o.shape == q.shape and torch.count_nonzero(o) == 0
    (o.sum() + 1.0).backward()
    for name, t in (("q", q), ("k", k), ("v", v)):
        assert t.grad is not None and torch.equal(t.grad, torch.zeros_like(t)), name


def test_no_tokens_still_checks_the_arguments():
    q, k = torch.randn(0, 2, 16), torch.randn(4, 1, 16)
    c0, c4 = cu([0]), cu([4])
    with pytest.raises(octet.OctetError, match="precision"):
        ot.attention_varlen(q, k, k, c0, c4, 0, 4, precision="fp9")
    with pytest.raises(ValueError, match="kv heads"):
        ot.attention_varlen(torch.randn(0, 3, 16), torch.randn(4, 2, 16), torch.randn(4, 2, 16), c0,
                            c4, 0, 4)
    with pytest.raises(ValueError, match="rise from 0 to the 4"):
        ot.attention_varlen(q, k, k, c0, cu([3]), 0, 4)


def test_offsets_are_read_once_per_tensor_until_modified(monkeypatch):
    # Eagerly, two "layers" on the same offsets tensors, forward and backward: each tensor read on
    # the host once (CUDA tensors by default; here the CPU ones, as CI has no GPU); an in-place
    # change, or new storage under the same object, is read again and gives that packing's result.
    from octet.torch import varlen
    reads, real = [], varlen._host_values
    monkeypatch.setattr(varlen, "_host_values", lambda cu: reads.append(cu) or real(cu))
    monkeypatch.setattr(varlen, "_OFFSETS", varlen.HostReads(4, devices=("cpu",)))
    gen = torch.Generator().manual_seed(14)
    q = packed([3, 4], 2, 16, gen, torch.float32)
    k, v = packed([3, 4], 1, 16, gen, torch.float32), packed([3, 4], 1, 16, gen, torch.float32)
    cq, ck = cu([3, 4]), cu([3, 4])
    o = ot.attention_varlen(q, k, v, cq, ck, 4, 4, causal=True)
    ot.attention_varlen(o, k, v, cq, ck, 4, 4, causal=True).sum().backward()
    assert len(reads) == 2 and reads[0] is cq and reads[1] is ck
    cq.copy_(cu([4, 3]))
    ck.data = cu([4, 3])  # new storage: no version bump, another data_ptr
    with torch.no_grad():
        again = ot.attention_varlen(q, k, v, cq, ck, 4, 4, causal=True)
        fresh = ot.attention_varlen(q, k, v, cu([4, 3]), cu([4, 3]), 4, 4, causal=True)
    assert len(reads) == 6 and torch.equal(again, fresh) and not torch.equal(again, o.detach())
    with torch.inference_mode():  # inference tensors have no version counter: read every time
        cq, ck = cu([3, 4]), cu([3, 4])
        for _ in range(2):
            ot.attention_varlen(q, k, v, cq, ck, 4, 4, causal=True)
    assert len(reads) == 10


def test_cpu_offsets_and_the_ops_read_every_time(monkeypatch):
    # The default keeps CUDA tensors only (a CPU tensor may be refilled through .numpy(), which no
    # version counter sees), and the custom ops (what compiled code calls) never keep anything.
    from octet.torch import varlen
    reads, real = [], varlen._host_values
    monkeypatch.setattr(varlen, "_host_values", lambda cu: reads.append(cu) or real(cu))
    gen = torch.Generator().manual_seed(15)
    q = packed([3, 4], 2, 16, gen, torch.float32).detach()
    k = packed([3, 4], 1, 16, gen, torch.float32).detach()
    c = cu([3, 4])
    with torch.no_grad():
        ot.attention_varlen(q, k, k, c, c, 4, 4)
        c.numpy()[1] = 4
        again = ot.attention_varlen(q, k, k, c, c, 4, 4)
        assert torch.equal(again, ot.attention_varlen(q, k, k, cu([4, 3]), cu([4, 3]), 4, 4))
    assert len(reads) == 6
    config = (False, 0.0, "matched", "fp8", "hybrid")
    monkeypatch.setattr(varlen, "_OFFSETS", varlen.HostReads(4, devices=("cpu",)))
    for _ in range(2):
        torch.ops.octet.attention_varlen_forward(q, k, k, c, c, 4, 4, *config)
    assert len(reads) == 10


def test_inductor_reusing_a_buffer_for_new_offsets_equals_eager():
    # Inductor hands the second cumsum the first one's buffer (same object, no version bump): the
    # ops must read it again.
    from test_torch_compile import compiling
    pad = torch.nn.functional.pad

    def f(q, k, v, l1, l2):
        c1 = pad(l1.cumsum(0), (1, 0)).int()
        o = ot.attention_varlen(q, k, v, c1, c1, 7, 7, causal=True)
        c2 = pad(l2.cumsum(0), (1, 0)).int()
        return ot.attention_varlen(o, k, v, c2, c2, 7, 7, causal=True)

    gen = torch.Generator().manual_seed(16)
    q = packed([3, 4], 2, 16, gen, torch.float32).detach()
    k = packed([3, 4], 1, 16, gen, torch.float32).detach()
    args = (q, k, k, torch.tensor([3, 4]), torch.tensor([4, 3]))
    with compiling("inductor"):
        got = torch.compile(f, fullgraph=True, backend="inductor")(*args)
    assert torch.equal(got, f(*args))


def test_backward_op_refuses_a_packing_of_another_sequence_count():
    gen = torch.Generator().manual_seed(10)
    q = packed([3, 2], 2, 16, gen, torch.float32).detach()
    k = packed([4, 1], 1, 16, gen, torch.float32).detach()
    o, lse, saved = torch.ops.octet.attention_varlen_forward(
        q, k, k, cu([3, 2]), cu([4, 1]), 3, 4, False, 0.0, "matched", "fp8", "hybrid")
    with pytest.raises(ValueError, match="cu_seqlens_q has 2 sequences, cu_seqlens_k 1"):
        torch.ops.octet.attention_varlen_backward(o, lse, saved, o, cu([3, 2]), cu([5]), 1, 5, False,
                                                  0.0, "matched", "fp8", "hybrid")


def test_backward_op_refuses_tensors_it_would_misread():
    gen = torch.Generator().manual_seed(12)
    q = packed([3, 2], 4, 16, gen, torch.float32).detach()
    k = packed([4, 1], 2, 16, gen, torch.float32).detach()
    cq, ck, config = cu([3, 2]), cu([4, 1]), (False, 0.0, "matched", "fp8", "hybrid")
    o, lse, saved = torch.ops.octet.attention_varlen_forward(q, k, k, cq, ck, 3, 4, *config)
    bwd = torch.ops.octet.attention_varlen_backward
    assert all(torch.isfinite(g).all() for g in bwd(o, lse, saved, o, cq, ck, 2, 5, *config))
    n = saved.numel()
    for bad_saved in (saved[:-1], torch.zeros(n + 256, dtype=torch.uint8), saved[:0]):
        with pytest.raises(ValueError, match=f"saved must be the uint8 \\[{n}\\]"):
            bwd(o, lse, bad_saved, o, cq, ck, 2, 5, *config)
    with pytest.raises(ValueError, match="rise from 0 to the 6"):
        bwd(o, lse, saved, o, cq, ck, 2, 6, *config)
    with pytest.raises(ValueError, match="saved must be"):  # another total: another saved size
        bwd(o, lse, saved, o, cq, cu([3, 1]), 2, 4, *config)
    with pytest.raises(ValueError, match="saved must be"):  # kv heads that divide, but not k's
        bwd(o, lse, saved, o, cq, ck, 1, 5, *config)
    for heads in (3, -1):
        with pytest.raises(ValueError, match=f"n_kv_heads {heads} must divide"):
            bwd(o, lse, saved, o, cq, ck, heads, 5, *config)
    with pytest.raises(TypeError, match="lse"):
        bwd(o, lse[:-1], saved, o, cq, ck, 2, 5, *config)


def test_activation_checkpointing_is_bitwise():
    gen = torch.Generator().manual_seed(13)
    base = [packed(LENS_Q, 4, 16, gen, torch.float32).detach()] + \
        [packed(LENS_K, 2, 16, gen, torch.float32).detach() for _ in range(2)]
    d_o = torch.randn(base[0].shape, generator=gen)
    check_checkpointing_is_bitwise(
        lambda q, k, v: ot.attention_varlen(q, k, v, cu(LENS_Q), cu(LENS_K), 9, 9, causal=True), base, d_o)


def test_forward_op_passes_opcheck():
    gen = torch.Generator().manual_seed(11)
    q = packed(LENS_Q, 4, 16, gen, torch.float32)
    k, v = packed(LENS_K, 2, 16, gen, torch.float32), packed(LENS_K, 2, 16, gen, torch.float32)
    args = (q, k, v, cu(LENS_Q), cu(LENS_K), 9, 9, True, 0.0, "matched", "fp8", "hybrid")
    # freed non-zero memory first, so that bytes the op leaves unwritten differ between its runs
    # and the compiled-vs-eager check (test_aot_dispatch_dynamic) sees them
    junk = [torch.full((1 << 20,), 0xAB, dtype=torch.uint8) for _ in range(4)]
    del junk
    result = torch.library.opcheck(torch.ops.octet.attention_varlen_forward.default, args)
    assert set(result.values()) == {"SUCCESS"}, result


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
    with pytest.raises(ValueError, match="max_seqlen_q is 4, but a sequence of cu_seqlens_q has 6"):
        ot.attention_varlen(q, k, v, good, good, 4, 6)
    with pytest.raises(ValueError, match="max_seqlen_k is 5"):
        ot.attention_varlen(q, k, v, good, good, 6, 5)
    with pytest.raises(TypeError, match="max_seqlen_k must be an int, got float"):
        ot.attention_varlen(q, k, v, good, good, 6, 6.0)
    with pytest.raises(TypeError, match="q must be a torch.Tensor, got list"):
        ot.attention_varlen(q.tolist(), k, v, good, good, 6, 6)
    with pytest.raises(TypeError, match="q's dtype must be one of"):
        torch.ops.octet.attention_varlen_forward(q.half(), k.half(), v.half(), good, good, 6, 6, False, 0.0,
                                                  "matched", "fp8", "hybrid")
    with pytest.raises(ValueError, match="2 sequences"):
        ot.attention_varlen(q, k, v, torch.tensor([0, 3, 6]), good, 6, 6)
    with pytest.raises(ValueError, match="3-D"):
        ot.attention_varlen(q[None], k, v, good, good, 6, 6)


def test_a_numpy_integer_max_seqlen_is_its_int():
    np = pytest.importorskip("numpy")
    q = torch.randn(6, 2, 16)
    k = v = torch.randn(6, 1, 16)
    cu = torch.tensor([0, 2, 6], dtype=torch.int32)
    got = ot.attention_varlen(q, k, v, cu, cu, np.int64(4), np.int32(4), causal=True)
    assert torch.equal(got, ot.attention_varlen(q, k, v, cu, cu, 4, 4, causal=True))


def groups(lens_q, lens_k, causal):
    """The library's dense calls of a packing (src/capi/attention_varlen.cpp, docs/pytorch.md):
    causal sequences with len_q == len_k bucketed by their length rounded up to 128, below 65
    tokens to a power of two from 16 (a bucket's padded length, its sequences), every other
    sequence with queries and keys alone (0: no padding); a bucket of one runs alone."""
    out, bucket = [], {}
    for s, (lq, lk) in enumerate(zip(lens_q, lens_k)):
        if lq == 0 or lk == 0:
            continue
        if causal and lq == lk:
            t = -(-lq // 128) * 128 if lq > 64 else max(16, 1 << (lq - 1).bit_length())
            if t not in bucket:
                bucket[t] = len(out)
                out.append((t, []))
            out[bucket[t]][1].append(s)
        else:
            out.append((0, [s]))
    return [(t if len(seqs) > 1 else 0, seqs) for t, seqs in out]


def dense_calls(q, k, v, lens_q, lens_k, causal, delta, d_o):
    """The packing's dense octet.torch.attention calls (groups()): each sequence alone on its rows,
    each bucket on its sequences zero-padded to the bucket's length; o and the gradients, packed."""
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    cq, ck = cu(lens_q).tolist(), cu(lens_k).tolist()
    outs = [torch.zeros(n, *q.shape[1:], dtype=q.dtype, device=q.device) for n in lens_q]
    for t, seqs in groups(lens_q, lens_k, causal):
        if t == 0:
            s = seqs[0]
            outs[s] = ot.attention(q[None, cq[s]:cq[s + 1]], k[None, ck[s]:ck[s + 1]],
                                   v[None, ck[s]:ck[s + 1]], causal=causal, delta=delta)[0]
            continue
        pad = lambda x, a, b: torch.nn.functional.pad(x[a:b], (0, 0, 0, 0, 0, t - (b - a)))
        o = ot.attention(*(torch.stack([pad(x, c[s], c[s + 1]) for s in seqs])
                           for x, c in ((q, cq), (k, ck), (v, ck))), causal=True, delta=delta)
        for b, s in enumerate(seqs):
            outs[s] = o[b, :lens_q[s]]
    o = torch.cat(outs)
    o.backward(d_o)
    return [o.detach(), q.grad, k.grad, v.grad]


def test_groups_bucket_causal_self_attention_only():
    assert groups([5, 0, 9, 1, 3, 130, 128, 100, 16, 17, 33], [7, 0, 9, 1, 0, 130, 128, 100, 16, 17, 33],
                  True) == [(0, [0]), (16, [2, 3, 8]), (0, [5]), (128, [6, 7]), (0, [9]), (0, [10])]
    assert groups([9, 1], [9, 1], False) == [(0, [0]), (0, [1])]


@pytest.mark.parametrize("delta", ["matched", "stale"])
def test_fp8_forward_and_backward_equal_the_dense_calls_bit_for_bit(delta):
    gen = torch.Generator().manual_seed(5)
    # the last: keys and no queries; 9 and 1 share a bucket of 16 rows, 100 and 80 one of 128, 200
    # is alone in 256's
    lens_q, lens_k = [5, 0, 9, 1, 200, 100, 80, 3, 0], [7, 0, 9, 1, 200, 100, 80, 0, 4]
    q = packed(lens_q, 4, 16, gen, torch.float32)
    k, v = packed(lens_k, 2, 16, gen, torch.float32), packed(lens_k, 2, 16, gen, torch.float32)
    d_o = torch.randn(q.shape, generator=gen)
    o = ot.attention_varlen(q, k, v, cu(lens_q), cu(lens_k), 200, 200, causal=True, delta=delta)
    o.backward(d_o)
    want = dense_calls(q, k, v, lens_q, lens_k, True, delta, d_o)
    for name, x, y in zip("o dq dk dv".split(), [o.detach(), q.grad, k.grad, v.grad], want):
        assert torch.equal(x, y), name
    assert torch.count_nonzero(k.grad[-4:]) == 0 and torch.count_nonzero(v.grad[-4:]) == 0


def test_lse_blocks_are_the_dense_calls_and_minus_inf_without_keys():
    gen = torch.Generator().manual_seed(6)
    q = packed(LENS_Q, 4, 16, gen, torch.float32).detach()
    k, v = packed(LENS_K, 2, 16, gen, torch.float32).detach(), packed(LENS_K, 2, 16, gen, torch.float32).detach()
    o, lse, saved = torch.ops.octet.attention_varlen_forward(
        q, k, v, cu(LENS_Q), cu(LENS_K), 9, 9, False, 0.0, "matched", "fp8", "hybrid")
    assert lse.shape == (4 * q.shape[0],) and saved.dtype == torch.uint8 and saved.numel() > 0
    cq, ck = cu(LENS_Q).tolist(), cu(LENS_K).tolist()
    for s in range(len(LENS_Q)):
        block = lse[4 * cq[s]:4 * cq[s + 1]].view(4, LENS_Q[s])
        if LENS_Q[s] == 0:
            continue
        if LENS_K[s] == 0:
            assert torch.all(block == float("-inf")) and torch.count_nonzero(o[cq[s]:cq[s + 1]]) == 0
            continue
        _, dense_lse, _ = torch.ops.octet.attention_forward(
            q[None, cq[s]:cq[s + 1]], k[None, ck[s]:ck[s + 1]], v[None, ck[s]:ck[s + 1]],
            torch.zeros(0, dtype=torch.float64), False, 0.0, "matched", "fp8", "hybrid", "bshd")
        assert torch.equal(block, dense_lse[0]), s


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_fullgraph_equals_eager(backend):
    from test_torch_compile import compiling
    gen = torch.Generator().manual_seed(7)
    q = packed(LENS_Q, 4, 16, gen, torch.float32)
    k, v = packed(LENS_K, 2, 16, gen, torch.float32), packed(LENS_K, 2, 16, gen, torch.float32)
    cq, ck = cu(LENS_Q), cu(LENS_K)

    def f(q, k, v):
        return ot.attention_varlen(q * 1.0, k, v, cq, ck, 9, 9, causal=True).sum()

    got = []
    for fn in (f, torch.compile(f, fullgraph=True, backend=backend)):
        for t in (q, k, v):
            t.grad = None
        with compiling(backend):
            loss = fn(q, k, v)
            loss.backward()
        got.append([loss.detach(), q.grad.clone(), k.grad.clone(), v.grad.clone()])
    for x, y in zip(*got):
        assert torch.equal(x, y)


def test_compiled_call_checks_the_offsets_it_is_given():
    q = torch.randn(6, 2, 16)
    k = v = torch.randn(6, 1, 16)
    f = torch.compile(lambda q, k, v, cq, ck: ot.attention_varlen(q, k, v, cq, ck, 6, 6),
                      fullgraph=True, backend="aot_eager")
    good = torch.tensor([0, 2, 6], dtype=torch.int32)
    assert f(q, k, v, good, good).shape == q.shape
    with pytest.raises(ValueError, match="rise from 0"):
        f(q, k, v, torch.tensor([0, 4, 3], dtype=torch.int32), good)


def test_the_library_refuses_packings_it_cannot_read():
    q = torch.randn(6, 2, 16)
    k = v = torch.randn(6, 1, 16)
    offsets = torch.tensor([0, 2, 6], dtype=torch.int64)

    def call(**change):
        p = _lib.AttentionParams()
        p.batch, p.n_heads, p.n_kv_heads, p.seq_q, p.seq_k, p.head_dim = 1, 2, 1, 6, 6, 16
        p.precision, p.delta, p.formats = b"fp8", b"matched", b"hybrid"
        p.dtype, p.layout = _lib.DTYPE_F32, _lib.LAYOUT_TOKENS_MAJOR
        p.n_seqs, p.cu_seqlens_q, p.cu_seqlens_k = 2, offsets.data_ptr(), offsets.data_ptr()
        o, lse = torch.empty_like(q), torch.empty(12)
        p.q, p.k, p.v, p.o, p.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
        for name, value in change.items():
            setattr(p, name, value)
        return _lib.lib().octet_attention_forward(backend_for(q.device), ctypes.byref(p))

    assert call() == 0
    bad = torch.tensor([0, 4, 3], dtype=torch.int64)
    residual = torch.zeros(2, dtype=torch.float64)
    for change, message in [({"batch": 2}, "batch 1"), ({"layout": _lib.LAYOUT_HEADS_MAJOR}, "TOKENS_MAJOR"),
                            ({"residual": residual.data_ptr()}, "no residual"),
                            ({"cu_seqlens_k": bad.data_ptr()}, "cu_seqlens_k must run from 0 to 6"),
                            ({"seq_q": 7}, "cu_seqlens_q must run from 0 to 7"),
                            ({"n_seqs": 0}, "n_seqs >= 1"), ({"n_seqs": 2**63 - 1}, "n_seqs 9223372036854775807 is above"),
                            ({"n_seqs": 2**31 - 1}, "n_seqs 2147483647 is above the 2147483646"),
                            ({"seq_k": -1}, "seq_k -1 must be >= 0"), ({"seq_q": -1}, "seq_q -1 and"),
                            ({"cu_seqlens_q": None}, "cu_seqlens_q is NULL")]:
        assert call(**change) == -1, change
        assert message in _lib.lib().octet_last_error().decode(), (change, _lib.lib().octet_last_error())


def test_double_backward_raises():
    """A gradient of the gradient through attention_varlen raises (its backward has no formula of
    its own), with respect to the packed inputs themselves too."""
    q = torch.randn(10, 2, 8, dtype=torch.float64, requires_grad=True)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    o = ot.attention_varlen(q, q, q, cu, cu, 6, 6, precision="fp64")
    (g,) = torch.autograd.grad(o.sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(g.square().sum(), q, allow_unused=True)


def test_offsets_that_cannot_be_read_and_head_dim_mismatch_are_named():
    q = torch.randn(10, 4, 16)
    cu = torch.tensor([0, 10], dtype=torch.int32)
    with pytest.raises(ValueError, match="cu_seqlens_q must be on the CPU or a CUDA device, got meta"):
        ot.attention_varlen(q, q, q, cu.to("meta"), cu, 10, 10)
    k = torch.randn(12, 2, 8)
    with pytest.raises(ValueError, match=r"q \(10, 4, 16\) and k \(12, 2, 8\) must have one head_dim"):
        ot.attention_varlen(q, k, k, cu, torch.tensor([0, 12], dtype=torch.int32), 10, 12)
