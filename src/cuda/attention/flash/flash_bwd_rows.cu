// src/cuda/attention/flash/flash_bwd_rows.cu — the row kernels of the flash FP8 attention
// backward that do not depend on the architecture (flash_kernels.h; launched by
// flash_bwd_launch.cu):
//   the stale delta (FlashAttention-2/3, cuDNN): D_i = dO_i·O_i from the forward's stored O, and
//     dV's row factor 1/l_i, one warp per row (CPU twin: src/cpu/attention_flash.cpp's pre-pass);
//   the row residual's finish: |Σ_j dS_ij| / Σ_j P_ij(|dP_ij| + |D_i|) from the main kernel's sums;
//   the dQ row-sum projection (AttentionConfig::dq_projection, beyond the Delta-Matching paper;
//     docs/delta-matching.md §"The dQ row-sum projection"). With the matched delta Σ_j dS_ij = 0, so
//     dQ_i = τ Σ_j dS_ij (K̂_j − k̄) for any k̄; rounding dS to FP8 breaks that sum (r̂_i = Σ_j dŜ_ij
//     ≠ 0) and dQ = τ dŜK̂ multiplies the error by the keys' common component. The kernel subtracts
//     τ r̂_i k̄ (k̄ the mean key of the KV head) from the FP32 dQ accumulator, as the CPU reference's
//     project_dq (src/cpu/attention.cpp) does from its dQ; r̂_i comes from the wgmma backward
//     (BackwardParams::ds_row_sum).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/attention/row_factor.h"
#include "cuda/runtime/check.h"
#include "cuda/attention/flash/flash_kernels.h"
#include "cuda/attention/flash/flash_qkv_scales.cuh"
#include "cuda/runtime/typed.cuh"
#include "octet/delta_rule.h"
#include "octet/error.h"
#include "octet/fp8.h"

namespace octet::cuda::flash {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Stale: D_i = dO_i·O_i (FP32, lane partials then a warp sum), one warp per row; and 1/l_i. O and
// dO are read as they are given, F32 or BF16 (typed.cuh: BF16 widened exactly in registers).
template <class TO, class TDO>
__global__ void stale_delta_kernel(const BackwardParams p, const TO* o, const TDO* d_o) {
  const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= p.B * p.H * p.Tq) return;
  float dot = 0.0f;
  const int64_t at = act_row_offset(p.tokens_major, row / p.Tq, row % p.Tq, p.H, p.Tq, p.D);
  for (int64_t c = lane; c < p.D; c += 32) dot += ld(d_o, at + c) * ld(o, at + c);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xFFFFFFFFu, dot, o);
  if (lane == 0) {
    const float l = p.row_sum[row];
    p.delta[row] = RowDelta<float>::stale(dot).value;
    p.row_factor[row] = row_factor_of(l);
  }
}

__global__ void residual_finish_kernel(const double* sums, int64_t rows, double* residual) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows;
       i += int64_t(gridDim.x) * blockDim.x)
    residual[i] = sums[2 * i + 1] > 0.0 ? fabs(sums[2 * i]) / sums[2 * i + 1] : 0.0;
}

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

void bwd_stale_delta_launch(const BackwardParams& p, cudaStream_t stream) {
  const int64_t blocks = (p.B * p.H * p.Tq + kWarps - 1) / kWarps;
  OCTET_CHECK(blocks <= 0x7FFFFFFF, "flash attention backward: too many rows");
  const Bf16* o16 = reinterpret_cast<const Bf16*>(p.o_bf16);
  const Bf16* do16 = reinterpret_cast<const Bf16*>(p.d_o_bf16);
  const unsigned grid = unsigned(blocks);
  if (o16 && do16)
    stale_delta_kernel<<<grid, kThreads, 0, stream>>>(p, o16, do16);
  else if (o16)
    stale_delta_kernel<<<grid, kThreads, 0, stream>>>(p, o16, p.d_o_f32);
  else if (do16)
    stale_delta_kernel<<<grid, kThreads, 0, stream>>>(p, p.o, do16);
  else
    stale_delta_kernel<<<grid, kThreads, 0, stream>>>(p, p.o, p.d_o_f32);
  OCTET_CUDA_LAUNCH_CHECK();
}

void bwd_residual_finish_launch(const double* res_sums, int64_t rows, double* residual, cudaStream_t stream) {
  int64_t blocks = (rows + 255) / 256;
  blocks = blocks < 1 ? 1 : (blocks > 4096 ? 4096 : blocks);
  residual_finish_kernel<<<unsigned(blocks), 256, 0, stream>>>(res_sums, rows, residual);
  OCTET_CUDA_LAUNCH_CHECK();
}

void bwd_dq_projection_launch(const BackwardParams& p, cudaStream_t stream) {
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
