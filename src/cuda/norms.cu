// src/cuda/norms.cu — RMSNorm (Zhang & Sennrich 2019) and LayerNorm (Ba et al. 2016), forward and
// backward, one thread block per row; row statistics and the backward's row sums in double, the
// weight/bias gradients by a two-stage column reduction (partial sums over chunks of kChunkRows
// rows in a 32-column x 8-row thread block, then one thread per feature adds the chunks in order:
// deterministic, no atomics; the partials live in stream-ordered scratch, cudaMallocAsync).
// Twin of src/cpu/backend/norms.cpp (same formulas, same double accumulation); see ops.h.
// x, y, dy, dx may be F32 or BF16 each (typed.cuh); weights, statistics and their gradients are F32.
#include <cuda_runtime.h>

#include "cuda/check.h"
#include "cuda/ops.h"
#include "cuda/reduce_util.cuh"
#include "cuda/typed.cuh"

namespace octet::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float w_at(const float* w, int64_t i) { return w ? w[i] : 1.0f; }

template <class TX, class TY>
__global__ void rmsnorm_forward_kernel(const TX* x, const float* w, TY* y, float* rstd,
                                       int64_t dim, float eps) {
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const TX* xr = x + r * dim;
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += double(ld(xr, i)) * ld(xr, i);
  ss = block_sum(ss, scratch);
  const float rs = float(1.0 / sqrt(ss / double(dim) + double(eps)));
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) st(y, r * dim + i, ld(xr, i) * rs * w_at(w, i));
  if (threadIdx.x == 0) rstd[r] = rs;
}

template <class TX, class TD, class TG>
__global__ void rmsnorm_backward_kernel(const TX* x, const float* w, const float* rstd,
                                        const TD* dy, TG* dx, int64_t dim) {
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const TX* xr = x + r * dim;
  const TD* dyr = dy + r * dim;
  const double rs = rstd[r];
  double gx = 0.0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    gx += double(ld(dyr, i)) * w_at(w, i) * ld(xr, i);
  gx = block_sum(gx, scratch);
  const double c = rs * rs * rs * gx / double(dim);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    st(dx, r * dim + i, float(rs * double(ld(dyr, i)) * w_at(w, i) - c * ld(xr, i)));
}

// dw[i] += Σ_r dy[r,i]·x̂[r,i], with x̂ = x·rstd (rms) or (x − mean)·rstd (layer); db[i] += Σ_r dy.
// Stage 1: block (blockIdx.x, blockIdx.y) sums columns [32·bx, 32·bx + 32) over rows
// [kChunkRows·by, kChunkRows·(by + 1)) in double, 8 row-strided lanes per column combined in shared
// memory; the chunk's partials go to pw/pb [chunks, dim]. (One thread per column looping over all
// rows, the first form, left ~130 of 132 SMs idle: 2 ms per call at 8192 x 768 on an H200.)
constexpr int kChunkRows = 128, kColTile = 32, kRowLanes = 8;

template <class TX, class TD>
__global__ void norm_param_partial_kernel(const TX* x, const float* mean, const float* rstd,
                                          const TD* dy, double* pw, double* pb, int64_t rows,
                                          int64_t dim) {
  __shared__ double sw_s[kRowLanes][kColTile], sb_s[kRowLanes][kColTile];
  const int64_t i = blockIdx.x * int64_t(kColTile) + threadIdx.x;
  const int64_t r0 = blockIdx.y * int64_t(kChunkRows);
  const int64_t r1 = r0 + kChunkRows < rows ? r0 + kChunkRows : rows;
  double sw = 0.0, sb = 0.0;
  if (i < dim) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) {
      const double xhat = (double(ld(x, r * dim + i)) - (mean ? double(mean[r]) : 0.0)) * double(rstd[r]);
      const double g = ld(dy, r * dim + i);
      sw += g * xhat;
      sb += g;
    }
  }
  sw_s[threadIdx.y][threadIdx.x] = sw;
  sb_s[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && i < dim) {
    for (int l = 1; l < kRowLanes; ++l) sw += sw_s[l][threadIdx.x], sb += sb_s[l][threadIdx.x];
    pw[blockIdx.y * dim + i] = sw;
    pb[blockIdx.y * dim + i] = sb;
  }
}

// Stage 2: one thread per column adds the chunks' partials in chunk order.
__global__ void norm_param_finish_kernel(const double* pw, const double* pb, float* dw, float* db,
                                         int64_t chunks, int64_t dim) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= dim) return;
  double sw = 0.0, sb = 0.0;
  for (int64_t c = 0; c < chunks; ++c) sw += pw[c * dim + i], sb += pb[c * dim + i];
  if (dw) dw[i] += float(sw);
  if (db) db[i] += float(sb);
}

template <class TX, class TY>
__global__ void layernorm_forward_kernel(const TX* x, const float* w, const float* b, TY* y,
                                         float* mean, float* rstd, int64_t dim, float eps) {
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const TX* xr = x + r * dim;
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) s += ld(xr, i);
  const double mu = block_sum(s, scratch) / double(dim);
  double var = 0.0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) var += (ld(xr, i) - mu) * (ld(xr, i) - mu);
  var = block_sum(var, scratch) / double(dim);
  const double rs = 1.0 / sqrt(var + double(eps));
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    st(y, r * dim + i, float((ld(xr, i) - mu) * rs * w_at(w, i) + (b ? b[i] : 0.0f)));
  if (threadIdx.x == 0) {
    mean[r] = float(mu);
    rstd[r] = float(rs);
  }
}

template <class TX, class TD, class TG>
__global__ void layernorm_backward_kernel(const TX* x, const float* w, const float* mean,
                                          const float* rstd, const TD* dy, TG* dx,
                                          int64_t dim) {
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const TX* xr = x + r * dim;
  const TD* dyr = dy + r * dim;
  const double mu = mean[r], rs = rstd[r];
  double gs = 0.0, gxs = 0.0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const double g = double(ld(dyr, i)) * w_at(w, i);
    gs += g;
    gxs += g * (ld(xr, i) - mu) * rs;
  }
  const double g_mean = block_sum(gs, scratch) / double(dim);
  const double gx_mean = block_sum(gxs, scratch) / double(dim);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const double xhat = (ld(xr, i) - mu) * rs;
    const double g = double(ld(dyr, i)) * w_at(w, i);
    st(dx, r * dim + i, float(rs * (g - g_mean - xhat * gx_mean)));
  }
}

unsigned col_blocks(int64_t dim) { return unsigned((dim + kThreads - 1) / kThreads); }

#define OCTET_T(tag) std::remove_pointer_t<decltype(tag)>

// dw += Σ_r dy·x̂ and db += Σ_r dy (either may be null) through the two kernels above.
void norm_param_grad(const Tensor& x, const float* mean, const float* rstd, const Tensor& dy,
                     float* dw, float* db, int64_t rows, int64_t dim, cudaStream_t s) {
  const int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
  double* partial = nullptr;  // [2, chunks, dim]: weight partials, then bias partials
  OCTET_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partial),
                                   size_t(2 * chunks * dim) * sizeof(double), s));
  const dim3 grid(unsigned((dim + kColTile - 1) / kColTile), unsigned(chunks));
  dispatch_act([&](auto a, auto b) {
    norm_param_partial_kernel<OCTET_T(a), OCTET_T(b)><<<grid, dim3(kColTile, kRowLanes), 0, s>>>(
        typed(x, a), mean, rstd, typed(dy, b), partial, partial + chunks * dim, rows, dim);
  }, x.dtype, dy.dtype);
  OCTET_CUDA_LAUNCH_CHECK();
  norm_param_finish_kernel<<<col_blocks(dim), kThreads, 0, s>>>(partial, partial + chunks * dim, dw, db,
                                                                 chunks, dim);
  OCTET_CUDA_LAUNCH_CHECK();
  OCTET_CUDA_CHECK(cudaFreeAsync(partial, s));
}

}  // namespace

void rmsnorm_forward_launch(const Tensor& x, const float* w, const Tensor& y, float* rstd,
                            int64_t rows, int64_t dim, float eps, cudaStream_t s) {
  if (rows == 0) return;
  dispatch_act([&](auto a, auto b) {
    rmsnorm_forward_kernel<OCTET_T(a), OCTET_T(b)><<<unsigned(rows), kThreads, 0, s>>>(
        typed(x, a), w, typed(y, b), rstd, dim, eps);
  }, x.dtype, y.dtype);
  OCTET_CUDA_LAUNCH_CHECK();
}

void rmsnorm_backward_launch(const Tensor& x, const float* w, const float* rstd, const Tensor& dy,
                             const Tensor& dx, float* dw, int64_t rows, int64_t dim,
                             cudaStream_t s) {
  if (rows == 0) return;
  dispatch_act([&](auto a, auto b, auto c) {
    rmsnorm_backward_kernel<OCTET_T(a), OCTET_T(b), OCTET_T(c)><<<unsigned(rows), kThreads, 0, s>>>(
        typed(x, a), w, rstd, typed(dy, b), typed(dx, c), dim);
  }, x.dtype, dy.dtype, dx.dtype);
  OCTET_CUDA_LAUNCH_CHECK();
  if (dw) norm_param_grad(x, nullptr, rstd, dy, dw, nullptr, rows, dim, s);
}

void layernorm_forward_launch(const Tensor& x, const float* w, const float* b, const Tensor& y,
                              float* mean, float* rstd, int64_t rows, int64_t dim, float eps,
                              cudaStream_t s) {
  if (rows == 0) return;
  dispatch_act([&](auto ta, auto tb) {
    layernorm_forward_kernel<OCTET_T(ta), OCTET_T(tb)><<<unsigned(rows), kThreads, 0, s>>>(
        typed(x, ta), w, b, typed(y, tb), mean, rstd, dim, eps);
  }, x.dtype, y.dtype);
  OCTET_CUDA_LAUNCH_CHECK();
}

void layernorm_backward_launch(const Tensor& x, const float* w, const float* mean,
                               const float* rstd, const Tensor& dy, const Tensor& dx, float* dw,
                               float* db, int64_t rows, int64_t dim, cudaStream_t s) {
  if (rows == 0) return;
  dispatch_act([&](auto a, auto b, auto c) {
    layernorm_backward_kernel<OCTET_T(a), OCTET_T(b), OCTET_T(c)><<<unsigned(rows), kThreads, 0, s>>>(
        typed(x, a), w, mean, rstd, typed(dy, b), typed(dx, c), dim);
  }, x.dtype, dy.dtype, dx.dtype);
  OCTET_CUDA_LAUNCH_CHECK();
  if (dw || db) norm_param_grad(x, mean, rstd, dy, dw, db, rows, dim, s);
}

}  // namespace octet::cuda
