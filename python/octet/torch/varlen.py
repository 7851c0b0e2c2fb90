"""attention_varlen: octet's attention over packed sequences in FlashAttention's varlen form
(flash_attn_varlen_func's arguments; docs/pytorch.md).

q [total_q, heads, head_dim] and k, v [total_k, kv_heads, head_dim] hold the sequences back to
back; cu_seqlens_q / cu_seqlens_k [n + 1] are their offsets. Sequence s attends from its queries
q[cu_q[s]:cu_q[s+1]] to its keys k[cu_k[s]:cu_k[s+1]] only. The fused kernels take no sequence
offsets yet: this runs octet.torch.attention once per sequence (a Python loop; the same numbers as
those dense calls), which is what a fused varlen kernel will have to equal.
"""
import torch

from .attention import attention


def _offsets(cu, total, max_len, name):
    if not isinstance(cu, torch.Tensor) or cu.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"octet.torch.attention_varlen: {name} must be an int32 or int64 tensor, got "
                        f"{cu.dtype if isinstance(cu, torch.Tensor) else type(cu).__name__}")
    if cu.dim() != 1 or cu.numel() < 2:
        raise ValueError(f"octet.torch.attention_varlen: {name} must be 1-D with at least 2 offsets, "
                         f"got shape {tuple(cu.shape)}")
    offsets = cu.tolist()
    if offsets[0] != 0 or offsets[-1] != total or any(b < a for a, b in zip(offsets, offsets[1:])):
        raise ValueError(f"octet.torch.attention_varlen: {name} must rise from 0 to the {total} "
                         f"packed tokens without decreasing, got {offsets}")
    longest = max(b - a for a, b in zip(offsets, offsets[1:]))
    if max_len < longest:
        raise ValueError(f"octet.torch.attention_varlen: max_seqlen for {name} is {max_len}, but a "
                         f"sequence has {longest} tokens")
    return offsets


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False,
                     delta="matched", softmax_scale=None, *, precision="fp8", format="hybrid"):
    """Attention over packed sequences. q [total_q, heads, head_dim]; k, v [total_k, kv_heads,
    head_dim] (GQA when kv_heads divides heads); cu_seqlens_q, cu_seqlens_k int32/int64 [n + 1]
    offsets (0, ..., total), the same n; max_seqlen_q/_k: at least the longest sequence (as
    FlashAttention takes them). Returns o [total_q, heads, head_dim] in q's dtype. causal: within
    each sequence, bottom-right aligned (query i sees keys j <= i + len_k − len_q); a sequence with
    queries and no keys gives 0 rows. delta, softmax_scale, precision, format: attention()'s.
    Errors: TypeError/ValueError naming the argument; attention()'s for the rest."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3:
            raise ValueError(f"octet.torch.attention_varlen: {name} must be a 3-D tensor [total, "
                             f"heads, head_dim], got "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    offsets_q = _offsets(cu_seqlens_q, q.shape[0], max_seqlen_q, "cu_seqlens_q")
    offsets_k = _offsets(cu_seqlens_k, k.shape[0], max_seqlen_k, "cu_seqlens_k")
    if len(offsets_q) != len(offsets_k):
        raise ValueError(f"octet.torch.attention_varlen: cu_seqlens_q has {len(offsets_q) - 1} "
                         f"sequences, cu_seqlens_k {len(offsets_k) - 1}")
    if k.shape != v.shape:
        raise ValueError(f"octet.torch.attention_varlen: k and v must have one shape, got "
                         f"{tuple(k.shape)} and {tuple(v.shape)}")
    out = []
    for s in range(len(offsets_q) - 1):
        q0, q1, k0, k1 = offsets_q[s], offsets_q[s + 1], offsets_k[s], offsets_k[s + 1]
        if q1 == q0:
            continue
        if k1 == k0:
            out.append(_zeros_of(q[q0:q1]))
            continue
        o = attention(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], causal=causal, delta=delta,
                      softmax_scale=softmax_scale, precision=precision, format=format)
        out.append(o[0])
    return torch.cat(out) if out else _zeros_of(q)


def _zeros_of(x):
    """Zeros of x's shape in x's autograd graph (gradient 0, whatever x holds: no NaN from 0·inf),
    so that backward works when no sequence has keys."""
    return torch.where(torch.zeros((), dtype=torch.bool, device=x.device), x,
                       torch.zeros((), dtype=x.dtype, device=x.device))
