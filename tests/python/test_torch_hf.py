"""octet.hf (python/octet/hf.py, docs/pytorch.md): octet's attention as a Hugging Face transformers
attention implementation, on tiny Llama models on the CPU.

- float64 through octet's FP64 oracle (precision "fp64"): the model's logits and gradients equal
  the same model with transformers' SDPA attention in float64 to 1e-6 relative (the softmax scale
  crosses octet's C API as a float32: 1/sqrt(8) is not exact there); greedy generation with a
  static KV cache gives SDPA's tokens;
- packed sequences (position_ids restarting, and cu_seq_lens_q/k, or FlashAttention's spelling
  cu_seqlens_q/k) equal each sequence run alone (with cu_seq_lens_q/k the model also compiles with
  fullgraph=True, equal to eager; so does an unpacked batch of several rows),
  and a padding mask (right and left) each row run alone without padding, to 1e-12 (the linears'
  BLAS blocking differs with the token count; a sequence seeing another's keys would be off by
  percents);
- the FP8 attention ("octet", "octet-stale") trains a tiny Llama (the loss falls), with its first
  loss near eager's; convert_to_float8 with float8_filter swaps every linear but the LM head;
- cross-attention with a padded encoder mask computes every query row over the valid keys;
- bench/peers/hf_llama.py runs both arms on a tiny model with consistent fields (under FSDP:
  test_torch_hf_fsdp.py), and compiled with lengths that change per step (--seq-cycle) stays one
  graph with octet's attention and FP8 linears;
- bad input (dropout, a sliding window, chunked attention, a score bias, a dense mask, bad
  cu_seq_lens, both spellings of one offsets tensor, position_ids it cannot read as packing, a bad
  delta/precision, a built-in name) raises a ValueError naming it.
"""
import copy

import pytest
import torch

import octet_torch_util  # noqa: F401  (puts the checkout's python/ on sys.path)
import octet.hf
import octet.torch as ot

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

NAMES = octet.hf.register() + octet.hf.register("octet-fp64", precision="fp64")


def tiny_llama(attn, dtype=torch.float64, seed=0):
    """A 2-layer Llama (d 32, 4 heads, 2 KV heads: GQA) with attention implementation `attn`."""
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                         max_position_embeddings=64, attention_dropout=0.0)
    model = LlamaForCausalLM(config).to(dtype).eval()
    model.set_attn_implementation(attn)
    return model


def same_weights(src, attn):
    """A copy of `src` (its own config) with attention implementation `attn`."""
    dst = LlamaForCausalLM(copy.deepcopy(src.config)).to(next(src.parameters()).dtype)
    dst.load_state_dict(src.state_dict())
    dst.set_attn_implementation(attn)
    return dst.eval()


def logits_and_grads(model, ids, **kw):
    model.zero_grad()
    out = model(input_ids=ids, **kw).logits
    (out.square().sum() * 1e-3).backward()
    return out.detach(), [p.grad.clone() for p in model.parameters()]


def rel(a, b):
    return float((a - b).norm() / b.norm())


def test_registered_names():
    assert NAMES == ["octet", "octet-stale", "octet-fp64"]
    from transformers import AttentionInterface
    for name in NAMES:
        assert name in AttentionInterface._global_mapping


def test_fp64_oracle_equals_sdpa():
    ref = tiny_llama("sdpa")
    model = same_weights(ref, "octet-fp64")
    ids = torch.randint(0, 64, (2, 13), generator=torch.Generator().manual_seed(1))
    la, ga = logits_and_grads(ref, ids)
    lb, gb = logits_and_grads(model, ids)
    assert rel(lb, la) < 1e-6
    for x, y in zip(gb, ga):
        assert rel(x, y) < 1e-6


def test_output_attentions_gives_what_sdpa_gives():
    ref = tiny_llama("sdpa")
    model = same_weights(ref, "octet-fp64")
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        plain = model(input_ids=ids).logits
        out, sdpa = model(input_ids=ids, output_attentions=True), ref(input_ids=ids, output_attentions=True)
    assert out.attentions == sdpa.attentions == (), (out.attentions, sdpa.attentions)
    assert torch.equal(out.logits, plain)


def documents(lengths, seed):
    """The octet-fp64 tiny Llama, random documents of `lengths` tokens, their logits each run
    alone (concatenated), and the packed row's ids and restarting position_ids."""
    model = same_weights(tiny_llama("eager"), "octet-fp64")
    gen = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(0, 64, (1, n), generator=gen) for n in lengths]
    alone = torch.cat([model(input_ids=s).logits.detach() for s in seqs], dim=1)
    pos = torch.cat([torch.arange(s.shape[1]) for s in seqs])[None]
    return model, seqs, alone, torch.cat(seqs, dim=1), pos


def test_packed_equals_each_sequence():
    model, seqs, alone, ids, pos = documents((5, 9, 1), seed=2)
    packed = model(input_ids=ids, position_ids=pos).logits.detach()
    torch.testing.assert_close(packed, alone, rtol=1e-12, atol=1e-12)
    cu = torch.tensor([0, 5, 14, 15], dtype=torch.int32)
    flash_kwargs = dict(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=9, max_length_k=9)
    packed_cu = model(input_ids=ids, position_ids=pos, **flash_kwargs).logits.detach()
    torch.testing.assert_close(packed_cu, alone, rtol=1e-12, atol=1e-12)


def test_packed_row_with_a_padding_mask_is_refused_not_run_as_one_sequence():
    # One row of packed sequences padded to a fixed length: the padding path alone would run the
    # documents as one sequence (they would attend to each other). Refused, naming the way that
    # works (cu_seq_lens); with a mask that pads nothing the row is read as packed, as without one;
    # a left-padded single row (generation's position_ids count from 0 over the valid tokens) runs.
    model, seqs, alone, ids, pos = documents((5, 3, 3), seed=4)
    pad = torch.zeros(1, 1, dtype=torch.long)
    ids, pos = torch.cat([ids, pad], dim=1), torch.cat([pos, pad], dim=1)  # 11 tokens + 1 pad
    mask = torch.ones_like(ids)
    mask[0, -1] = 0
    with pytest.raises(ValueError, match="restart at 0 inside a row that also has a padding mask"):
        model(input_ids=ids, position_ids=pos, attention_mask=mask)
    ones = torch.ones_like(ids[:, :-1])
    packed = model(input_ids=ids[:, :-1], position_ids=pos[:, :-1], attention_mask=ones).logits.detach()
    torch.testing.assert_close(packed, alone, rtol=1e-12, atol=1e-12)
    left = torch.cat([torch.zeros(1, 2, dtype=torch.long), seqs[0]], dim=1)
    left_mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1]])
    left_pos = (left_mask.cumsum(1) - 1).masked_fill(left_mask == 0, 1)
    out = model(input_ids=left, position_ids=left_pos, attention_mask=left_mask).logits.detach()
    torch.testing.assert_close(out[:, 2:], alone[:, :5], rtol=1e-12, atol=1e-12)


def test_packed_with_offsets_compiles_fullgraph():
    # cu_seq_lens_q/k given (DataCollatorWithFlattening(return_flash_attn_kwargs=True)): each
    # layer's packed attention is one op, so the whole model compiles without a graph break and
    # gives eager's logits and gradients bit for bit (aot_eager runs the same ops).
    base = tiny_llama("eager", dtype=torch.float32)
    model = same_weights(base, "octet")
    ids = torch.randint(0, 64, (1, 15), generator=torch.Generator().manual_seed(3))
    pos = torch.cat([torch.arange(n) for n in (5, 9, 1)])[None]
    cu = torch.tensor([0, 5, 14, 15], dtype=torch.int32)
    kw = dict(position_ids=pos, cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=9, max_length_k=9)
    want = logits_and_grads(model, ids, **kw)
    got = logits_and_grads(torch.compile(model, fullgraph=True, backend="aot_eager"), ids, **kw)
    assert torch.equal(got[0], want[0])
    assert all(torch.equal(a, b) for a, b in zip(got[1], want[1]))


@pytest.mark.parametrize("dynamic", [False, True])
def test_unpacked_batch_compiles_fullgraph(dynamic):
    # A batch of several rows cannot be packed, so compiled the attention does not read
    # position_ids (no host sync, no graph break): the model compiles whole and equals eager;
    # with dynamic=True the softmax scale is a symbolic float (checked by comparisons).
    base = tiny_llama("eager", dtype=torch.float32)
    model = same_weights(base, "octet")
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(4))
    want = logits_and_grads(model, ids)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager", dynamic=dynamic)
    got = logits_and_grads(compiled, ids)
    assert torch.equal(got[0], want[0])
    assert all(torch.equal(a, b) for a, b in zip(got[1], want[1]))


def test_eager_forward_reads_position_ids_once(monkeypatch):
    # Every layer gets the same position_ids: read on the host for the first layer only, and read
    # again once they are modified in place.
    # (CUDA tensors are kept by default; here the CPU ones, as CI has no GPU)
    model = same_weights(tiny_llama("eager", dtype=torch.float32), "octet")
    assert model.config.num_hidden_layers == 2
    calls, real = [], octet.hf._packed_offsets
    monkeypatch.setattr(octet.hf, "_packed_offsets", lambda *a: calls.append(a) or real(*a))
    monkeypatch.setattr(octet.hf, "_POSITIONS", octet.hf.HostReads(1, devices=("cpu",)))
    ids = torch.randint(0, 64, (1, 15), generator=torch.Generator().manual_seed(5))
    pos = torch.cat([torch.arange(n) for n in (5, 9, 1)])[None]
    with torch.no_grad():
        packed = model(ids, position_ids=pos).logits
        assert len(calls) == 1
        pos.copy_(torch.arange(15)[None])
        plain = model(ids, position_ids=pos).logits
        assert len(calls) == 2
        fresh = model(ids, position_ids=torch.arange(15)[None]).logits
        assert len(calls) == 3
    with torch.inference_mode():  # an inference tensor has no version counter: read per layer
        model(ids, position_ids=torch.arange(15)[None])
        assert len(calls) == 5
    assert torch.equal(plain, fresh) and not torch.equal(plain, packed)


def test_static_cache_generation_equals_sdpa():
    ref = tiny_llama("sdpa")
    model = same_weights(ref, "octet-fp64")
    ids = torch.randint(1, 64, (1, 7), generator=torch.Generator().manual_seed(8))
    kw = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    for cache in ("static", "dynamic"):
        want = ref.generate(ids, cache_implementation=cache, **kw)
        got = model.generate(ids, cache_implementation=cache, **kw)
        assert torch.equal(got, want), cache


def test_static_cache_reads_the_filled_slots_whatever_the_positions():
    # A static cache without a padding mask: octet's mask rule gives the attention the cache's
    # filled slots (q_offset + q_length), so position ids that are not the slots (here 5..11 in
    # slots 0..6) change RoPE alone, as with SDPA; then a second chunk into the same cache.
    from transformers import StaticCache
    ref = tiny_llama("sdpa")
    model = same_weights(ref, "octet-fp64")
    ids = torch.randint(0, 64, (1, 7), generator=torch.Generator().manual_seed(12))
    for pos in (torch.arange(5, 12)[None], None):
        outs = []
        for m in (model, ref):
            cache = StaticCache(config=m.config, max_cache_len=32)
            first = m(ids, past_key_values=cache, use_cache=True,
                      **({} if pos is None else {"position_ids": pos})).logits
            outs.append((first, m(ids[:, :3], past_key_values=cache, use_cache=True).logits))
        for a, b in zip(*outs):
            assert rel(a, b) < 1e-6, pos  # the oracle's float32 tau: ~1e-8; 5 empty slots read: ~0.1


def test_cross_attention_mask_keeps_every_query_row():
    fn = octet.hf.make_attention_function(precision="fp64")
    module = torch.nn.Module()
    module.is_causal = False
    gen = torch.Generator().manual_seed(9)
    q = torch.randn(2, 4, 5, 8, generator=gen, dtype=torch.float64)    # 5 decoder queries
    k, v = (torch.randn(2, 2, 12, 8, generator=gen, dtype=torch.float64) for _ in range(2))  # 12 keys
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[0, 8:] = 0
    out, _ = fn(module, q, k, v, mask)
    want0 = ot.attention(q[:1].transpose(1, 2), k[:1, :, :8].transpose(1, 2), v[:1, :, :8].transpose(1, 2),
                         precision="fp64")
    want1 = ot.attention(q[1:].transpose(1, 2), k[1:].transpose(1, 2), v[1:].transpose(1, 2), precision="fp64")
    torch.testing.assert_close(out, torch.cat([want0, want1]), rtol=0, atol=0)


@pytest.mark.parametrize("kept", [False, True])
def test_padding_mask_equals_unpadded_rows(monkeypatch, kept):
    # kept: the mask's varlen form kept across layers (HostReads; CUDA tensors by default, here the
    # CPU ones): computed once per forward, the same numbers
    calls, real = [], octet.hf._unpadding
    monkeypatch.setattr(octet.hf, "_unpadding", lambda *a: calls.append(a) or real(*a))
    if kept:
        monkeypatch.setattr(octet.hf, "_PADDING", octet.hf.HostReads(1, devices=("cpu",)))
    base = tiny_llama("eager")
    model = same_weights(base, "octet-fp64")
    gen = torch.Generator().manual_seed(3)
    a, b = torch.randint(1, 64, (1, 10), generator=gen), torch.randint(1, 64, (1, 6), generator=gen)
    for left in (False, True):
        pad = torch.zeros(1, 4, dtype=torch.long)
        b_padded = torch.cat([pad, b], 1) if left else torch.cat([b, pad], 1)
        ids = torch.cat([a, b_padded])
        mask = torch.ones_like(ids)
        mask[1, :4] = 0 if left else 1
        if not left:
            mask[1, 6:] = 0
        pos = (mask.cumsum(1) - 1).clamp(min=0)
        before = len(calls)
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits.detach()
        assert len(calls) - before == (1 if kept else model.config.num_hidden_layers)
        assert torch.allclose(out[0], model(input_ids=a).logits.detach()[0], rtol=0, atol=1e-12)
        rows = out[1, 4:] if left else out[1, :6]
        assert torch.allclose(rows, model(input_ids=b).logits.detach()[0], rtol=0, atol=1e-12)


@pytest.mark.parametrize("attn", ["octet", "octet-stale"])
def test_fp8_llama_trains(attn):
    ref = tiny_llama("eager", dtype=torch.float32, seed=4)
    model = same_weights(ref, attn).train()
    ids = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        first_ref = float(ref(input_ids=ids, labels=ids).loss)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert abs(losses[0] - first_ref) < 0.02 * first_ref  # FP8 Q, K, V, P move the loss a little
    assert losses[-1] < 0.5 * losses[0]


def test_float8_filter_keeps_the_head():
    model = tiny_llama("octet", dtype=torch.float32, seed=6)
    ot.convert_to_float8(model, module_filter=octet.hf.float8_filter)
    kinds = {name: type(m).__name__ for name, m in model.named_modules()
             if isinstance(m, (torch.nn.Linear, ot.Float8Linear))}
    assert kinds["lm_head"] == "Linear"
    assert kinds["model.layers.0.self_attn.q_proj"] == "Float8Linear"
    assert kinds["model.layers.1.mlp.down_proj"] == "Float8Linear"
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(7))
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss) and model.model.layers[0].self_attn.q_proj.weight.grad is not None


def test_flash_attention_spelling_of_the_offsets():
    """FlashAttention's cu_seqlens_q / cu_seqlens_k (flash_attn_varlen_func's names) are taken as
    Hugging Face's cu_seq_lens_q / cu_seq_lens_k are: the same packed call, either spelling per
    side; errors name the spelling given; both spellings of one side are refused, naming both; a
    padding mask with zeros beside the offsets is refused."""
    fn = octet.hf.make_attention_function(precision="fp64")
    module = torch.nn.Module()
    gen = torch.Generator().manual_seed(8)
    q = torch.randn(1, 4, 6, 8, dtype=torch.float64, generator=gen)
    k, v = (torch.randn(1, 2, 6, 8, dtype=torch.float64, generator=gen) for _ in range(2))
    cu = torch.tensor([0, 2, 6], dtype=torch.int32)
    want = fn(module, q, k, v, None, cu_seq_lens_q=cu, cu_seq_lens_k=cu)[0]
    assert not torch.equal(want, fn(module, q, k, v, None)[0])  # the offsets matter here
    for kw in (dict(cu_seqlens_q=cu, cu_seqlens_k=cu), dict(cu_seqlens_q=cu, cu_seq_lens_k=cu),
               dict(cu_seq_lens_q=cu, cu_seqlens_k=cu), dict(cu_seqlens_q=cu), dict(cu_seqlens_k=cu)):
        assert torch.equal(fn(module, q, k, v, None, **kw)[0], want), kw
    with pytest.raises(ValueError, match="octet.hf: both cu_seq_lens_q and cu_seqlens_q were given"):
        fn(module, q, k, v, None, cu_seq_lens_q=cu, cu_seqlens_q=cu, cu_seq_lens_k=cu)
    with pytest.raises(ValueError, match="octet.hf: both cu_seq_lens_k and cu_seqlens_k were given"):
        fn(module, q, k, v, None, cu_seqlens_q=cu, cu_seq_lens_k=cu, cu_seqlens_k=cu)
    with pytest.raises(ValueError, match="octet.hf: cu_seqlens_k must rise from 0"):
        fn(module, q, k, v, None, cu_seq_lens_q=cu, cu_seqlens_k=torch.tensor([0, 7]))
    with pytest.raises(ValueError, match=r"octet.hf: cu_seqlens_q \(used for queries\) must rise"):
        fn(module, q, k, v, None, cu_seqlens_q=torch.tensor([0, 3, 5]))
    with pytest.raises(ValueError, match="cu_seqlens_q has 2 sequences, cu_seq_lens_k 1"):
        fn(module, q, k, v, None, cu_seqlens_q=cu, cu_seq_lens_k=torch.tensor([0, 6]))
    # a padding mask beside the offsets: an all-ones one is no padding; one with zeros is refused
    # (the padded tokens would be attended as tokens of the sequences)
    assert torch.equal(fn(module, q, k, v, torch.ones(1, 6, dtype=torch.int64), cu_seqlens_q=cu)[0], want)
    with pytest.raises(ValueError, match="a padding mask with zeros beside cu_seqlens_q"):
        fn(module, q, k, v, torch.tensor([[0, 0, 1, 1, 1, 1]]), cu_seqlens_q=cu, cu_seqlens_k=cu)
    with pytest.raises(ValueError, match=r"packed sequences \(cu_seq_lens_q, cu_seq_lens_k\) need a "
                                         r"batch of one row, got 2"):
        fn(module, q.expand(2, -1, -1, -1), k.expand(2, -1, -1, -1), v.expand(2, -1, -1, -1), None,
           cu_seq_lens_q=cu, cu_seq_lens_k=cu)
    # through a model: transformers hands the kwarg to the attention function (the bad offsets
    # below are refused: they reached it)
    model, seqs, alone, ids, pos = documents((5, 9, 1), seed=2)
    cu = torch.tensor([0, 5, 14, 15], dtype=torch.int32)
    out = model(input_ids=ids, position_ids=pos, cu_seqlens_q=cu, cu_seqlens_k=cu).logits.detach()
    torch.testing.assert_close(out, alone, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="octet.hf: cu_seqlens_q must rise from 0"):
        model(input_ids=ids, position_ids=pos, cu_seqlens_q=torch.tensor([0, 5, 14, 16]),
              cu_seqlens_k=cu)


def test_bad_input_raises():
    fn = octet.hf.make_attention_function()
    module = torch.nn.Module()
    q = torch.randn(1, 4, 6, 8)
    k = v = torch.randn(1, 2, 6, 8)
    with pytest.raises(ValueError, match="dropout"):
        fn(module, q, k, v, None, dropout=0.1)
    with pytest.raises(ValueError, match="sliding window"):
        fn(module, q, k, v, None, sliding_window=4)
    with pytest.raises(ValueError, match="softcapping"):
        fn(module, q, k, v, None, softcap=30.0)
    with pytest.raises(ValueError, match="dense attention mask"):
        fn(module, q, k, v, torch.ones(1, 1, 6, 6, dtype=torch.bool))
    # the offsets' errors name Hugging Face's arguments (cu_seq_lens_q/k), not octet's
    with pytest.raises(ValueError, match="octet.hf: cu_seq_lens_q must rise from 0"):
        fn(module, q, k, v, None, cu_seq_lens_q=torch.tensor([0, 4, 3, 6]),
           cu_seq_lens_k=torch.tensor([0, 4, 3, 6]))
    with pytest.raises(ValueError, match="octet.hf: cu_seq_lens_q must rise from 0"):
        fn(module, q, k, v, None, cu_seq_lens_q=torch.tensor([0, 5]), cu_seq_lens_k=torch.tensor([0, 5]))
    with pytest.raises(ValueError, match="octet.hf: cu_seq_lens_k must rise from 0"):
        fn(module, q, k, v, None, cu_seq_lens_q=torch.tensor([0, 6]), cu_seq_lens_k=torch.tensor([0, 7]))
    with pytest.raises(TypeError, match="octet.hf: cu_seq_lens_q must be an int32 or int64 tensor or a list"):
        fn(module, q, k, v, None, cu_seq_lens_q=[0, [3], 6], cu_seq_lens_k=[0, 3, 6])  # ragged
    # one of the two given (used for both): its errors name it, not the other
    with pytest.raises(ValueError, match=r"octet.hf: cu_seq_lens_k \(used for queries\) must rise"):
        fn(module, q, k, v, None, cu_seq_lens_k=torch.tensor([0, 3, 5]))
    with pytest.raises(TypeError, match="octet.hf: cu_seq_lens_k must be an int32 or int64"):
        fn(module, q, k, v, None, cu_seq_lens_q=torch.tensor([0, 6]), cu_seq_lens_k=torch.tensor([0., 6.]))
    with pytest.raises(ValueError, match="batch of one row"):
        fn(module, q.expand(2, -1, -1, -1), k.expand(2, -1, -1, -1), v.expand(2, -1, -1, -1), None,
           cu_seq_lens_q=torch.tensor([0, 6]), cu_seq_lens_k=torch.tensor([0, 6]))
    with pytest.raises(ValueError, match="cu_seq_lens_q has 2 sequences, cu_seq_lens_k 1"):
        fn(module, q, k, v, None, cu_seq_lens_q=torch.tensor([0, 3, 6]), cu_seq_lens_k=torch.tensor([0, 6]))
    with pytest.raises(ValueError, match="padding mask must be"):
        fn(module, q, k, v, torch.tensor([[1, 1, 0], [1, 1, 1]]))
    with pytest.raises(ValueError, match="position_bias"):
        fn(module, q, k, v, None, position_bias=torch.zeros(1, 4, 6, 6))
    with pytest.raises(TypeError, match="int32 or int64"):
        fn(module, q, k, v, None, cu_seq_lens_q=torch.tensor([0.0, 6.0]), cu_seq_lens_k=torch.tensor([0.0, 6.0]))
    with pytest.raises(ValueError, match="batch of 2 rows"):
        pos = torch.tensor([[0, 1, 2, 0, 1, 2]] * 2)
        fn(module, q.expand(2, -1, -1, -1), k.expand(2, -1, -1, -1), v.expand(2, -1, -1, -1), None,
           position_ids=pos)
    with pytest.raises(ValueError, match="not packed sequences that each start at 0"):
        fn(module, q, k, v, None, position_ids=torch.tensor([[5, 6, 7, 0, 1, 2]]))
    # positions with gaps and no restart are RoPE's only: one sequence per row, as SDPA runs them
    q2, k2, v2 = q.expand(2, -1, -1, -1), k.expand(2, -1, -1, -1), v.expand(2, -1, -1, -1)
    for pos in (torch.tensor([[0, 2, 4, 6, 8, 10]] * 2), torch.tensor([[3, 4, 5, 9, 10, 11]])):
        rows = pos.shape[0]
        got = fn(module, q2[:rows], k2[:rows], v2[:rows], None, position_ids=pos)[0]
        assert torch.equal(got, fn(module, q2[:rows], k2[:rows], v2[:rows], None)[0])
    chunked = torch.nn.Module()
    chunked.config = type("C", (), {"attention_chunk_size": 4})()
    with pytest.raises(ValueError, match="chunked attention"):
        fn(chunked, q, k, v, None)
    with pytest.raises(ValueError, match="delta must be"):
        octet.hf.register("octet-bad", delta="fresh")
    with pytest.raises(ValueError, match="precision must be"):
        octet.hf.register("octet-bad", precision="fp16")
    with pytest.raises(ValueError, match="already an attention implementation"):
        octet.hf.register("sdpa")
    with pytest.raises(ValueError, match="name must be"):
        octet.hf.register("")


def test_hf_llama_bench_script_on_cpu(tmp_path):
    """bench/peers/hf_llama.py (the Hugging Face drop-in benchmark): tiny model, both arms, gradient
    accumulation and held-out data; the row's fields agree with each other and with the model."""
    import json
    import os
    import pathlib
    import subprocess
    import sys
    script = pathlib.Path(__file__).resolve().parents[2] / "bench" / "peers" / "hf_llama.py"
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the driver frees a buffer before the queue stops. " * 400)
    args = ["--model", "tiny", "--device", "cpu", "--no-compile", "--seq", "64", "--batch", "2",
            "--grad-accum", "2", "--warmup", "1", "--steps", "2", "--data", str(corpus), "--eval-every", "2"]
    rows = {}
    for arm in (["--attention", "sdpa", "--linears", "bf16"], ["--attention", "octet", "--linears", "fp8", "--profile"]):
        r = subprocess.run([sys.executable, str(script), *args, *arm], capture_output=True, text=True,
                           env=dict(os.environ), cwd=script.parent)
        assert r.returncode == 0, r.stderr
        row = json.loads(r.stdout.splitlines()[-1])
        rows[row["arm"]] = row
    for row in rows.values():
        assert row["tokens_per_step"] == 2 * 64 * 2
        assert abs(row["tokens_per_s"] - row["tokens_per_step"] / (row["step_ms_median"] * 1e-3)) < 1e-6 * row["tokens_per_s"]
        assert row["n_params"] == row["n_matmul_params"] + 64 * 5  # tied head; 2 x 2 + 1 RMSNorm weights
        assert len(row["losses"]) == 3 and [s for s, _ in row["val_losses"]] == [2, 3]
        assert abs(row["loss_first"] - 5.545) < 0.3  # log(256) at init
        assert row["peak_memory_gib"] is None  # a CUDA measurement only
    assert rows["fp8+octet"]["fp8_linears"] == 14 and rows["bf16+sdpa"]["fp8_linears"] == 0
    # --profile: one more, untimed step (no loss of its own); its operators by category, the
    # categories summing to the total
    prof = rows["fp8+octet"]["profile"]
    assert rows["bf16+sdpa"]["profile"] is None and prof["kernel_ms"] > 0
    assert abs(sum(prof["by_category_ms"].values()) - prof["kernel_ms"]) < 1e-6 * prof["kernel_ms"]
    assert 0 < len(prof["top"]) <= 25 and prof["top"][0]["ms"] >= prof["top"][-1]["ms"]
    # --packed: one row of documents; octet through cu_seq_lens, SDPA through position_ids (the
    # same packing, model and data: the first losses agree to the arms' precision)
    packed = {}
    for arm in (["--attention", "sdpa", "--linears", "bf16"], ["--attention", "octet", "--linears", "fp8"]):
        r = subprocess.run([sys.executable, str(script), *args, *arm, "--packed", "16"],
                           capture_output=True, text=True, env=dict(os.environ), cwd=script.parent)
        assert r.returncode == 0, r.stderr
        row = json.loads(r.stdout.splitlines()[-1])
        assert row["packed_mean_tokens"] == 16 and row["tokens_per_step"] == 2 * 64 * 2
        packed[row["arm"]] = row
    assert abs(packed["fp8+octet"]["loss_first"] - packed["bf16+sdpa"]["loss_first"]) < 0.02
    r = subprocess.run([sys.executable, str(script), *args, "--packed", "1000"], capture_output=True,
                       text=True, cwd=script.parent)
    assert r.returncode != 0 and "--packed must be a mean document length" in r.stderr, r.stderr


def test_hf_llama_bench_changing_lengths_compile_into_one_graph(capsys, monkeypatch):
    """hf_llama.py --seq-cycle: compiled, lengths that change from step to step recompile the model
    once with dynamic shapes, and with octet's attention and FP8 linears it stays one graph (the
    saved states' sizes are expressions of the lengths). Run in this process (Inductor's compiler
    must not inherit an ASan preload: octet_torch_util.compiling), Dynamo's counters cleared
    first. A cycle whose shortest length is below 1 token is refused."""
    import json
    import pathlib
    import runpy
    import sys
    from torch._dynamo.utils import counters
    script = pathlib.Path(__file__).resolve().parents[2] / "bench" / "peers" / "hf_llama.py"
    monkeypatch.syspath_prepend(str(script.parent))
    args = ["--model", "tiny", "--device", "cpu", "--seq", "384", "--batch", "2", "--warmup", "2",
            "--steps", "3", "--attention", "octet", "--linears", "fp8"]
    torch._dynamo.reset()
    counters.clear()
    monkeypatch.setattr(sys, "argv", [str(script), *args, "--seq-cycle", "3"])
    with octet_torch_util.compiling("inductor"):
        runpy.run_path(str(script), run_name="__main__")
    row = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert row["seq_cycle"] == 3 and row["graph_breaks"] == 0, row["graph_breaks"]
    assert row["graphs_compiled"] == 2, row["graphs_compiled"]  # the first length, then dynamic
    assert row["tokens_per_s"] > 0 and len(row["losses"]) == 5
    # timed steps 2, 3, 4 at 128, 384, 256 tokens per sequence; FLOPs counted at each length
    assert row["tokens_per_step"] is None and row["timed_tokens"] == 2 * (128 + 384 + 256)
    import hf_llama
    at = [hf_llama.flops_per_token("tiny", 256, t)[0] for t in (128, 384, 256)]
    assert abs(row["flops_per_token"] - sum(f * 2 * t for f, t in zip(at, (128, 384, 256))) / 1536) < 1e-6 * at[0]
    assert abs(row["tflops"] - row["flops_per_token"] * row["tokens_per_s"] / 1e12) < 1e-9 * row["tflops"]
    monkeypatch.setattr(sys, "argv", [str(script), *args, "--seq-cycle", "4"])  # 384 - 3·128 = 0
    with pytest.raises(SystemExit, match="--seq-cycle must be"):
        runpy.run_path(str(script), run_name="__main__")


def test_hf_llama_bench_packing():
    """hf_llama.py's packing: total // mean documents cut at random points, position_ids
    restarting at each start, the same cuts for the same micro-batch."""
    import pathlib
    import sys
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench" / "peers"))
    import hf_llama
    kw, starts = hf_llama.packing(3, 128, 16, torch.device("cpu"))
    cu = kw["cu_seq_lens_q"]
    assert cu.dtype == torch.int32 and cu.numel() == 128 // 16 + 1
    assert int(cu[0]) == 0 and int(cu[-1]) == 128 and bool((cu.diff() >= 1).all())
    assert torch.equal(kw["cu_seq_lens_k"], cu) and kw["max_length_q"] == kw["max_length_k"] == 128
    pos = kw["position_ids"][0]
    assert torch.equal(pos[starts.long()], torch.zeros(len(starts), dtype=pos.dtype))
    assert int((pos == 0).sum()) == len(starts) and bool((pos.diff()[pos[1:] != 0] == 1).all())
    again, _ = hf_llama.packing(3, 128, 16, torch.device("cpu"))
    other, _ = hf_llama.packing(4, 128, 16, torch.device("cpu"))
    assert torch.equal(again["cu_seq_lens_q"], cu) and not torch.equal(other["cu_seq_lens_q"], cu)
