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
- a padding mask: per batch row, its valid tokens as one sequence (exact for the contiguous left
  or right padding tokenizers produce); padded query rows get 0;
- packed sequences (several sequences in one row, FlashAttention's varlen form): cu_seq_lens_q /
  cu_seq_lens_k passed to the model (DataCollatorWithFlattening(return_flash_attn_kwargs=True)), or
  position_ids restarting at their minimum in a batch of one row: one call per sequence. The
  fused kernels take no sequence offsets yet, so this is a loop over sequences (graph breaks under
  torch.compile), not a varlen kernel.

Refused with a ValueError naming the feature: attention dropout > 0, a sliding window, logit
softcapping, attention sinks, a dense (4-D) mask, cu_seq_lens that are not non-decreasing from 0
to the number of tokens.
"""
import torch

from .torch import attention

# What the attention function refuses: each is a kwarg transformers passes when a model uses it.
_UNSUPPORTED = {
    "sliding_window": "a sliding window",
    "softcap": "logit softcapping",
    "s_aux": "attention sinks",
}


def _check_cu_seqlens(cu, total, name):
    if cu.dim() != 1 or cu.numel() < 2:
        raise ValueError(f"octet.hf: {name} must be a 1-D tensor of at least 2 offsets, got shape "
                         f"{tuple(cu.shape)}")
    offsets = cu.tolist()
    if offsets[0] != 0 or offsets[-1] != total or any(b < a for a, b in zip(offsets, offsets[1:])):
        raise ValueError(f"octet.hf: {name} must rise from 0 to the {total} packed tokens without "
                         f"decreasing, got {offsets}")
    return offsets


def _packed_offsets(position_ids, tokens):
    """Sequence starts of a batch-of-one row whose position ids restart at their minimum (the
    packed form transformers' FlashAttention path reads), or None when the row is one sequence."""
    if position_ids is None or position_ids.dim() != 2 or position_ids.shape[0] != 1:
        return None
    ids = position_ids[0]
    if ids.numel() != tokens or ids.numel() < 2 or bool((ids[1:] - ids[:-1] == 1).all()):
        return None
    starts = (ids == ids.min()).nonzero().flatten().tolist()
    if starts[0] != 0:
        return None
    return starts + [tokens]


def _per_sequence(q, k, v, offsets_q, offsets_k, run):
    """q [1, Tq, H, D], k, v [1, Tk, G, D]: `run` on each (query, key) span, zero rows for empty
    query spans."""
    out = []
    for s in range(len(offsets_q) - 1):
        q0, q1, k0, k1 = offsets_q[s], offsets_q[s + 1], offsets_k[s], offsets_k[s + 1]
        if q1 == q0:
            continue
        if k1 == k0:  # a sequence with queries but no keys: its rows see nothing
            out.append(torch.zeros_like(q[:, q0:q1]))
            continue
        out.append(run(q[:, q0:q1], k[:, k0:k1], v[:, k0:k1]))
    return torch.cat(out, dim=1) if out else torch.zeros_like(q)


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

        cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
        if cu_q is not None or cu_k is not None:
            if batch != 1:
                raise ValueError(f"octet.hf: packed sequences (cu_seq_lens_q/k) need a batch of "
                                 f"one row, got {batch}")
            offsets_q = _check_cu_seqlens(cu_q if cu_q is not None else cu_k, tq, "cu_seq_lens_q")
            offsets_k = _check_cu_seqlens(cu_k if cu_k is not None else cu_q, tk, "cu_seq_lens_k")
            if len(offsets_q) != len(offsets_k):
                raise ValueError("octet.hf: cu_seq_lens_q and cu_seq_lens_k must count the same "
                                 "number of sequences")
            return _per_sequence(q, k, v, offsets_q, offsets_k, run), None
        if attention_mask is None and tq == tk:
            offsets = _packed_offsets(kwargs.get("position_ids"), tq)
            if offsets is not None:
                return _per_sequence(q, k, v, offsets, offsets, run), None
        if attention_mask is None or bool(attention_mask.all()):
            return run(q, k, v), None
        if attention_mask.shape != (batch, tk):
            raise ValueError(f"octet.hf: the padding mask must be [batch, kv_len] = "
                             f"{(batch, tk)}, got {tuple(attention_mask.shape)}")
        mask = attention_mask.to(torch.bool)
        out = torch.zeros_like(q)
        for b in range(batch):
            keys = mask[b].nonzero().flatten()
            rows = mask[b, tk - tq:].nonzero().flatten()  # the queries are the last q_len tokens
            if keys.numel() == 0 or rows.numel() == 0:
                continue
            o = run(q[b:b + 1, rows], k[b:b + 1, keys], v[b:b + 1, keys])
            out = out.index_put((torch.tensor([b], device=q.device), rows), o[0])
        return out, None

    return octet_attention


def register(name=None, *, delta=None, precision="fp8", format="hybrid"):
    """Registers octet's attention with transformers. register(): "octet" (Delta-Matching) and
    "octet-stale" (the stale delta), FP8. register(name, delta=..., precision=..., format=...):
    one name with octet.torch.attention's options (e.g. precision="fp64" on float64 CPU models:
    octet's FP64 oracle). Returns the registered names. Needs transformers with
    AttentionInterface (>= 4.48); raises ImportError naming the version otherwise."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask
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
    for n, d in pairs:
        if d not in ("matched", "stale"):
            raise ValueError(f"octet.hf.register: delta must be 'matched' or 'stale', got {d!r}")
        AttentionInterface.register(n, make_attention_function(d, precision, format))
        AttentionMaskInterface.register(n, flash_attention_mask)
    return [n for n, _ in pairs]


def float8_filter(module, fqn):
    """convert_to_float8's module_filter for transformers models: every nn.Linear except an
    output head (named lm_head, score or classifier: the logits stay in the model's precision, as
    torchao and Transformer Engine recipes keep them) and layers whose in or out features are not
    multiples of 16 (small or odd projections gain nothing from FP8 GEMMs)."""
    if fqn.split(".")[-1] in ("lm_head", "score", "classifier"):
        return False
    return module.in_features % 16 == 0 and module.out_features % 16 == 0
