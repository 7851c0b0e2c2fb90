"""torch.compile(fullgraph=True) of octet.torch (CPU; docs/pytorch.md, "torch.compile"): the custom
ops' fake implementations let Dynamo trace without a graph break, AOTAutograd traces their
registered backward, and the compiled code gives the eager code's results.

octet's ops are the same calls compiled or not and the CPU reference is deterministic, so where
the torch ops around them are exact (views, splits, one add) compiled equals eager bit for bit:
a linear alone (BF16 with a bias: Inductor fuses the bias add and drops intermediate roundings,
which once made ~1/8 of the outputs differ by a BF16 unit), an attention alone on strided inputs,
and several training steps of a block whose tensor-delayed scales advance from step to step (a
copy of the eager block, compiled: its octet state must evolve exactly as the eager one's). The
transformer block with a LayerNorm (which Inductor reduces in another order) is held to
assert_close. Backends: aot_eager (tracing, fake implementations, autograd) and inductor (also
code generation; where the ASan runtime is preloaded — the sanitized CI run — its compiler
subprocesses are started without the preload). Under dynamic shapes (dynamic=True, mark_dynamic)
linears and attention compile into one graph without fullgraph too, the attention's graph held to
one head_dim.
"""
import copy

import pytest
import torch

from octet_torch_util import compiling, rel  # noqa: F401  (also puts python/ on the path)
import octet.torch as ot

BACKENDS = ["aot_eager", "inductor"]


class Block(torch.nn.Module):
    """x + proj(attention(split(qkv(norm(x))))), GQA, causal."""

    def __init__(self, d=64, heads=4, kv_heads=2, norm=True, bias=True):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.norm = torch.nn.LayerNorm(d) if norm else torch.nn.Identity()
        self.qkv = torch.nn.Linear(d, (heads + 2 * kv_heads) * self.hd, bias=bias)
        self.proj = torch.nn.Linear(d, d, bias=bias)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).split(
            [self.heads * self.hd, self.kv_heads * self.hd, self.kv_heads * self.hd], dim=-1)
        o = ot.attention(q.view(b, t, self.heads, self.hd), k.view(b, t, self.kv_heads, self.hd),
                         v.view(b, t, self.kv_heads, self.hd), causal=True, delta="matched")
        return x + self.proj(o.reshape(b, t, -1))


def run(fn, params, *inputs):
    """(output, input grads, param grads) of fn(*inputs) with loss Σ out² (in float32)."""
    xs = [x.detach().clone().requires_grad_() for x in inputs]
    y = fn(*xs)
    grads = torch.autograd.grad(y.float().square().sum(), xs + list(params))
    return y.detach(), grads[:len(xs)], grads[len(xs):]


@pytest.mark.parametrize("backend", BACKENDS)
def test_compile_fullgraph_matches_eager(backend):
    torch.manual_seed(0)
    block = ot.convert_to_float8(Block(), recipe="tensor-current", format="hybrid")
    x = torch.randn(2, 16, 64)
    with compiling(backend):
        got = run(torch.compile(block, fullgraph=True, backend=backend), block.parameters(), x)
    want = run(block, block.parameters(), x)
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
    for a, b in zip(got[1] + got[2], want[1] + want[2]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("bias", [True, False])
def test_compiled_linear_is_eager_bitwise(backend, dtype, bias):
    torch.manual_seed(1)
    lin = ot.Float8Linear(64, 96, bias=bias, recipe="tensor-current", format="hybrid")
    x = torch.randn(3, 40, 64).to(dtype)
    with compiling(backend):
        got = run(torch.compile(lin, fullgraph=True, backend=backend), lin.parameters(), x)
    want = run(lin, lin.parameters(), x)
    assert torch.equal(got[0], want[0]), int((got[0] != want[0]).sum())
    assert torch.equal(got[1][0], want[1][0])          # dx
    assert torch.equal(got[2][0], want[2][0])          # dw (FP8 GEMM)
    if bias:  # db: a sum over rows, in whatever order the compiled reduction takes
        torch.testing.assert_close(got[2][1], want[2][1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("delta", ["matched", "stale"])
def test_compiled_attention_strided_is_eager_bitwise(backend, delta):
    gen = torch.Generator().manual_seed(2)
    b, t, h, g, d = 2, 24, 4, 2, 16

    def fn(packed):  # packed [B, H + 2G, T, D]: q, k, v are strided views of one tensor
        q, k, v = packed.transpose(1, 2).split([h, g, g], dim=2)
        return ot.attention(q, k, v, causal=True, delta=delta)

    packed = torch.randn(b, h + 2 * g, t, d, generator=gen).bfloat16()
    with compiling(backend):
        got = run(torch.compile(fn, fullgraph=True, backend=backend), [], packed)
    want = run(fn, [], packed)
    assert torch.equal(got[0], want[0])
    assert torch.equal(got[1][0], want[1][0])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("recipe", ["tensor-delayed", "tensor-current"])
def test_compiled_training_steps_are_eager_bitwise(backend, recipe):
    """A block without norm and biases (only exact torch ops around octet's), trained a few steps
    compiled and eagerly from the same start: outputs, gradients and the quantizer state equal at
    every step, while the delayed scales change from step to step."""
    torch.manual_seed(3)
    eager = ot.convert_to_float8(Block(norm=False, bias=False), recipe=recipe, format="hybrid")
    twin = copy.deepcopy(eager)  # its own octet state, starting from eager's
    with compiling(backend):
        compiled = torch.compile(twin, fullgraph=True, backend=backend)
        states = []
        for step in range(4):
            x = torch.randn(2, 16, 64, dtype=torch.bfloat16)
            results = []
            for module, fn in ((eager, eager), (twin, compiled)):
                out, dx, dparams = run(fn, module.parameters(), x)
                with torch.no_grad():
                    for p, dp in zip(module.parameters(), dparams):
                        p -= 0.05 * dp
                ot.update_scales(module)
                results.append((out, dx[0], *dparams, module.qkv.quant_state()))
            for a, b in zip(*results):
                assert torch.equal(a, b), f"step {step}"
            states.append(results[0][-1])
    if recipe == "tensor-delayed":
        assert not torch.equal(states[0], states[-1])  # the state really advanced


def test_residual_runs_eagerly_inside_a_compiled_graph():
    """return_residual=True: the backward fills a tensor the forward made, which a graph cannot
    express, so that call runs eagerly (a graph break); fullgraph=True refuses it."""
    q = torch.randn(1, 32, 2, 16)

    def fn(q):
        o, residual = ot.attention(q, q, q, causal=True, delta="stale", return_residual=True)
        return 2 * o, residual

    want = []
    for f in (fn, torch.compile(fn, backend="aot_eager")):
        qi = q.clone().requires_grad_()
        o, residual = f(qi)
        o.square().sum().backward()
        want.append((o.detach(), qi.grad, residual))
    for a, b in zip(*want):
        assert torch.equal(a, b)
    assert want[0][2][1] > 0  # the stale delta's residual was filled
    torch._dynamo.reset()
    with pytest.raises(Exception, match="disable"):
        torch.compile(fn, fullgraph=True, backend="aot_eager")(q)


def test_float8_linears_of_many_layers_compile_once():
    # One compiled code for every layer: a Float8Linear's registry id reaches the ops as a tensor,
    # so torch.compile does not specialize on it (an int attribute recompiled per layer, and the
    # recompile limit sent a Hugging Face model's later layers to eager).
    torch.manual_seed(0)
    layers = [ot.Float8Linear(32, 32, bias=False) for _ in range(3)]
    x = torch.randn(4, 32)
    step = torch.compile(lambda layer, x: layer(x), backend="eager", fullgraph=True)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(error_on_recompile=True):
        for layer in layers:
            assert torch.equal(step(layer, x), layer(x))
    assert "_octet_layer_t" not in layers[0].state_dict()


def test_float8_linear_built_on_meta_computes_after_to_empty():
    # The registry id stays a CPU tensor under torch.device("meta") (FSDP2's and torchtitan's meta
    # init): on meta the op would dispatch to its fake implementation and return garbage.
    torch.manual_seed(0)
    eager = ot.Float8Linear(32, 16, bias=False)
    with torch.device("meta"):
        meta = ot.Float8Linear(32, 16, bias=False)
    meta.to_empty(device="cpu")
    meta.load_state_dict(eager.state_dict())
    x = torch.randn(4, 32)
    assert meta._octet_layer_t.device.type == "cpu"
    assert torch.equal(meta(x), eager(x))


def test_linears_compile_into_one_graph():
    """The fake implementation knows the size of Float8Linear's saved state from the spec the op is
    given (an output of unknown size broke the graph at every linear: on the GPU a Hugging Face
    Llama ran at 0.6x its speed)."""
    model = torch.nn.Sequential(ot.Float8Linear(32, 64), torch.nn.GELU(), ot.Float8Linear(64, 32))
    x = torch.randn(4, 8, 32, requires_grad=True)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons


@pytest.mark.parametrize("fullgraph", [False, True])
def test_dynamic_shapes_compile_into_one_graph(fullgraph):
    """Under dynamic shapes saved's size is an expression of the row count (the library's size
    terms, octet_linear_saved_size_terms), not an unbacked size: the linears compile into one
    graph without fullgraph too, and match eager for two row counts."""
    torch.manual_seed(3)
    model = torch.nn.Sequential(ot.Float8Linear(32, 64), torch.nn.GELU(), ot.Float8Linear(64, 32))
    torch._dynamo.reset()
    x = torch.randn(7, 32)
    torch._dynamo.mark_dynamic(x, 0)  # the row count traced as a symbol
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=False):
        explained = torch._dynamo.explain(model)(x)
        assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons
        torch._dynamo.reset()
        compiled = torch.compile(model, fullgraph=fullgraph, dynamic=True, backend="aot_eager")
        for rows in (8, 12, 300):
            x = torch.randn(rows, 32)
            got, want = run(compiled, model.parameters(), x), run(model, model.parameters(), x)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1][0], want[1][0])


@pytest.mark.parametrize("fullgraph", [False, True])
def test_attention_under_dynamic_shapes_compiles_into_one_graph(fullgraph):
    """Under dynamic batch and sequence lengths the attention's saved state has a size expressed
    in them (the library's size terms, octet_attention_saved_size_terms), not an unbacked size:
    a block of linears and octet attention compiles into one graph without fullgraph too, and
    matches eager at other lengths."""
    torch.manual_seed(5)
    block = Block()
    x = torch.randn(2, 9, 64)
    torch._dynamo.mark_dynamic(x, 0)
    torch._dynamo.mark_dynamic(x, 1)
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=False):
        torch._dynamo.reset()
        explained = torch._dynamo.explain(block)(x)
        assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons
        torch._dynamo.reset()
        compiled = torch.compile(block, fullgraph=fullgraph, dynamic=True, backend="aot_eager")
        for b, t in ((2, 10), (3, 17), (1, 40)):
            x = torch.randn(b, t, 64)
            got, want = run(compiled, block.parameters(), x), run(block, block.parameters(), x)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1][0], want[1][0])
            for g, w in zip(got[2], want[2]):
                assert torch.equal(g, w)


def test_attention_graph_is_specialized_to_its_head_dim():
    """head_dim picks the CUDA implementation and so the size terms (the flash kernels take 64 and
    128): under dynamic=True a graph holds one head_dim (a guard), and another compiles anew; other
    lengths reuse it."""
    from torch._dynamo.testing import CompileCounter

    def attn(q, k, v):
        return ot.attention(q, k, v, causal=True)

    counter = CompileCounter()
    torch._dynamo.reset()
    compiled = torch.compile(attn, dynamic=True, backend=counter)
    for t, d in ((9, 16), (20, 16), (9, 32), (31, 32)):
        q, k, v = (torch.randn(2, t, h, d) for h in (4, 2, 2))
        assert torch.equal(compiled(q, k, v), attn(q, k, v)), (t, d)
    assert counter.frame_count == 2, counter.frame_count


def test_data_dependent_row_counts_compile_into_one_graph():
    """A row count known only at run time (the rows a routing selects, as a mixture of experts
    does): Float8Linear does not branch on it, so fullgraph=True compiles it, and the ops take the
    selection of no row too (empty output, zero weight gradient), equal to eager."""
    torch.manual_seed(4)
    model = torch.nn.Sequential(ot.Float8Linear(32, 48), torch.nn.GELU(), ot.Float8Linear(48, 16))

    def routed(x):
        return model(x[x[:, 0] > 0])

    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        torch._dynamo.reset()
        compiled = torch.compile(routed, fullgraph=True, backend="aot_eager")
        for x in (torch.randn(40, 32), -torch.rand(9, 32)):  # some rows selected, then none
            got, want = run(compiled, model.parameters(), x), run(routed, model.parameters(), x)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1][0], want[1][0])
            for g, w in zip(got[2], want[2]):
                assert torch.equal(g, w)
        assert want[0].shape == (0, 16) and not any(p.abs().sum() for p in want[2][:1])
