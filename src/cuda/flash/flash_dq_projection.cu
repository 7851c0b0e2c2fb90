// src/cuda/flash/flash_dq_projection.cu — the dQ row-sum projection of the fused FP8 attention
// backward (flash_backward.h dq_projection_launch; AttentionConfig::dq_projection, beyond the
// Delta-Matching paper; docs/delta-matching.md §"The dQ row-sum projection"). With the matched
// delta Σ_j dS_ij = 0, so dQ_i = τ Σ_j dS_ij (K̂_j − k̄) for any k̄; rounding dS to FP8 breaks that
// sum (r̂_i = Σ_j dŜ_ij ≠ 0) and dQ = τ dŜK̂ multiplies the error by the keys' common component.
// This kernel subtracts τ r̂_i k̄ (k̄ the mean key of the KV head) from the FP32 dQ accumulator,
// as the CPU reference's project_dq (src/cpu/attention.cpp) does from its dQ; r̂_i comes from the
// wgmma backward (BackwardParams::ds_row_sum).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/check.h"
#include "cuda/flash/flash_backward.h"
#include "cuda/flash/flash_qkv_scales.cuh"
#include "octet/error.h"
#include "octet/fp8.h"

namespace octet::cuda::flash {
namespace {

constexpr int kThreads = 256;

// One CTA per (b, h): k̄ of its KV head in FP64 (D columns x kThreads / D key slices, the slices
// joined in a fixed order: deterministic), then dq_acc[b, h, i, c] −= τ · r̂_i · k̄_c over its Tq rows.
__global__ void __launch_bounds__(kThreads) dq_projection_kernel(const BackwardParams p) {
  __shared__ double part[kThreads];
  __shared__ float k_mean[128];
  const int64_t bh = blockIdx.x, b = bh / p.H, h = bh % p.H;
  const int64_t D = p.D, slices = kThreads / D;
  const int tid = threadIdx.x;
  const int64_t c = tid % D, slice = tid / D;
  const int64_t bg = b * p.G + h / (p.H / p.G);
  const uint8_t* const k = p.k + bg * p.Tk_p * D;
  double sum = 0.0;  // of the codes (per-tensor scale) or the values (per-block scales): dq_acc's units
  for (int64_t j = slice; j < p.Tk; j += slices) {
    const double x = fp8_decode(k[j * D + c], Format::E4M3);
    sum += p.qkv_head_block ? x * double(k_inv_at(p, bg, j)) : x;
  }
  part[tid] = sum;
  __syncthreads();
  if (tid < D) {
    double total = 0.0;
    for (int64_t s = 0; s < slices; ++s) total += part[s * D + c];
    k_mean[c] = float(total / double(p.Tk));
  }
  __syncthreads();
  float* const dq = p.dq_acc + bh * p.Tq_p * D;
  const float* const r = p.ds_row_sum + bh * p.Tq;
  for (int64_t e = tid; e < p.Tq * D; e += kThreads) {
    const int64_t i = e / D;
    dq[e] -= float(double(p.tau) * double(r[i]) * double(k_mean[e % D]));
  }
}

}  // namespace

void dq_projection_launch(const BackwardParams& p, cudaStream_t stream) {
  OCTET_CHECK(p.D == 64 || p.D == 128,
              "dQ row-sum projection: head_dim must be 64 or 128, got " + std::to_string(p.D));
  OCTET_CHECK(p.k && p.ds_row_sum && p.dq_acc && (!p.qkv_head_block || p.k_scale_inv),
              "dQ row-sum projection: a null pointer (k, ds_row_sum, dq_acc, k_scale_inv)");
  OCTET_CHECK(p.B >= 1 && p.H >= 1 && p.G >= 1 && p.H % p.G == 0 && p.Tq >= 1 && p.Tk >= 1,
              "dQ row-sum projection: need B, H, G, Tq, Tk >= 1 and H a multiple of G");
  OCTET_CHECK(p.B * p.H <= 0x7FFFFFFF, "dQ row-sum projection: too many (batch, head) pairs");
  dq_projection_kernel<<<unsigned(p.B * p.H), kThreads, 0, stream>>>(p);
  OCTET_CUDA_LAUNCH_CHECK();
}

}  // namespace octet::cuda::flash
