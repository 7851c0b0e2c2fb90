"""octet.torch.Float8Linear and convert_to_float8 on the CPU (python/octet, docs/pytorch.md).

- Float8Linear vs nn.Linear (float64 reference) within a derived FP8 error bound, forward and
  both backward GEMMs, for recipes tensor-current, tensor-delayed, row, block and formats e4m3,
  hybrid. Round to nearest in a format with p mantissa bits has relative error <= u = 2^-(p+1)
  (E4M3 2^-4, E5M2 2^-3) above the smallest normal; below it the absolute error is at most half
  the subnormal spacing at the block's scale, <= amax / fp8_max · 2^-(bias + p) / 2 with the
  tensor's amax (a finer recipe's block amax is smaller). So each product a_k b_k of a GEMM is off
  by at most (u_a + u_b + u_a u_b)|a_k b_k| + |b_k| Δ_a + |a_k| Δ_b + Δ_a Δ_b; summed over k, plus
  FP32 accumulation (well below the slack of 1e-5 relative used here).
- convert_to_float8 keeps state_dict keys (and values), respects module_filter, and a tiny model
  trains (loss falls) with tensor-delayed (update_scales each step) and block scaling.
- tensor-delayed state: quant_state round-trips into a fresh layer (same outputs), not in the
  state_dict.
- Bad input raises a Python exception naming the problem.
"""
import pytest
import torch

from octet_torch_util import rel  # noqa: F401  (also puts python/ on the path)
import octet
import octet.torch as ot

FMT = {"e4m3": (2.0 ** -4, 448.0, 2.0 ** -9), "e5m2": (2.0 ** -3, 57344.0, 2.0 ** -16)}


def gemm_bound(a, b, fa, fb):
    """Elementwise bound of |A Bᵀ − Â B̂ᵀ| (a [M, K], b [N, K]) for FP8 formats fa, fb."""
    (ua, ma, sa), (ub, mb, sb) = FMT[fa], FMT[fb]
    da = a.abs().max() / ma * sa / 2  # half the subnormal spacing at the tensor's scale
    db = b.abs().max() / mb * sb / 2
    aa, bb = a.abs(), b.abs()
    bound = (ua + ub + ua * ub) * aa @ bb.T + da * bb.sum(1)[None, :] + db * aa.sum(1)[:, None]
    return bound + a.shape[1] * da * db + 1e-5 * (aa @ bb.T)


@pytest.mark.parametrize("recipe", ["tensor-current", "tensor-delayed", "row", "block"])
@pytest.mark.parametrize("fmt", ["e4m3", "hybrid"])
def test_within_fp8_bound(recipe, fmt):
    gen = torch.Generator().manual_seed(0)
    m, k, n = 37, 160, 48  # k > 128: two block-scale tiles, one partial
    x = torch.randn(m, k, generator=gen) * torch.rand(m, 1, generator=gen) * 4
    dy = torch.randn(m, n, generator=gen)
    lin = ot.Float8Linear(k, n, recipe=recipe, format=fmt)
    xg = x.clone().requires_grad_()
    y = lin(xg)
    y.backward(dy)
    w, b = lin.weight.detach().double(), lin.bias.detach().double()
    xd, dyd = x.double(), dy.double()
    g = "e5m2" if fmt == "hybrid" else "e4m3"
    checks = [("y", y.detach() - b, xd @ w.T, gemm_bound(xd, w, "e4m3", "e4m3")),
              ("dx", xg.grad, dyd @ w, gemm_bound(dyd, w.T, g, "e4m3")),
              ("dw", lin.weight.grad, dyd.T @ xd, gemm_bound(dyd.T, xd.T, g, "e4m3"))]
    for name, got, want, bound in checks:
        err = (got.double() - want).abs()
        assert bool((err <= bound).all()), (name, float((err / bound).max()))
        assert rel(got, want) > 0  # FP8 really ran (an FP32 GEMM would be exact here)
    torch.testing.assert_close(lin.bias.grad, dy.sum(0))


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 64),
                               torch.nn.GELU(), torch.nn.Linear(64, 8))


def test_convert_keeps_state_dict_and_filter():
    model = mlp()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    params = list(model.parameters())
    ot.convert_to_float8(model, recipe="row", module_filter=lambda m, fqn: fqn != "4")
    assert isinstance(model[0], ot.Float8Linear) and isinstance(model[2], ot.Float8Linear)
    assert type(model[4]) is torch.nn.Linear  # filtered out
    after = model.state_dict()
    assert list(after) == list(before)
    assert all(torch.equal(after[k], before[k]) for k in before)
    assert list(model.parameters()) == params  # the same Parameter objects
    model.load_state_dict(mlp().state_dict())  # an nn.Linear checkpoint loads as it is


@pytest.mark.parametrize("recipe", ["tensor-delayed", "block"])
def test_tiny_model_trains(recipe):
    model = ot.convert_to_float8(mlp(), recipe=recipe, format="hybrid")
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(128, 32, generator=gen)
    target = torch.sin(x[:, :8] * 2) + x[:, 8:16] * x[:, 16:24]
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    losses = []
    for _ in range(40):
        loss = torch.nn.functional.mse_loss(model(x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        ot.update_scales(model)
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses[::10]


def test_delayed_state_round_trips():
    gen = torch.Generator().manual_seed(2)
    a = ot.Float8Linear(16, 16, recipe="tensor-delayed", amax_history_len=4)
    for scale in (1.0, 8.0, 2.0):  # three steps of different amax
        a(torch.randn(8, 16, generator=gen) * scale).sum().backward()
        a.update_scales()
    state = a.quant_state()
    assert state.numel() > 9  # 3 slots, each [n, history..., scale, overflow count]
    b = ot.Float8Linear(16, 16, recipe="tensor-delayed", amax_history_len=4)
    b.load_state_dict(a.state_dict())
    assert list(b.state_dict()) == ["weight", "bias"]  # the quantizer state is not in it
    x = torch.randn(8, 16, generator=gen) * 0.1  # below the history's amax: its scale shows
    assert not torch.equal(a(x), b(x))
    b.load_quant_state(state)
    assert torch.equal(a(x), b(x))


def test_bad_input_raises():
    lin = ot.Float8Linear(16, 8)
    with pytest.raises(ValueError, match=r"\[\.\.\., 16\]"):
        lin(torch.randn(4, 15))
    with pytest.raises(TypeError, match="torch.int64"):
        lin(torch.ones(4, 16, dtype=torch.int64))
    with pytest.raises(octet.OctetError, match="unknown recipe 'tensorwise'"):
        ot.Float8Linear(16, 8, recipe="tensorwise")
    with pytest.raises(octet.OctetError, match="amax_history_len"):
        ot.Float8Linear(16, 8, recipe="tensor-delayed", amax_history_len=0)
    with pytest.raises(octet.OctetError):
        lin.load_quant_state([1.0, 2.0])  # a stateless recipe has no state to load
