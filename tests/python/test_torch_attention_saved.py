"""The attention ops' saved state (docs/pytorch.md, "Saved state"), on the CPU through liboctet_c.

- octet::attention_forward returns (o, lse, saved): lse is the natural-log row LSE (equal to
  float64 logsumexp of τ·QKᵀ on the FP64 oracle's path to 1e-12; within FP8 logit error otherwise),
  saved a uint8 tensor of the library's saved_bytes, the same size the fake implementation says;
  the size terms taken at one shape give the library's size at others, and under symbolic shapes
  the fake's size is an expression of the symbols (not an unbacked size).
- The backward op reads o, lse and saved only: with q, k, v overwritten after the forward it gives
  bitwise the gradients of the C ABI's re-running backward on the original q, k, v (fp8 matched and
  stale, bf16, GQA, causal, the FP64 oracle).
- Autograd keeps o, lse and saved, not q, k, v (the graph's saved tensors say so).
- torch.utils.checkpoint around the attention gives the uncheckpointed gradients bitwise.
- Direct calls of the ops with a tensor of the wrong size, dtype or shape raise an exception
  naming it, never a crash; double backward raises (no formula), as the op does; make_fx records
  the op (a tracer never takes the eager shortcut).
"""
import ctypes
import importlib
import math

import pytest
import torch
import torch.utils.checkpoint

from octet_torch_util import check_checkpointing_is_bitwise, rel  # noqa: F401  (also puts python/ on the path)
import octet
import octet.torch as ot
from octet import _lib
from octet.torch._backend import backend_for, dtype_code

FWD = torch.ops.octet.attention_forward
BWD = torch.ops.octet.attention_backward
NO_RESIDUAL = torch.zeros(0, dtype=torch.float64)


def heads_major(b, tq, tk, h, g, d, seed, dtype):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, tq, d, generator=gen, dtype=torch.float64).to(dtype)
    k = (torch.randn(b, g, tk, d, generator=gen, dtype=torch.float64) + 0.5).to(dtype)
    v = torch.randn(b, g, tk, d, generator=gen, dtype=torch.float64).to(dtype)
    d_o = torch.randn(b, h, tq, d, generator=gen, dtype=torch.float64).to(dtype)
    return q, k, v, d_o


def rerun_backward(q, k, v, d_o, config):
    """The C ABI's backward without `saved`: it re-runs the forward on q, k, v first."""
    causal, scale, delta, precision, formats = config
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    p = _lib.AttentionParams()
    p.batch, p.n_heads, p.seq_q, p.head_dim = q.shape[0], q.shape[1], q.shape[2], q.shape[3]
    p.n_kv_heads, p.seq_k = k.shape[1], k.shape[2]
    p.causal, p.softmax_scale, p.dtype = int(causal), scale, dtype_code(q)
    p.precision, p.delta, p.formats = precision.encode(), delta.encode(), formats.encode()
    for name, t in (("q", q), ("k", k), ("v", v), ("d_o", d_o), ("dq", dq), ("dk", dk),
                    ("dv", dv)):
        setattr(p, name, t.data_ptr())
    _lib.check(_lib.lib().octet_attention_backward(backend_for(q.device), ctypes.byref(p)))
    return dq, dk, dv


CASES = [  # b, tq, tk, h, g, d, causal, delta, precision, dtype
    (2, 33, 33, 4, 2, 16, True, "matched", "fp8", torch.float32),
    (1, 20, 45, 4, 1, 32, True, "stale", "fp8", torch.bfloat16),
    (2, 17, 17, 2, 2, 8, False, "matched", "bf16", torch.float32),
    (1, 9, 12, 2, 1, 4, True, "matched", "fp64", torch.float64),
]


@pytest.mark.parametrize("b,tq,tk,h,g,d,causal,delta,precision,dtype", CASES)
def test_backward_reads_the_saved_state_not_q_k_v(b, tq, tk, h, g, d, causal, delta, precision,
                                                   dtype):
    q, k, v, d_o = heads_major(b, tq, tk, h, g, d, seed=tq + tk, dtype=dtype)
    config = (causal, 0.0, delta, precision, "hybrid")
    expect = rerun_backward(q, k, v, d_o, config)
    o, lse, saved = FWD(q, k, v, NO_RESIDUAL, *config)
    assert saved.dtype == torch.uint8 and saved.numel() > 0
    for t in (q, k, v):
        t.fill_(float("nan"))  # the backward must not read them
    got = BWD(o, lse, saved, d_o, NO_RESIDUAL, g, tk, *config)
    for name, x, y in zip(("dq", "dk", "dv"), got, expect):
        assert x.shape == y.shape and x.dtype == y.dtype, name
        assert torch.equal(x, y), f"{name}: the saved-state backward differs from the re-run one"
        assert x.abs().sum() > 0, f"{name} is all zero (vacuous)"


def test_lse_is_the_row_logsumexp():
    q, k, v, _ = heads_major(1, 9, 12, 2, 1, 4, seed=3, dtype=torch.float64)
    tau = 1 / math.sqrt(4)
    s = tau * q @ k.transpose(-1, -2)  # one KV head for both query heads (GQA)
    mask = torch.ones(9, 12, dtype=torch.bool).tril(12 - 9)  # bottom-right causal
    want = s.masked_fill(~mask, float("-inf")).logsumexp(-1)
    _, lse, _ = FWD(q, k, v, NO_RESIDUAL, True, 0.0, "matched", "fp64", "hybrid")
    assert lse.dtype == torch.float64
    assert torch.allclose(lse, want, rtol=0, atol=1e-12)
    q32, k32, v32 = (t.float() for t in (q, k, v))
    _, lse8, _ = FWD(q32, k32, v32, NO_RESIDUAL, True, 0.0, "matched", "fp8", "hybrid")
    assert lse8.dtype == torch.float32
    err = (lse8.double() - want).abs().max().item()
    assert 0 < err < 0.1, f"FP8 LSE error {err}"  # E4M3 logits: close, not exact


def test_fake_size_is_the_library_size():
    from torch._subclasses.fake_tensor import FakeTensorMode
    q, k, v, _ = heads_major(2, 33, 33, 4, 2, 16, seed=1, dtype=torch.bfloat16)
    _, _, saved = FWD(q, k, v, NO_RESIDUAL, True, 0.0, "matched", "fp8", "hybrid")
    with FakeTensorMode() as mode:
        fq, fk, fv, fr = (mode.from_tensor(t) for t in (q, k, v, NO_RESIDUAL))
        _, flse, fsaved = FWD(fq, fk, fv, fr, True, 0.0, "matched", "fp8", "hybrid")
    assert fsaved.shape == saved.shape and fsaved.dtype == torch.uint8
    assert tuple(flse.shape) == (2, 4, 33)


@pytest.mark.parametrize("precision,dtype", [("fp8", torch.bfloat16), ("bf16", torch.float32),
                                             ("fp64", torch.float64)])
def test_size_terms_give_the_librarys_saved_bytes(precision, dtype):
    """The Python size formula over the library's terms (what the fake implementation writes as an
    expression of symbolic sizes), with the terms taken at one shape, equals
    octet_attention_saved_bytes at other batches, sequence lengths and both layouts."""
    att = importlib.import_module("octet.torch.attention")  # the module; octet.torch.attention is the function
    cpu = torch.device("cpu")
    for layout in ("bhsd", "bshd"):
        config = (True, 0.0, "matched", precision, "hybrid", layout)
        terms = att._size_terms(cpu, (2, 4, 2, 33, 33, 16), dtype, config)
        assert terms and all(len(t) == 4 for t in terms)
        for dims in ((1, 4, 2, 1, 1, 16), (3, 4, 2, 17, 300, 16), (2, 4, 2, 129, 128, 16)):
            p = att._params(*dims, dtype, *config)
            want = _lib.lib().octet_attention_saved_bytes(backend_for(cpu), p)
            assert want > 0 and att._terms_size(terms, dims) == want, dims
    lib, p = _lib.lib(), att._params(2, 4, 2, 33, 33, 16, dtype, *config)
    assert lib.octet_attention_saved_size_terms(backend_for(cpu), p, None, 1) == -1  # no room
    assert "capacity" in lib.octet_last_error().decode()
    p.n_seqs = 1  # packed sequences: the size depends on the offsets
    assert lib.octet_attention_saved_size_terms(backend_for(cpu), p, None, 0) == -1
    assert "packed" in lib.octet_last_error().decode()


def test_fake_size_under_symbolic_shapes_is_an_expression():
    """Under symbolic batch and sequence lengths the fake's saved has a size expressed in the
    symbols (not an unbacked size), equal to the library's at the traced sizes."""
    from torch.fx.experimental.proxy_tensor import make_fx
    q, k, v, _ = heads_major(2, 33, 21, 4, 2, 16, seed=1, dtype=torch.bfloat16)

    def forward(q, k, v, residual):
        return FWD(q, k, v, residual, False, 0.0, "matched", "fp8", "hybrid")[2]

    gm = make_fx(forward, tracing_mode="symbolic")(q, k, v, NO_RESIDUAL)
    sizes = [n.meta["val"][2].shape[0] for n in gm.graph.nodes
             if n.op == "call_function" and "attention_forward" in str(n.target)]
    assert len(sizes) == 1 and isinstance(sizes[0], torch.SymInt)
    symbols = {str(x) for x in sizes[0].node.expr.free_symbols}
    assert symbols and not any(x.startswith("u") for x in symbols), symbols  # u*: unbacked
    assert sizes[0].node.hint == forward(q, k, v, NO_RESIDUAL).numel()


def test_autograd_keeps_o_lse_and_saved_not_q_k_v():
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 16, h, 8, generator=gen).requires_grad_() for h in (4, 2, 2))
    o = ot.attention(q, k, v, causal=True)
    kept, seen, todo = [], set(), [o.grad_fn]
    while todo:  # every tensor any node of the graph keeps for its backward
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        try:
            kept += [t for t in (getattr(fn, "saved_tensors", None) or ()) if t is not None]
        except RuntimeError:
            pass
        kept += [getattr(fn, n) for n in dir(fn)
                 if n.startswith("_saved_") and isinstance(getattr(fn, n), torch.Tensor)]
        todo += [nxt for nxt, _ in fn.next_functions]
    shapes = [(tuple(t.shape), t.dtype) for t in kept]
    assert any(dt == torch.uint8 for _, dt in shapes), "the saved-state tensor is not kept"
    assert ((1, 4, 16), torch.float32) in shapes, "the LSE is not kept"
    # q, k, v come [B, T, H, D]-contiguous: the op runs in that layout ("bshd"), o too
    assert shapes.count(((1, 16, 4, 8), torch.float32)) == 1, "o once, and not q"
    assert ((1, 16, 2, 8), torch.float32) not in shapes, "k or v is kept"
    o.sum().backward()
    assert all(x.grad is not None and x.grad.abs().sum() > 0 for x in (q, k, v))


def test_activation_checkpointing_is_bitwise():
    gen = torch.Generator().manual_seed(4)
    base = [torch.randn(2, 24, h, 16, generator=gen) for h in (4, 2, 2)]
    d_o = torch.randn(2, 24, 4, 16, generator=gen)
    check_checkpointing_is_bitwise(lambda q, k, v: ot.attention(q, k, v, causal=True, delta="matched"),
                                   base, d_o)


def test_direct_op_calls_with_bad_tensors_raise():
    """torch.ops.octet.* called directly: every mismatch the library would read past is a Python
    exception naming the argument (never a crash, never silent garbage)."""
    q, k, v, d_o = heads_major(1, 16, 16, 2, 2, 8, seed=5, dtype=torch.float32)
    config = (True, 0.0, "matched", "fp8", "hybrid")
    o, lse, saved = FWD(q, k, v, NO_RESIDUAL, *config)
    bad_backward = {
        "saved": lambda: BWD(o, lse, saved[:-1], d_o, NO_RESIDUAL, 2, 16, *config),
        "saved ": lambda: BWD(o, lse, saved.float(), d_o, NO_RESIDUAL, 2, 16, *config),
        "d_o": lambda: BWD(o, lse, saved, d_o.bfloat16(), NO_RESIDUAL, 2, 16, *config),
        "lse": lambda: BWD(o, lse[..., :4].clone(), saved, d_o, NO_RESIDUAL, 2, 16, *config),
        "residual": lambda: BWD(o, lse, saved, d_o, torch.zeros(2), 2, 16, *config),
        "n_kv_heads": lambda: BWD(o, lse, saved, d_o, NO_RESIDUAL, 3, 16, *config),
        "seq_k must be >= 1, got 0": lambda: BWD(o, lse, saved, d_o, NO_RESIDUAL, 2, 0, *config),
        "one device": lambda: BWD(o, lse, saved.to("meta"), d_o, NO_RESIDUAL, 2, 16, *config),
    }
    for name, call in bad_backward.items():
        with pytest.raises((TypeError, ValueError), match=name.strip()):
            call()
    # another shape's state of the same size is not another size here: seq_k names it
    with pytest.raises(ValueError, match="saved"):
        BWD(o, lse, saved, d_o, NO_RESIDUAL, 2, 32, *config)
    bad_forward = {
        "v": lambda: FWD(q, k, v[:, :, :4].contiguous(), NO_RESIDUAL, *config),
        "k": lambda: FWD(q, k.double(), v, NO_RESIDUAL, *config),
        "residual": lambda: FWD(q, k, v, torch.zeros(2), *config),
        "dtype": lambda: FWD(q.half(), k.half(), v.half(), NO_RESIDUAL, *config),
        # a meta tensor among real ones would reach the fake implementation: garbage outputs
        "one device": lambda: FWD(q, k, v, torch.zeros(2, dtype=torch.float64, device="meta"), *config),
    }
    for name, call in bad_forward.items():
        with pytest.raises((TypeError, ValueError), match=name):
            call()


def test_double_backward_raises_as_the_op_does():
    q, k, v = (torch.randn(1, 8, 2, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    o = ot.attention(q, k, v, precision="fp64")
    (g,) = torch.autograd.grad(o.sum(), q, create_graph=True)  # allowed: no second order yet
    with pytest.raises(RuntimeError, match="double backward"):
        ((g ** 2).sum() + o.sum()).backward()  # a gradient penalty


@pytest.mark.parametrize("wrt", ["weight", "bias", "x"])
def test_double_backward_raises_for_a_parameter_upstream(wrt):
    """torch.autograd.grad of a gradient with respect to something upstream of the op (a projection's
    weight, bias or input) raises too: the second-order term through the op's backward is not there,
    and a gradient without it (or None) would be silently wrong."""
    torch.manual_seed(3)
    lin = torch.nn.Linear(8, 8).double()
    x = torch.randn(1, 3, 8, dtype=torch.float64, requires_grad=True)
    h = lin(x).view(1, 3, 2, 4)
    (gx,) = torch.autograd.grad(ot.attention(h, h, h, precision="fp64").sum(), x, create_graph=True)
    target = {"weight": lin.weight, "bias": lin.bias, "x": x}[wrt]
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(gx.square().sum(), target, allow_unused=True)


def test_make_fx_records_the_op():
    """A tracer (make_fx's dispatch mode) sees the custom op, not the eager shortcut."""
    from torch.fx.experimental.proxy_tensor import make_fx
    q, k, v = (torch.randn(1, 8, 2, 8) for _ in range(3))
    f = lambda q, k, v: ot.attention(q, k, v, causal=True)
    g = make_fx(f)(q, k, v)
    assert any("octet" in str(n.target) for n in g.graph.nodes)
    assert torch.equal(g(q, k, v), f(q, k, v))


@pytest.mark.parametrize("precision", ["fp8", "bf16"])
def test_forward_op_passes_opcheck(precision):
    """torch.library.opcheck on the dense forward op: schema, autograd registration, fake tensor,
    and compiled equal to eager, which compares every byte of o, the LSE and the saved state."""
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(2, 4, 9, 16, generator=gen, requires_grad=True)  # [B, H, T, D]
    k = torch.randn(2, 2, 7, 16, generator=gen, requires_grad=True)
    v = torch.randn(2, 2, 7, 16, generator=gen, requires_grad=True)
    junk = [torch.full((1 << 20,), 0xAB, dtype=torch.uint8) for _ in range(4)]  # unwritten bytes differ
    del junk
    residual = torch.empty(0, dtype=torch.float64)
    args = (q, k, v, residual, True, 0.0, "matched", precision, "hybrid", "bhsd")
    result = torch.library.opcheck(torch.ops.octet.attention_forward.default, args)
    assert set(result.values()) == {"SUCCESS"}, result
