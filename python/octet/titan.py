"""octet in torchtitan (0.3): config overrides that put octet's FP8 attention (Delta-Matching by
default) and octet's FP8 linears into its language models, through torchtitan's own extension
point (torchtitan.config.override), switched on from the command line without changing torchtitan:

  torchrun --nproc-per-node 8 -m torchtitan.train --module llama3 --config llama3_8b \\
      --override.imports octet.titan.attention,octet.titan.float8_linears \\
      --training.disable_cuda_graphs

(attention_varlen reads the document offsets on the host: no CUDA graph capture; under
torchtitan's `--compile.enable` the layers trace with fullgraph, without a graph break.) Tested on its models on the CPU, not yet under its
Trainer (docs/pytorch.md "torchtitan").

attention: every inner attention of the model (a FlexAttention or VarlenAttention config) becomes
OctetAttention. It subclasses VarlenAttention, so the trainer builds the per-document cu_seqlens
of its packed batches (torchtitan's dataloader packs documents and restarts positions per
document), and octet.torch.attention_varlen computes causal attention inside each document.
float8_linears: the Linear configs under the decoder layers become OctetLinear (Float8Linear with
torchtitan's Module protocol); the embedding and the output head stay as they are, as
octet.torch.convert_to_float8's rule keeps a model's head. delta, precision and format are the
octet.torch.attention options, set per OctetAttention.Config.

What the extension points do not give (docs/pytorch.md "torchtitan"): context parallelism
(torchtitan refuses attention modules it does not know), torchtitan's float8 bookkeeping
(it recognizes torchao's classes only), and a varlen kernel: attention_varlen is one library call
per layer, which runs one dense kernel call per document.
"""
from dataclasses import dataclass

from torchtitan.config import derive, override
from torchtitan.models.common.attention import FlexAttention, VarlenAttention, VarlenMetadata
from torchtitan.models.common.linear import Linear
from torchtitan.protocols.module import Module

from .torch import attention_varlen
from .torch.linear import Float8Linear

_CAUSAL, _FULL = (-1, 0), (-1, -1)
_STATELESS_RECIPES = ("tensor-current", "row", "block", "mx", "unit")  # octet/quant.h, no per-step state


def _post_init(config, parent, check):
    """A config dataclass's __post_init__: its parent's (explicitly: a slots dataclass has no
    zero-argument super()), then octet's check of its own fields."""
    parent_init = getattr(parent, "__post_init__", None)
    if parent_init is not None:
        parent_init(config)
    check(config)


class OctetAttention(VarlenAttention):
    """torchtitan's inner attention on octet: q, k, v [batch, seq, heads, head_dim] (GQA), the
    trainer's VarlenMetadata (per-document offsets over batch·seq tokens) → o of q's shape.
    window_size (-1, 0) is causal, (-1, -1) full; a sliding window raises ValueError."""

    @dataclass(kw_only=True, slots=True)
    class Config(VarlenAttention.Config):
        delta: str = "matched"
        precision: str = "fp8"
        format: str = "hybrid"

        def __post_init__(self):  # refused when the config is made, not at the first forward
            _post_init(self, VarlenAttention.Config, OctetAttention._check)

    @staticmethod
    def _check(config):
        for name, allowed in (("delta", ("matched", "stale")), ("precision", ("fp8", "bf16", "fp64")),
                              ("format", ("hybrid", "e4m3"))):
            if getattr(config, name) not in allowed:
                raise ValueError(f"octet.titan.OctetAttention.Config: {name} must be one of "
                                 f"{', '.join(allowed)}, got {getattr(config, name)!r}")

    def __init__(self, config: Config):
        OctetAttention._check(config)  # a field set after the config was made
        Module.__init__(self)  # not VarlenAttention's: it selects a PyTorch flash implementation
        window = tuple(config.window_size)
        if window not in (_CAUSAL, _FULL):
            raise ValueError(f"octet.titan.OctetAttention: window_size must be {_CAUSAL} (causal) or "
                             f"{_FULL} (full); sliding windows are not supported, got {window}")
        self.window_size = window
        self.delta, self.precision, self.format = config.delta, config.precision, config.format

    def forward(self, q_BLNH, k_BLNH, v_BLNH, *, attention_masks=None, scale=None, out_transform=None,
                **kwargs):
        if out_transform is not None:
            raise NotImplementedError("octet.titan.OctetAttention: out_transform (it needs the "
                                      "softmax LSE, which octet's attention does not return)")
        if not isinstance(attention_masks, VarlenMetadata):
            raise TypeError(f"octet.titan.OctetAttention: attention_masks must be the trainer's "
                            f"VarlenMetadata, got {type(attention_masks).__name__}")
        b, length = q_BLNH.shape[:2]
        flat = lambda t: t.reshape(b * length, t.shape[2], t.shape[3])
        m = attention_masks
        o = attention_varlen(flat(q_BLNH), flat(k_BLNH), flat(v_BLNH), m.cu_seq_q, m.cu_seq_k,
                             m.max_q, m.max_k, causal=self.window_size == _CAUSAL, delta=self.delta,
                             softmax_scale=scale, precision=self.precision, format=self.format)
        return o.reshape(b, length, o.shape[1], o.shape[2])


class OctetLinear(Float8Linear, Module):
    """torchtitan's Linear on octet's FP8 GEMMs (Float8Linear: weight and bias as nn.Linear's, so
    torchtitan's initialization, sharding and checkpoints see an nn.Linear's parameters). The
    stateless recipes only: tensor-delayed needs update_scales() once per optimizer step, which
    torchtitan's loop does not call (ValueError)."""

    @dataclass(kw_only=True, slots=True)
    class Config(Linear.Config):
        recipe: str = "tensor-current"
        format: str = "hybrid"

        def __post_init__(self):  # refused when the config is made (and again when built)
            _post_init(self, Linear.Config, OctetLinear._check)

    @staticmethod
    def _check(config):
        if config.recipe == "tensor-delayed":
            raise ValueError("octet.titan.OctetLinear: recipe tensor-delayed needs update_scales() "
                             "after every optimizer step, which torchtitan does not call; use "
                             "tensor-current, row or block")
        if config.recipe not in _STATELESS_RECIPES:
            raise ValueError(f"octet.titan.OctetLinear: recipe must be one of "
                             f"{', '.join(_STATELESS_RECIPES)}, got {config.recipe!r}")
        if config.format not in ("hybrid", "e4m3"):
            raise ValueError(f"octet.titan.OctetLinear: format must be hybrid or e4m3, got {config.format!r}")

    def __init__(self, config: Config):
        OctetLinear._check(config)  # a field set after the config was made
        Float8Linear.__init__(self, config.in_features, config.out_features, bias=config.bias,
                              recipe=config.recipe, format=config.format)


# The overrides take keyword options from the command line, e.g.
#   --override.imports 'octet.titan.attention={"delta": "stale"}'


@override(target=FlexAttention.Config, description="octet FP8 attention")
def attention(config, delta="matched", precision="fp8", format="hybrid"):
    """Every FlexAttention config → OctetAttention (causal, per document)."""
    return derive(config, OctetAttention.Config, delta=delta, precision=precision, format=format)


@override(target=VarlenAttention.Config, description="octet FP8 attention")
def varlen_attention(config, delta="matched", precision="fp8", format="hybrid"):
    """Every VarlenAttention config (attn_backend "varlen") → OctetAttention, window kept."""
    return derive(config, OctetAttention.Config, delta=delta, precision=precision, format=format)


@override(target=Linear.Config, fqns=["*layers.*"], exact=True,
          description="octet FP8 linears in the decoder layers (embedding and head kept)")
def float8_linears(config, recipe="tensor-current", format="hybrid"):
    """The decoder layers' Linear configs → OctetLinear."""
    return derive(config, OctetLinear.Config, recipe=recipe, format=format)
