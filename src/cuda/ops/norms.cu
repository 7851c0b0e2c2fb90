// src/cuda/ops/norms.cu — RMSNorm (Zhang & Sennrich 2019) and LayerNorm (Ba et al. 2016), forward and
// backward, one warp per row (8-wide 16-byte accesses when the row allows, the weight and bias read
// the same way: see RowParams and lane_walk). Numerics (docs/cuda.md §"Memory-bound kernels"): every
// per-element operation in float, as PyTorch's and Apex's kernels; each lane's partial row sums in float, the
// sum of the 32 lanes and the statistics derived from it (mean, rstd, the backward's row means) in double;
// the weight/bias gradients by a two-stage column reduction (partial sums over chunks of kChunkRows rows in a
// 256-column x 8-row-lane thread block, then one warp per feature adds the chunks in a fixed order:
// deterministic, no atomics; the partials live in stream-ordered scratch, cudaMallocAsync). Twin of
// src/cpu/backend/norms.cpp (same formulas; the twin sums every element in double, so the two agree to float
// rounding, not bit for bit); see ops.h. x, y, dy, dx may be F32 or BF16 each (typed.cuh); weights,
// statistics and their gradients are F32. docs/cuda.md §"Memory-bound kernels".
#include <cuda_runtime.h>

#include <initializer_list>

#include "cuda/runtime/check.h"
#include "cuda/ops/ops.h"
#include "cuda/ops/reduce_util.cuh"
#include "cuda/runtime/typed.cuh"

namespace octet::cuda {
namespace {

constexpr int kThreads = 256;  // = 32 * kRowWarps for the row kernels

__device__ __forceinline__ float w_at(const float* w, int64_t i) { return w ? w[i] : 1.0f; }

// One warp per row (kRowWarps rows per block): a lane walks its elements of the row — with kVec,
// 8 consecutive ones at 8·lane + 256·k through ld8/st8 (16-byte accesses for BF16), else lane +
// 32·k — and the row sums are warp shuffles, no block barriers. The second walk over the row
// (the outputs) re-reads it from L1. The per-element work is float (a double per element made these
// kernels FP64-conversion bound, 2-3x their memory floor on an H200); a lane's partial sums cover
// dim / 32 elements and are combined across the warp in double.
constexpr int kRowWarps = 8;

// The per-feature parameters a row walk reads beside its two tensors: the weight w (1 if null) and
// the bias b (0 if null). With kVec, eight consecutive entries are loaded per 8-element step —
// two 16-byte loads each when `vec` (w and b 16-byte aligned), else eight scalar loads — so a
// warp's parameter reads coalesce like its tensor reads (one 4-byte load per element and lane
// touched a separate 32-byte sector: the L1 throughput limit of the first form).
struct RowParams {
  const float* w;
  const float* b;
  bool vec;
};
__device__ __forceinline__ void ld8_param(const float* p, int64_t i, bool vec, float absent, float v[8]) {
  if (!p) {
    for (int e = 0; e < 8; ++e) v[e] = absent;
  } else if (vec) {
    ld8(p + i, v);
  } else {
    for (int e = 0; e < 8; ++e) v[e] = p[i + e];
  }
}

// Calls f(i, a[i], b[i], w[i], bias[i]) for each element i of the row this lane owns.
template <bool kVec, class TA, class TB, class F>
__device__ __forceinline__ void lane_walk(const TA* a, const TB* b, const RowParams& pr, int64_t dim,
                                          int lane, F&& f) {
  if constexpr (kVec) {
#pragma unroll 4  // several steps' loads in flight; f still sees the elements in order
    for (int64_t i = 8 * lane; i < dim; i += 256) {
      float va[8], vb[8], vw[8], vz[8];
      ld8(a + i, va);
      ld8(b + i, vb);
      ld8_param(pr.w, i, pr.vec, 1.0f, vw);
      ld8_param(pr.b, i, pr.vec, 0.0f, vz);
      for (int e = 0; e < 8; ++e) f(i + e, va[e], vb[e], vw[e], vz[e]);
    }
  } else {
    for (int64_t i = lane; i < dim; i += 32) f(i, ld(a, i), ld(b, i), w_at(pr.w, i), pr.b ? pr.b[i] : 0.0f);
  }
}
// out[i] = f(i, a[i], b[i], w[i], bias[i]) for each element i of the row this lane owns — with
// acc, out[i] += f(..) as stored (typed.cuh stored_value: the bits of writing f's value to a
// tensor like out and axpy(1, that, out); __fadd_rn keeps the compiler from fusing f's last
// multiply into the add, which would give other bits than the write and axpy); returns the largest |out[i]|
// as stored (float bits: typed.cuh stored_abs_bits), for the forwards' amax output.
template <bool kVec, class TA, class TB, class TO, class F>
__device__ __forceinline__ unsigned lane_map(const TA* a, const TB* b, const RowParams& pr, TO* out,
                                             int64_t dim, int lane, F&& f, bool acc = false) {
  unsigned m = 0;
  if constexpr (kVec) {
    for (int64_t i = 8 * lane; i < dim; i += 256) {
      float va[8], vb[8], vo[8], vw[8], vz[8];
      ld8(a + i, va);
      ld8(b + i, vb);
      ld8_param(pr.w, i, pr.vec, 1.0f, vw);
      ld8_param(pr.b, i, pr.vec, 0.0f, vz);
      if (acc) ld8(out + i, vo);
      for (int e = 0; e < 8; ++e) {
        va[e] = f(i + e, va[e], vb[e], vw[e], vz[e]);
        if (acc) va[e] = __fadd_rn(vo[e], stored_value(out, va[e]));  // no FMA with f's last product
        m = max(m, stored_abs_bits(out, va[e]));
      }
      st8(out + i, va);
    }
  } else {
    for (int64_t i = lane; i < dim; i += 32) {
      float v = f(i, ld(a, i), ld(b, i), w_at(pr.w, i), pr.b ? pr.b[i] : 0.0f);
      if (acc) v = __fadd_rn(ld(out, i), stored_value(out, v));
      m = max(m, stored_abs_bits(out, v));
      st(out, i, v);
    }
  }
  return m;
}

// The row of this warp, or -1 past the last row (uniform over the warp).
__device__ __forceinline__ int64_t warp_row(int64_t rows) {
  const int64_t r = blockIdx.x * int64_t(kRowWarps) + threadIdx.x / 32;
  return r < rows ? r : -1;
}

// amax (may be null): max of |y| as stored, one atomicMax per block (ops.h). The forwards keep every
// warp to the end (no early return) for that block reduction.
template <bool kVec, class TX, class TY>
__global__ void rmsnorm_forward_kernel(const TX* x, RowParams pr, TY* y, float* rstd, int64_t rows,
                                       int64_t dim, float eps, unsigned* amax) {
  __shared__ unsigned scratch[32];
  const int64_t r = warp_row(rows);
  const int lane = threadIdx.x % 32;
  unsigned m = 0;
  if (r >= 0) {
    const TX* xr = x + r * dim;
    float ss = 0.0f;
    lane_walk<kVec>(xr, xr, RowParams{}, dim, lane,
                    [&](int64_t, float v, float, float, float) { ss += v * v; });
    double ssd = ss;
    if (!isfinite(ss)) {  // |x| ≳ 1e18: v² overflowed FP32, not double (an inf or NaN in x stays one)
      ssd = 0.0;
      lane_walk<kVec>(xr, xr, RowParams{}, dim, lane,
                      [&](int64_t, float v, float, float, float) { ssd += double(v) * v; });
    }
    const float rs = float(1.0 / sqrt(warp_sum(ssd) / double(dim) + double(eps)));
    m = lane_map<kVec>(xr, xr, pr, y + r * dim, dim, lane,
                       [&](int64_t, float v, float, float wi, float) { return v * rs * wi; });
    if (lane == 0) rstd[r] = rs;
  }
  block_amax_out(m, scratch, amax);
}

template <bool kVec, class TX, class TD, class TG>
__global__ void rmsnorm_backward_kernel(const TX* x, RowParams pr, const float* rstd, const TD* dy, TG* dx,
                                        int64_t rows, int64_t dim, bool acc) {
  const int64_t r = warp_row(rows);
  if (r < 0) return;
  const int lane = threadIdx.x % 32;
  const TX* xr = x + r * dim;
  const TD* dyr = dy + r * dim;
  const float rs = rstd[r];
  float gx = 0.0f;
  lane_walk<kVec>(dyr, xr, pr, dim, lane,
                  [&](int64_t, float g, float v, float wi, float) { gx += g * wi * v; });
  const double rsd = rs;
  const float c = float(rsd * rsd * rsd * warp_sum(double(gx)) / double(dim));
  lane_map<kVec>(
      dyr, xr, pr, dx + r * dim, dim, lane,
      [&](int64_t, float g, float v, float wi, float) { return rs * g * wi - c * v; }, acc);
}

// dw[i] += Σ_r dy[r,i]·x̂[r,i], with x̂ = x·rstd (rms) or (x − mean)·rstd (layer); db[i] += Σ_r dy.
// Stage 1: block (blockIdx.x, blockIdx.y) sums columns [256·bx, 256·bx + 256) over rows
// [kChunkRows·by, kChunkRows·(by + 1)): each thread sums its rows of the chunk in float (per-element
// work in float, as the row kernels), the 8 row lanes are added in double: lane l owns 8 consecutive columns
// (one 16-byte BF16 load per row with kVec), the 8 warps of the block take every 8th row and are combined in
// shared memory in warp order; the chunk's partials go to pw/pb [chunks, dim].
// Stage 2: one warp per column adds the chunks' partials (lane l: chunks l, l + 32, ... in order,
// then a fixed shuffle tree). Deterministic, no atomics. (The first forms: one thread per column
// over all rows left ~130 of 132 SMs idle, 2 ms per call at 8192 x 768 on an H200; then 32
// columns per block with 2-byte loads and one thread per column for stage 2: 55 us per call.)
constexpr int kChunkRows = 32, kColLanes = 32, kColsPerLane = 8, kRowLanes = 8;
static_assert(kChunkRows % kRowLanes == 0, "every row lane takes the same number of rows of a chunk");
constexpr int kColsPerBlock = kColLanes * kColsPerLane;

template <bool kVec, class TX, class TD>
__global__ void __launch_bounds__(kColLanes* kRowLanes)
    norm_param_partial_kernel(const TX* x, const float* mean, const float* rstd, const TD* dy, double* pw,
                              double* pb, int64_t rows, int64_t dim) {
  // Row lane y's sum for column 8·tx + e at [y][tx·9 + e]: the padding spreads the stores of one e
  // (lanes 8 columns apart) over the banks.
  constexpr int kPad = kColsPerLane + 1;
  __shared__ double sw_s[kRowLanes][kColLanes * kPad], sb_s[kRowLanes][kColLanes * kPad];
  const int64_t c0 = blockIdx.x * int64_t(kColsPerBlock) + kColsPerLane * threadIdx.x;
  const int64_t r0 = blockIdx.y * int64_t(kChunkRows);
  const int64_t r1 = r0 + kChunkRows < rows ? r0 + kChunkRows : rows;
  float sw[kColsPerLane], sb[kColsPerLane];
#pragma unroll
  for (int e = 0; e < kColsPerLane; ++e) sw[e] = 0.0f, sb[e] = 0.0f;
  if (c0 < dim) {
#pragma unroll  // every row's loads in flight (predicated), summed in row order
    for (int k = 0; k < kChunkRows / kRowLanes; ++k) {
      const int64_t r = r0 + threadIdx.y + int64_t(k) * kRowLanes;
      if (r >= r1) break;
      float xv[kColsPerLane], gv[kColsPerLane];
      if constexpr (kVec) {  // dim % 8 == 0: the 8 columns are inside the row
        ld8(x + r * dim + c0, xv);
        ld8(dy + r * dim + c0, gv);
      } else {
#pragma unroll
        for (int e = 0; e < kColsPerLane; ++e) {
          const bool in = c0 + e < dim;
          xv[e] = in ? ld(x, r * dim + c0 + e) : 0.0f;
          gv[e] = in ? ld(dy, r * dim + c0 + e) : 0.0f;
        }
      }
      const float mu = mean ? mean[r] : 0.0f, rs = rstd[r];
#pragma unroll
      for (int e = 0; e < kColsPerLane; ++e) {
        sw[e] += gv[e] * ((xv[e] - mu) * rs);
        sb[e] += gv[e];
      }
    }
  }
#pragma unroll
  for (int e = 0; e < kColsPerLane; ++e) {
    sw_s[threadIdx.y][kPad * threadIdx.x + e] = double(sw[e]);
    sb_s[threadIdx.y][kPad * threadIdx.x + e] = double(sb[e]);
  }
  __syncthreads();
  // Thread t of the block: column 256·bx + t, the row lanes in order.
  const int t = threadIdx.y * kColLanes + threadIdx.x;
  const int64_t i = blockIdx.x * int64_t(kColsPerBlock) + t;
  if (i < dim) {
    const int at = kPad * (t / kColsPerLane) + t % kColsPerLane;
    double w = sw_s[0][at], bb = sb_s[0][at];
    for (int l = 1; l < kRowLanes; ++l) w += sw_s[l][at], bb += sb_s[l][at];
    pw[blockIdx.y * dim + i] = w;
    pb[blockIdx.y * dim + i] = bb;
  }
}

constexpr int kFinishThreads = 256;  // 8 columns (warps) per block

__global__ void norm_param_finish_kernel(const double* pw, const double* pb, float* dw, float* db,
                                         int64_t chunks, int64_t dim) {
  const int64_t i = blockIdx.x * int64_t(kFinishThreads / 32) + threadIdx.x / 32;
  if (i >= dim) return;  // uniform over the warp
  const int lane = threadIdx.x % 32;
  double sw = 0.0, sb = 0.0;
  for (int64_t c = lane; c < chunks; c += 32) sw += pw[c * dim + i], sb += pb[c * dim + i];
  for (int off = 16; off > 0; off /= 2) {
    sw += __shfl_xor_sync(0xFFFFFFFFu, sw, off);
    sb += __shfl_xor_sync(0xFFFFFFFFu, sb, off);
  }
  if (lane != 0) return;
  if (dw) dw[i] += float(sw);
  if (db) db[i] += float(sb);
}

template <bool kVec, class TX, class TY>
__global__ void layernorm_forward_kernel(const TX* x, RowParams pr, TY* y, float* mean, float* rstd,
                                         int64_t rows, int64_t dim, float eps, unsigned* amax) {
  __shared__ unsigned scratch[32];
  const int64_t r = warp_row(rows);
  const int lane = threadIdx.x % 32;
  unsigned m = 0;
  if (r >= 0) {
    const TX* xr = x + r * dim;
    float s = 0.0f;
    lane_walk<kVec>(xr, xr, RowParams{}, dim, lane, [&](int64_t, float v, float, float, float) { s += v; });
    double sd = s;
    if (!isfinite(s)) {  // FP32 overflow of the lane's sum (as the variance's below): again in double
      sd = 0.0;
      lane_walk<kVec>(xr, xr, RowParams{}, dim, lane,
                      [&](int64_t, float v, float, float, float) { sd += v; });
    }
    const float mu = float(warp_sum(sd) / double(dim));
    float var = 0.0f;  // two passes (the row is in L1): no cancellation of E[x²] − E[x]²
    lane_walk<kVec>(xr, xr, RowParams{}, dim, lane,
                    [&](int64_t, float v, float, float, float) { var += (v - mu) * (v - mu); });
    double vd = var;
    if (!isfinite(var)) {  // |x − mean| ≳ 1e18
      vd = 0.0;
      lane_walk<kVec>(xr, xr, RowParams{}, dim, lane, [&](int64_t, float v, float, float, float) {
        vd += (double(v) - mu) * (double(v) - mu);
      });
    }
    const float rs = float(1.0 / sqrt(warp_sum(vd) / double(dim) + double(eps)));
    m = lane_map<kVec>(xr, xr, pr, y + r * dim, dim, lane,
                       [&](int64_t, float v, float, float wi, float bi) { return (v - mu) * rs * wi + bi; });
    if (lane == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
  }
  block_amax_out(m, scratch, amax);
}

template <bool kVec, class TX, class TD, class TG>
__global__ void layernorm_backward_kernel(const TX* x, RowParams pr, const float* mean, const float* rstd,
                                          const TD* dy, TG* dx, int64_t rows, int64_t dim, bool acc) {
  const int64_t r = warp_row(rows);
  if (r < 0) return;
  const int lane = threadIdx.x % 32;
  const TX* xr = x + r * dim;
  const TD* dyr = dy + r * dim;
  const float mu = mean[r], rs = rstd[r];
  float gs = 0.0f, gxs = 0.0f;
  lane_walk<kVec>(dyr, xr, pr, dim, lane, [&](int64_t, float dv, float v, float wi, float) {
    const float g = dv * wi;
    gs += g;
    gxs += g * ((v - mu) * rs);
  });
  const float g_mean = float(warp_sum(double(gs)) / double(dim));
  const float gx_mean = float(warp_sum(double(gxs)) / double(dim));
  lane_map<kVec>(
      dyr, xr, pr, dx + r * dim, dim, lane,
      [&](int64_t, float dv, float v, float wi, float) {
        const float xhat = (v - mu) * rs;
        return rs * (dv * wi - g_mean - xhat * gx_mean);
      },
      acc);
}

#define OCTET_T(tag) std::remove_pointer_t<decltype(tag)>

// dw += Σ_r dy·x̂ and db += Σ_r dy (either may be null) through the two kernels above.
void norm_param_grad(const Tensor& x, const float* mean, const float* rstd, const Tensor& dy, float* dw,
                     float* db, int64_t rows, int64_t dim, cudaStream_t s) {
  const int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
  double* partial = nullptr;  // [2, chunks, dim]: weight partials, then bias partials
  OCTET_CUDA_CHECK(
      cudaMallocAsync(reinterpret_cast<void**>(&partial), size_t(2 * chunks * dim) * sizeof(double), s));
  const dim3 grid(unsigned((dim + kColsPerBlock - 1) / kColsPerBlock), unsigned(chunks));
  const bool vec = dim % kColsPerLane == 0 && vec_ok({x.data, dy.data});
  dispatch_act(
      [&](auto a, auto b) {
        using TX = OCTET_T(a);
        using TD = OCTET_T(b);
        auto* k = vec ? norm_param_partial_kernel<true, TX, TD> : norm_param_partial_kernel<false, TX, TD>;
        k<<<grid, dim3(kColLanes, kRowLanes), 0, s>>>(typed(x, a), mean, rstd, typed(dy, b), partial,
                                                      partial + chunks * dim, rows, dim);
      },
      x.dtype, dy.dtype);
  OCTET_CUDA_LAUNCH_CHECK();
  const unsigned finish_blocks = unsigned((dim + kFinishThreads / 32 - 1) / (kFinishThreads / 32));
  norm_param_finish_kernel<<<finish_blocks, kFinishThreads, 0, s>>>(partial, partial + chunks * dim, dw, db,
                                                                    chunks, dim);
  OCTET_CUDA_LAUNCH_CHECK();
  OCTET_CUDA_CHECK(cudaFreeAsync(partial, s));
}

// Blocks of kRowWarps warps for one warp per row; 8-wide walks when dim % 8 == 0 and every act
// tensor of the row is 16-byte aligned.
unsigned row_blocks(int64_t rows) { return unsigned((rows + kRowWarps - 1) / kRowWarps); }
bool rows_vec(int64_t dim, std::initializer_list<const void*> ptrs) { return dim % 8 == 0 && vec_ok(ptrs); }
// The row kernels' parameters: 16-byte loads when both present pointers are 16-byte aligned.
RowParams row_params(const float* w, const float* b) { return RowParams{w, b, vec_ok({w, b})}; }

}  // namespace

void rmsnorm_forward_launch(const Tensor& x, const float* w, const Tensor& y, float* rstd, int64_t rows,
                            int64_t dim, float eps, cudaStream_t s, unsigned* amax) {
  if (rows == 0) return;
  const bool vec = rows_vec(dim, {x.data, y.data});
  dispatch_act(
      [&](auto a, auto b) {
        using TX = OCTET_T(a);
        using TY = OCTET_T(b);
        auto* k = vec ? rmsnorm_forward_kernel<true, TX, TY> : rmsnorm_forward_kernel<false, TX, TY>;
        k<<<row_blocks(rows), kThreads, 0, s>>>(typed(x, a), row_params(w, nullptr), typed(y, b), rstd, rows,
                                                dim, eps, amax);
      },
      x.dtype, y.dtype);
  OCTET_CUDA_LAUNCH_CHECK();
}

void rmsnorm_backward_launch(const Tensor& x, const float* w, const float* rstd, const Tensor& dy,
                             const Tensor& dx, float* dw, int64_t rows, int64_t dim, cudaStream_t s,
                             bool accumulate) {
  if (rows == 0) return;
  const bool vec = rows_vec(dim, {x.data, dy.data, dx.data});
  dispatch_act(
      [&](auto a, auto b, auto c) {
        using TX = OCTET_T(a);
        using TD = OCTET_T(b);
        using TG = OCTET_T(c);
        auto* k =
            vec ? rmsnorm_backward_kernel<true, TX, TD, TG> : rmsnorm_backward_kernel<false, TX, TD, TG>;
        k<<<row_blocks(rows), kThreads, 0, s>>>(typed(x, a), row_params(w, nullptr), rstd, typed(dy, b),
                                                typed(dx, c), rows, dim, accumulate);
      },
      x.dtype, dy.dtype, dx.dtype);
  OCTET_CUDA_LAUNCH_CHECK();
  if (dw) norm_param_grad(x, nullptr, rstd, dy, dw, nullptr, rows, dim, s);
}

void layernorm_forward_launch(const Tensor& x, const float* w, const float* b, const Tensor& y, float* mean,
                              float* rstd, int64_t rows, int64_t dim, float eps, cudaStream_t s,
                              unsigned* amax) {
  if (rows == 0) return;
  const bool vec = rows_vec(dim, {x.data, y.data});
  dispatch_act(
      [&](auto ta, auto tb) {
        using TX = OCTET_T(ta);
        using TY = OCTET_T(tb);
        auto* k = vec ? layernorm_forward_kernel<true, TX, TY> : layernorm_forward_kernel<false, TX, TY>;
        k<<<row_blocks(rows), kThreads, 0, s>>>(typed(x, ta), row_params(w, b), typed(y, tb), mean, rstd,
                                                rows, dim, eps, amax);
      },
      x.dtype, y.dtype);
  OCTET_CUDA_LAUNCH_CHECK();
}

void layernorm_backward_launch(const Tensor& x, const float* w, const float* mean, const float* rstd,
                               const Tensor& dy, const Tensor& dx, float* dw, float* db, int64_t rows,
                               int64_t dim, cudaStream_t s, bool accumulate) {
  if (rows == 0) return;
  const bool vec = rows_vec(dim, {x.data, dy.data, dx.data});
  dispatch_act(
      [&](auto a, auto b, auto c) {
        using TX = OCTET_T(a);
        using TD = OCTET_T(b);
        using TG = OCTET_T(c);
        auto* k =
            vec ? layernorm_backward_kernel<true, TX, TD, TG> : layernorm_backward_kernel<false, TX, TD, TG>;
        k<<<row_blocks(rows), kThreads, 0, s>>>(typed(x, a), row_params(w, nullptr), mean, rstd, typed(dy, b),
                                                typed(dx, c), rows, dim, accumulate);
      },
      x.dtype, dy.dtype, dx.dtype);
  OCTET_CUDA_LAUNCH_CHECK();
  if (dw || db) norm_param_grad(x, mean, rstd, dy, dw, db, rows, dim, s);
}

}  // namespace octet::cuda
