// src/cuda/gated_delta/gated_delta_chunk.cuh — the per-chunk steps the Gated DeltaNet forward and backward
// kernels share (gated_delta.h; equations in include/octet/recurrent.h, arXiv 2412.06464 §3.3): loading a
// chunk's rows into shared memory, the gates and their cumulative log decay γ, the decayed C × C
// products e^{γ_r−γ_i} k_r·k_i and e^{γ_r−γ_i} q_r·k_i, and the two triangular solves with (I + A),
// A_ri = β_r e^{γ_r−γ_i} k_r·k_i (strictly lower): forward substitution (Δ = (I + A)^{-1} R, the UT
// transform applied without forming it) and backward substitution ((I + A)^{-T}). CPU twin:
// src/cpu/gated_delta_chunked.cpp (ChunkForm::build and the backward's solve).
//
// Shared-memory rows are padded against bank conflicts: a row of d_k floats has stride d_k + 1, a
// row of the 32 value columns stride 33, a C × C row stride C + 1; then a warp reading one column
// of any of them (lane = row) touches 32 distinct banks. Thread mappings: "warp rows" = warp w takes
// rows w, w + 8, ... and lane = value column j (or lanes over d_k for the d_k-wide rows).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/runtime/check.h"
#include "cuda/runtime/kernel_attrs.h"
#include "cuda/gated_delta/gated_delta.h"
#include "cuda/runtime/typed.cuh"
#include "octet/recurrent.h"

namespace octet::cuda::gdn {

constexpr int kThreads = 256;  // 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int C = kGdnMaxChunk;
constexpr int VB = kGdnColumns;
constexpr int VP = VB + 1;  // row stride of [*, VB] arrays
constexpr int CP = C + 1;   // row stride of [C, C] arrays
static_assert(VB == 32, "a warp's lanes are the value columns of its CTA");
static_assert(C == 64, "the solves give each lane two rows of a chunk");

__device__ __forceinline__ float load(const GdnIn& t, int64_t i) {
  return t.bf16 ? ld(static_cast<const Bf16*>(t.p), i) : ld(static_cast<const float*>(t.p), i);
}
__device__ __forceinline__ void store(const GdnOut& t, int64_t i, float v) {
  if (t.bf16)
    st(static_cast<Bf16*>(t.p), i, v);
  else
    st(static_cast<float*>(t.p), i, v);
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

/// Inclusive prefix sum of x[0..n) in place (reverse: suffix sums, x_r = Σ_{i≥r} x_i), n <= 64,
/// by one whole warp.
__device__ __forceinline__ void warp_scan64(float* x, int n, bool reverse, int lane) {
  const int i0 = reverse ? n - 1 - lane : lane, i1 = reverse ? n - 33 - lane : lane + 32;
  float a = lane < n ? x[i0] : 0.0f, b = lane + 32 < n ? x[i1] : 0.0f;
  for (int o = 1; o < 32; o <<= 1) {
    const float ua = __shfl_up_sync(0xffffffffu, a, o), ub = __shfl_up_sync(0xffffffffu, b, o);
    if (lane >= o) a += ua, b += ub;
  }
  b += __shfl_sync(0xffffffffu, a, 31);
  if (lane < n) x[i0] = a;
  if (lane + 32 < n) x[i1] = b;
}

/// The chunk's per-position scalars: γ (cumulative log decay), Γ = e^γ, β, and eC_i = e^{γ_{n−1}−γ_i}.
struct ChunkGates {
  float *gam, *Gam, *beta, *eC;
};

/// Reads the gates of positions [t0, t0 + n) of head h of sequence b (gated_delta_gates, FP64, then
/// rounded to FP32 as the CPU twin) and forms γ, Γ, eC. Ends with a block barrier.
__device__ inline void load_gates(const GdnParams& p, int64_t b, int64_t h, int64_t t0, int n,
                                  const ChunkGates& cg) {
  const int tid = threadIdx.x;
  if (tid < n) {
    const int64_t tok = (b * p.seq + t0 + tid) * 2 * p.heads;
    const GateValues gv =
        gated_delta_gates(double(load(p.gates, tok + h)), double(load(p.gates, tok + p.heads + h)));
    cg.gam[tid] = float(gv.g);
    cg.beta[tid] = float(gv.beta);
  }
  __syncthreads();
  if (tid < 32) {
    warp_scan64(cg.gam, n, false, tid);
    __syncwarp();
    const float last = cg.gam[n - 1];
    for (int r = tid; r < n; r += 32) {
      cg.Gam[r] = expf(cg.gam[r]);
      cg.eC[r] = expf(last - cg.gam[r]);
    }
  }
  __syncthreads();
}

/// dst[r·stride + c] = src[(row0 + r)·ld + col0 + c] for r < n, c < cols (coalesced along c).
__device__ __forceinline__ void load_rows(float* dst, int stride, const GdnIn& src, int64_t row0, int64_t ld,
                                          int64_t col0, int n, int cols) {
  for (int x = threadIdx.x; x < n * cols; x += kThreads) {
    const int r = x / cols, c = x - r * cols;
    dst[r * stride + c] = load(src, (row0 + r) * ld + col0 + c);
  }
}

/// KKe[r][i] = e^{γ_r−γ_i} k_r·k_i for i < r (0 on and above the diagonal) and, if Qs is set,
/// QKe[r][i] = e^{γ_r−γ_i} q_r·k_i for i <= r (0 above), over r, i < n. Qs, Ks: [C][K + 1].
template <int K>
__device__ inline void chunk_products(const float* Qs, const float* Ks, const float* gam, int n, float* KKe,
                                      float* QKe) {
  constexpr int KP = K + 1;
  for (int x = threadIdx.x; x < n * n; x += kThreads) {
    const int r = x / n, i = x - r * n;
    float kk = 0.0f, qk = 0.0f;
    if (i <= r) {
      const float e = expf(gam[r] - gam[i]);
#pragma unroll 8
      for (int c = 0; c < K; ++c) {
        const float ki = Ks[i * KP + c];
        kk += Ks[r * KP + c] * ki;
        if (Qs) qk += Qs[r * KP + c] * ki;
      }
      kk = i < r ? e * kk : 0.0f;
      qk *= e;
    }
    KKe[r * CP + i] = kk;
    if (Qs) QKe[r * CP + i] = qk;
  }
}

/// X[r][j] ← (I + A)^{-1} X, A_ri = β_r KKe[r][i] (i < r): forward substitution, row by row;
/// warp w owns columns 4w..4w+3, lanes split the sum over i. X: [C][VP]. No block barrier inside.
__device__ inline void solve_lower(const float* KKe, const float* beta, int n, float* X) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int r = 1; r < n; ++r) {
    const float a0 = lane < r ? beta[r] * KKe[r * CP + lane] : 0.0f;
    const float a1 = lane + 32 < r ? beta[r] * KKe[r * CP + lane + 32] : 0.0f;
#pragma unroll
    for (int jj = 0; jj < VB / kWarps; ++jj) {
      const int j = warp * (VB / kWarps) + jj;
      float s = lane < r ? a0 * X[lane * VP + j] : 0.0f;
      if (lane + 32 < r) s += a1 * X[(lane + 32) * VP + j];
      s = warp_sum(s);
      if (lane == 0) X[r * VP + j] -= s;
    }
    __syncwarp();
  }
}

/// X ← (I + A)^{-T} X: backward substitution, X_i −= Σ_{r>i} A_ri X_r, from i = n − 2 down.
__device__ inline void solve_upper(const float* KKe, const float* beta, int n, float* X) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int r0 = lane, r1 = lane + 32;
  for (int i = n - 2; i >= 0; --i) {
    const float a0 = r0 > i && r0 < n ? beta[r0] * KKe[r0 * CP + i] : 0.0f;
    const float a1 = r1 > i && r1 < n ? beta[r1] * KKe[r1 * CP + i] : 0.0f;
#pragma unroll
    for (int jj = 0; jj < VB / kWarps; ++jj) {
      const int j = warp * (VB / kWarps) + jj;
      float s = r0 > i && r0 < n ? a0 * X[r0 * VP + j] : 0.0f;
      if (r1 > i && r1 < n) s += a1 * X[r1 * VP + j];
      s = warp_sum(s);
      if (lane == 0) X[i * VP + j] -= s;
    }
    __syncwarp();
  }
}

/// For warp-row r (lane = column j): s0k = Σ_c k_r[c] S0[c][j], and R_rj = β_r (v_rj − Γ_r s0k)
/// written to X[r][j]; returns s0k. Vrow: v_rj (already loaded by the caller).
template <int K>
__device__ __forceinline__ float s0k_and_r(const float* Ks, const float* S0, int r, int j, float v_rj,
                                           const ChunkGates& cg, float* X) {
  constexpr int KP = K + 1;
  float s = 0.0f;
#pragma unroll 8
  for (int c = 0; c < K; ++c) s += Ks[r * KP + c] * S0[c * VP + j];
  X[r * VP + j] = cg.beta[r] * (v_rj - cg.Gam[r] * s);
  return s;
}

/// Sets the kernel's dynamic shared-memory limit to `bytes` (above 48 KiB needs it; for the current
/// device, so it is set at every launch).
template <class Kernel>
void allow_smem(Kernel* k, size_t bytes) {
  opt_in_shared_memory(k, int(bytes));
}

}  // namespace octet::cuda::gdn
