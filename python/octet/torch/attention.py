"""octet's FP8 attention with Delta-Matching as a PyTorch op (docs/pytorch.md).

`attention(q, k, v)` takes FlashAttention's layout [batch, seq, heads, head_dim] and runs octet's
attention (octet/attention.h; the fp8-stale / fp8-matched arms' config) through liboctet_c: the
CPU reference on CPU tensors, the CUDA backend (the fused FP8 kernels where they implement
head_dim) on CUDA tensors, on torch's current stream. Two custom ops (torch.library), each with a
fake implementation so torch.compile traces through them:
  octet::attention_forward(q, k, v, residual, ..., layout) -> o, lse, saved
  octet::attention_backward(o, lse, saved, d_o, residual, ..., layout) -> dq, dk, dv
                                                                         (mutates residual)
layout "bshd": q, k, v, o and the gradients [B, T, H, D] (the projections' output as it lies);
"bhsd": [B, H, T, D]. octet's kernels read and write either, so neither costs a copy; lse is
[B, H, T] in both.
`saved` is a uint8 tensor holding the backend's saved state (the FP8 codes of Q, K, V, their
scales and the softmax statistics; c_api.h octet_attention_saved_bytes), as FlashAttention
returns softmax_lse: autograd keeps o, lse and saved (not q, k, v), and the backward never re-runs
the forward. Under symbolic shapes the fake writes saved's size as an expression of them from
the library's size terms (octet_attention_saved_size_terms), so that dynamic shapes compile
without a graph break at the op. In eager mode the two bodies are called through an autograd.Function instead of the
custom-op dispatch (host time); torch.compile traces the ops. A call with
return_residual=True runs eagerly even inside torch.compile (a graph break): its backward writes a
tensor the forward made, which a compiled graph cannot express.
"""
import math
import numbers

import torch

from .. import _lib

from ._backend import backend_for, dtype_code, eager, no_double_backward, require

# The dtype octet computes in for each input dtype: BF16 and FP32 as they are, FP16 widened to
# FP32 (exact; the backend has no FP16 tensors), FP64 kept for the FP64 oracle ("fp64") and
# narrowed to FP32 otherwise (the FP8/BF16 paths read FP32).
_ACCEPTED = {
    "cpu": (torch.float32, torch.float64, torch.bfloat16, torch.float16),
    "cuda": (torch.bfloat16, torch.float16, torch.float32),
}


_LAYOUTS = {"bhsd": _lib.LAYOUT_HEADS_MAJOR, "bshd": _lib.LAYOUT_TOKENS_MAJOR}


def _params(b, h, g, tq, tk, d, dtype, causal, softmax_scale, delta, precision, formats, layout):
    p = _lib.AttentionParams()
    p.batch, p.n_heads, p.n_kv_heads, p.seq_q, p.seq_k, p.head_dim = b, h, g, tq, tk, d
    p.causal, p.softmax_scale = int(causal), softmax_scale
    p.precision, p.delta, p.formats = precision.encode(), delta.encode(), formats.encode()
    p.dtype = dtype_code(dtype)
    p.layout = _LAYOUTS[layout]
    return p


def _axes(layout):
    """(heads axis, seq axis) of the ops' 4-D tensors in `layout`."""
    require(layout in _LAYOUTS, ValueError,
            f"{_OP}forward/backward: layout must be 'bhsd' or 'bshd', got {layout!r}")
    return (1, 2) if layout == "bhsd" else (2, 1)


def _dims(q, k, layout):
    """(batch, heads, kv_heads, seq_q, seq_k, head_dim) of q and k in `layout`."""
    ha, ta = _axes(layout)
    return q.shape[0], q.shape[ha], k.shape[ha], q.shape[ta], k.shape[ta], q.shape[3]


def _shape(layout, b, heads, seq, d):
    """A 4-D tensor's shape in `layout`."""
    return (b, heads, seq, d) if layout == "bhsd" else (b, seq, heads, d)


_saved_sizes = {}
_SAVED_SIZES_KEPT = 4096  # a process with ever new shapes (serving) keeps the most recent ones


def _saved_bytes(device, dims, dtype, config):
    """Bytes of the saved-state tensor of a forward (c_api.h octet_attention_saved_bytes), cached
    per (device, shapes, dtype, config): the library answers from the shapes alone."""
    key = (device.type, device.index, dims, dtype, config)
    n = _saved_sizes.get(key)
    if n is None:
        p = _params(*dims, dtype, *config)
        n = _lib.lib().octet_attention_saved_bytes(backend_for(device), p)
        if n < 0:
            _lib.check(-1)
        _lib.bounded_put(_saved_sizes, key, n, _SAVED_SIZES_KEPT)
    return n


_size_terms_cache = {}


def _size_terms(device, dims, dtype, config):
    """The saved state's size as terms in the call's sizes (c_api.h octet_attention_saved_size_terms:
    (unit_bytes, dims, seq_step, align) each) for the implementation the library runs at `dims`
    (ints), cached per (device, dims, dtype, config)."""
    key = (device.type, device.index, dims, dtype, config)
    terms = _size_terms_cache.get(key)
    if terms is None:
        terms = _lib.size_terms(_lib.lib().octet_attention_saved_size_terms, backend_for(device),
                                _params(*dims, dtype, *config))
        _lib.bounded_put(_size_terms_cache, key, terms, _SAVED_SIZES_KEPT)
    return terms


def _terms_size(terms, dims):
    """Σ over the terms of round_up(unit_bytes · Π, align), Π the product of the sizes in the
    term's dims bits (octet/saved_size.h AttnSizeTerm; each sequence length as
    ceil(seq / seq_step)): octet_attention_saved_bytes. Integer arithmetic only, so that symbolic
    sizes (torch.SymInt) give an expression torch.compile keeps: no unbacked size, no graph
    break."""
    b, h, g, tq, tk, d = dims
    total = 0
    for unit, mask, step, align in terms:
        n = unit
        for bit, size in ((1, b), (2, h), (4, g), (8, d)):
            if mask & bit:
                n = n * size
        for bit, seq in ((16, tq), (32, tk)):
            if mask & bit:
                n = n * ((seq + step - 1) // step)
        total = total + (n + align - 1) // align * align
    return total


def _example(n):
    """A size's value; for a symbolic size its example value (the hint torch.compile traced
    with), or 128 where it has none (a size known only at run time: a length at which every
    backend runs its usual implementation)."""
    if isinstance(n, int):
        return n
    hint = getattr(n.node, "hint", None)
    return hint if isinstance(hint, int) else 128


def _lse_dtype(q):
    return torch.float64 if q.dtype == torch.float64 else torch.float32


_OP = "octet::attention_"
_FP32_NORMAL = (2.0 ** -126, (2.0 - 2.0 ** -23) * 2.0 ** 127)  # smallest normal, largest finite


def _check_op_scale(op, softmax_scale):
    """A forward op's softmax_scale: 0 (c_api.h's default, 1/sqrt(head_dim)) or a number within
    FP32's normal range, which the library takes as an FP32 number: anything else would reach it
    as 0 (the default instead), a subnormal or an infinity. attention() checks its own argument
    (_prepare); this is for direct calls of the ops."""
    require(softmax_scale == 0.0 or _FP32_NORMAL[0] <= softmax_scale <= _FP32_NORMAL[1], ValueError,
            f"{op}: softmax_scale must be 0 (the default 1/sqrt(head_dim)) or within FP32's normal "
            f"range [{_FP32_NORMAL[0]:.7g}, {_FP32_NORMAL[1]:.7g}], got {softmax_scale}")


def _check_op_forward(q, k, v, residual, layout, softmax_scale=0.0):
    """The forward op's tensors and scale, for direct calls of torch.ops.octet.attention_forward."""
    _check_op_scale(f"{_OP}forward", softmax_scale)
    ha, _ = _axes(layout)
    for name, t in (("q", q), ("k", k), ("v", v)):
        require(t.dim() == 4, ValueError, f"{_OP}forward: {name} must be 4-D ({layout}), got "
                f"{tuple(t.shape)}")
        require(t.dtype == q.dtype and t.device == q.device, TypeError,
                f"{_OP}forward: {name} must have q's dtype and device ({q.dtype}, {q.device}), "
                f"got {t.dtype}, {t.device}")
    require(q.dtype in _DTYPE_OK, TypeError, f"{_OP}forward: dtype {q.dtype} is not one of "
            f"{', '.join(map(str, _DTYPE_OK))}")
    require(all(n >= 1 for n in (*q.shape, *k.shape)), ValueError,
            f"{_OP}forward: every size must be >= 1, got q {tuple(q.shape)}, k {tuple(k.shape)}")
    require(k.shape == v.shape and k.shape[0] == q.shape[0] and k.shape[3] == q.shape[3]
            and q.shape[ha] % k.shape[ha] == 0, ValueError,
            f"{_OP}forward: k, v {tuple(k.shape)} do not fit q {tuple(q.shape)} (equal batch and "
            f"head_dim, kv heads dividing the query heads, k and v one shape)")
    require(residual.dtype == torch.float64 and residual.numel() in (0, 2)
            and residual.is_contiguous() and residual.device == q.device, TypeError,
            f"{_OP}forward: residual must be a contiguous float64 tensor of 0 or 2 elements on q's "
            f"device, got {residual.dtype} {tuple(residual.shape)} on {residual.device}")


def _check_op_backward(o, lse, saved, d_o, residual, n_kv_heads, seq_k, config):
    """The backward op's tensors: o, lse and saved must be what attention_forward returned for
    the same arguments (the size of saved is checked; where it came from cannot be)."""
    layout = config[-1]
    ha, ta = _axes(layout)
    require(o.dim() == 4 and o.dtype in _DTYPE_OK, TypeError,
            f"{_OP}backward: o must be a 4-D ({layout}) tensor of a supported dtype, got "
            f"{o.dtype} {tuple(o.shape)}")
    b, h, tq, d = o.shape[0], o.shape[ha], o.shape[ta], o.shape[3]
    require(all(n >= 1 for n in o.shape), ValueError,
            f"{_OP}backward: every size of o must be >= 1, got {tuple(o.shape)}")
    require(d_o.shape == o.shape and d_o.dtype == o.dtype and d_o.device == o.device, TypeError,
            f"{_OP}backward: d_o must have o's shape, dtype and device, got {d_o.dtype} "
            f"{tuple(d_o.shape)}")
    require(lse.shape == (b, h, tq) and lse.dtype == _lse_dtype(o) and lse.device == o.device,
            TypeError, f"{_OP}backward: lse must be {_lse_dtype(o)} {(b, h, tq)}, got {lse.dtype} "
            f"{tuple(lse.shape)}")
    require(n_kv_heads >= 1 and h % n_kv_heads == 0, ValueError,
            f"{_OP}backward: n_kv_heads {n_kv_heads} must divide the {h} heads")
    require(seq_k >= 1, ValueError, f"{_OP}backward: seq_k must be >= 1, got {seq_k}")
    want = _saved_bytes(o.device, (b, h, n_kv_heads, tq, seq_k, d), o.dtype, config)
    require(saved.dtype == torch.uint8 and saved.shape == (want,) and saved.device == o.device,
            ValueError, f"{_OP}backward: saved must be the uint8 [{want}] tensor that "
            f"attention_forward returned for these arguments, got {saved.dtype} "
            f"{tuple(saved.shape)}")
    require(residual.dtype == torch.float64 and residual.numel() in (0, 2)
            and residual.is_contiguous() and residual.device == o.device, TypeError,
            f"{_OP}backward: residual must be a contiguous float64 tensor of 0 or 2 elements on o's "
            f"device, got {residual.dtype} {tuple(residual.shape)} on {residual.device}")


_DTYPE_OK = (torch.float32, torch.bfloat16, torch.float64)


def _forward_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, residual: torch.Tensor,
                  causal: bool, softmax_scale: float, delta: str, precision: str, formats: str,
                  layout: str = "bhsd") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_op_forward(q, k, v, residual, layout, softmax_scale)
    return _forward_body(q, k, v, residual, causal, softmax_scale, delta, precision, formats, layout)


def _forward_body(q, k, v, residual, causal, softmax_scale, delta, precision, formats, layout):
    """The forward op without its checks: the eager path of attention() calls it directly (its
    own checks, _check, have run; it made the residual)."""
    # octet reads and writes contiguous tensors of the layout: under torch.compile an op's inputs
    # may come with whatever strides Inductor chose, so the op makes them contiguous itself (a
    # no-op when they are) and allocates contiguous outputs (the fake impls say so too).
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    config = (causal, softmax_scale, delta, precision, formats, layout)
    dims = _dims(q, k, layout)
    o = q.new_empty(q.shape)
    lse = torch.empty((dims[0], dims[1], dims[3]), dtype=_lse_dtype(q), device=q.device)
    saved = torch.empty(_saved_bytes(q.device, dims, q.dtype, config), dtype=torch.uint8,
                        device=q.device)
    p = _params(*dims, q.dtype, *config)
    p.q, p.k, p.v, p.o, p.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), \
        lse.data_ptr()
    p.saved, p.saved_size = saved.data_ptr(), saved.numel()
    _lib.check(_lib.lib().octet_attention_forward(backend_for(q.device), p))
    return o, lse, saved


_forward = torch.library.custom_op("octet::attention_forward", _forward_impl, mutates_args=())


def _one_device(op, **tensors):
    """The op's tensors on one device. A meta tensor among real ones would send the call to the
    fake implementation, which returns uninitialised outputs instead of running the op."""
    devices = {name: t.device for name, t in tensors.items()}
    first = next(iter(devices.values()))
    require(all(d == first for d in devices.values()), ValueError,
            f"{op}: the tensors must be on one device, got " +
            ", ".join(f"{n} on {d}" for n, d in devices.items()))


@_forward.register_fake
def _(q, k, v, residual, causal, softmax_scale, delta, precision, formats, layout="bhsd"):
    _one_device(f"{_OP}forward", q=q, k=k, v=v, residual=residual)
    shapes = (*q.shape, *k.shape)
    dims = _dims(q, k, layout)
    config = (causal, softmax_scale, delta, precision, formats, layout)
    if all(isinstance(n, int) for n in shapes):
        n = _saved_bytes(q.device, dims, q.dtype, config)
    else:  # symbolic shapes: the library's size terms at the traced example, in the symbols
        # head_dim picks the implementation (the flash kernels take 64 and 128): fixed per graph
        # (a guard; another head_dim compiles anew), as are the head counts. precision "bf16" on
        # CUDA picks cuDNN's SDPA or the unfused form by the lengths too (c_api.h
        # octet_attention_saved_size_terms), whose states differ: its lengths are fixed as well.
        b, h, g, tq, tk, d = dims
        if q.device.type == "cuda" and precision == "bf16":
            tq, tk = int(tq), int(tk)
        dims = (b, int(h), int(g), tq, tk, int(d))
        examples = tuple(_example(n) for n in dims)
        n = _terms_size(_size_terms(q.device, examples, q.dtype, config), dims)
    return (q.new_empty(q.shape), q.new_empty((dims[0], dims[1], dims[3]), dtype=_lse_dtype(q)),
            q.new_empty(n, dtype=torch.uint8))


def _backward_impl(o: torch.Tensor, lse: torch.Tensor, saved: torch.Tensor, d_o: torch.Tensor,
                   residual: torch.Tensor, n_kv_heads: int, seq_k: int, causal: bool,
                   softmax_scale: float, delta: str, precision: str, formats: str,
                   layout: str = "bhsd") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    config = (causal, softmax_scale, delta, precision, formats, layout)
    _check_op_backward(o, lse, saved, d_o, residual, n_kv_heads, seq_k, config)
    return _backward_body(o, lse, saved, d_o, residual, n_kv_heads, seq_k, *config)


def _backward_body(o, lse, saved, d_o, residual, n_kv_heads, seq_k, causal, softmax_scale, delta,
                   precision, formats, layout):
    """The backward op without its checks: the eager path calls it with what its own forward
    returned."""
    config = (causal, softmax_scale, delta, precision, formats, layout)
    ha, ta = _axes(layout)
    b, h, tq, d = o.shape[0], o.shape[ha], o.shape[ta], o.shape[3]
    kv_shape = _shape(layout, b, n_kv_heads, seq_k, d)
    o, lse, saved, d_o = o.contiguous(), lse.contiguous(), saved.contiguous(), d_o.contiguous()
    dq, dk, dv = o.new_empty(o.shape), o.new_empty(kv_shape), o.new_empty(kv_shape)
    p = _params(b, h, n_kv_heads, tq, seq_k, d, o.dtype, *config)
    p.o, p.lse, p.saved, p.saved_size = o.data_ptr(), lse.data_ptr(), saved.data_ptr(), \
        saved.numel()
    p.d_o, p.dq, p.dk, p.dv = d_o.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
    p.residual = residual.data_ptr() if residual.numel() == 2 else None
    _lib.check(_lib.lib().octet_attention_backward(backend_for(o.device), p))
    return dq, dk, dv


_backward = torch.library.custom_op("octet::attention_backward", _backward_impl,
                                    mutates_args=("residual",))


@_backward.register_fake
def _(o, lse, saved, d_o, residual, n_kv_heads, seq_k, causal, softmax_scale, delta, precision,
      formats, layout="bhsd"):
    _one_device(f"{_OP}backward", o=o, lse=lse, saved=saved, d_o=d_o, residual=residual)
    kv_shape = _shape(layout, o.shape[0], n_kv_heads, seq_k, o.shape[3])
    return o.new_empty(o.shape), o.new_empty(kv_shape), o.new_empty(kv_shape)


def _setup_context(ctx, inputs, output):
    q, k, v, residual, *config = inputs
    o, lse, saved = output
    # What the backward reads: O and the LSE as the forward wrote them and the saved state (FP8
    # codes, scales, softmax statistics); not q, k, v.
    ctx.save_for_backward(o, lse, saved)
    ctx.mark_non_differentiable(lse, saved)
    # lse and saved get no gradient: without this autograd would hand the backward a zero-filled
    # tensor of each (saved is ~5 bytes per element of q, k, v: a large fill and allocation per call)
    ctx.set_materialize_grads(False)
    ha, ta = _axes(config[-1])  # every argument is here, defaults too
    ctx.kv = (k.shape[ha], k.shape[ta])
    # Not a saved tensor: each backward writes it, and a graph may be run backward more than once
    # (retain_graph), which autograd's version check on saved tensors would refuse.
    ctx.residual = residual
    ctx.config = config


def _grads(backward, ctx, d_o, tensors=None):
    """tensors: ctx.saved_tensors when the caller has unpacked them (once only: non-reentrant
    activation checkpointing refuses a second unpack)."""
    if d_o is None:  # o took no part in what is differentiated
        return (None,) * (4 + len(ctx.config))
    o, lse, saved = ctx.saved_tensors if tensors is None else tensors
    dq, dk, dv = backward(o, lse, saved, d_o.to(o.dtype).contiguous(), ctx.residual, *ctx.kv,
                          *ctx.config)
    return (dq, dk, dv, None) + (None,) * len(ctx.config)


def _autograd_backward(ctx, d_o, _d_lse, _d_saved):
    return _grads(_backward, ctx, d_o)


_forward.register_autograd(_autograd_backward, setup_context=_setup_context)


class _Eager(torch.autograd.Function):
    """The same forward and backward as the two ops, called directly: in eager mode (nothing
    traced, plain tensors) this skips the custom-op dispatch, whose host time exceeds the kernels'
    at small shapes (docs/pytorch.md "Speed"); torch.compile traces the ops."""

    @staticmethod
    def forward(ctx, q, k, v, residual, *config):  # ctx first: no per-call signature binding
        out = _forward_body(q, k, v, residual, *config)
        _setup_context(ctx, (q, k, v, residual, *config), out)
        return out

    @staticmethod
    def backward(ctx, d_o, _d_lse, _d_saved):
        tensors = ctx.saved_tensors
        return no_double_backward("octet.torch.attention", _grads(_backward_body, ctx, d_o, tensors),
                                  through=(d_o, tensors[0]))  # o leads back to q, k, v


def _attention_op(q):
    """The forward to call: _Eager's outside tracing on plain tensors, else the custom op."""
    return _Eager.apply if eager(q) else _forward


def _check(q, k, v, precision, who, empty_seq_ok=False):
    names = ("q", "k", "v")
    for name, t in zip(names, (q, k, v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{who}: {name} must be a torch.Tensor, "
                            f"got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{who}: {name} must have 4 dims [batch, seq, heads, "
                             f"head_dim], got shape {tuple(t.shape)}")
        if any(n == 0 for i, n in enumerate(t.shape) if not (empty_seq_ok and i == 1)):
            raise ValueError(f"{who}: {name} {tuple(t.shape)} [batch, seq, heads, "
                             f"head_dim] has a size 0: every size must be >= 1")
    if not (q.device == k.device == v.device):
        raise ValueError(f"{who}: q, k, v must be on one device, got "
                         f"{q.device}, {k.device}, {v.device}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"{who}: q, k, v must have one dtype, got "
                        f"{q.dtype}, {k.dtype}, {v.dtype}")
    accepted = _ACCEPTED.get(q.device.type)
    if accepted is None:
        raise ValueError(f"{who}: tensors must be on cpu or cuda, got {q.device}")
    if q.dtype not in accepted:
        raise TypeError(f"{who}: dtype {q.dtype} is not supported on "
                        f"{q.device.type} (expected one of {', '.join(map(str, accepted))})")
    if k.shape != v.shape:
        raise ValueError(f"{who}: k and v must have one shape, got "
                         f"{tuple(k.shape)} and {tuple(v.shape)}")
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(f"{who}: q {tuple(q.shape)} and k {tuple(k.shape)} must "
                         f"agree in batch and head_dim")
    if k.shape[2] < 1 or q.shape[2] % k.shape[2] != 0:
        raise ValueError(f"{who}: the kv heads ({k.shape[2]}) must divide the "
                         f"query heads ({q.shape[2]}) (GQA)")
    if precision == "fp64" and q.device.type != "cpu":
        raise ValueError(f"{who}: precision fp64 (the FP64 oracle) runs on cpu only")


def _autocast(*ts):
    """The inputs as autocast would hand them to SDPA: inside torch.autocast, floating tensors
    other than float64 in autocast's dtype (Hugging Face's RoPE leaves q and k in float32 while
    v comes out of its projection in bfloat16)."""
    if not all(isinstance(t, torch.Tensor) for t in ts):
        return ts  # _check names the argument
    kind = ts[0].device.type
    if kind not in ("cpu", "cuda") or not torch.is_autocast_enabled(kind):
        return ts
    cast = torch.get_autocast_dtype(kind)
    return tuple(t.to(cast) if t.is_floating_point() and t.dtype != torch.float64 else t for t in ts)


def attention(q, k, v, causal=False, delta="matched", softmax_scale=None, return_residual=False,
              *, precision="fp8", format="hybrid"):
    """Multi-head attention with octet's FP8 kernels and the matched (or stale) softmax delta.

    q [batch, seq_q, heads, head_dim]; k, v [batch, seq_k, kv_heads, head_dim] (FlashAttention's
    layout; GQA when kv_heads divides heads). Returns o [batch, seq_q, heads, head_dim] in q's
    dtype; with return_residual=True, (o, residual) where residual is a float64 [2] tensor on q's
    device that each backward through o fills: [max, mean] over query rows of the softmax-gradient
    row residual |Σ_j dS_ij| / Σ_j P_ij(|dP_ij| + |D_i|) (octet/attention.h AttentionStats):
    FP32 rounding (≤ 1e-6) with the matched delta, the delta's relative error with the stale one
    (left at 0 by precision "fp64" on float64 tensors, the exact oracle). Such a call runs
    eagerly under torch.compile (a graph break; fullgraph=True refuses it).

    causal: query i sees keys j <= i + seq_k - seq_q (bottom-right aligned, as FlashAttention-2).
    delta: "matched" (Delta-Matching, D_i = Σ_j P_ij dP_ij) or "stale" (D_i = dO_i·O_i).
    softmax_scale: τ (default 1/sqrt(head_dim)).
    precision: "fp8" (E4M3 Q, K, V, P; the fp8-stale / fp8-matched arms' config), "bf16", or
      "fp64" (cpu, float64 tensors: octet's FP64 oracle, for gradient checks).
    format: "hybrid" (dO and dS in E5M2) or "e4m3".
    dtypes: cpu float32/float64/bfloat16/float16; cuda bfloat16/float16/float32. Any strides:
    q, k, v contiguous as [batch, seq, heads, head_dim] (a projection's output viewed per head,
    as Hugging Face's attention functions receive it after their transpose) or as [batch, heads,
    seq, head_dim] are read where they lie, with no copy, and o comes back in the same memory
    order; other strides are copied into the first layout. Errors: TypeError/ValueError naming the
    bad argument; octet.OctetError for what the library rejects (e.g. a CUDA head_dim that is not
    a multiple of 16). Under torch.autocast, as SDPA (an autocast lower-precision op): q, k, v of
    a floating dtype other than float64 are cast to autocast's dtype first, and o has it.
    """
    q, k, v, dtype, causal, scale = _prepare(q, k, v, causal, softmax_scale, precision,
                                             "octet.torch.attention")
    # The layout octet reads: the one all three already lie in (no copy), tokens-major otherwise.
    if not all(t.is_contiguous() for t in (q, k, v)) and \
            all(t.transpose(1, 2).is_contiguous() for t in (q, k, v)):
        layout, q, k, v = "bhsd", q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    else:
        layout = "bshd"

    def caller_order(o):  # the op's o as [B, T, H, D] in the caller's dtype
        return (o.transpose(1, 2) if layout == "bhsd" else o).to(dtype)

    args = (q, k, v, causal, scale, str(delta), str(precision), str(format), layout)
    if return_residual:
        o, residual = _with_residual(*args)
        return caller_order(o), residual
    # no residual: a NULL pointer (empty, not zeros: one dispatcher fill call fewer per call)
    empty = torch.empty(0, dtype=torch.float64, device=q.device)
    return caller_order(_attention_op(args[0])(*args[:3], empty, *args[3:])[0])


def _prepare(q, k, v, causal, softmax_scale, precision, who, empty_seq_ok=False):
    """attention()'s arguments checked (errors naming `who`) and converted: q, k, v [B, T, H, D]
    in the dtype octet computes in, the caller's dtype, causal as a bool and the softmax scale
    (0: c_api.h's default). empty_seq_ok: T may be 0 (packed sequences with no tokens)."""
    q, k, v = _autocast(q, k, v)
    _check(q, k, v, precision, who, empty_seq_ok)
    dtype = q.dtype
    if dtype == torch.float16 or (dtype == torch.float64 and precision != "fp64"):
        work = torch.float32
    else:
        work = dtype

    if type(causal).__module__ == "numpy" and type(causal).__name__ in ("bool", "bool_"):
        causal = bool(causal)  # numpy's bool scalar
    if not isinstance(causal, bool):
        raise TypeError(f"{who}: causal must be a bool, got "
                        f"{type(causal).__module__}.{type(causal).__qualname__}")
    if softmax_scale is not None and (isinstance(softmax_scale, bool)
                                      or not isinstance(softmax_scale, numbers.Real)):
        raise TypeError(f"{who}: softmax_scale must be a real number or None, got "
                        f"{type(softmax_scale).__name__}")
    try:
        scale = 0.0 if softmax_scale is None else float(softmax_scale)  # 0: c_api.h's default
    except OverflowError:  # an int beyond any float
        raise ValueError(f"{who}: softmax_scale {softmax_scale} is beyond FP32's range") from None
    # comparisons, not math.isfinite: under torch.compile(dynamic=True) the scale is a symbolic
    # float, which comparisons guard on and isfinite cannot trace (NaN fails both comparisons)
    if softmax_scale is not None and not 0 < scale < math.inf:
        raise ValueError(f"{who}: softmax_scale must be finite and > 0, "
                         f"got {softmax_scale}")
    # octet takes the scale as an FP32 number (c_api.h), where 0 means the default 1/sqrt(head_dim):
    # a scale that is 0, subnormal or infinite in FP32 would silently become another one.
    if softmax_scale is not None and not _FP32_NORMAL[0] <= scale <= _FP32_NORMAL[1]:
        raise ValueError(f"{who}: softmax_scale {softmax_scale} is outside FP32's normal range "
                         f"[{_FP32_NORMAL[0]:.7g}, {_FP32_NORMAL[1]:.7g}] (octet computes in FP32)")
    return q.to(work), k.to(work), v.to(work), dtype, bool(causal), scale


@torch.compiler.disable
def _with_residual(q, k, v, *config):
    """The forward op with a residual tensor that the backward op fills. Always run eagerly: the
    backward writes a tensor made in the forward, which a compiled graph cannot express, so
    torch.compile breaks the graph here (fullgraph=True refuses it; docs/pytorch.md)."""
    residual = torch.zeros(2, dtype=torch.float64, device=q.device)
    return _attention_op(q)(q, k, v, residual, *config)[0], residual
