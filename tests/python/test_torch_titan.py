"""octet.titan (python/octet/titan.py, docs/pytorch.md "torchtitan") on torchtitan 0.3's Llama 3
debug model, on the CPU:

- The attention override with precision "fp64" (octet's FP64 oracle) gives the model's logits of
  an independent reference — the same model whose inner attention is torch's float64 SDPA with a
  dense mask built from the positions (causal inside each packed document) — to 1e-12, on a batch
  of two rows with two documents each; the reference without document boundaries differs (the
  test sees the masking). (GQA: octet.torch's own tests.)
- With the FP8 attention (matched delta) and the FP8 linears of the decoder layers, the model's
  first loss is within 5 % of the float64 reference's and 15 AdamW steps on the batch lower it by
  a third; the embedding and the output head stay torchtitan's Linear.
- Built on the meta device, as torchtitan's Trainer builds it, then to_empty + init_states: the
  same logits as the model built in place.
- Bad options fail with a message naming them: an unsupported window, a missing VarlenMetadata,
  the tensor-delayed recipe (torchtitan never calls update_scales).
- Each decoder layer compiled with fullgraph=True (what --compile.enable does) gives the eager
  model's loss and gradients bit for bit.
"""
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F

from octet_torch_util import rel  # noqa: F401  (also puts python/ on the path)
from torchtitan.config.override import OverrideConfig, apply_overrides
from torchtitan.models.common.attention import VarlenAttention
from torchtitan.models.common.linear import Linear
from torchtitan.models.llama3 import model_registry
from torchtitan.protocols.module import Module

import octet.titan as titan


class DocumentSdpa(VarlenAttention):
    """Reference inner attention: float64 SDPA, causal within documents (ids in `doc` [B, L])."""

    @dataclass(kw_only=True, slots=True)
    class Config(VarlenAttention.Config):
        pass

    doc = None

    def __init__(self, config):
        Module.__init__(self)

    def forward(self, q, k, v, *, attention_masks=None, scale=None, **kwargs):
        d, length = DocumentSdpa.doc, q.shape[1]
        mask = (d[:, :, None] == d[:, None, :]) & torch.ones(length, length, dtype=torch.bool).tril()
        rep = q.shape[2] // k.shape[2]
        k, v = k.repeat_interleave(rep, 2), v.repeat_interleave(rep, 2)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           attn_mask=mask[:, None], scale=scale)
        return o.transpose(1, 2)


def build(config, dtype):
    torch.manual_seed(0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        model = config.build()
        model.init_states(buffer_device=torch.device("cpu"))
    finally:
        torch.set_default_dtype(old)
    model.verify_module_protocol()
    return model


def reference_config():
    config = model_registry("debugmodel").model
    for layer in config.layers:
        layer.attention.inner_attention = DocumentSdpa.Config()
    return config


def with_overrides(*imports):
    config = model_registry("debugmodel").model
    apply_overrides(OverrideConfig(imports=list(imports)), config)
    return config


POSITIONS = torch.stack([torch.cat([torch.arange(40), torch.arange(24)]),
                         torch.cat([torch.arange(10), torch.arange(54)])])  # two documents a row


def batch(vocab):
    gen = torch.Generator().manual_seed(1)
    return torch.randint(0, vocab, (2, 65), generator=gen)


def logits(model, tokens):
    DocumentSdpa.doc = (POSITIONS == 0).cumsum(1)
    masks = model.get_attention_masks(positions=POSITIONS)
    return model(tokens[:, :-1], positions=POSITIONS, attention_masks=masks)


def loss(model, tokens):
    out = logits(model, tokens)
    return F.cross_entropy(out.flatten(0, 1).float(), tokens[:, 1:].flatten())


def test_fp64_attention_equals_document_masked_sdpa():
    ref = build(reference_config(), torch.float64)
    octet_model = build(with_overrides(("octet.titan.attention", {"precision": "fp64"})), torch.float64)
    assert isinstance(octet_model.layers["0"].attention.inner_attention, titan.OctetAttention)
    octet_model.load_state_dict(ref.state_dict())
    tokens = batch(2048)
    with torch.no_grad():
        a, b = logits(ref, tokens), logits(octet_model, tokens)
        err = ((a - b).abs().max() / a.abs().max()).item()
        assert err < 1e-12, err
        DocumentSdpa.doc = torch.zeros_like(POSITIONS)  # one document a row: a different model
        masks = ref.get_attention_masks(positions=POSITIONS)
        c = ref(tokens[:, :-1], positions=POSITIONS, attention_masks=masks)
        assert ((a - c).abs().max() / a.abs().max()).item() > 1e-3


def test_fp8_attention_and_linears_train():
    ref = build(reference_config(), torch.float64)
    model = build(with_overrides("octet.titan.attention", "octet.titan.float8_linears"), torch.float32)
    model.load_state_dict({k: v.float() for k, v in ref.state_dict().items()})
    kinds = {name: type(m) for name, m in model.named_modules()}
    assert kinds["layers.0.attention.wo"] is titan.OctetLinear
    assert kinds["layers.0.feed_forward.w1"] is titan.OctetLinear
    assert kinds["lm_head"] is Linear  # the head stays
    assert model.layers["0"].attention.inner_attention.delta == "matched"
    tokens = batch(2048)
    with torch.no_grad():
        ref_loss = loss(ref, tokens).item()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(15):
        opt.zero_grad()
        value = loss(model, tokens)
        value.backward()
        opt.step()
        losses.append(value.item())
    assert abs(losses[0] - ref_loss) < 0.05 * ref_loss, (losses[0], ref_loss)
    assert losses[-1] < (2 / 3) * losses[0], losses


def test_meta_build_equals_in_place():
    config = with_overrides("octet.titan.attention", "octet.titan.float8_linears")
    in_place = build(config, torch.float32)
    with torch.device("meta"):
        meta = config.build()
    meta.to_empty(device="cpu")
    meta.init_states(buffer_device=torch.device("cpu"))
    meta.load_state_dict(in_place.state_dict())
    tokens = batch(2048)
    with torch.no_grad():
        assert torch.equal(logits(meta, tokens), logits(in_place, tokens))


def test_options_and_bad_input():
    stale = with_overrides(("octet.titan.attention", {"delta": "stale"}))
    assert stale.layers[0].attention.inner_attention.delta == "stale"  # a config: a list
    with pytest.raises(ValueError, match="window_size"):
        titan.OctetAttention(titan.OctetAttention.Config(window_size=(128, 0)))
    for name, value in (("delta", "bogus"), ("precision", "fp16"), ("format", "e5m2")):
        with pytest.raises(ValueError, match=f"{name} must be one of"):  # when the config is made
            titan.OctetAttention.Config(**{name: value})
    attn = titan.OctetAttention(titan.OctetAttention.Config())
    q = torch.randn(1, 8, 2, 16)
    with pytest.raises(TypeError, match="VarlenMetadata"):
        attn(q, q, q, attention_masks=None)
    with pytest.raises(ValueError, match="tensor-delayed"):
        titan.OctetLinear.Config(in_features=16, out_features=16, recipe="tensor-delayed")
    with pytest.raises(ValueError, match="recipe must be one of"):
        titan.OctetLinear.Config(in_features=16, out_features=16, recipe="bogus")
    late = titan.OctetAttention.Config()
    late.delta = "bogus"  # set after the config was made: refused when built
    with pytest.raises(ValueError, match="delta must be one of"):
        titan.OctetAttention(late)


def test_compiled_layers_equal_eager():
    # What --compile.enable does (each decoder layer compiled, fullgraph=True): the packed
    # attention is one op per call, so nothing breaks the graph, and the loss and gradients are
    # the eager model's bit for bit (aot_eager runs the same ops).
    config = with_overrides("octet.titan.attention", "octet.titan.float8_linears")
    eager_model = build(config, torch.float32)
    compiled = build(config, torch.float32)
    compiled.load_state_dict(eager_model.state_dict())
    for layer in compiled.layers.values():
        layer.compile(fullgraph=True, backend="aot_eager")
    tokens = batch(2048)
    got = []
    for model in (eager_model, compiled):
        value = loss(model, tokens)
        value.backward()
        got.append((value.detach(), {n: p.grad for n, p in model.named_parameters()}))
    assert torch.equal(got[0][0], got[1][0])
    for name, grad in got[0][1].items():
        assert torch.equal(grad, got[1][1][name]), name
