// src/cuda/attention/cudnn/cudnn_sdpa.h — cuDNN's fused scaled-dot-product attention (a
// FlashAttention-2-style kernel inside cuDNN 9) through the cuDNN frontend graph API (the pinned PyPI wheel
// nvidia-cudnn-frontend, header-only; docs/dependencies.md), forward and backward, in BF16 and in FP8.
//
// The BF16 graphs are what the CUDA backend's BF16 attention runs in form 'flash' (attention.cpp;
// docs/attention.md §"cuDNN SDPA"): S = τ QKᵀ in FP32 from BF16 Q, K; online softmax in FP32; P rounded to
// BF16 for the PV and dV products; the LSE ("Stats") saved in FP32, natural log; backward with the
// stale delta D_i = Σ_c dO_ic O_ic (cuDNN's only delta), dS rounded to BF16 for dQ and dK. The FP8
// graphs (E4M3 Q, K, V, O, dO, dQ, dK, dV with per-tensor descale/scale factors and amax outputs; the
// backward stale-delta: D from the FP8 O and dO) are the peer the fused FP8 kernels are measured
// against (`octet bench attention`), not an octet arm.
//
// Layouts (octet's, attention.h): q, o, dq, do [B, H, Tq, D]; k, v, dk, dv [B, G, Tk, D], contiguous;
// GQA: query head h uses KV head h / (H/G); lse [B, H, Tq] FP32. Causal masks are octet's rule,
// aligned to the bottom-right (query i sees keys j <= i + Tk − Tq); cuDNN cannot express Tq > Tk
// with it (rows that see no key), which sdpa_unsupported() reports.
// Graphs are built once per (kind, shape, causal, τ) and cached with their execution plan; the
// workspace is the engine's (stream-ordered, grows only); everything runs on the backend's stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

#include "cuda/runtime/buffer.h"
#include "octet/attention.h"
#include "octet/backend.h"

namespace octet::cuda {

/// One attention problem, in octet's layouts above. tau = the softmax scale τ.
struct SdpaDims {
  int64_t B = 1, H = 1, G = 1, Tq = 1, Tk = 1, D = 64;
  bool causal = false;
  float tau = 0.125f;
  /// q, k, v, o and the gradients [B, T, heads, D] (AttnLayout::TokensMajor) instead of
  /// [B, heads, T, D]; the Stats (LSE) stay [B, H, Tq]
  bool tokens_major = false;
};

/// Why octet does not send `d` to cuDNN's fused SDPA (BF16, or FP8 when fp8): a reason naming the
/// limit, or "" when octet's checks pass (cuDNN may still refuse at graph build: SdpaEngine throws).
/// Checked: head_dim 64 or 128 (FP8 backward on Hopper: 128 only, fp8_backward), G dividing H,
/// causal with Tq > Tk (cuDNN's bottom-right mask needs Tq <= Tk), and Tq = Tk = 1 (cuDNN 9.14's
/// backward graph fails validation for s_q = s_kv = 1).
std::string sdpa_unsupported(const SdpaDims& d, bool fp8, bool fp8_backward = false);

/// BF16 forward: q, k, v, o BF16; lse F32 [B, H, Tq] (natural log).
struct SdpaBf16Forward {
  const void *q = nullptr, *k = nullptr, *v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
};
/// BF16 backward: the forward's q, k, v, o, lse and d_o (BF16); dq, dk, dv BF16 (overwritten).
struct SdpaBf16Backward {
  const void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *d_o = nullptr;
  const float* lse = nullptr;
  void *dq = nullptr, *dk = nullptr, *dv = nullptr;
};
/// FP8 forward: E4M3 q, k, v, o; every scale a device F32 scalar. x = descale·code; P is cast as
/// P·scale_s, O as O·scale_o; amax_s, amax_o receive max |P|, max |O| (before scaling).
struct SdpaFp8Forward {
  const void *q = nullptr, *k = nullptr, *v = nullptr;
  const float *descale_q = nullptr, *descale_k = nullptr, *descale_v = nullptr, *descale_s = nullptr,
              *scale_s = nullptr, *scale_o = nullptr;
  void* o = nullptr;
  float *lse = nullptr, *amax_s = nullptr, *amax_o = nullptr;
};
/// FP8 backward (stale delta): E4M3 q, k, v, o, d_o, dq, dk, dv; F32 scalar scales and amaxes.
struct SdpaFp8Backward {
  const void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *d_o = nullptr;
  const float* lse = nullptr;
  const float *descale_q = nullptr, *descale_k = nullptr, *descale_v = nullptr, *descale_o = nullptr,
              *descale_do = nullptr, *descale_s = nullptr, *descale_dp = nullptr, *scale_s = nullptr,
              *scale_dq = nullptr, *scale_dk = nullptr, *scale_dv = nullptr, *scale_dp = nullptr;
  void *dq = nullptr, *dk = nullptr, *dv = nullptr;
  float *amax_dq = nullptr, *amax_dk = nullptr, *amax_dv = nullptr, *amax_dp = nullptr;
};

/// The cuDNN handle (bound to one stream), the graph/plan cache and the workspace of one
/// CudaBackend. Every call enqueues on the stream and returns without waiting (building a graph
/// the first time a shape is seen does host work only). Errors: octet::Error naming the graph and
/// cuDNN's message (e.g. a shape cuDNN does not support).
class SdpaEngine {
 public:
  explicit SdpaEngine(cudaStream_t stream);
  ~SdpaEngine();
  SdpaEngine(const SdpaEngine&) = delete;
  SdpaEngine& operator=(const SdpaEngine&) = delete;

  /// deterministic: cuDNN's deterministic backward (no atomics in dQ: identical bits run to run;
  /// on Hopper it keeps dP in a B·H·Tq·Tk BF16 workspace). Else cuDNN's default (dQ by atomics).
  void bf16_forward(const SdpaDims& d, const SdpaBf16Forward& a);
  void bf16_backward(const SdpaDims& d, const SdpaBf16Backward& a, bool deterministic);
  void fp8_forward(const SdpaDims& d, const SdpaFp8Forward& a);
  void fp8_backward(const SdpaDims& d, const SdpaFp8Backward& a);

  /// The version of the cuDNN library loaded (cudnnGetVersion(), e.g. 91900 for 9.19.0).
  static int64_t version();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class CudaBackend;

/// The CUDA backend's attention for precision bf16 in form 'flash': cuDNN's fused BF16 SDPA
/// (cudnn_attention.cpp), stale delta. Returns null, after one note on stderr per process,
/// for the matched delta or when sdpa_unsupported() names a reason (the caller then runs the
/// unfused BF16 attention). Throws
/// octet::Error for an invalid shape or config, or one not bf16/flash.
std::unique_ptr<Attention> make_cudnn_sdpa_attention(const AttentionShape& shape,
                                                     const AttentionConfig& config, CudaBackend& backend);

}  // namespace octet::cuda
