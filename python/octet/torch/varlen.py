"""attention_varlen: octet's attention over packed sequences in FlashAttention's varlen form
(flash_attn_varlen_func's arguments; docs/pytorch.md).

q [total_q, heads, head_dim] and k, v [total_k, kv_heads, head_dim] hold the sequences back to
back; cu_seqlens_q / cu_seqlens_k [n + 1] are their offsets. Sequence s attends from its queries
q[cu_q[s]:cu_q[s+1]] to its keys k[cu_k[s]:cu_k[s+1]] only. One library call per direction
(c_api.h octet_attention_params' packed sequences), through two custom ops as attention()'s:
  octet::attention_varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                  max_seqlen_k, ...) -> o, lse, saved
  octet::attention_varlen_backward(o, lse, saved, d_o, cu_seqlens_q, cu_seqlens_k, n_kv_heads,
                                   total_k, ...) -> dq, dk, dv
The ops read the offsets on the host (the library takes host offsets: CUDA offsets cost a copy
and a synchronization; eagerly once per tensor while it is unmodified: _backend.HostReads) and
check them there, so torch.compile traces one op per call, with fullgraph=True too; a CUDA graph
cannot capture them. No kernel reads the offsets yet: the library runs dense calls, causal
documents (len_q == len_k) bucketed by their length rounded up to 128 (below 65 tokens to a power
of two from 16) into one padded batch each,
every other sequence alone (c_api.h, docs/pytorch.md).
"""
import functools
import numbers

import torch

from .. import _lib

from ._backend import HostReads, backend_for, eager, no_double_backward, require
from .attention import _DTYPE_OK, _check_op_scale, _lse_dtype, _params, _prepare

_WHO = "octet.torch.attention_varlen"
_OP = "octet::attention_varlen_"


_OFFSETS = HostReads(4)  # eagerly, the offsets tensors' values: a step reads each once


def _host_values(cu):
    return cu.tolist()


def _read_offsets(cu, cached):
    """cu's values as a list (not to be modified); cached (the eager path only, HostReads): read on
    the host once while cu is unmodified."""
    return _OFFSETS.get(cu, None, lambda: _host_values(cu)) if cached else _host_values(cu)


def _offsets(cu, total, max_len, name, who=_WHO, cached=False):
    """The offsets as a list, checked: rising from 0 to `total`, the longest sequence within
    `max_len` (None: not checked). Reads cu on the host (_read_offsets)."""
    _offsets_tensor(cu, name, who)
    offsets = _read_offsets(cu, cached)
    if offsets[0] != 0 or offsets[-1] != total or any(b < a for a, b in zip(offsets, offsets[1:])):
        raise ValueError(f"{who}: {name} must rise from 0 to the {total} packed tokens without "
                         f"decreasing, got {offsets}")
    longest = max(b - a for a, b in zip(offsets, offsets[1:]))
    if max_len is not None and max_len < longest:
        raise ValueError(f"{who}: {name.replace('cu_seqlens', 'max_seqlen')} is {max_len}, but a "
                         f"sequence of {name} has {longest} tokens")
    return offsets


def _offsets_tensor(cu, name, who=_WHO):
    """What can be checked of an offsets tensor without reading it (so also while tracing)."""
    if not isinstance(cu, torch.Tensor) or cu.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{who}: {name} must be an int32 or int64 tensor, got "
                        f"{cu.dtype if isinstance(cu, torch.Tensor) else type(cu).__name__}")
    if cu.dim() != 1 or cu.numel() < 2:
        raise ValueError(f"{who}: {name} must be 1-D with at least 2 offsets, got shape "
                         f"{tuple(cu.shape)}")
    if cu.device.type not in ("cpu", "cuda"):  # its values are read: a meta tensor has none
        raise ValueError(f"{who}: {name} must be on the CPU or a CUDA device, got {cu.device}")


def _packed_params(total_q, h, total_k, g, d, dtype, offsets_q, offsets_k, config):
    """c_api.h params of a packed call, and the host offset tensors its pointers point into
    (the caller keeps them alive for the call)."""
    p = _params(1, h, g, total_q, total_k, d, dtype, *config, "bshd")
    hold = (torch.tensor(offsets_q, dtype=torch.int64), torch.tensor(offsets_k, dtype=torch.int64))
    p.n_seqs = len(offsets_q) - 1
    p.cu_seqlens_q, p.cu_seqlens_k = hold[0].data_ptr(), hold[1].data_ptr()
    return p, hold


def _check_op_forward(q, k, v, softmax_scale=0.0):
    _check_op_scale(f"{_OP}forward", softmax_scale)
    for name, t in (("q", q), ("k", k), ("v", v)):
        require(t.dim() == 3 and t.shape[1] >= 1 and t.shape[2] >= 1, ValueError,
                f"{_OP}forward: {name} must be 3-D [total, heads, head_dim] with heads and "
                f"head_dim >= 1, got {tuple(t.shape)}")
        require(q.dtype in _DTYPE_OK, TypeError,
                f"{_OP}forward: q's dtype must be one of {', '.join(map(str, _DTYPE_OK))}, got "
                f"{q.dtype}")
        require(t.dtype == q.dtype and t.device == q.device, TypeError,
                f"{_OP}forward: {name} must have q's dtype and device ({q.dtype}, {q.device}), got "
                f"{t.dtype}, {t.device}")
    require(k.shape == v.shape and k.shape[2] == q.shape[2] and q.shape[1] % k.shape[1] == 0,
            ValueError, f"{_OP}forward: k, v {tuple(k.shape)} do not fit q {tuple(q.shape)} "
            f"(equal head_dim, kv heads dividing the query heads, k and v one shape)")


def _forward_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                  cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, causal: bool,
                  softmax_scale: float, delta: str, precision: str,
                  formats: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_op_forward(q, k, v, softmax_scale)
    return _forward_body(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
                         softmax_scale, delta, precision, formats)


def _packing(cu_seqlens_q, cu_seqlens_k, total_q, total_k, max_seqlen_q=None, max_seqlen_k=None,
             cached=False):
    """Both offset lists, checked (_offsets) and of one sequence count."""
    offsets_q = _offsets(cu_seqlens_q, total_q, max_seqlen_q, "cu_seqlens_q", cached=cached)
    offsets_k = _offsets(cu_seqlens_k, total_k, max_seqlen_k, "cu_seqlens_k", cached=cached)
    if len(offsets_q) != len(offsets_k):
        raise ValueError(f"{_WHO}: cu_seqlens_q has {len(offsets_q) - 1} sequences, cu_seqlens_k "
                         f"{len(offsets_k) - 1}")
    return offsets_q, offsets_k


def _forward_body(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *config,
                  cached=False):
    """The forward op without its tensor checks; cached: the eager path (_read_offsets)."""
    offsets_q, offsets_k = _packing(cu_seqlens_q, cu_seqlens_k, q.shape[0], k.shape[0],
                                    max_seqlen_q, max_seqlen_k, cached)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    (total_q, h, d), (total_k, g, _) = q.shape, k.shape
    p, hold = _packed_params(total_q, h, total_k, g, d, q.dtype, offsets_q, offsets_k, config)
    lib, backend = _lib.lib(), backend_for(q.device)
    n = lib.octet_attention_saved_bytes(backend, p)
    if n < 0:
        _lib.check(-1)
    o = q.new_empty(q.shape)
    lse = torch.empty(h * total_q, dtype=_lse_dtype(q), device=q.device)
    saved = torch.empty(n, dtype=torch.uint8, device=q.device)  # every byte written (c_api.h)
    p.q, p.k, p.v, p.o, p.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), \
        lse.data_ptr()
    p.saved, p.saved_size = (saved.data_ptr(), n) if n > 0 else (None, 0)
    _lib.check(lib.octet_attention_forward(backend, p))
    del hold
    return o, lse, saved


_forward = torch.library.custom_op("octet::attention_varlen_forward", _forward_impl,
                                   mutates_args=())


@_forward.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, softmax_scale,
      delta, precision, formats):
    # saved's size depends on the offsets' values: the library's to say, at run time
    n = torch.library.get_ctx().new_dynamic_size()
    return (q.new_empty(q.shape), q.new_empty(q.shape[1] * q.shape[0], dtype=_lse_dtype(q)),
            q.new_empty(n, dtype=torch.uint8))


def _backward_impl(o: torch.Tensor, lse: torch.Tensor, saved: torch.Tensor, d_o: torch.Tensor,
                   cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, n_kv_heads: int,
                   total_k: int, causal: bool, softmax_scale: float, delta: str, precision: str,
                   formats: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    require(o.dim() == 3 and o.dtype in _DTYPE_OK and d_o.shape == o.shape
            and d_o.dtype == o.dtype and d_o.device == o.device, TypeError,
            f"{_OP}backward: o must be a 3-D tensor of a supported dtype and d_o like it, got "
            f"o {o.dtype} {tuple(o.shape)}, d_o {d_o.dtype} {tuple(d_o.shape)}")
    require(lse.shape == (o.shape[0] * o.shape[1],) and lse.dtype == _lse_dtype(o)
            and saved.dtype == torch.uint8 and saved.dim() == 1, TypeError,
            f"{_OP}backward: lse and saved must be what attention_varlen_forward returned, got "
            f"lse {lse.dtype} {tuple(lse.shape)}, saved {saved.dtype} {tuple(saved.shape)}")
    require(n_kv_heads >= 1 and o.shape[1] % n_kv_heads == 0, ValueError,
            f"{_OP}backward: n_kv_heads {n_kv_heads} must divide the {o.shape[1]} heads")
    require(total_k >= 0, ValueError, f"{_OP}backward: total_k must be >= 0, got {total_k}")
    return _backward_body(o, lse, saved, d_o, cu_seqlens_q, cu_seqlens_k, n_kv_heads, total_k,
                          causal, softmax_scale, delta, precision, formats, exact_saved=True)


def _backward_body(o, lse, saved, d_o, cu_seqlens_q, cu_seqlens_k, n_kv_heads, total_k, *config,
                   exact_saved=False, cached=False):
    """The backward op without its tensor checks (the eager path calls it with what its own
    forward returned, and cached: _read_offsets). exact_saved: saved must have the size this
    packing's forward gives (the op's check; a saved state of other shapes or offsets mostly
    differs in size)."""
    # The forward's packing, or saved is misread: counts and totals are checked here, saved's size
    # by the op (exact_saved); offsets of one count, total and size cannot be told apart.
    offsets_q, offsets_k = _packing(cu_seqlens_q, cu_seqlens_k, o.shape[0], total_k, cached=cached)
    (total_q, h, d) = o.shape
    o, lse, saved, d_o = o.contiguous(), lse.contiguous(), saved.contiguous(), d_o.contiguous()
    dq = o.new_empty(o.shape)
    dk, dv = o.new_empty((total_k, n_kv_heads, d)), o.new_empty((total_k, n_kv_heads, d))
    p, hold = _packed_params(total_q, h, total_k, n_kv_heads, d, o.dtype, offsets_q, offsets_k,
                             config)
    if exact_saved:
        want = _lib.lib().octet_attention_saved_bytes(backend_for(o.device), p)
        if want < 0:
            _lib.check(-1)
        require(saved.numel() == want, ValueError,
                f"{_OP}backward: saved must be the uint8 [{want}] tensor that "
                f"attention_varlen_forward returned for this packing, got [{saved.numel()}]")
    p.o, p.lse, p.d_o = o.data_ptr(), lse.data_ptr(), d_o.data_ptr()
    p.saved, p.saved_size = (saved.data_ptr(), saved.numel()) if saved.numel() else (None, 0)
    p.dq, p.dk, p.dv = dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
    _lib.check(_lib.lib().octet_attention_backward(backend_for(o.device), p))
    del hold
    return dq, dk, dv


_backward = torch.library.custom_op("octet::attention_varlen_backward", _backward_impl,
                                    mutates_args=())


@_backward.register_fake
def _(o, lse, saved, d_o, cu_seqlens_q, cu_seqlens_k, n_kv_heads, total_k, causal, softmax_scale,
      delta, precision, formats):
    kv = (total_k, n_kv_heads, o.shape[2])
    return o.new_empty(o.shape), o.new_empty(kv), o.new_empty(kv)


def _setup_context(ctx, inputs, output):
    q, k, v, cu_q, cu_k, _max_q, _max_k, *config = inputs
    o, lse, saved = output
    ctx.save_for_backward(o, lse, saved, cu_q, cu_k)  # not q, k, v: saved holds what is read
    ctx.mark_non_differentiable(lse, saved)
    ctx.set_materialize_grads(False)
    ctx.kv = (k.shape[1], k.shape[0])
    ctx.config = config


def _grads(backward, ctx, d_o, tensors=None):
    """tensors: ctx.saved_tensors when the caller has unpacked them (attention.py's _grads)."""
    n_inputs = 7 + len(ctx.config)
    if d_o is None:
        return (None,) * n_inputs
    o, lse, saved, cu_q, cu_k = ctx.saved_tensors if tensors is None else tensors
    dq, dk, dv = backward(o, lse, saved, d_o.to(o.dtype).contiguous(), cu_q, cu_k, *ctx.kv,
                          *ctx.config)
    return (dq, dk, dv) + (None,) * (n_inputs - 3)


def _autograd_backward(ctx, d_o, _d_lse, _d_saved):
    return _grads(_backward, ctx, d_o)


_forward.register_autograd(_autograd_backward, setup_context=_setup_context)


class _Eager(torch.autograd.Function):
    """The two ops' bodies called directly outside tracing (attention.py's _Eager: no custom-op
    dispatch host time)."""

    @staticmethod
    def forward(ctx, *inputs):
        out = _forward_body(*inputs, cached=True)
        _setup_context(ctx, inputs, out)
        return out

    @staticmethod
    def backward(ctx, d_o, _d_lse, _d_saved):
        backward = functools.partial(_backward_body, cached=True)
        tensors = ctx.saved_tensors
        return no_double_backward(_WHO, _grads(backward, ctx, d_o, tensors),
                                  through=(d_o, tensors[0]))  # o leads back to q, k, v


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False,
                     delta="matched", softmax_scale=None, *, precision="fp8", format="hybrid"):
    """Attention over packed sequences. q [total_q, heads, head_dim]; k, v [total_k, kv_heads,
    head_dim] (GQA when kv_heads divides heads); cu_seqlens_q, cu_seqlens_k int32/int64 [n + 1]
    offsets (0, ..., total), the same n, on any device (read on the host); max_seqlen_q/_k: at
    least the longest sequence (as FlashAttention takes them). Returns o [total_q, heads,
    head_dim] in q's dtype. causal: within each sequence, bottom-right aligned (query i sees keys
    j <= i + len_k − len_q); a sequence with queries and no keys gives 0 rows. delta,
    softmax_scale, precision, format, dtypes and autocast: attention()'s. Errors: TypeError or
    ValueError naming the argument (bad offsets when the op runs: under torch.compile, from the
    compiled call); octet.OctetError for what the library rejects."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{_WHO}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 3 or t.shape[1] < 1 or t.shape[2] < 1:
            raise ValueError(f"{_WHO}: {name} must be a 3-D tensor [total, heads, head_dim] with "
                             f"heads and head_dim >= 1, got {tuple(t.shape)}")
    _offsets_tensor(cu_seqlens_q, "cu_seqlens_q")
    _offsets_tensor(cu_seqlens_k, "cu_seqlens_k")
    if cu_seqlens_q.numel() != cu_seqlens_k.numel():
        raise ValueError(f"{_WHO}: cu_seqlens_q has {cu_seqlens_q.numel() - 1} sequences, "
                         f"cu_seqlens_k {cu_seqlens_k.numel() - 1}")
    if k.shape != v.shape:
        raise ValueError(f"{_WHO}: k and v must have one shape, got {tuple(k.shape)} and "
                         f"{tuple(v.shape)}")
    if q.shape[2] != k.shape[2]:  # before _prepare, whose message would name 4-D shapes
        raise ValueError(f"{_WHO}: q {tuple(q.shape)} and k {tuple(k.shape)} must have one "
                         f"head_dim")
    for name, n in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if isinstance(n, bool) or not isinstance(n, (numbers.Integral, torch.SymInt)):
            raise TypeError(f"{_WHO}: {name} must be an int, got {type(n).__name__}")
    if not isinstance(max_seqlen_q, torch.SymInt):
        max_seqlen_q = int(max_seqlen_q)  # a NumPy integer as the int it holds
    if not isinstance(max_seqlen_k, torch.SymInt):
        max_seqlen_k = int(max_seqlen_k)
    # either total may be 0 (no sequence has queries, or none has keys): the library's packing
    q4, k4, v4, dtype, causal, scale = _prepare(q[None], k[None], v[None], causal, softmax_scale,
                                                precision, _WHO, empty_seq_ok=True)
    args = (q4[0], k4[0], v4[0], cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
            scale, str(delta), str(precision), str(format))
    op = _Eager.apply if eager(q) else _forward
    return op(*args)[0].to(dtype)

