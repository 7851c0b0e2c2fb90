"""octet's FP8 linear layer for PyTorch: Float8Linear, an nn.Linear whose three GEMMs run in FP8
through octet's Linear (octet/backend.h; recipes docs/numerics.md) via liboctet_c.

Forward Y = X̂Ŵᵀ, backward dX = dŶŴ and dW = dŶᵀX̂, each operand quantized from its
high-precision source in the orientation its GEMM reads (DeepSeek-V3, Transformer Engine); the
bias is added by torch in FP32 (FP64 for float64 input) and the sum rounded once to the output
dtype (docs/pytorch.md "torch.compile"). Two custom ops (torch.library, with fake
implementations for torch.compile):
  octet::linear_forward(x [M, in], w f32 [out, in], layer, settings) -> y [M, out], saved uint8
  octet::linear_backward(saved, dy [M, out], layer, in_features) -> dx [M, in], dw f32 [out, in]
`layer` (a CPU int64 scalar tensor) names the module's octet Linear (its quantizer state:
tensor-delayed amax histories) in a registry here. It is a tensor, not an int, because
torch.compile specializes on an int attribute of a module: with one id per module, every layer of
a model would recompile the same code (the recompile limit then sends the rest to eager).
`saved` holds the backend's saved state (X̂ᵀ and Ŵᵀ, the FP8 codes and scales the backward's two
GEMMs read; c_api.h octet_linear_saved_bytes): autograd keeps it, and the backward never
quantizes x or w again. `settings` ("recipe,format,history,algo,margin": _settings_key) lets the
fake implementation ask the library for saved's size without the layer id, which it cannot read
while tracing (an output of unknown size breaks torch.compile's graph at every linear); a string,
so layers of one spec share their compiled code. The library gives the size as terms in the row
count (octet_linear_saved_size_terms), so under dynamic shapes it is an expression of M. In eager mode the two bodies are called through an autograd.Function
instead of the custom-op dispatch (host time); torch.compile traces the ops.

Delayed scaling (tensor-delayed) is quantize-then-update: call update_scales(model) (or
Float8Linear.update_scales) once per optimizer step. Its state is not in the state_dict (the keys
stay nn.Linear's: weight, bias); quant_state() / load_quant_state() carry it.
"""
import ctypes
import numbers
import secrets
import weakref

import torch

from .. import _lib

from ._backend import backend_for, dtype_code, eager, no_double_backward

_layers = {}  # layer id -> _Layer


class _Layer:
    """The octet Linear handles of one module: one per backend (device and stream) it ran on;
    a new backend's handle starts from the quantizer state of the last one used."""

    def __init__(self, spec, settings):
        self.spec = spec
        self.settings = settings  # _settings_key of spec
        self.handles = {}
        self.last = None
        self.size_terms = {}  # handle -> the saved state's size terms (_size_terms)

    def handle(self, device):
        backend = backend_for(device)
        h = self.handles.get(backend)
        if h is None:
            lib = _lib.lib()
            h = _lib.check_handle(lib.octet_linear_new(backend, ctypes.byref(self.spec)))
            if self.last is not None:
                _load_state(h, _quant_state(self.last))
            self.handles[backend] = h
        self.last = h
        return h

    def free(self):
        for h in self.handles.values():
            _lib.lib().octet_linear_free(h)
        self.handles.clear()
        self.size_terms.clear()
        self.last = None


def _quant_state(h):
    lib = _lib.lib()
    n = lib.octet_linear_quant_state(h, None, 0)
    if n < 0:
        _lib.check(-1)
    buf = (ctypes.c_float * max(n, 1))()
    _lib.check(0 if lib.octet_linear_quant_state(h, buf, n) == n else -1)
    return list(buf[:n])


def _load_state(h, values):
    buf = (ctypes.c_float * max(len(values), 1))(*values)
    _lib.check(_lib.lib().octet_linear_load_quant_state(h, buf, len(values)))


def _entry(layer):
    """The _Layer of a layer id tensor: TypeError/ValueError naming the problem."""
    if not isinstance(layer, torch.Tensor) or layer.numel() != 1 or layer.dtype != torch.int64:
        raise TypeError("octet::linear: layer must be a Float8Linear's one-element int64 id tensor")
    entry = _layers.get(int(layer))
    if entry is None:
        raise ValueError(f"octet::linear: no Float8Linear layer has the id {int(layer)} in this process")
    return entry


def _settings_key(recipe, fmt, history, algo, margin):
    return f"{recipe},{fmt},{history},{algo},{margin}"


def _spec_of(n_in, n_out, settings):
    recipe, fmt, history, algo, margin = settings.split(",")
    return _lib.LinearSpec(n_in, n_out, recipe.encode(), fmt.encode(), int(history), algo.encode(),
                           int(margin))


# (settings, in, out, device type, device index) -> a _Layer whose handle answers sizes only (fakes)
_size_handles = {}


def _fake_saved_bytes(settings, n_in, n_out, device, rows):
    """saved's size for the fake implementation: from a Linear of the same spec on the same kind
    of backend (the size depends on nothing else: not on the stream), kept per spec and device;
    `rows` may be symbolic (dynamic shapes), and the size is then an expression of it."""
    key = (settings, n_in, n_out, device.type, device.index)
    entry = _size_handles.get(key)
    if entry is None:
        entry = _Layer(_spec_of(n_in, n_out, settings), settings)
        _size_handles[key] = entry
    return _saved_size(_size_terms(entry, entry.handle(device)), rows)


def _size_terms(entry, h):
    """The saved state's size as terms in the row count (c_api.h octet_linear_saved_size_terms:
    (step_bytes, step_rows, fixed_bytes, align) each) for handle h of the layer `entry`, kept per
    handle: the library's layout for the spec and backend."""
    terms = entry.size_terms.get(h)
    if terms is None:
        terms = _lib.size_terms(_lib.lib().octet_linear_saved_size_terms, h)
        entry.size_terms[h] = terms
    return terms


def _saved_size(terms, rows):
    """Bytes of the saved state of a forward of `rows` rows: the sum over the terms of
    round_up(step_bytes * ceil(rows / step_rows) + fixed_bytes, align) (octet/saved_size.h; the
    library's octet_linear_saved_bytes), and 0 for no rows (the ops skip the library, which takes
    M >= 1). Integer arithmetic only, so that a symbolic row count (torch.SymInt) gives an
    expression torch.compile keeps: no unbacked size, no graph break."""
    n = 0
    for step_bytes, step_rows, fixed_bytes, align in terms:
        b = step_bytes * ((rows + step_rows - 1) // step_rows) + fixed_bytes
        n = n + (b + align - 1) // align * align
    return n * torch.sym_min(rows, 1)


def _call(x, w, layer, settings):
    """The forward call's arguments and the layer's handle, after checking every tensor against
    what the library will read through its pointer (a wrong size or dtype would read or write past
    the tensors): TypeError/ValueError naming the argument."""
    entry = _entry(layer)
    if settings != entry.settings:
        raise ValueError(f"octet::linear_forward: settings {settings!r} are not the layer's "
                         f"({entry.settings!r})")
    spec = entry.spec
    shape = (spec.out_features, spec.in_features)
    # octet's Linear was built for this shape and reads that many elements: anything else would
    # read or write past the tensors.
    if x.dim() != 2 or w.dim() != 2 or tuple(w.shape) != shape or x.shape[1] != spec.in_features:
        raise ValueError(f"octet::linear: the layer is [{shape[0]}, {shape[1]}] (out_features, "
                         f"in_features); got x {tuple(x.shape)}, w {tuple(w.shape)}")
    if x.dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"octet::linear: x must be float32 or bfloat16 (the dtypes octet computes "
                        f"in), got {x.dtype}")
    if w.dtype != torch.float32:
        raise TypeError(f"octet::linear: w must be float32, got {w.dtype}")
    if w.device != x.device:
        raise ValueError(f"octet::linear: x is on {x.device}, w on {w.device}")
    c = _lib.LinearCall()
    c.rows, c.dtype = x.shape[0], dtype_code(x)
    c.x, c.w = x.data_ptr(), w.data_ptr()
    return c, _layers[int(layer)].handle(x.device)


def _forward_impl(x: torch.Tensor, w: torch.Tensor, layer: torch.Tensor,
                  settings: str) -> tuple[torch.Tensor, torch.Tensor]:
    # Contiguous inputs and outputs whatever strides torch.compile gives the op (as attention.py's).
    x, w = x.contiguous(), w.contiguous()
    y = x.new_empty(x.shape[0], w.shape[0])
    c, h = _call(x, w, layer, settings)
    # the allocator's blocks are 256-byte aligned on CUDA (c_api.h); the CPU needs none
    saved = torch.empty(_saved_size(_size_terms(_layers[int(layer)], h), x.shape[0]),
                        dtype=torch.uint8, device=x.device)
    if x.shape[0] == 0:  # nothing to quantize or multiply (the library takes M >= 1): y and saved
        return y, saved  # are empty, no amax recorded
    c.y, c.saved, c.saved_size = y.data_ptr(), saved.data_ptr(), saved.numel()
    _lib.check(_lib.lib().octet_linear_forward(h, ctypes.byref(c)))
    return y, saved


_forward = torch.library.custom_op("octet::linear_forward", _forward_impl, mutates_args=())


def _fake_devices(op, x, w, layer, dy=None):
    """A meta tensor among real ones sends a call here, to the fake implementation, which would
    return uninitialised outputs instead of running the op: x, w (and dy) on one device, the layer
    id on the CPU (as Float8Linear keeps it, also for a meta-device model)."""
    same = w.device == x.device and (dy is None or dy.device == x.device)
    if not same or layer.device.type != "cpu":
        raise ValueError(f"octet::{op}: x, w{', dy' if dy is not None else ''} must be on one device "
                         f"and the layer id on the cpu, got x on {x.device}, w on {w.device}"
                         + (f", dy on {dy.device}" if dy is not None else "")
                         + f", layer on {layer.device}")


@_forward.register_fake
def _(x, w, layer, settings):
    _fake_devices("linear_forward", x, w, layer)
    # the library's size for the spec (w's shape and settings), x's rows and the backend, as an
    # expression of the rows under dynamic shapes; an unbacked size (known at run time) only if w's
    # shape is symbolic; meta tensors (shape inference, no backend) get an empty saved state
    if x.device.type == "meta":
        n = 0
    elif w.dim() == 2 and all(isinstance(d, int) for d in w.shape):
        n = _fake_saved_bytes(settings, w.shape[1], w.shape[0], x.device, x.shape[0])
    else:
        n = torch.library.get_ctx().new_dynamic_size()
    return x.new_empty(x.shape[0], w.shape[0]), x.new_empty(n, dtype=torch.uint8)


def _backward_impl(saved: torch.Tensor, dy: torch.Tensor, layer: torch.Tensor,
                   in_features: int) -> tuple[torch.Tensor, torch.Tensor]:
    spec = _entry(layer).spec
    out = spec.out_features
    if dy.dim() != 2 or dy.shape[1] != out or in_features != spec.in_features:
        raise ValueError(f"octet::linear_backward: the layer is [{out}, {spec.in_features}] "
                         f"(out_features, in_features); got dy {tuple(dy.shape)}, in_features "
                         f"{in_features}")
    if dy.dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"octet::linear_backward: dy must be float32 or bfloat16, got {dy.dtype}")
    rows = dy.shape[0]
    entry = _layers[int(layer)]
    h = entry.handle(dy.device)
    want = _saved_size(_size_terms(entry, h), rows)
    if saved.dtype != torch.uint8 or tuple(saved.shape) != (want,) or saved.device != dy.device:
        raise ValueError(f"octet::linear_backward: saved must be the uint8 [{want}] tensor that "
                         f"linear_forward returned for {rows} rows on {dy.device}, got {saved.dtype} "
                         f"{tuple(saved.shape)} on {saved.device}")
    # read through its pointer: one dense block (a strided or expanded view would be read past)
    saved, dy = saved.contiguous(), dy.contiguous()
    dx = dy.new_empty(rows, spec.in_features)
    dw = dy.new_zeros(out, spec.in_features, dtype=torch.float32)  # dw accumulates (+=) in octet
    if rows == 0:  # no rows: dX is empty and dW = dYᵀX = 0 (the library takes M >= 1)
        return dx, dw
    c = _lib.LinearCall()
    c.rows, c.dtype = rows, dtype_code(dy)
    c.dy, c.dx, c.dw = dy.data_ptr(), dx.data_ptr(), dw.data_ptr()
    c.saved, c.saved_size = saved.data_ptr(), saved.numel()
    _lib.check(_lib.lib().octet_linear_backward(h, ctypes.byref(c)))
    return dx, dw


_backward = torch.library.custom_op("octet::linear_backward", _backward_impl, mutates_args=())


@_backward.register_fake
def _(saved, dy, layer, in_features):
    if saved.device != dy.device or layer.device.type != "cpu":
        raise ValueError(f"octet::linear_backward: saved and dy must be on one device and the layer "
                         f"id on the cpu, got saved on {saved.device}, dy on {dy.device}, layer on "
                         f"{layer.device}")
    return dy.new_empty(dy.shape[0], in_features), dy.new_empty(dy.shape[1], in_features,
                                                                dtype=torch.float32)


def _setup_context(ctx, inputs, output):
    x, w, layer, _settings = inputs
    ctx.mark_non_differentiable(output[1])
    # saved gets no gradient: without this autograd would hand the backward a zero-filled tensor
    # of its size at every call
    ctx.set_materialize_grads(False)
    ctx.in_features, ctx.x_dtype = x.shape[1], x.dtype
    ctx.save_for_backward(output[1], layer)


def _grads(backward, ctx, dy, tensors=None):
    """tensors: ctx.saved_tensors when the caller has unpacked them (once only: non-reentrant
    activation checkpointing refuses a second unpack); their first two are saved and layer. dy
    None (y unused: grads are not materialized): no gradients."""
    if dy is None:
        return None, None, None, None
    saved, layer = (ctx.saved_tensors if tensors is None else tensors)[:2]
    dx, dw = backward(saved, dy.to(ctx.x_dtype).contiguous(), layer, ctx.in_features)
    return dx, dw, None, None


def _autograd_backward(ctx, dy, _dsaved):
    return _grads(_backward, ctx, dy)


_forward.register_autograd(_autograd_backward, setup_context=_setup_context)


class _Eager(torch.autograd.Function):
    """The two ops' bodies called directly: in eager mode (nothing traced, plain tensors) this
    skips the custom-op dispatch's host time (as octet.torch.attention; docs/pytorch.md)."""

    @staticmethod
    def forward(ctx, x, w, layer, settings):  # ctx first: no per-call signature binding
        y, saved = _forward_impl(x, w, layer, settings)
        ctx.mark_non_differentiable(saved)
        ctx.set_materialize_grads(False)  # as _setup_context
        ctx.in_features, ctx.x_dtype = x.shape[1], x.dtype
        # x and w only for no_double_backward's links (the backward reads saved alone): eager
        # mode keeps them as it did before saved existed (docs/pytorch.md, memory)
        ctx.save_for_backward(saved, layer, x, w)
        return y, saved

    @staticmethod
    def backward(ctx, dy, _dsaved):
        if dy is None:  # y unused (grads not materialized)
            return None, None, None, None
        tensors = ctx.saved_tensors
        return no_double_backward("Float8Linear", _grads(_backward_impl, ctx, dy, tensors),
                                  through=(dy, *tensors[2:]))  # x, w

_WORK = {  # activation dtype octet computes in, per input dtype and device type
    ("cpu", torch.float32): torch.float32, ("cpu", torch.float64): torch.float32,
    ("cpu", torch.bfloat16): torch.bfloat16, ("cpu", torch.float16): torch.float32,
    ("cuda", torch.float32): torch.float32, ("cuda", torch.bfloat16): torch.bfloat16,
    ("cuda", torch.float16): torch.float32,
}


# octet/quant.h QuantConfig::validate's ranges, checked here too so that a bad value is refused
# before the weight is allocated and with what it means for a recipe without a history.
_MAX_AMAX_HISTORY = 1 << 20  # QuantConfig::kMaxAmaxHistory
_MAX_MARGIN = 32             # |margin| <= 32
# The recipes that keep no amax history (octet/quant.h Recipe: all but tensor-delayed).
_RECIPES_WITHOUT_HISTORY = ("tensor-current", "row", "block", "mx", "unit")


def _as_int(name, value):
    """`value` as a Python int: an int or a NumPy integer (numbers.Integral), never a bool (which
    Python counts as an int) nor a tensor. TypeError naming `name` else."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    raise TypeError(f"Float8Linear: {name} must be an int, got {type(value).__name__} {value!r}")


class Float8Linear(torch.nn.Linear):
    """nn.Linear with FP8 GEMMs (octet). Parameters and state_dict as nn.Linear's.

    recipe: "tensor-current" | "tensor-delayed" | "row" | "block" (also "mx", "unit");
    format: "hybrid" (E4M3 forward, E5M2 gradients) | "e4m3"; amax_history_len (1 to 2^20) and
    amax_algo ("max" | "most_recent"): tensor-delayed's amax history; margin: scales leave
    2^margin headroom below the format's max (octet/quant.h QuantConfig). amax_history_len is
    checked for every recipe, as octet's QuantConfig checks it (for a training config's
    precision.amax_history_len too): a recipe without a history ignores a length in range and
    refuses one out of range. amax_history_len and margin are ints (or NumPy integers): another
    type (a bool or a tensor too) is a TypeError; an amax_history_len out of [1, 2^20] or a margin
    out of [-32, 32] a ValueError, raised before the weight is allocated.
    Input [..., in_features] of dtype float32/bfloat16/float16 (float64 on cpu, computed in
    float32); the output has the input's dtype (under torch.autocast, as nn.Linear: autocast's). Errors: octet.OctetError naming the problem (an
    unknown recipe or format at construction; what the backend rejects at the first call).
    """

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None, *,
                 recipe="tensor-current", format="hybrid", amax_history_len=1024,
                 amax_algo="max", margin=0):
        for name, value in (("recipe", recipe), ("format", format), ("amax_algo", amax_algo)):
            if not isinstance(value, str):
                raise TypeError(f"Float8Linear: {name} must be a str, got {type(value).__name__}")
        amax_history_len = _as_int("amax_history_len", amax_history_len)
        margin = _as_int("margin", margin)
        if not 1 <= amax_history_len <= _MAX_AMAX_HISTORY:
            unused = ("" if recipe not in _RECIPES_WITHOUT_HISTORY else
                      f" (recipe {recipe!r} keeps no amax history, but the length is checked for "
                      f"every recipe: leave it at its default)")
            raise ValueError(f"Float8Linear: amax_history_len must be in [1, {_MAX_AMAX_HISTORY}], "
                             f"got {amax_history_len}{unused}")
        if not -_MAX_MARGIN <= margin <= _MAX_MARGIN:
            raise ValueError(f"Float8Linear: margin must be in [{-_MAX_MARGIN}, {_MAX_MARGIN}], got {margin}")
        settings = (recipe, format, amax_history_len, amax_algo, margin)
        key = _settings_key(*settings)
        layer = _Layer(_spec_of(in_features, out_features, key), key)
        # Validates the spec before the weight exists (octet's message for an unknown recipe or
        # format).
        layer.handle(torch.device("cpu"))
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.recipe, self.format = recipe, format
        # The shape octet's Linear is built for (checked at every call: in_features and
        # out_features are plain attributes a user may change). Ints, not the layer id, so that
        # torch.compile's guards on them pass for every layer of a shape.
        self._octet_shape = (out_features, in_features)
        self._octet_settings = settings
        self._register(layer)

    def _register(self, layer):
        # A random 62-bit id, not a counter: a module unpickled in another process brings its id
        # along, and must not find an unrelated layer of this process under it.
        self._octet_layer = next(i for i in iter(lambda: secrets.randbits(62), None)
                                 if i not in _layers)
        _layers[self._octet_layer] = layer
        # The id as the ops take it (not a buffer: outside the state_dict, and .to() leaves it on
        # the CPU, where reading it is no device sync).
        # device="cpu" whatever the default device: a module built under torch.device("meta")
        # (torchtitan, FSDP2's meta init) keeps a real id, which to_empty() does not touch.
        self._octet_layer_t = torch.tensor(self._octet_layer, dtype=torch.int64, device="cpu")
        # The settings string the forward op takes (a str attribute: torch.compile guards on its
        # value, so layers of one spec share their compiled code)
        self._octet_key = layer.settings
        # Freed with the module; not at interpreter exit (CUDA may be torn down by then).
        weakref.finalize(self, _release, self._octet_layer).atexit = False

    def __setstate__(self, state):
        """A copy (copy.deepcopy, copy.copy, pickle) gets its own octet Linear, starting from a
        copy of its original's quantizer state (a fresh one when the original is not in this
        process). Done here, at copy time, so that forward() only reads the id: torch.compile
        traces it without side effects."""
        super().__setstate__(state)
        if "_octet_shape" not in self.__dict__:  # pickled before the shape was kept
            self._octet_shape = (self.out_features, self.in_features)
        src = _layers.get(self._octet_layer)
        layer = _Layer(self._spec(), _settings_key(*self._octet_settings))
        if src is not None and src.last is not None:
            _load_state(layer.handle(torch.device("cpu")), _quant_state(src.last))
        self._register(layer)

    def _spec(self):
        n_out, n_in = self._octet_shape
        return _spec_of(n_in, n_out, _settings_key(*self._octet_settings))

    @classmethod
    def from_linear(cls, linear, **kwargs):
        """A Float8Linear sharing `linear`'s parameters (the same Parameter objects)."""
        new = cls(linear.in_features, linear.out_features, bias=linear.bias is not None,
                  device="meta", **kwargs)
        new.weight = linear.weight
        new.bias = linear.bias
        return new.train(linear.training)

    def forward(self, x):
        n_out, n_in = self._octet_shape  # what octet's Linear was built for
        if tuple(self.weight.shape) != (n_out, n_in) or (
                self.bias is not None and tuple(self.bias.shape) != (n_out,)):
            raise ValueError(
                f"Float8Linear: built for [out_features, in_features] = [{n_out}, {n_in}], but the "
                f"weight is {list(self.weight.shape)}"
                + ("" if self.bias is None else f" and the bias {list(self.bias.shape)}")
                + ": a layer cannot change shape (make a new one after resizing, e.g. "
                "Float8Linear.from_linear)")
        if not isinstance(x, torch.Tensor) or x.dim() < 1 or x.shape[-1] != n_in:
            raise ValueError(f"Float8Linear: input must be [..., {n_in}], got "
                             f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x)}")
        if x.device.type == "meta":  # shape inference: nn.Linear's answer, no kernel to run
            return torch.nn.functional.linear(x, self.weight, self.bias)
        if torch.is_autocast_enabled(x.device.type) and x.dtype in (torch.float32, torch.bfloat16,
                                                                   torch.float16):
            # as nn.Linear: autocast's dtype for the floating types it casts (float64 and
            # integer inputs are left as they are: float64 computes in float32, an integer
            # input is refused below)
            x = x.to(torch.get_autocast_dtype(x.device.type))
        if x.device != self.weight.device:
            raise ValueError(f"Float8Linear: input on {x.device}, weight on {self.weight.device}")
        work = _WORK.get((x.device.type, x.dtype))
        if work is None:
            raise TypeError(f"Float8Linear: dtype {x.dtype} on {x.device.type} is not supported")
        # No branch on the row count: a row count known only at run time (a mixture-of-experts
        # routing, torch.compile with capture_dynamic_output_shape_ops) cannot be guarded on; the
        # ops take 0 rows themselves (an empty y, dW = 0, no amax recorded).
        x2 = x.reshape(-1, n_in).to(work).contiguous()
        w = self.weight.float().contiguous()
        y, _ = (_Eager.apply if eager(x2, w) else _forward)(x2, w, self._octet_layer_t, self._octet_key)
        if self.bias is not None:
            # The bias is added in FP32 (FP64 for float64 input) and the sum rounded once to the
            # output dtype: Inductor fuses this add and drops an intermediate rounding of the bias
            # to BF16 (torch._inductor.config.emulate_precision_casts), so adding a BF16-rounded
            # bias would make compiled and eager outputs differ by one BF16 unit in ~1/8 of the
            # elements, which FP8 quantization downstream magnifies (docs/pytorch.md,
            # "torch.compile").
            acc = torch.promote_types(x.dtype, torch.float32)
            y = y.to(acc) + self.bias.to(acc)
        return y.to(x.dtype).reshape(*x.shape[:-1], n_out)

    def update_scales(self):
        """tensor-delayed: fold the recorded amaxes into the history (once per optimizer step)."""
        layer = _layers[self._octet_layer]
        if layer.last is not None:
            _lib.check(_lib.lib().octet_linear_update_scales(layer.last))

    def quant_state(self):
        """The quantizer state (octet/backend.h Linear::quant_state layout) as a float32 tensor."""
        layer = _layers[self._octet_layer]
        return torch.tensor(_quant_state(layer.last) if layer.last is not None else [],
                            dtype=torch.float32)

    def load_quant_state(self, state):
        """Restores a quant_state() (a 1-D tensor or a sequence of numbers); octet.OctetError
        names a mismatch of its length or contents, ValueError a value that is not 1-D."""
        if isinstance(state, torch.Tensor):
            if state.dim() != 1:
                raise ValueError(f"Float8Linear.load_quant_state: state must be the 1-D tensor "
                                 f"quant_state() returned, got shape {tuple(state.shape)}")
            values = state.detach().double().cpu().tolist()
        else:
            try:
                values = [float(v) for v in state]
            except (TypeError, ValueError) as e:
                raise ValueError(f"Float8Linear.load_quant_state: state must be a sequence of "
                                 f"numbers ({e})") from None
        layer = _layers[self._octet_layer]
        _load_state(layer.handle(self.weight.device), values)

    def extra_repr(self):
        return f"{super().extra_repr()}, recipe={self.recipe}, format={self.format}"


def _release(layer_id):
    layer = _layers.pop(layer_id, None)
    if layer is not None:
        layer.free()


def update_scales(model):
    """Delayed scaling's update for every Float8Linear in `model`: call once per optimizer step
    (after the backward of its last micro-batch). A no-op for the other recipes."""
    for m in model.modules():
        if isinstance(m, Float8Linear):
            m.update_scales()
