"""octet.torch.attention reads q, k, v where they lie (docs/pytorch.md "`octet.torch.attention`"):

- tensors contiguous as [B, T, H, D] (a projection's output, what Hugging Face's attention
  functions hand over after their transpose) run in layout "bshd", contiguous [B, H, T, D] ones in
  "bhsd", anything else is copied into [B, T, H, D]; all three give the same bits, forward and
  backward, in every precision;
- the two contiguous cases copy nothing: no aten copy, clone or _to_copy runs in the forward or
  the backward (a dispatch mode records every aten op); nor does the backward get zero-filled
  gradients of lse and saved (the non-differentiable outputs; the eager path too, seen by the
  profiler);
- the ops take the layout as an argument: the "bshd" op equals the "bhsd" op on the transposed
  tensors, its lse is [B, H, T], and a direct call with an unknown layout is a ValueError;
- direct op calls refuse an empty dimension (kv heads 0 included) and a residual that is not
  contiguous (the library writes its two values through the pointer) with a Python error;
- the C ABI refuses a layout value it does not know.
"""
import ctypes

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from octet_torch_util import rel  # noqa: F401  (also puts python/ on the path)
import octet
import octet.torch as ot
from octet import _lib
from octet.torch._backend import backend_for

FWD = torch.ops.octet.attention_forward
BWD = torch.ops.octet.attention_backward
NO_RESIDUAL = torch.zeros(0, dtype=torch.float64)

ARMS = [  # precision, delta, dtype
    ("fp8", "matched", torch.float32),
    ("fp8", "stale", torch.bfloat16),
    ("bf16", "matched", torch.float32),
    ("fp64", "matched", torch.float64),
]


def inputs(b, tq, tk, h, g, d, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, tq, h, d, generator=gen, dtype=torch.float64).to(dtype)
    k = (torch.randn(b, tk, g, d, generator=gen, dtype=torch.float64) + 0.5).to(dtype)
    v = torch.randn(b, tk, g, d, generator=gen, dtype=torch.float64).to(dtype)
    d_o = torch.randn(b, tq, h, d, generator=gen, dtype=torch.float64).to(dtype)
    return q, k, v, d_o


def heads_major_storage(t):
    """t's values as a [B, T, H, D] view of contiguous [B, H, T, D] memory."""
    return t.transpose(1, 2).contiguous().transpose(1, 2)


def strided(t):
    """t's values in memory that is neither layout (every other element of a wider tensor)."""
    wide = torch.zeros(*t.shape[:3], 2 * t.shape[3], dtype=t.dtype)
    wide[..., ::2] = t
    return wide[..., ::2]


def run(q, k, v, d_o, causal, delta, precision):
    leaves = [t.detach().clone(memory_format=torch.preserve_format).requires_grad_()
              for t in (q, k, v)]
    o = ot.attention(*leaves, causal=causal, delta=delta, precision=precision)
    o.backward(d_o)
    return [o.detach()] + [t.grad for t in leaves]


@pytest.mark.parametrize("precision,delta,dtype", ARMS)
@pytest.mark.parametrize("causal", [False, True])
def test_every_memory_order_gives_the_same_bits(precision, delta, dtype, causal):
    q, k, v, d_o = inputs(2, 13, 21, 4, 2, 16, dtype, seed=3)
    want = run(q, k, v, d_o, causal, delta, precision)
    assert all(t.abs().sum() > 0 for t in want), "vacuous: a zero result"
    for name, move in (("bhsd storage", heads_major_storage), ("strided", strided)):
        moved = [move(t) for t in (q, k, v)]
        if name == "bhsd storage":
            assert all(t.transpose(1, 2).is_contiguous() and not t.is_contiguous() for t in moved)
        got = run(*moved, d_o, causal, delta, precision)
        for what, x, y in zip(("o", "dq", "dk", "dv"), got, want):
            assert x.shape == y.shape, f"{name} {what}"
            assert torch.equal(x, y), f"{name} {what}: differs from the [B, T, H, D] call"


class AtenLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("storage", ["bshd", "bhsd"])
def test_a_contiguous_layout_is_not_copied(storage):
    q, k, v, d_o = inputs(1, 16, 16, 2, 2, 16, torch.float32, seed=5)
    if storage == "bhsd":
        q, k, v, d_o = (heads_major_storage(t) for t in (q, k, v, d_o))
    leaves = [t.detach().clone(memory_format=torch.preserve_format).requires_grad_()
              for t in (q, k, v)]
    log = AtenLog()
    with log:
        o = ot.attention(*leaves, causal=True)
        o.backward(d_o)
    assert any("octet.attention_forward" in op for op in log.ops), log.ops  # the mode saw the op
    copies = [op for op in log.ops
              if op.split(".")[-1] in ("copy_", "clone", "_to_copy", "zeros_like", "fill_", "zero_")]
    assert not copies, f"{storage}: octet copied or filled a tensor: {copies}"
    assert all(t.grad is not None and t.grad.abs().sum() > 0 for t in leaves)


def test_the_bshd_op_equals_the_bhsd_op_on_transposed_tensors():
    q, k, v, d_o = inputs(2, 11, 19, 4, 1, 16, torch.float32, seed=9)
    base = (True, 0.0, "matched", "fp8", "hybrid")
    o_t, lse_t, saved_t = FWD(q, k, v, NO_RESIDUAL, *base, "bshd")
    qh, kh, vh, doh = (t.transpose(1, 2).contiguous() for t in (q, k, v, d_o))
    o_h, lse_h, saved_h = FWD(qh, kh, vh, NO_RESIDUAL, *base, "bhsd")
    assert o_t.shape == q.shape and lse_t.shape == (2, 4, 11)
    assert torch.equal(o_t.transpose(1, 2), o_h) and torch.equal(lse_t, lse_h)
    assert saved_t.shape == saved_h.shape  # the saved state does not depend on the layout
    grads_t = BWD(o_t, lse_t, saved_t, d_o, NO_RESIDUAL, 1, 19, *base, "bshd")
    grads_h = BWD(o_h, lse_h, saved_h, doh, NO_RESIDUAL, 1, 19, *base, "bhsd")
    for x, y in zip(grads_t, grads_h):
        assert torch.equal(x.transpose(1, 2), y)
    with pytest.raises(ValueError, match="layout"):
        FWD(q, k, v, NO_RESIDUAL, *base, "sbhd")


def test_the_c_abi_refuses_an_unknown_layout():
    q, k, v, _ = inputs(1, 8, 8, 2, 2, 16, torch.float32)
    o = torch.empty_like(q)
    lse = torch.empty(1, 2, 8)
    p = _lib.AttentionParams()
    p.batch, p.n_heads, p.n_kv_heads, p.seq_q, p.seq_k, p.head_dim = 1, 2, 2, 8, 8, 16
    p.precision, p.delta, p.formats, p.dtype = b"fp8", b"matched", b"hybrid", _lib.DTYPE_F32
    p.q, p.k, p.v, p.o, p.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), \
        lse.data_ptr()
    p.layout = 2
    with pytest.raises(octet.OctetError, match="layout"):
        _lib.check(_lib.lib().octet_attention_forward(backend_for(q.device), ctypes.byref(p)))


def test_direct_calls_refuse_empty_sizes_and_a_strided_residual():
    q, k, v, d_o = inputs(1, 8, 8, 2, 1, 16, torch.float32)
    base = (False, 0.0, "stale", "fp8", "hybrid", "bshd")
    with pytest.raises(ValueError, match="size"):
        FWD(q, k[:, :, :0], v[:, :, :0], NO_RESIDUAL, *base)  # kv heads 0
    with pytest.raises(ValueError, match="size"):
        FWD(q[:, :0], k, v, NO_RESIDUAL, *base)
    strided = torch.zeros(4, dtype=torch.float64)[::2]
    with pytest.raises(TypeError, match="contiguous"):
        FWD(q, k, v, strided, *base)
    o, lse, saved = FWD(q, k, v, NO_RESIDUAL, *base)
    expanded = torch.zeros(1, dtype=torch.float64).expand(2)
    for bad in (strided, expanded):
        with pytest.raises(TypeError, match="contiguous"):
            BWD(o, lse, saved, d_o, bad, 1, 8, *base)


def test_the_eager_backward_gets_no_zero_filled_gradients():
    q, k, v, d_o = inputs(1, 16, 16, 2, 2, 16, torch.float32, seed=4)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                record_shapes=True) as prof:
        ot.attention(*leaves, causal=True).backward(d_o)
    events = [(e.name, e.input_shapes) for e in prof.events()]
    assert any(name == "aten::empty" for name, _ in events), "the profiler recorded nothing"
    # the only fill is of the empty residual (a NULL pointer for the library)
    filled = [(name, shapes) for name, shapes in events
              if name in ("aten::zeros_like", "aten::fill_", "aten::zero_")
              and shapes and shapes[0] and shapes[0] != [0]]
    assert not filled, f"the backward filled tensors: {filled}"
    assert all(t.grad.abs().sum() > 0 for t in leaves)
