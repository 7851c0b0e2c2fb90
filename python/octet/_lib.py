"""Finds and loads liboctet_c, octet's C ABI (include/octet/c_api.h), with ctypes.

Where it looks, first hit wins (docs/pytorch.md, "Finding liboctet_c"):
  1. $OCTET_LIBRARY, the path of the .so (when set and not empty, nothing else is tried);
  2. build/{cuda,release,debug}/liboctet_c.so of $OCTET_HOME, then of the checkout this package
     file lives in (a `pip install -e ./python` or PYTHONPATH=python), the CUDA build first;
  3. liboctet_c.so on the dynamic loader's path (LD_LIBRARY_PATH, ldconfig).
Failures of the library come back as OctetError carrying octet's one-line message.
"""
import ctypes
import os
import pathlib

ABI_VERSION = 7
_PRESETS = ("cuda", "release", "debug")


class OctetError(RuntimeError):
    """An error reported by octet (bad argument, unsupported shape, CUDA failure): its message
    names the problem."""


class AttentionParams(ctypes.Structure):
    """octet_attention_params of c_api.h, field for field."""
    _fields_ = [(n, ctypes.c_int64) for n in
                ("batch", "n_heads", "n_kv_heads", "seq_q", "seq_k", "head_dim")] + [
        ("causal", ctypes.c_int32), ("softmax_scale", ctypes.c_float),
        ("precision", ctypes.c_char_p), ("delta", ctypes.c_char_p), ("formats", ctypes.c_char_p),
        ("dtype", ctypes.c_int32),
        ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
        ("o", ctypes.c_void_p), ("lse", ctypes.c_void_p), ("d_o", ctypes.c_void_p),
        ("dq", ctypes.c_void_p), ("dk", ctypes.c_void_p), ("dv", ctypes.c_void_p),
        ("residual", ctypes.c_void_p), ("saved", ctypes.c_void_p), ("saved_size", ctypes.c_int64),
        ("layout", ctypes.c_int32), ("n_seqs", ctypes.c_int64),
        ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p)]


class LinearSpec(ctypes.Structure):
    """octet_linear_spec of c_api.h."""
    _fields_ = [("in_features", ctypes.c_int64), ("out_features", ctypes.c_int64),
                ("recipe", ctypes.c_char_p), ("formats", ctypes.c_char_p),
                ("amax_history_len", ctypes.c_int32), ("amax_algo", ctypes.c_char_p),
                ("margin", ctypes.c_int32)]


class LinearCall(ctypes.Structure):
    """octet_linear_call of c_api.h."""
    _fields_ = [("rows", ctypes.c_int64), ("dtype", ctypes.c_int32), ("x", ctypes.c_void_p),
                ("w", ctypes.c_void_p), ("y", ctypes.c_void_p), ("dy", ctypes.c_void_p),
                ("dx", ctypes.c_void_p), ("dw", ctypes.c_void_p), ("saved", ctypes.c_void_p),
                ("saved_size", ctypes.c_int64)]


# c_api.h enum octet_c_dtype
DTYPE_F64, DTYPE_F32, DTYPE_BF16 = 0, 1, 2
# c_api.h enum octet_c_layout
LAYOUT_HEADS_MAJOR, LAYOUT_TOKENS_MAJOR = 0, 1

_P = ctypes.c_void_p
_SIGNATURES = {
    "octet_c_api_version": (ctypes.c_int, []),
    "octet_last_error": (ctypes.c_char_p, []),
    "octet_backend_new_cpu": (_P, []),
    "octet_backend_new_cuda": (_P, [ctypes.c_int, _P]),
    "octet_backend_free": (None, [_P]),
    "octet_backend_synchronize": (ctypes.c_int, [_P]),
    "octet_attention_saved_bytes": (ctypes.c_int64, [_P, ctypes.POINTER(AttentionParams)]),
    "octet_attention_saved_size_terms": (ctypes.c_int64, [_P, ctypes.POINTER(AttentionParams),
                                                          ctypes.POINTER(ctypes.c_int64),
                                                          ctypes.c_int64]),
    "octet_attention_forward": (ctypes.c_int, [_P, ctypes.POINTER(AttentionParams)]),
    "octet_attention_backward": (ctypes.c_int, [_P, ctypes.POINTER(AttentionParams)]),
    "octet_linear_new": (_P, [_P, ctypes.POINTER(LinearSpec)]),
    "octet_linear_free": (None, [_P]),
    "octet_linear_saved_bytes": (ctypes.c_int64, [_P, ctypes.c_int64]),
    "octet_linear_saved_size_terms": (ctypes.c_int64, [_P, ctypes.POINTER(ctypes.c_int64),
                                                       ctypes.c_int64]),
    "octet_linear_forward": (ctypes.c_int, [_P, ctypes.POINTER(LinearCall)]),
    "octet_linear_backward": (ctypes.c_int, [_P, ctypes.POINTER(LinearCall)]),
    "octet_linear_update_scales": (ctypes.c_int, [_P]),
    "octet_linear_quant_state": (ctypes.c_int64, [_P, ctypes.POINTER(ctypes.c_float),
                                                  ctypes.c_int64]),
    "octet_linear_load_quant_state": (ctypes.c_int, [_P, ctypes.POINTER(ctypes.c_float),
                                                     ctypes.c_int64]),
    "octet_linear_amax": (ctypes.c_int, [_P, ctypes.POINTER(ctypes.c_float)]),
}

_lib = None
_path = None


def _build_paths():
    """build/{cuda,release,debug}/liboctet_c.so under $OCTET_HOME, then under this checkout."""
    roots = []
    if os.environ.get("OCTET_HOME"):
        roots.append(pathlib.Path(os.environ["OCTET_HOME"]))
    roots.append(pathlib.Path(__file__).resolve().parents[2])  # <checkout>/python/octet/_lib.py
    return [str(r / "build" / p / "liboctet_c.so") for r in roots for p in _PRESETS]


def _candidates():
    explicit = os.environ.get("OCTET_LIBRARY")
    if explicit:
        return [explicit]
    return [f for f in _build_paths() if os.path.exists(f)] + ["liboctet_c.so"]


def lib():
    """The loaded library (loaded on first use). Raises OctetError if none loads."""
    global _lib, _path
    if _lib is not None:
        return _lib
    tried = []
    for path in _candidates():
        try:
            handle = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({e})")
            continue
        # The version first, then the symbols: a library of another version may lack a newer
        # one, and a library that is not octet's has no version at all.
        try:
            version_fn = handle.octet_c_api_version
        except AttributeError:
            raise OctetError(f"{path} is not octet's C library (no octet_c_api_version): point "
                             f"OCTET_LIBRARY at build/<preset>/liboctet_c.so") from None
        version_fn.restype, version_fn.argtypes = ctypes.c_int, []
        version = version_fn()
        if version != ABI_VERSION:
            raise OctetError(f"{path} has C ABI version {version}, this package needs "
                             f"{ABI_VERSION}: rebuild liboctet_c from the same checkout")
        for name, (res, args) in _SIGNATURES.items():
            try:
                fn = getattr(handle, name)
            except AttributeError:
                raise OctetError(f"{path} (C ABI version {version}) lacks {name}: rebuild "
                                 f"liboctet_c from the same checkout") from None
            fn.restype, fn.argtypes = res, args
        _lib, _path = handle, path
        return _lib
    raise OctetError("cannot load liboctet_c: set OCTET_LIBRARY to its path, or build it in the "
                     "checkout (cmake --preset release && cmake --build --preset release --target "
                     "octet_c; the cuda preset for GPUs; the asan build's copy needs the ASan "
                     "runtime preloaded, docs/pytorch.md); tried: " + "; ".join(tried)
                     + ("" if os.environ.get("OCTET_LIBRARY") else
                        "; not found: " + ", ".join(p for p in _build_paths()
                                                    if not os.path.exists(p))))


def library_path():
    """The path of the loaded liboctet_c (loading it if needed)."""
    lib()
    return _path


def check(rc):
    """Raises OctetError with octet's message unless a c_api.h call returned 0."""
    if rc != 0:
        raise OctetError(lib().octet_last_error().decode("utf-8", "replace"))


def size_terms(fn, *args):
    """The size terms a c_api.h *_saved_size_terms function gives for args, as a tuple of 4-tuples:
    asked once for the count, then for the terms (octet/saved_size.h). OctetError on failure."""
    n = fn(*args, None, 0)
    if n < 0:
        check(-1)
    buf = (ctypes.c_int64 * max(4 * n, 1))()
    check(0 if fn(*args, buf, n) == n else -1)
    return tuple(tuple(buf[4 * t:4 * t + 4]) for t in range(n))


def bounded_put(cache, key, value, kept):
    """cache[key] = value, first dropping the oldest entry (dicts keep insertion order) when the
    cache holds `kept`: a process with ever new shapes (serving) keeps the most recent ones."""
    if len(cache) >= kept:
        del cache[next(iter(cache))]
    cache[key] = value


def check_handle(handle):
    """Raises OctetError with octet's message if a c_api.h constructor returned NULL."""
    if not handle:
        raise OctetError(lib().octet_last_error().decode("utf-8", "replace"))
    return handle
