// src/cuda/attention/unfused/unfused_rows.cu — kernels of the unfused CUDA attention (unfused/unfused.h).
//
// They reproduce the CPU reference's whole-row form (src/cpu/attention_whole.cpp,
// attention_backward_tile.cpp, attention_quant.cpp) step by step: per-tensor current-scaled E4M3
// Q, K, V (fp8.h scale_from_amax), m = max S, L = m + log Σ exp(S − m) over the unrounded P,
// P̃ = E4M3 of exp(S − m)·p_scale (row-max-relative: "P without underflow", docs/delta-matching.md),
// O = (Σ P̃ V̂) / Σ P̃ stored as BF16, dÔ per-tensor in do_format; the forward saves m and
// l = Σ exp(S − m) per row, the backward's P = exp(S − m) / l (sums to 1 to FP32 rounding at any
// logit size, docs/delta-matching.md "The saved softmax statistics"), the delta by
// octet/delta_rule.h (the CPU's rule: stale D = dO·O; matched D = Σ_j P_ij dP_ij / Σ_j P_ij with
// FP64 sums), dS = P ∘ (dP − D), the row residual before rounding
// (|Σ_j dS_ij| / Σ_j P_ij(|dP_ij| + |D_i|), as the CPU's ds_step), dV's
// P̃ = E4M3 of exp(S − m)·p_scale with the row factor 1/l_i moved into dV's dO
// operand, and dŜ with one power-of-two scale per (block_q x block_k) tile (Delta-Matching, arXiv
// 2609.37852; FlashAttention-2's backward structure, arXiv 2307.08691).
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>

#include "cuda/attention/row_factor.h"
#include "cuda/attention/act_layout.h"
#include "cuda/attention/unfused/unfused.h"
#include "cuda/runtime/check.h"
#include "cuda/quantize/fp8_device.cuh"
#include "cuda/ops/reduce_util.cuh"
#include "octet/delta_rule.h"

namespace octet::cuda {
namespace {

__device__ __forceinline__ float bf16_value(uint16_t b) { return __uint_as_float(uint32_t(b) << 16); }

__device__ __forceinline__ int64_t visible(const AttnDims& d, int64_t i) {
  if (!d.causal) return d.Tk;
  const int64_t n = i + d.Tk - d.Tq + 1;
  return n < 0 ? 0 : (n > d.Tk ? d.Tk : n);
}

constexpr int kRowThreads = 256;

__global__ void softmax_forward_kernel(AttnDims d, const float* S, bool fp8, float p_scale, void* P,
                                       float* lse, float* rinv, float* row_max, float* row_sum) {
  __shared__ float scratch[32];
  __shared__ float lut[256];  // fp8_decode of every E4M3 code, divided by p_scale
  for (int c = threadIdx.x; c < 256; c += blockDim.x) lut[c] = fp8_decode(uint8_t(c), Format::E4M3) / p_scale;
  const int64_t row = blockIdx.x, bh = row / d.Tq, i = row % d.Tq;
  const float* s = S + (bh * d.Tq_p + i) * d.Tk_p;
  const int64_t n = visible(d, i), base = (bh * d.Tq_p + i) * d.Tk_p;
  uint8_t* p8 = static_cast<uint8_t*>(P);
  uint16_t* p16 = static_cast<uint16_t*>(P);
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, s[j]);
  m = block_max(m, scratch, -INFINITY);
  float l = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) l += expf(s[j] - m);
  l = block_sum(l, scratch);
  const float L = n > 0 ? m + logf(l) : -INFINITY;
  float l_hat = 0.0f;
  for (int64_t j = threadIdx.x; j < d.Tk_p; j += blockDim.x) {
    const float p = j < n ? expf(s[j] - m) : 0.0f;  // row-max-relative, <= 1: no underflow
    if (fp8) {
      const uint8_t c = fp8_encode(p * p_scale, Format::E4M3, true);
      p8[base + j] = c;
      l_hat += lut[c];
    } else {
      const uint16_t b = bf16_bits(p);
      p16[base + j] = b;
      l_hat += bf16_value(b);
    }
  }
  l_hat = block_sum(l_hat, scratch);
  if (threadIdx.x == 0) {
    lse[row] = L;
    rinv[row] = l_hat > 0.0f ? 1.0f / l_hat : 0.0f;
    row_max[row] = m;  // −inf and l = 0 in a row that sees no key
    row_sum[row] = l;
  }
}

__global__ void output_finalize_kernel(AttnDims d, const float* o_acc, const float* rinv, float* o,
                                       float* o_saved) {
  const int64_t n = d.B * d.H * d.Tq * d.D;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = idx % d.D, row = idx / d.D, bh = row / d.Tq, i = row % d.Tq;
    const float v = bf16_round(o_acc[(bh * d.Tq_p + i) * d.D + c] * rinv[row]);
    const int64_t at = act_row_offset(d.tokens_major, bh, i, d.H, d.Tq, d.D) + c;
    o[at] = v;
    if (o_saved) o_saved[at] = v;
  }
}

// Two block sums in one round (block_sum's order: the same bits as two block_sum calls).
__device__ __forceinline__ double2 block_sum2(double2 v, double2* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
  v.x = warp_sum(v.x);
  v.y = warp_sum(v.y);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  double2 r = lane < nw ? scratch[lane] : make_double2(0.0, 0.0);
  r.x = warp_sum(r.x);
  r.y = warp_sum(r.y);
  return r;
}

// One block per query row, P_ij = exp(S_ij − m_i) / l_i from the forward's saved m and l (l >= 1
// in a row that sees a key: its max term is exp(0) = 1, so never a denormal denominator); two
// passes over the row:
//   1. the delta (octet/delta_rule.h): stale D = dO·O (the given dO, the forward's O); matched
//      D = Σ_j P_ij dP_ij / Σ_j P_ij with both sums in FP64 (MatchedSums);
//   2. dS, the residual sums, dV's P̃.
__global__ void backward_rows_kernel(AttnDims d, BackwardRowArgs a) {
  __shared__ float scratch[32];
  __shared__ double2 dscratch[32];
  const int64_t row = blockIdx.x, bh = row / d.Tq, i = row % d.Tq;
  const int64_t base = (bh * d.Tq_p + i) * d.Tk_p, n = visible(d, i);
  const float* s = a.S + base;
  float* dp = a.dP + base;
  uint8_t* p8 = static_cast<uint8_t*>(a.P);
  uint16_t* p16 = static_cast<uint16_t*>(a.P);
  // The forward's m_i = max_j S_ij (the S recomputed here is the forward's: the same GEMM on the
  // same saved operands) and l_i = Σ_j exp(S_ij − m_i) as the forward summed it.
  const float m = a.row_max[row], l = a.row_sum[row];
  RowDelta<float> delta;
  if (!a.matched) {
    float dot = 0.0f;
    const int64_t orow = act_row_offset(d.tokens_major, bh, i, d.H, d.Tq, d.D);
    for (int64_t c = threadIdx.x; c < d.D; c += blockDim.x) dot += a.d_o[orow + c] * a.o[orow + c];
    delta = RowDelta<float>::stale(block_sum(dot, scratch));
  } else {
    MatchedSums sums;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) sums.add(expf(s[j] - m) / l, dp[j]);
    const double2 t = block_sum2(make_double2(sums.p_dp, sums.p), dscratch);
    sums.p_dp = t.x;
    sums.p = t.y;
    delta = sums.delta<float>();  // block_sum2's barriers order pass 1's reads of dp before pass 2
  }
  // Residual r_i = |Σ_j dS_ij| / (Σ_j P_ij (|dP_ij| + |D_i|) + n·2^-126) (attention.h).
  const double d_abs = fabs(double(delta.value));
  double2 res = make_double2(0.0, 0.0);  // (Σ dS, Σ P(|dP| + |D|))
  for (int64_t j = threadIdx.x; j < d.Tk_p; j += blockDim.x) {
    const float e = j < n ? expf(s[j] - m) : 0.0f;  // dV's P̃ before rounding, <= 1
    const float p = j < n ? e / l : 0.0f;
    const float dpj = dp[j];
    const float ds = delta.ds(p, dpj);
    dp[j] = j < n ? ds : 0.0f;
    if (j < n) {
      res.x += double(ds);
      res.y += double(p) * (fabs(double(dpj)) + d_abs);
    }
    if (a.fp8)
      p8[base + j] = fp8_encode(e * a.p_scale, Format::E4M3, true);
    else
      p16[base + j] = bf16_bits(e);
  }
  __syncthreads();  // dscratch is reused
  res = block_sum2(res, dscratch);
  if (threadIdx.x == 0) {
    // the denominator's floor: n·2^-126 (attention.h AttentionStats)
    const double mag = res.y + double(n) * double(FLT_MIN);
    a.residual[row] = (mag > 0.0 || mag != mag) ? fabs(res.x) / mag : 0.0;  // a NaN stays
    a.row_factor[row] = n > 0 ? row_factor_of(l) : 0.0f;                    // 1/l_i, moved into dV's dO
  }
}

// Pass 1: amax of every (block_q x block_k) tile of dS, from 32x32 sub-tiles.
__global__ void ds_amax_kernel(AttnDims d, const float* dS, int64_t bq, int64_t bk, unsigned* tile_amax) {
  const int64_t bh = blockIdx.z, i0 = int64_t(blockIdx.y) * 32, j0 = int64_t(blockIdx.x) * 32;
  unsigned m = 0;
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int64_t i = i0 + k, j = j0 + threadIdx.x;
    if (i < d.Tq && j < d.Tk) m = max(m, __float_as_uint(dS[(bh * d.Tq_p + i) * d.Tk_p + j]) & 0x7FFFFFFFu);
  }
  m = warp_max(m);
  const int64_t ntj = (d.Tk + bk - 1) / bk, nti = (d.Tq + bq - 1) / bq;
  if (threadIdx.x == 0 && i0 < d.Tq && j0 < d.Tk)
    atomicMax(&tile_amax[(bh * nti + i0 / bq) * ntj + j0 / bk], m);
}

// Pass 2: dŜ rows and transposes (BF16), and P̃ᵀ, per 32x32 sub-tile through shared memory.
__global__ void ds_write_kernel(AttnDims d, const float* dS, bool fp8, Format fmt, int64_t bq, int64_t bk,
                                const unsigned* tile_amax, uint16_t* ds_rows, uint16_t* ds_trans,
                                const void* P, void* P_trans, int p_bytes) {
  __shared__ uint16_t t_ds[32][33];
  __shared__ uint16_t t_p[32][33];
  __shared__ float lut[256];  // fp8_decode of every code of ds_format
  for (int c = threadIdx.y * 32 + threadIdx.x; c < 256; c += 32 * blockDim.y)
    lut[c] = fp8_decode(uint8_t(c), fmt);
  __syncthreads();
  const int64_t bh = blockIdx.z, i0 = int64_t(blockIdx.y) * 32, j0 = int64_t(blockIdx.x) * 32;
  const int tx = threadIdx.x, ty = threadIdx.y;
  float s = 1.0f;
  if (fp8 && i0 < d.Tq && j0 < d.Tk) {
    const int64_t ntj = (d.Tk + bk - 1) / bk, nti = (d.Tq + bq - 1) / bq;
    s = scale_from_amax(amax_from_bits(tile_amax[(bh * nti + i0 / bq) * ntj + j0 / bk]), fmt, 0, true);
  }
  const float s_inv = 1.0f / s;
  for (int k = ty; k < 32; k += blockDim.y) {
    const int64_t i = i0 + k, j = j0 + tx;
    if (i >= d.Tq_p || j >= d.Tk_p) continue;
    const int64_t idx = (bh * d.Tq_p + i) * d.Tk_p + j;
    const float x = (i < d.Tq && j < d.Tk) ? dS[idx] : 0.0f;
    const float xq = fp8 ? lut[fp8_encode(x * s, fmt, true)] * s_inv : x;  // fp8_round(x·s)·(1/s)
    const uint16_t b = bf16_bits(xq);  // exact for FP8: a 3-bit mantissa times a power of two
    ds_rows[idx] = b;
    t_ds[k][tx] = b;
    t_p[k][tx] =
        p_bytes == 1 ? uint16_t(static_cast<const uint8_t*>(P)[idx]) : static_cast<const uint16_t*>(P)[idx];
  }
  __syncthreads();
  const int64_t b = bh / d.H, h = bh % d.H, g = h / d.rep, l = h % d.rep;
  const int64_t width = d.rep * d.Tq_p;
  for (int k = ty; k < 32; k += blockDim.y) {
    const int64_t j = j0 + k, i = i0 + tx;
    if (i >= d.Tq_p || j >= d.Tk_p) continue;
    const int64_t idx = ((b * d.G + g) * d.Tk_p + j) * width + l * d.Tq_p + i;
    ds_trans[idx] = t_ds[tx][k];
    if (p_bytes == 1)
      static_cast<uint8_t*>(P_trans)[idx] = uint8_t(t_p[tx][k]);
    else
      static_cast<uint16_t*>(P_trans)[idx] = t_p[tx][k];
  }
}

unsigned blocks(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return unsigned(b < 1 ? 1 : (b > 132 * 32 ? 132 * 32 : b));
}

}  // namespace

void softmax_forward_launch(const AttnDims& d, const float* S, bool fp8, float p_scale, void* P, float* lse,
                            float* rinv, float* row_max, float* row_sum, cudaStream_t s) {
  softmax_forward_kernel<<<unsigned(d.B * d.H * d.Tq), kRowThreads, 0, s>>>(d, S, fp8, p_scale, P, lse, rinv,
                                                                            row_max, row_sum);
  OCTET_CUDA_LAUNCH_CHECK();
}

void output_finalize_launch(const AttnDims& d, const float* o_acc, const float* rinv, float* o,
                            float* o_saved, cudaStream_t s) {
  output_finalize_kernel<<<blocks(d.B * d.H * d.Tq * d.D, 256), 256, 0, s>>>(d, o_acc, rinv, o, o_saved);
  OCTET_CUDA_LAUNCH_CHECK();
}

void backward_rows_launch(const AttnDims& d, const BackwardRowArgs& a, cudaStream_t s) {
  backward_rows_kernel<<<unsigned(d.B * d.H * d.Tq), kRowThreads, 0, s>>>(d, a);
  OCTET_CUDA_LAUNCH_CHECK();
}

void ds_quantize_launch(const AttnDims& d, const float* dS, bool fp8, Format ds_format, int64_t block_q,
                        int64_t block_k, unsigned* tile_amax, uint16_t* ds_rows, uint16_t* ds_trans,
                        const void* P, void* P_trans, int p_elem_bytes, cudaStream_t s) {
  const dim3 grid(unsigned((d.Tk_p + 31) / 32), unsigned((d.Tq_p + 31) / 32), unsigned(d.B * d.H));
  if (fp8) {
    const int64_t n = d.B * d.H * ((d.Tq + block_q - 1) / block_q) * ((d.Tk + block_k - 1) / block_k);
    OCTET_CUDA_CHECK(cudaMemsetAsync(tile_amax, 0, size_t(n) * sizeof(unsigned), s));
    ds_amax_kernel<<<grid, dim3(32, 8), 0, s>>>(d, dS, block_q, block_k, tile_amax);
    OCTET_CUDA_LAUNCH_CHECK();
  }
  ds_write_kernel<<<grid, dim3(32, 8), 0, s>>>(d, dS, fp8, ds_format, block_q, block_k, tile_amax, ds_rows,
                                               ds_trans, P, P_trans, p_elem_bytes);
  OCTET_CUDA_LAUNCH_CHECK();
}

}  // namespace octet::cuda
