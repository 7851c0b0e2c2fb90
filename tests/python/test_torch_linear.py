"""octet.torch.Float8Linear and convert_to_float8 on the CPU (python/octet, docs/pytorch.md).

- Float8Linear vs nn.Linear (float64 reference) within the derived FP8 error bound of
  octet_torch_util.gemm_bound, forward and both backward GEMMs, for recipes tensor-current,
  tensor-delayed, row, block and formats e4m3, hybrid.
- convert_to_float8 keeps state_dict keys (and values), respects module_filter, and a tiny model
  trains (loss falls) with tensor-delayed (update_scales each step) and block scaling.
- tensor-delayed state: quant_state round-trips into a fresh layer (same outputs), not in the
  state_dict; a deep copy starts from its original's state and then keeps its own.
- An empty input gives nn.Linear's empty result and zero parameter gradients, the delayed state
  untouched.
- Bad input raises a Python exception naming the problem.
"""
import copy
import pickle

import pytest
import torch

from octet_torch_util import check_linear_bound
import octet
import octet.torch as ot


@pytest.mark.parametrize("recipe", ["tensor-current", "tensor-delayed", "row", "block"])
@pytest.mark.parametrize("fmt", ["e4m3", "hybrid"])
def test_within_fp8_bound(recipe, fmt):
    gen = torch.Generator().manual_seed(0)
    m, k, n = 37, 160, 48  # k > 128: two block-scale tiles, one partial
    x = torch.randn(m, k, generator=gen) * torch.rand(m, 1, generator=gen) * 4
    dy = torch.randn(m, n, generator=gen)
    check_linear_bound(ot.Float8Linear(k, n, recipe=recipe, format=fmt), x, dy, fmt)


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


@pytest.mark.parametrize("how", ["deepcopy", "copy", "pickle"])
def test_copy_gets_its_own_state(how):
    gen = torch.Generator().manual_seed(3)
    a = ot.Float8Linear(16, 16, recipe="tensor-delayed", amax_history_len=4)
    a(torch.randn(8, 16, generator=gen) * 4).sum().backward()
    a.update_scales()
    b = {"deepcopy": copy.deepcopy, "copy": copy.copy,
         "pickle": lambda m: pickle.loads(pickle.dumps(m))}[how](a)
    assert b._octet_layer != a._octet_layer
    assert torch.equal(b.quant_state(), a.quant_state())  # starts from the original's state
    b(torch.randn(8, 16, generator=gen) * 100).sum().backward()
    b.update_scales()
    assert not torch.equal(b.quant_state(), a.quant_state())  # and moves on alone
    del a
    x = torch.randn(8, 16, generator=gen)
    assert b(x).shape == (8, 16)  # still works with the original gone


def test_autocast_computes_in_its_dtype():
    lin = ot.Float8Linear(16, 8)
    x = torch.randn(4, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = lin(x)
    assert y.dtype == torch.bfloat16
    assert torch.equal(y, lin(x.bfloat16()))
    # as nn.Linear: autocast leaves float64 alone (computed in float32, returned as float64) and
    # an integer input is refused, not cast
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert lin(x.double()).dtype == torch.float64
        with pytest.raises(TypeError, match="torch.int64"):
            lin(torch.ones(4, 16, dtype=torch.int64))


@pytest.mark.parametrize("recipe", ["tensor-current", "tensor-delayed"])
def test_empty_input_is_nn_linears_empty_result(recipe):
    lin = ot.Float8Linear(16, 8, recipe=recipe)
    before = copy.deepcopy(lin.quant_state()) if recipe == "tensor-delayed" else None
    x = torch.randn(2, 0, 16, requires_grad=True)
    y = lin(x)
    assert y.shape == (2, 0, 8) and y.dtype == x.dtype
    y.sum().backward()
    assert x.grad.shape == x.shape
    assert torch.equal(lin.weight.grad, torch.zeros_like(lin.weight))
    assert torch.equal(lin.bias.grad, torch.zeros_like(lin.bias))
    if before is not None:  # no amax of an empty tensor enters the history
        assert torch.equal(lin.quant_state(), before)


def test_unknown_recipe_or_format_is_refused_before_the_weight_exists(monkeypatch):
    built = []
    init = torch.nn.Linear.__init__
    monkeypatch.setattr(torch.nn.Linear, "__init__", lambda self, *a, **k: (built.append(a), init(self, *a, **k)))
    for kwargs, message in (({"recipe": "tensorwise"}, "unknown recipe 'tensorwise'"),
                            ({"format": "e3m4"}, "e3m4")):
        with pytest.raises(octet.OctetError, match=message):
            ot.Float8Linear(16, 8, **kwargs)
        assert built == [], f"{kwargs}: the weight was allocated before the spec was checked"
    ot.Float8Linear(16, 8)
    assert built == [(16, 8)]


def test_bad_input_raises():
    lin = ot.Float8Linear(16, 8)
    with pytest.raises(ValueError, match=r"\[\.\.\., 16\]"):
        lin(torch.randn(4, 15))
    with pytest.raises(TypeError, match="torch.int64"):
        lin(torch.ones(4, 16, dtype=torch.int64))
    with pytest.raises(octet.OctetError, match="unknown recipe 'tensorwise'"):
        ot.Float8Linear(16, 8, recipe="tensorwise")
    with pytest.raises(ValueError, match=r"amax_history_len must be in \[1, 1048576\], got 0$"):
        ot.Float8Linear(16, 8, recipe="tensor-delayed", amax_history_len=0)
    with pytest.raises(ValueError, match=r"amax_history_len must be in \[1, 1048576\], got 1073741824"):
        ot.Float8Linear(16, 8, recipe="tensor-delayed", amax_history_len=2**30)  # a C int, 4 GiB a slot
    with pytest.raises(octet.OctetError):
        lin.load_quant_state([1.0, 2.0])  # a stateless recipe has no state to load
    with pytest.raises(ValueError, match="amax_history_len must be in"):  # would wrap as a C int
        ot.Float8Linear(16, 8, recipe="tensor-delayed", amax_history_len=10**12)
    for margin in (33, -33, -2**32):  # octet's rule [-32, 32], checked before the weight exists
        with pytest.raises(ValueError, match=rf"margin must be in \[-32, 32\], got {margin}$"):
            ot.Float8Linear(16, 8, margin=margin)
    with pytest.raises(TypeError, match="recipe must be a str"):
        ot.Float8Linear(16, 8, recipe=None)


@pytest.mark.parametrize("name", ["amax_history_len", "margin"])
@pytest.mark.parametrize("value", [2.5, 16.0, "16", None, True, False, torch.tensor(1.0),
                                   torch.tensor(4), torch.tensor(True), torch.tensor([4])], ids=repr)
def test_an_int_setting_of_another_type_is_a_type_error(name, value):
    """amax_history_len and margin cross to octet as C ints: a float, a str, None or a tensor (of
    any dtype or shape) is a TypeError naming the setting (not a ValueError: the type is wrong, not
    the value), and so is a bool, which Python counts as an int."""
    with pytest.raises(TypeError, match=rf"^Float8Linear: {name} must be an int, got "):
        ot.Float8Linear(16, 8, recipe="tensor-delayed", **{name: value})


def test_an_int_setting_takes_an_integer_type():
    """A NumPy integer (what a config loader or a sweep may hand over) is taken as its value."""
    np = pytest.importorskip("numpy")
    gen = torch.Generator().manual_seed(2)
    xs = [torch.randn(3, 16, generator=gen) * (i + 1) for i in range(6)]

    def run(history, margin):  # 6 steps through a history of 4: outputs and the final state
        torch.manual_seed(0)
        lin = ot.Float8Linear(16, 8, recipe="tensor-delayed", amax_history_len=history,
                              margin=margin)
        assert lin._octet_settings[2:] == (4, "max", 1)
        assert type(lin._octet_settings[2]) is int and type(lin._octet_settings[4]) is int
        ys = []
        for x in xs:
            ys.append(lin(x))
            lin.update_scales()
        return torch.stack(ys), lin.quant_state()

    want = run(4, 1)
    got = run(np.int64(4), np.int32(1))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    with pytest.raises(TypeError, match="margin must be an int, got bool"):
        ot.Float8Linear(16, 8, margin=np.bool_(True))


@pytest.mark.parametrize("recipe", ["tensor-current", "row", "block", "mx", "unit"])
def test_amax_history_len_is_checked_for_every_recipe(recipe):
    """A recipe without an amax history ignores amax_history_len, but the length is checked for
    every recipe, as octet's QuantConfig checks it (the C API's linear spec, a training config's
    precision.amax_history_len): one out of range is a ValueError that says the recipe keeps no
    history; one in range changes nothing."""
    for bad in (0, -1, 2**20 + 1):
        with pytest.raises(ValueError, match=rf"amax_history_len must be in \[1, 1048576\], got "
                                             rf"{bad} \(recipe '{recipe}' keeps no amax history"):
            ot.Float8Linear(16, 8, recipe=recipe, amax_history_len=bad)
    x = torch.randn(5, 16, generator=torch.Generator().manual_seed(1))
    ys = []
    for history in (1, 1024, 2**20):
        torch.manual_seed(0)
        ys.append(ot.Float8Linear(16, 8, recipe=recipe, amax_history_len=history)(x))
    assert torch.equal(ys[0], ys[1]) and torch.equal(ys[1], ys[2])


def test_double_backward_raises():
    """A gradient of the gradient through Float8Linear raises (its backward has no formula of its
    own, eager or compiled) instead of silently losing the second-order term."""
    lin = ot.Float8Linear(16, 8, bias=False)
    x = torch.randn(4, 16, requires_grad=True)
    y = lin(x)
    (g,) = torch.autograd.grad(y.square().sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        ((g ** 2).sum() + y.sum()).backward()


@pytest.mark.parametrize("wrt", ["first.weight", "first.bias", "last.weight"])
def test_double_backward_raises_for_a_parameter(wrt):
    """torch.autograd.grad of an input gradient with respect to one parameter raises as well
    (without the weight and input as inputs of the raising node, autograd would prune it and
    return None or a gradient missing the second-order term)."""
    m = torch.nn.Sequential(ot.Float8Linear(8, 8), torch.nn.Tanh(), ot.Float8Linear(8, 8))
    x = torch.randn(4, 8, requires_grad=True)
    (g,) = torch.autograd.grad(m(x).sum(), x, create_graph=True)
    target = {"first.weight": m[0].weight, "first.bias": m[0].bias, "last.weight": m[2].weight}[wrt]
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(g.square().sum(), target, allow_unused=True)


def test_direct_ops_check_what_the_library_reads():
    # The custom ops are callable by anyone (torch.ops.octet.*): every tensor the library reads
    # through a pointer is checked first (a short dy was read past its end: garbage or a crash).
    lin = ot.Float8Linear(64, 32)
    x, w, layer = torch.randn(8, 64), lin.weight.detach(), lin._octet_layer_t
    key = "tensor-current,hybrid,1024,max,0"  # the layer's settings (linear.py _settings_key)
    fwd, bwd = torch.ops.octet.linear_forward, torch.ops.octet.linear_backward
    y, saved = fwd(x, w, layer, key)
    with pytest.raises(ValueError, match="settings 'row,hybrid,1024,max,0' are not the layer's"):
        fwd(x, w, layer, "row,hybrid,1024,max,0")
    assert y.shape == (8, 32) and saved.dtype == torch.uint8 and saved.dim() == 1
    with pytest.raises(ValueError, match=r"the layer is \[32, 64\].*dy \(1, 1\)"):
        bwd(saved, torch.randn(1, 1), layer, 64)
    with pytest.raises(ValueError, match="in_features 63"):
        bwd(saved, torch.randn(8, 32), layer, 63)
    with pytest.raises(TypeError, match="dy must be float32 or bfloat16"):
        bwd(saved, torch.randn(8, 32, dtype=torch.float64), layer, 64)
    # saved is read through its pointer: a short one, or one of another row count, is refused
    with pytest.raises(ValueError, match=r"saved must be the uint8 \[\d+\] tensor"):
        bwd(saved[:-1], torch.randn(8, 32), layer, 64)
    with pytest.raises(ValueError, match="for 4 rows"):
        bwd(saved, torch.randn(4, 32), layer, 64)
    with pytest.raises(ValueError, match="saved must be"):
        bwd(saved.float(), torch.randn(8, 32), layer, 64)
    # a strided view of the right size is read as the tensor it shows, not past it
    dy = torch.randn(8, 32)
    spread = torch.zeros(2 * saved.numel(), dtype=torch.uint8)
    spread[::2] = saved
    assert all(torch.equal(a, b) for a, b in zip(bwd(spread[::2], dy, layer, 64), bwd(saved, dy, layer, 64)))
    with pytest.raises(TypeError, match="w must be float32"):
        fwd(x, w.bfloat16(), layer, key)
    with pytest.raises(TypeError, match="x must be float32 or bfloat16"):
        fwd(x.half(), w, layer, key)
    with pytest.raises(ValueError, match="no Float8Linear layer has the id"):
        fwd(x, w, torch.tensor(12345), key)
    # a meta tensor among real ones would reach the fake implementation (uninitialised outputs)
    with pytest.raises(ValueError, match="layer id on the cpu"):
        fwd(x, w, layer.to("meta"), key)
    with pytest.raises(ValueError, match="must be on one device"):
        fwd(x, w.to("meta"), layer, key)
    assert fwd(x.to("meta"), w.to("meta"), layer, key)[0].device.type == "meta"  # a meta model: shapes only
    dx, dw = bwd(saved, torch.randn(8, 32), layer, 64)
    assert dx.shape == x.shape and dw.shape == w.shape


@pytest.mark.parametrize("recipe", ["tensor-current", "tensor-delayed", "row", "block", "mx", "unit"])
def test_size_terms_give_the_librarys_saved_bytes(recipe):
    """The Python size formula over the library's terms (what the fake implementation writes
    as an expression of a symbolic row count) equals octet_linear_saved_bytes at row counts on
    both sides of every block edge."""
    from octet import _lib
    from octet.torch import linear as lin
    for n_in in (160, 37):  # 37: the CPU image's 16-byte rounding matters
        layer = ot.Float8Linear(n_in, 48, recipe=recipe, format="e4m3")
        entry = lin._entry(layer._octet_layer_t)
        h = entry.handle(torch.device("cpu"))
        terms = lin._size_terms(entry, h)
        assert len(terms) >= 2 and all(len(t) == 4 for t in terms)
        for rows in (1, 2, 15, 16, 17, 31, 32, 33, 127, 128, 129, 511, 512, 513, 4096):
            assert lin._saved_size(terms, rows) == _lib.lib().octet_linear_saved_bytes(h, rows), rows
        assert lin._saved_size(terms, 0) == 0  # no rows: nothing saved (the ops skip the library)
    assert _lib.lib().octet_linear_saved_size_terms(h, None, 1) == -1  # no room for the one asked
    assert "capacity" in _lib.lib().octet_last_error().decode()
    assert _lib.lib().octet_linear_saved_size_terms(h, None, -1) == -1
    assert _lib.lib().octet_linear_saved_bytes(h, 2**62) == -1  # refused, not wrapped around
    assert "does not fit" in _lib.lib().octet_last_error().decode()


def test_a_resized_layer_is_refused_not_read_past():
    """octet's Linear is built for the constructor's shape and reads that many elements: a weight
    or bias resized afterwards (pruning) gets a ValueError naming both shapes, not a read past the
    tensors; the direct op checks its tensors against the layer too."""
    m = ot.Float8Linear(32, 16)
    keep = torch.arange(8)
    m.weight = torch.nn.Parameter(m.weight.data[keep])
    m.bias = torch.nn.Parameter(m.bias.data[keep])
    m.out_features = 8
    with pytest.raises(ValueError, match=r"\[16, 32\].*\[8, 32\]"):
        m(torch.randn(4, 32))
    m = ot.Float8Linear(32, 16, bias=False)
    m.weight.data = torch.randn(16, 8)
    m.in_features = 8
    with pytest.raises(ValueError, match="cannot change shape"):
        m(torch.randn(4, 8))
    m = ot.Float8Linear(32, 16)
    m.bias = torch.nn.Parameter(torch.zeros(1))  # would broadcast
    with pytest.raises(ValueError, match=r"bias \[1\]"):
        m(torch.randn(4, 32))
    with pytest.raises(ValueError, match="octet::linear"):
        torch.ops.octet.linear_forward(torch.randn(4, 8), torch.randn(16, 8), m._octet_layer_t,
                                       "tensor-current,hybrid,1024,max,0")
    assert ot.Float8Linear(32, 16)(torch.randn(2, 3, 32)).shape == (2, 3, 16)


def test_convert_keeps_a_shared_linear_shared():
    """A Linear registered twice (Sequential(l, l), or under two parents) becomes one Float8Linear
    in both places; the filter decides once, by the first name."""
    lin = torch.nn.Linear(8, 8)
    seq = ot.convert_to_float8(torch.nn.Sequential(lin, lin))
    assert type(seq[0]) is ot.Float8Linear and seq[0] is seq[1]
    outer = torch.nn.ModuleDict({"a": torch.nn.Linear(4, 4), "c": torch.nn.Linear(4, 2)})
    outer["b"] = torch.nn.Sequential(outer["a"], torch.nn.Linear(4, 4))
    keys = list(outer.state_dict())
    ot.convert_to_float8(outer, module_filter=lambda m, fqn: fqn != "c")
    assert type(outer["a"]) is ot.Float8Linear and outer["a"] is outer["b"][0]
    assert type(outer["b"][1]) is ot.Float8Linear and type(outer["c"]) is torch.nn.Linear
    assert list(outer.state_dict()) == keys


def test_meta_forward_gives_the_shape():
    """On the meta device (shape inference) the layer answers as nn.Linear does."""
    m = ot.Float8Linear(32, 16, device="meta")
    y = m(torch.empty(2, 3, 32, device="meta"))
    assert y.device.type == "meta" and y.shape == (2, 3, 16)


def test_load_quant_state_names_a_bad_state():
    m = ot.Float8Linear(8, 8, recipe="tensor-delayed")
    with pytest.raises(ValueError, match=r"1-D tensor quant_state\(\) returned, got shape \(2, 3\)"):
        m.load_quant_state(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="sequence of numbers"):
        m.load_quant_state([[1.0, 2.0]])
    m(torch.randn(4, 8))
    state = m.quant_state()
    m.load_quant_state(state)  # a round trip still works
    assert torch.equal(m.quant_state(), state)


def test_delayed_scaling_saturates_an_inf_and_counts_it():
    # tensor-delayed: the scale comes from earlier amaxes, so an inf input saturates (finite
    # output) instead of turning NaN; the history does not take the inf and the X slot's overflow
    # count says it happened (quant_state layout per slot: [n, amaxes..., scale, overflow count])
    f = ot.Float8Linear(16, 8, recipe="tensor-delayed", bias=False, amax_history_len=4)
    f(torch.randn(4, 16))
    f.update_scales()
    before = f.quant_state()
    x = torch.randn(4, 16)
    x[1, 3] = float("inf")
    y = f(x)
    f.update_scales()
    after = f.quant_state()
    assert torch.isfinite(y).all()
    n = int(before[0])
    assert int(after[0]) == n and torch.equal(after[1:1 + n], before[1:1 + n])  # no inf in the history
    assert after[n + 2] == before[n + 2] + 1  # X's overflow count


@pytest.mark.parametrize("recipe", ["tensor-current", "block"])
def test_forward_op_passes_opcheck(recipe):
    """torch.library.opcheck on the forward op: schema, autograd registration, fake tensor, and
    compiled equal to eager — which compares every byte of the saved state, so none may be left
    unwritten (the image's 16-byte rounding included; shapes where it matters)."""
    from octet.torch.linear import _settings_key
    layer = ot.Float8Linear(17, 33, recipe=recipe, format="hybrid")
    settings = _settings_key(*layer._octet_settings)
    # freed non-zero memory first, so that bytes the op leaves unwritten differ between its runs
    junk = [torch.full((1 << 20,), 0xAB, dtype=torch.uint8) for _ in range(4)]
    del junk
    x = torch.randn(5, 17, requires_grad=True)
    result = torch.library.opcheck(torch.ops.octet.linear_forward.default,
                                   (x, layer.weight, layer._octet_layer_t, settings))
    assert set(result.values()) == {"SUCCESS"}, result


def test_convert_swaps_nothing_when_the_filter_raises():
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16))

    def picky(module, fqn):
        if fqn == "2":
            raise RuntimeError("no opinion on layer 2")
        return True

    with pytest.raises(RuntimeError, match="no opinion"):
        ot.convert_to_float8(model, module_filter=picky)
    assert all(type(m) is torch.nn.Linear for m in (model[0], model[2])), model
