// src/cuda/ops/reduce.cu — whole-tensor reductions in double: Σx, Σx², central moments (two passes:
// the mean first, then Σ(x−μ)² and Σ(x−μ)⁴, as the CPU twin src/cpu/backend/reductions.cpp),
// and AdamW per tensor (Loshchilov & Hutter, arXiv 1711.05101; the rule of octet/adamw_rule.h, as its
// CPU twin src/cpu/backend/adamw.cpp; the fused step is optim.cu).
// Each reduction writes one double partial per block; accumulate_parts adds the partials in order
// into an F64 device accumulator (deterministic, no host round trip); moments() reads them on the
// host. x may be F32 or BF16 (typed.cuh).
#include <cuda_runtime.h>

#include "cuda/runtime/check.h"
#include "cuda/ops/ops.h"
#include "cuda/ops/reduce_util.cuh"
#include "cuda/runtime/typed.cuh"
#include "octet/adamw_rule.h"

namespace octet::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxParts = 1024;

template <int kKind, class T>  // 0: Σx, 1: Σx², 2: central moments (2 outputs)
__global__ void reduce_kernel(const T* x, size_t n, double mu, double* parts) {
  __shared__ double scratch[32];
  double a = 0.0, b = 0.0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const double v = ld(x, int64_t(i));
    if (kKind == 0) a += v;
    if (kKind == 1) a += v * v;
    if (kKind == 2) {
      const double d = v - mu, d2 = d * d;
      a += d2;
      b += d2 * d2;
    }
  }
  a = block_sum(a, scratch);
  if (kKind == 2) {
    b = block_sum(b, scratch);
    if (threadIdx.x == 0) {
      parts[2 * blockIdx.x] = a;
      parts[2 * blockIdx.x + 1] = b;
    }
  } else if (threadIdx.x == 0) {
    parts[blockIdx.x] = a;
  }
}

__global__ void sum_double_kernel(const double* x, size_t n, double* parts) {
  __shared__ double scratch[32];
  double a = 0.0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    a += x[i];
  a = block_sum(a, scratch);
  if (threadIdx.x == 0) parts[blockIdx.x] = a;
}

// acc[0] += Σ parts, one thread adding in index order (n_parts <= 1024: negligible).
__global__ void accumulate_parts_kernel(const double* parts, int n, double* acc) {
  double a = 0.0;
  for (int i = 0; i < n; ++i) a += parts[i];
  acc[0] += a;
}

// NaN-sticking max (a NaN anywhere is reported, as the CPU twin's row-residual max).
__device__ __forceinline__ double nan_max(double a, double b) {
  return (a != a || b != b) ? NAN : (a > b ? a : b);
}

// One block of kResidualThreads: acc[0] = nan_max(acc[0], max r), acc[1] += Σ r / n, in a fixed
// order (thread t: rows t, t + T, ... in kResidualUnroll independent accumulators, then the
// accumulators, a fixed shuffle tree per warp, the warps in index order by thread 0):
// deterministic. One wide block with independent loads in flight (n is B·H·Tq, ~1e5 rows: the first
// form, 256 threads with one dependent load each, took 150 us per call on an H200).
constexpr int kResidualThreads = 1024, kResidualUnroll = 4;

__global__ void __launch_bounds__(kResidualThreads)
    residual_accumulate_kernel(const double* r, int64_t n, double* acc) {
  __shared__ double mx_s[kResidualThreads / 32], sum_s[kResidualThreads / 32];
  double mx[kResidualUnroll], sum[kResidualUnroll];
#pragma unroll
  for (int u = 0; u < kResidualUnroll; ++u) mx[u] = 0.0, sum[u] = 0.0;
  constexpr int64_t kStep = int64_t(kResidualThreads) * kResidualUnroll;
  int64_t i = threadIdx.x;
  for (; i + (kResidualUnroll - 1) * kResidualThreads < n; i += kStep) {
    double v[kResidualUnroll];
#pragma unroll
    for (int u = 0; u < kResidualUnroll; ++u) v[u] = r[i + u * kResidualThreads];
#pragma unroll
    for (int u = 0; u < kResidualUnroll; ++u) mx[u] = nan_max(mx[u], v[u]), sum[u] += v[u];
  }
  for (; i < n; i += kResidualThreads) mx[0] = nan_max(mx[0], r[i]), sum[0] += r[i];
#pragma unroll
  for (int u = 1; u < kResidualUnroll; ++u) mx[0] = nan_max(mx[0], mx[u]), sum[0] += sum[u];
  for (int off = 16; off > 0; off /= 2) {  // a fixed tree within the warp
    mx[0] = nan_max(mx[0], __shfl_xor_sync(0xFFFFFFFFu, mx[0], off));
    sum[0] += __shfl_xor_sync(0xFFFFFFFFu, sum[0], off);
  }
  if (threadIdx.x % 32 == 0) mx_s[threadIdx.x / 32] = mx[0], sum_s[threadIdx.x / 32] = sum[0];
  __syncthreads();
  if (threadIdx.x == 0) {
    double m = mx_s[0], t = sum_s[0];
    for (int k = 1; k < kResidualThreads / 32; ++k) m = nan_max(m, mx_s[k]), t += sum_s[k];
    acc[0] = nan_max(acc[0], m);
    acc[1] += t / double(n);
  }
}

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, size_t n, AdamWCoef c, double wd) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    adamw_element(p[i], m[i], v[i], g[i], c, wd);
}

}  // namespace

int reduce_parts(size_t n) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return int(b < 1 ? 1 : (b > kMaxParts ? kMaxParts : b));
}

#define OCTET_T(tag) std::remove_pointer_t<decltype(tag)>

void sum_launch(const Tensor& x, double* parts, cudaStream_t s) {
  const size_t n = size_t(x.numel());
  dispatch_act(
      [&](auto a) {
        reduce_kernel<0, OCTET_T(a)><<<reduce_parts(n), kThreads, 0, s>>>(typed(x, a), n, 0.0, parts);
      },
      x.dtype);
  OCTET_CUDA_LAUNCH_CHECK();
}
void sum_squares_launch(const Tensor& x, double* parts, cudaStream_t s) {
  const size_t n = size_t(x.numel());
  dispatch_act(
      [&](auto a) {
        reduce_kernel<1, OCTET_T(a)><<<reduce_parts(n), kThreads, 0, s>>>(typed(x, a), n, 0.0, parts);
      },
      x.dtype);
  OCTET_CUDA_LAUNCH_CHECK();
}
void central_moments_launch(const Tensor& x, double mu, double* parts2, cudaStream_t s) {
  const size_t n = size_t(x.numel());
  dispatch_act(
      [&](auto a) {
        reduce_kernel<2, OCTET_T(a)><<<reduce_parts(n), kThreads, 0, s>>>(typed(x, a), n, mu, parts2);
      },
      x.dtype);
  OCTET_CUDA_LAUNCH_CHECK();
}
void accumulate_parts_launch(const double* parts, int n_parts, double* acc, cudaStream_t s) {
  accumulate_parts_kernel<<<1, 1, 0, s>>>(parts, n_parts, acc);
  OCTET_CUDA_LAUNCH_CHECK();
}
void residual_accumulate_launch(const double* r, int64_t n, double* acc, cudaStream_t s) {
  residual_accumulate_kernel<<<1, kResidualThreads, 0, s>>>(r, n, acc);
  OCTET_CUDA_LAUNCH_CHECK();
}
void sum_double_launch(const double* x, size_t n, double* parts, cudaStream_t s) {
  sum_double_kernel<<<reduce_parts(n), kThreads, 0, s>>>(x, n, parts);
  OCTET_CUDA_LAUNCH_CHECK();
}
void adamw_launch(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                  float eps, float wd, double bc1, double bc2, cudaStream_t s) {
  if (n == 0) return;
  adamw_kernel<<<reduce_parts(n) * 4, kThreads, 0, s>>>(
      p, g, m, v, n, AdamWCoef{beta1, beta2, bc1, bc2, lr, eps}, double(wd));
  OCTET_CUDA_LAUNCH_CHECK();
}

}  // namespace octet::cuda
