// src/cuda/gated_delta/gated_delta.h — the Gated DeltaNet mixer on the GPU (Yang, Kautz & Hatamizadeh, arXiv
// 2412.06464 §3.3; equations in include/octet/recurrent.h): the launch parameters and launchers of
// the chunked WY/UT kernels (gated_delta_forward.cu, gated_delta_backward.cu; shared chunk steps in
// gated_delta_chunk.cuh). The CPU twin is src/cpu/gated_delta_chunked.cpp (same chunk algebra, same
// order of the steps) behind src/cpu/backend/gated_delta.cpp; the backend entry points are in
// gated_delta_op.cpp.
//
// Decomposition: the recurrence is independent per column of the state (S_t[:, j] only needs k, β, g
// and v[:, j]), so one CTA owns one (batch·head, block of kGdnColumns value columns) and walks the
// chunks in order (forward) or in reverse (backward), with its d_k × 32 slice of the state in shared
// memory. The per-chunk C × C matrices (k_r·k_i, q_r·k_i) are recomputed by each column block. The
// backward's dq, dk, dg, dβ sum over all value columns: each column block writes FP32 partials and
// gated_delta_finish adds them in a fixed order (deterministic), applies the gate derivatives and
// rounds once to the output dtypes. All math in FP32; the gates in FP64 (recurrent.h
// gated_delta_gates, the CPU's function), rounded to FP32 as the CPU twin does.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "octet/fp8.h"  // OCTET_HD

namespace octet::cuda {

/// Value columns per CTA (the state slice is d_k × kGdnColumns) and the largest chunk the kernels
/// hold in shared memory. A larger requested chunk runs as kGdnMaxChunk: the chunked form gives the
/// same result for every chunk length (recurrent.h), up to rounding.
inline constexpr int kGdnColumns = 32;
inline constexpr int kGdnMaxChunk = 64;

/// An activation tensor (F32 or BF16) as the kernels see it: loaded as FP32, rounded once on store.
struct GdnIn {
  const void* p = nullptr;
  bool bf16 = false;
};
struct GdnOut {
  void* p = nullptr;
  bool bf16 = false;
};

/// One Gated DeltaNet call. Layouts (backend.h GatedDeltaArgs): q, k, dq, dk [B, H, T, dk];
/// v, o, d_o, dv [B, H, T, dv]; gates, dgates [B, T, 2H] (a in columns 0..H−1, b in H..2H−1).
/// kdim ∈ {32, 64, 128}; vdim a multiple of kGdnColumns; 1 <= chunk <= kGdnMaxChunk (checked by the op).
struct GdnParams {
  int64_t batch = 1, heads = 1, seq = 1, kdim = 32, vdim = 32;  // d_k, d_v
  int chunk = kGdnMaxChunk;
  float scale = 1.0f;
  GdnIn q, k, v, gates;
  // Forward: o (may be null: states only) and the chunk-entering states (may be null), F32
  // [B·H, dv/kGdnColumns, n_chunks, dk, kGdnColumns].
  GdnOut o;
  float* states = nullptr;
  // Backward: d_o; dv written directly; FP32 partials per column block [dv/kGdnColumns, B·H, T, dk]
  // (dq_part, dk_part) and [dv/kGdnColumns, B·H, T] (dg_part, db_part: dL/dg and dL/dβ), then
  // gated_delta_finish writes dq, dk and dgates.
  GdnIn d_o;
  GdnOut dq, dk, dv, dgates;
  float *dq_part = nullptr, *dk_part = nullptr, *dg_part = nullptr, *db_part = nullptr;

  OCTET_HD int64_t n_chunks() const { return (seq + chunk - 1) / chunk; }
  OCTET_HD int64_t col_blocks() const { return vdim / kGdnColumns; }
};

/// o (if set) and states (if set) from q, k, v, gates. Enqueues on `s`, never waits.
void gated_delta_forward_launch(const GdnParams& p, cudaStream_t s);
/// Needs `states` written by gated_delta_forward_launch for the same inputs; writes dv and the
/// partials, then runs the finish pass (dq, dk, dgates). Enqueues on `s`, never waits.
void gated_delta_backward_launch(const GdnParams& p, cudaStream_t s);

}  // namespace octet::cuda
