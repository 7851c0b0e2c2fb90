"""octet for PyTorch (docs/pytorch.md): FP8 attention with Delta-Matching and FP8 linears.

  attention(q, k, v, causal=False, delta="matched", ...)   FlashAttention layout, autograd, compile
  attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, ...)
                                                           packed sequences (FlashAttention's varlen)
  Float8Linear, convert_to_float8(model, recipe=..., format=..., module_filter=...)
  update_scales(model)   delayed scaling's once-per-optimizer-step update of every Float8Linear
"""
from .attention import attention
from .convert import convert_to_float8
from .linear import Float8Linear, update_scales
from .varlen import attention_varlen

__all__ = ["attention", "attention_varlen", "Float8Linear", "convert_to_float8", "update_scales"]
