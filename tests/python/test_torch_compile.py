"""torch.compile(fullgraph=True) of a transformer block that calls octet.torch.attention and
octet.torch.Float8Linear (CPU; docs/pytorch.md): the custom ops' fake implementations let Dynamo
trace the whole block without a graph break, AOTAutograd traces their registered backward, and
the compiled block gives the eager block's output and gradients (the ops themselves are the same
calls; only the torch ops around them may be fused differently). Backends: aot_eager (tracing,
fake implementations, autograd) and inductor (also code generation; skipped where the ASan
runtime is preloaded — the sanitized CI run — since its C++ compiler subprocesses inherit it)."""
import os

import pytest
import torch

from octet_torch_util import rel  # noqa: F401  (also puts python/ on the path)
import octet.torch as ot


class Block(torch.nn.Module):
    def __init__(self, d=64, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.norm = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, (heads + 2 * kv_heads) * self.hd)
        self.proj = torch.nn.Linear(d, d)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).split(
            [self.heads * self.hd, self.kv_heads * self.hd, self.kv_heads * self.hd], dim=-1)
        o = ot.attention(q.view(b, t, self.heads, self.hd), k.view(b, t, self.kv_heads, self.hd),
                         v.view(b, t, self.kv_heads, self.hd), causal=True, delta="matched")
        return x + self.proj(o.reshape(b, t, -1))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_matches_eager(backend):
    if backend == "inductor" and "asan" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("inductor's compiler subprocesses would inherit the ASan preload")
    torch.manual_seed(0)
    block = ot.convert_to_float8(Block(), recipe="tensor-current", format="hybrid")
    x = torch.randn(2, 16, 64)
    grads = []
    outs = []
    for fn in (block, torch.compile(block, fullgraph=True, backend=backend)):
        xi = x.clone().requires_grad_()
        y = fn(xi)
        y.square().sum().backward()
        outs.append(y.detach())
        grads.append([xi.grad] + [p.grad.clone() for p in block.parameters()])
        block.zero_grad()
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-5)
    for a, b in zip(grads[1], grads[0]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
