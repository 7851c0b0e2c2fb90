"""octet for PyTorch (docs/pytorch.md): FP8 attention with Delta-Matching and FP8 linears.

  attention(q, k, v, causal=False, delta="matched", ...)   FlashAttention layout, autograd, compile
  Float8Linear, convert_to_float8(model, recipe=..., format=..., module_filter=...)
  update_scales(model)   delayed scaling's once-per-optimizer-step update of every Float8Linear
"""
from .attention import attention
from .convert import convert_to_float8
from .linear import Float8Linear, update_scales

__all__ = ["attention", "Float8Linear", "convert_to_float8", "update_scales"]
