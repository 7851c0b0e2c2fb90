"""octet backends for torch tensors: one CPU backend, and one CUDA backend per (device, stream)
so that octet enqueues on the stream PyTorch is using (octet/backend.h CudaOptions; nothing in
octet synchronizes with the host). Handles live as long as the process (a backend is small: a
cuBLASLt handle and a workspace); dtype codes of c_api.h for torch dtypes; HostReads, what was
read of a tensor on the host, kept while the tensor is unmodified.
"""
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from .. import _lib

_handles = {}


def backend_for(device: torch.device):
    """The c_api.h backend handle for tensors on `device`, on torch's current stream there."""
    if device.type == "cpu":
        key = ("cpu",)
    elif device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        key = ("cuda", index, torch.cuda.current_stream(index).cuda_stream)
    else:
        raise ValueError(f"octet runs on cpu and cuda tensors, not on {device.type}")
    handle = _handles.get(key)
    if handle is None:
        lib = _lib.lib()
        if key[0] == "cpu":
            handle = _lib.check_handle(lib.octet_backend_new_cpu())
        else:
            # torch's default stream is the legacy NULL stream (0); octet reads NULL as "make
            # your own", so it gets CUDA's explicit handle for that stream, cudaStreamLegacy (1).
            handle = _lib.check_handle(lib.octet_backend_new_cuda(key[1], key[2] or 1))
        _handles[key] = handle
    return handle


_DTYPE_CODES = {torch.float64: _lib.DTYPE_F64, torch.float32: _lib.DTYPE_F32,
                torch.bfloat16: _lib.DTYPE_BF16}


def dtype_code(t) -> int:
    """c_api.h's enum octet_c_dtype for a tensor handed to the library, or for a torch dtype."""
    return _DTYPE_CODES[t.dtype if isinstance(t, torch.Tensor) else t]


_PLAIN = (torch.Tensor, torch.nn.Parameter)  # not subclasses: DTensor, FakeTensor, ...


def eager(*ts) -> bool:
    """Whether octet's ops may be called through an autograd.Function instead of their custom
    ops: plain tensors, nothing tracing (torch.compile, make_fx, export) and no dispatch or
    function mode active (selective checkpointing, FakeTensorMode), all of which must see the
    op."""
    return (all(type(t) in _PLAIN for t in ts) and not torch.compiler.is_compiling()
            and _get_current_dispatch_mode() is None
            and not torch._C._is_torch_function_mode_enabled())


def require(ok, error, message):
    """Raises error(message) unless ok: the direct calls of the custom ops name what is wrong
    instead of handing the library pointers it would read past."""
    if not ok:
        raise error(message)


def no_double_backward(what, grads, through=()):
    """The grads an autograd.Function's backward returns, made to raise if anything backpropagates
    through them when autograd records the backward (create_graph=True): octet's backwards have
    no gradient of their own, as their custom ops say, and a gradient penalty must not silently
    lose its second-order term (torch's once_differentiable, which checks only the incoming
    gradients' requires_grad, lets that through). `through`: the tensors the grads depend on as
    the backward sees them (the incoming gradient, and the saved inputs or outputs, which lead
    back to the op's inputs). They are inputs of the raising node too, so that every path from a
    grad to what it depends on runs through it: without them, torch.autograd.grad(..., inputs=w)
    for a w upstream of the op prunes the node (its only inputs would be detached copies) and
    returns a gradient without the op's second-order term, or None, instead of raising."""
    if not torch.is_grad_enabled():
        return grads
    from torch._C import _functions
    linked = [t for t in through if isinstance(t, torch.Tensor) and t.requires_grad]
    tensors = [g for g in grads if g is not None]
    err = _functions.DelayedError(f"{what}: double backward is not supported: octet's backward "
                                  f"has no gradient of its own".encode(),
                                  len(tensors) + len(linked))

    def tracked(g):
        g = g.detach()
        g.requires_grad_(True)
        return g

    out = iter(err(*[tracked(g) for g in tensors], *linked))
    return tuple(None if g is None else next(out) for g in grads)


class HostReads:
    """Values computed on the host from a tensor's contents, kept for the last `slots` tensors while
    each is unmodified: the same Python object (held here), storage address and version counter. A
    model hands every layer the same position ids or sequence offsets, so an eager step reads them
    once, not once per layer. Only tensors on `devices` (default CUDA, where a read is a copy and a
    sync; a CPU tensor is cheap to read and may be refilled through .numpy()) and not inference
    tensors (no version counter) are kept. Writes the version counter does not see are not seen:
    through `.data`, DLPack, kernels outside PyTorch. For eager code only: while torch.compile
    traces, get() computes (traced code keeps nothing), and code that compiled code calls at run
    time (a custom op's body) must not use it, since Inductor hands out one tensor object for new
    values without bumping its version. Entries are replaced as one tuple (thread-safe)."""

    def __init__(self, slots, devices=("cuda",)):
        self._slots, self._devices, self._entries = slots, devices, ()

    def get(self, tensor, key, compute):
        """compute() for (tensor, key), or the value it gave last time for them."""
        if (torch.compiler.is_compiling() or tensor.device.type not in self._devices
                or tensor.is_inference()):
            return compute()
        stamp = (tensor._version, tensor.data_ptr(), key)
        for held, held_stamp, value in self._entries:
            if held is tensor and held_stamp == stamp:
                return value
        value = compute()
        self._entries = (self._entries + ((tensor, stamp, value),))[-self._slots:]
        return value
