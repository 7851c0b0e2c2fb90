"""octet's attention as a Hugging Face transformers attention implementation (docs/pytorch.md).

  import octet.hf
  octet.hf.register()                      # attn_implementation "octet" (matched), "octet-stale"
  model = AutoModelForCausalLM.from_config(config, attn_implementation="octet")
  octet.torch.convert_to_float8(model, module_filter=octet.hf.float8_filter)

register() adds a function to transformers' AttentionInterface (the documented extension point
for custom attention, transformers >= 4.48) and the FlashAttention mask rule to its
AttentionMaskInterface, so that the model hands over no dense mask: either none (causal or full
attention over every token) or the 2-D padding mask [batch, kv_len]. The function receives the
model's q [batch, heads, q_len, head_dim] and k, v [batch, kv_heads, kv_len, head_dim] (GQA
heads unrepeated) and runs octet.torch.attention on them:

- no mask: one call over the batch, causal as the module says (module.is_causal);
- a padding mask: one attention_varlen call with a sequence per batch row. Self-attention
  (causal): the row's valid tokens (exact for the contiguous left or right padding tokenizers
  produce; padded query rows get 0); cross-attention or an encoder (not causal): every query row
  over that row's valid keys. A mask shorter than the keys (transformers' static KV cache) keeps
  the first mask-length key slots;
- a static KV cache without a padding mask: register()'s mask rule gives an all-ones mask of the
  cache's filled slots (q_offset + q_length), read as above; without that rule (a model that does
  not call it), the key slots up to the largest position id;
- packed sequences (several sequences in one row, FlashAttention's varlen form): cu_seq_lens_q /
  cu_seq_lens_k passed to the model (DataCollatorWithFlattening(return_flash_attn_kwargs=True);
  FlashAttention's spelling cu_seqlens_q / cu_seqlens_k is taken too, both spellings of one
  tensor refused), or
  position_ids of a batch of one row that restart at 0 (the first sequence starting at 0): one
  attention_varlen call (the library runs one dense kernel call per sequence). With cu_seq_lens
  the model compiles with fullgraph=True. position_ids are read on the host: eagerly once per
  forward (HostReads), compiled only for a batch of one row (a graph break there; a several-row
  batch cannot be a packing and is not read). Eagerly, position_ids that restart at 0 in a batch
  of several rows, or restart without each sequence counting up by one from 0, or restart among
  the valid tokens of a one-row batch whose mask pads (an all-ones mask reads as no mask), are
  refused;
  positions with gaps and no restart are RoPE's business only (one sequence per row, as SDPA).

Refused with a ValueError naming the feature: attention dropout > 0, a sliding window, chunked
attention, logit softcapping, attention sinks, a score bias (T5's position_bias), sparse indices,
a dense (4-D) mask; cu_seq_lens that are not integer offsets rising from 0 to the token count get
octet.torch.attention_varlen's TypeError or ValueError.
Not detectable, so not refused: models whose code does not call AttentionInterface (transformers
then runs its own attention under the name, or fails on it).
"""
import torch

from .torch import attention, attention_varlen
from .torch._backend import HostReads
from .torch.varlen import _offsets, _offsets_tensor

# What the attention function refuses: each is a kwarg transformers passes when a model uses it.
_UNSUPPORTED = {
    "sliding_window": "a sliding window",
    "softcap": "logit softcapping",
    "s_aux": "attention sinks",
    "sinks": "attention sinks",
    "position_bias": "a score bias (position_bias)",
    "indices": "sparse attention (indices)",
}
# What the attention function refuses when a module's config sets it (the mask carries it, not a
# kwarg): the config attribute and the feature's name.
_UNSUPPORTED_CONFIG = {"attention_chunk_size": "chunked attention"}
_PRECISIONS, _FORMATS = ("fp8", "bf16", "fp64"), ("hybrid", "e4m3")
_REGISTERED = set()  # names this module registered (others are transformers' or a user's)


def _packed_offsets(position_ids, batch, tokens):
    """Sequence starts (and the end) of packed rows: position_ids [1, tokens] that restart at 0,
    each sequence counting up by one from 0 (what DataCollatorWithFlattening makes). None when no
    row restarts at 0 (positions with gaps are positions only, read by RoPE: one sequence per row,
    as SDPA runs them). Raises ValueError for a restart in a batch of several rows, or restarts
    whose sequences do not count up by one from 0."""
    if position_ids is None or position_ids.dim() != 2 or position_ids.shape[-1] != tokens or tokens < 2:
        return None
    steps = position_ids[:, 1:] - position_ids[:, :-1]
    restarts = (position_ids[:, 1:] == 0) & (steps != 1)
    if bool((steps == 1).all()) or not bool(restarts.any()):
        return None
    if batch != 1:
        raise ValueError(f"octet.hf: position_ids restart at 0 inside a row of a batch of {batch} "
                         f"rows: packed sequences need a batch of one row (or cu_seq_lens_q/k)")
    ids = position_ids[0]
    if int(ids[0]) != 0 or not bool(((steps[0] == 1) | restarts[0]).all()):
        raise ValueError("octet.hf: position_ids restart at 0 but are not packed sequences that "
                         "each start at 0 and count up by one")
    return [0] + (restarts[0].nonzero().flatten() + 1).tolist() + [tokens]


_POSITIONS = HostReads(2)  # what the last position_ids say: a forward reads them once


def _masked_restart(position_ids, attention_mask):
    """Whether the position_ids [1, tokens] of a padded row restart at 0 among its valid tokens
    (attention_mask [1, tokens] 1): packed sequences that the padding path would run as one."""
    ids = position_ids[0][attention_mask[0].to(torch.bool)]
    return bool(((ids[1:] == 0) & (ids[1:] - ids[:-1] != 1)).any())


def _used_slots(position_ids):
    """The KV-cache slots up to the last query's position (a static cache: slot j holds position
    j)."""
    return int(position_ids.max()) + 1


def _packing_of(position_ids, batch, tokens):
    """_packed_offsets, read once per unmodified position_ids tensor (eagerly: HostReads)."""
    if not isinstance(position_ids, torch.Tensor):
        return _packed_offsets(position_ids, batch, tokens)
    return _POSITIONS.get(position_ids, (batch, tokens),
                          lambda: _packed_offsets(position_ids, batch, tokens))


_PADDING = HostReads(1)  # the last padding mask's varlen form: a forward unpads once


def _unpadding(attention_mask, tq, tk, causal):
    """FlashAttention's varlen form of a 2-D padding mask [batch, tk] (nonzero: a valid key):
    (batch index, row) of the queries, (batch index, slot) of the keys, both grouped by batch row,
    and their int64 offsets cu_q, cu_k [batch + 1] on the host; None when nothing is masked. The
    queries are the last tq slots' valid ones in self-attention (causal), every row otherwise
    (padded query rows stay 0)."""
    mask = attention_mask.to(torch.bool)
    if bool(mask.all()):
        return None
    batch = mask.shape[0]
    if causal and tk < tq:
        raise ValueError(f"octet.hf: a causal padding mask over {tk} keys for {tq} queries "
                         f"(the queries must be the last q_len of the keys)")
    kb, kj = mask.nonzero(as_tuple=True)
    if causal:
        qb, qi = mask[:, tk - tq:].nonzero(as_tuple=True)
    else:
        qb = torch.arange(batch, device=mask.device).repeat_interleave(tq)
        qi = torch.arange(tq, device=mask.device).repeat(batch)
    zero = torch.zeros(1, dtype=torch.int64)
    cu = lambda b: torch.cat([zero, torch.bincount(b, minlength=batch).cumsum(0).cpu()])
    return qb, qi, kb, kj, cu(qb), cu(kb)


def _cu_seqlens(kwargs, side):
    """The packed-sequence offsets of one side ("q" or "k") and the name they were given under:
    Hugging Face's cu_seq_lens_q / cu_seq_lens_k, or FlashAttention's cu_seqlens_q / cu_seqlens_k
    (flash_attn_varlen_func's); (None, None) if neither. Both spellings of one side: a ValueError
    naming both (which one to use is the caller's to say)."""
    hf, flash = f"cu_seq_lens_{side}", f"cu_seqlens_{side}"
    a, b = kwargs.get(hf), kwargs.get(flash)
    if a is not None and b is not None:
        raise ValueError(f"octet.hf: both {hf} and {flash} were given, two spellings of the same "
                         f"offsets: pass one of them")
    if a is not None:
        return a, hf
    return (b, flash) if b is not None else (None, None)


def make_attention_function(delta="matched", precision="fp8", format="hybrid"):
    """The function register() installs: transformers' attention signature (module, query, key,
    value, attention_mask, scaling=None, dropout=0.0, **kwargs) -> (o [batch, q_len, heads,
    head_dim], None). delta/precision/format: octet.torch.attention's."""

    def octet_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                        **kwargs):
        if dropout:
            raise ValueError(f"octet.hf: attention dropout is not supported (got {dropout}); set "
                             f"the model's attention_dropout to 0")
        for name, what in _UNSUPPORTED.items():
            if kwargs.get(name) is not None:
                raise ValueError(f"octet.hf: {what} ({name}) is not supported by octet's attention")
        config = getattr(module, "config", None)
        for name, what in _UNSUPPORTED_CONFIG.items():
            if getattr(config, name, None) is not None:
                raise ValueError(f"octet.hf: {what} ({name} in the model's config) is not supported "
                                 f"by octet's attention")
        if attention_mask is not None and attention_mask.dim() != 2:
            raise ValueError(f"octet.hf: a dense attention mask of shape "
                             f"{tuple(attention_mask.shape)} is not supported (octet takes causal "
                             f"or full attention, padding and packed sequences)")
        causal = bool(kwargs.get("is_causal", getattr(module, "is_causal", True)))
        q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)  # [B, T, H, D]
        batch, tq, tk = q.shape[0], q.shape[1], k.shape[1]

        def run(qs, ks, vs):
            return attention(qs, ks, vs, causal=causal, delta=delta, softmax_scale=scaling,
                             precision=precision, format=format)

        def packed(cu_q, cu_k, names=("cu_seq_lens_q", "cu_seq_lens_k")):
            # one row of packed sequences; names: the arguments the offsets came from (the
            # spelling given, Hugging Face's or FlashAttention's)
            if batch != 1:
                raise ValueError(f"octet.hf: packed sequences ({names[0]}, {names[1]}) need a batch "
                                 f"of one row, got {batch}")
            def to_tensor(c, name):
                if isinstance(c, torch.Tensor):
                    return c
                try:
                    return torch.tensor(c)
                except (TypeError, ValueError, RuntimeError) as e:  # ragged, strings, overflow
                    raise TypeError(f"octet.hf: {name} must be an int32 or int64 tensor or a list of "
                                    f"ints, got {type(c).__name__} ({e})") from None
            cu_q, cu_k = to_tensor(cu_q, names[0]), to_tensor(cu_k, names[1])
            # checked under Hugging Face's names first (attention_varlen's errors name its own
            # arguments); eagerly the values too (read once: attention_varlen reuses the read)
            for name, cu, total in ((names[0], cu_q, tq), (names[1], cu_k, tk)):
                _offsets_tensor(cu, name, "octet.hf")
                if not torch.compiler.is_compiling():
                    _offsets(cu, total, None, name, "octet.hf", cached=True)
            if cu_q.numel() != cu_k.numel():
                raise ValueError(f"octet.hf: {names[0]} has {cu_q.numel() - 1} sequences, "
                                 f"{names[1]} {cu_k.numel() - 1}")
            # max_seqlen: the token counts bound every sequence (attention_varlen only checks >=)
            o = attention_varlen(q[0], k[0], v[0], cu_q, cu_k, tq, tk, causal=causal, delta=delta,
                                 softmax_scale=scaling, precision=precision, format=format)
            return o[None], None

        (cu_q, name_q), (cu_k, name_k) = _cu_seqlens(kwargs, "q"), _cu_seqlens(kwargs, "k")
        if cu_q is not None or cu_k is not None:  # one given: the same offsets for queries and keys
            # A padding mask beside the offsets: its zeros would be attended as tokens of the
            # sequences. Read eagerly only (compiled, it is a host sync), once per forward for a
            # CUDA mask (every layer gets the same tensor).
            if attention_mask is not None and not torch.compiler.is_compiling() and _PADDING.get(
                    attention_mask, "has zeros", lambda: not bool(attention_mask.to(torch.bool).all())):
                raise ValueError(f"octet.hf: a padding mask with zeros beside {name_q or name_k} / "
                                 f"{name_k or name_q} (packed sequences): octet would attend the padded "
                                 f"tokens; leave the padding out of the packed row or pass no offsets")
            if cu_q is None or cu_k is None:
                cu, given = (cu_q, name_q) if cu_k is None else (cu_k, name_k)
                return packed(cu, cu, (f"{given} (used for queries)", f"{given} (used for keys)"))
            return packed(cu_q, cu_k, (name_q, name_k))
        # Packing read off position_ids needs their values on the host: a sync, and a graph break
        # under torch.compile. Compiled, only a batch of one row (what packing makes) is read; a
        # batch of several rows cannot be packed, and eagerly a restart in one still raises.
        read_packing = batch == 1 or not torch.compiler.is_compiling()
        if attention_mask is None and tq == tk and read_packing:
            offsets = _packing_of(kwargs.get("position_ids"), batch, tq)
            if offsets is not None:
                cu = torch.tensor(offsets, dtype=torch.int64)
                return packed(cu, cu)
        if attention_mask is None:
            pos = kwargs.get("position_ids")
            if causal and pos is not None and pos.numel() and tk > tq:
                # a static KV cache without a mask: slot j holds position j, so the keys are the
                # slots up to the last query's position
                valid = _POSITIONS.get(pos, "used slots", lambda: _used_slots(pos))
                if valid < tk:
                    k, v = k[:, :valid], v[:, :valid]
            return run(q, k, v), None
        if attention_mask.shape[0] != batch or attention_mask.shape[1] > tk:
            raise ValueError(f"octet.hf: the padding mask must be [batch, <= kv_len] with batch "
                             f"{batch}, kv_len {tk}; got {tuple(attention_mask.shape)}")
        pos = kwargs.get("position_ids")
        if (batch == 1 and tq == tk and attention_mask.shape[1] == tk and isinstance(pos, torch.Tensor)
                and tuple(pos.shape) == (1, tq) and not torch.compiler.is_compiling()):
            # packed sequences in a padded row: the padding path would run them as one sequence
            stamp = ("masked restart", attention_mask.data_ptr(), attention_mask._version)
            if _POSITIONS.get(pos, stamp, lambda: _masked_restart(pos, attention_mask)):
                if bool(attention_mask.to(torch.bool).all()):  # no padding: read as no mask
                    offsets = _packing_of(pos, batch, tq)
                    cu = torch.tensor(offsets, dtype=torch.int64)
                    return packed(cu, cu)
                raise ValueError("octet.hf: position_ids restart at 0 inside a row that also has a "
                                 "padding mask (packed sequences, padded): octet would run them as "
                                 "one sequence; pass cu_seq_lens_q / cu_seq_lens_k "
                                 "(DataCollatorWithFlattening(return_flash_attn_kwargs=True)) "
                                 "or leave the padding out")
        if attention_mask.shape[1] < tk:  # a static cache: the first mask-length slots hold keys
            tk = attention_mask.shape[1]
            k, v = k[:, :tk], v[:, :tk]
        unpad = _PADDING.get(attention_mask, (tq, tk, causal),
                             lambda: _unpadding(attention_mask, tq, tk, causal))
        if unpad is None:
            return run(q, k, v), None
        qb, qi, kb, kj, cu_q, cu_k = unpad
        o = attention_varlen(q[qb, qi], k[kb, kj], v[kb, kj], cu_q, cu_k, tq, tk, causal=causal,
                             delta=delta, softmax_scale=scaling, precision=precision,
                             format=format)
        # o's dtype, not q's: under autocast q may be float32 (RoPE's output) and o autocast's
        return q.new_zeros(q.shape, dtype=o.dtype).index_put((qb, qi), o), None

    return octet_attention


def _mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0, attention_mask=None, device=None,
          **kwargs):
    """The mask rule register() installs: FlashAttention's (flash_attention_mask: None when nothing
    is masked, else the 2-D padding mask, shorter than kv_length for a static cache), and for a
    static cache without a padding mask an all-ones mask of the filled slots, q_offset + q_length
    (the cache's own count, not the position ids), so that the attention reads those slots alone."""
    from transformers.masking_utils import flash_attention_mask
    mask = flash_attention_mask(batch_size, q_length, kv_length, q_offset, kv_offset,
                                attention_mask=attention_mask, **kwargs)
    if mask is None and kv_offset == 0:
        filled = int(q_offset) + q_length
        if filled < kv_length:
            return torch.ones(batch_size, filled, dtype=torch.bool, device=device)
    return mask


def register(name=None, *, delta=None, precision="fp8", format="hybrid"):
    """Registers octet's attention with transformers. register(): "octet" (Delta-Matching) and
    "octet-stale" (the stale delta), FP8. register(name, delta=..., precision=..., format=...):
    one name with octet.torch.attention's options (e.g. precision="fp64" on float64 CPU models:
    octet's FP64 oracle). Returns the registered names. Needs transformers with
    AttentionInterface (>= 4.48); raises ImportError naming the version otherwise."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask  # noqa: F401
    except ImportError as e:
        import transformers
        raise ImportError(f"octet.hf.register needs transformers >= 4.48 (AttentionInterface, "
                          f"AttentionMaskInterface); found {transformers.__version__}") from e
    if name is None:
        if delta is not None:
            raise ValueError("octet.hf.register: give a name together with delta")
        pairs = [("octet", "matched"), ("octet-stale", "stale")]
    else:
        if not isinstance(name, str) or not name:
            raise ValueError(f"octet.hf.register: name must be a non-empty string, got {name!r}")
        pairs = [(name, "matched" if delta is None else delta)]
    if precision not in _PRECISIONS:
        raise ValueError(f"octet.hf.register: precision must be one of {', '.join(_PRECISIONS)}, "
                         f"got {precision!r}")
    if format not in _FORMATS:
        raise ValueError(f"octet.hf.register: format must be one of {', '.join(_FORMATS)}, got "
                         f"{format!r}")
    for n, d in pairs:
        if d not in ("matched", "stale"):
            raise ValueError(f"octet.hf.register: delta must be 'matched' or 'stale', got {d!r}")
        if n not in _REGISTERED and (n == "eager" or n in AttentionInterface._global_mapping):
            raise ValueError(f"octet.hf.register: {n!r} is already an attention implementation of "
                             f"transformers or another library; choose another name")
        AttentionInterface.register(n, make_attention_function(d, precision, format))
        AttentionMaskInterface.register(n, _mask)
        _REGISTERED.add(n)
    return [n for n, _ in pairs]


def float8_filter(module, fqn):
    """convert_to_float8's module_filter for transformers models: every nn.Linear except an output
    head — a module named lm_head, score or classifier, or inside one (lm_head.decoder), or a masked
    LM's predictions.decoder: the logits stay in the model's precision, as torchao's and Transformer
    Engine's recipes keep them — and layers whose in or out features are not multiples of 16 (small
    or odd projections gain nothing from FP8 GEMMs). By name: a head under another name needs the
    caller's own filter."""
    parts = fqn.split(".")
    if any(p in ("lm_head", "score", "classifier") for p in parts) or fqn.endswith("predictions.decoder"):
        return False
    return module.in_features % 16 == 0 and module.out_features % 16 == 0
