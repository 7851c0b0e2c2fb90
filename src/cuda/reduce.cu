// src/cuda/reduce.cu — whole-tensor reductions in double: Σx, Σx², central moments (two passes:
// the mean first, then Σ(x−μ)² and Σ(x−μ)⁴, as the CPU twin src/cpu/backend/reductions.cpp),
// and AdamW (Loshchilov & Hutter, arXiv 1711.05101) evaluated in double per element like its twin.
// Each reduction writes one double partial per block; the host adds the partials (deterministic).
#include <cuda_runtime.h>

#include "cuda/check.h"
#include "cuda/ops.h"
#include "cuda/reduce_util.cuh"

namespace octet::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxParts = 1024;

template <int kKind>  // 0: Σx, 1: Σx², 2: central moments (2 outputs)
__global__ void reduce_kernel(const float* x, size_t n, double mu, double* parts) {
  __shared__ double scratch[32];
  double a = 0.0, b = 0.0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const double v = x[i];
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
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    a += x[i];
  a = block_sum(a, scratch);
  if (threadIdx.x == 0) parts[blockIdx.x] = a;
}

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, size_t n, float lr,
                             float beta1, float beta2, float eps, float wd, double bc1,
                             double bc2) {
  const double b1 = beta1, b2 = beta2;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const double gi = g[i];
    const double mi = b1 * m[i] + (1.0 - b1) * gi;
    const double vi = b2 * v[i] + (1.0 - b2) * gi * gi;
    m[i] = float(mi);
    v[i] = float(vi);
    const double update = (mi / bc1) / (sqrt(vi / bc2) + double(eps));
    const double pi = p[i];
    p[i] = float(pi - double(lr) * (update + double(wd) * pi));
  }
}

}  // namespace

int reduce_parts(size_t n) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return int(b < 1 ? 1 : (b > kMaxParts ? kMaxParts : b));
}

void sum_launch(const float* x, size_t n, double* parts, cudaStream_t s) {
  reduce_kernel<0><<<reduce_parts(n), kThreads, 0, s>>>(x, n, 0.0, parts);
  OCTET_CUDA_LAUNCH_CHECK();
}
void sum_squares_launch(const float* x, size_t n, double* parts, cudaStream_t s) {
  reduce_kernel<1><<<reduce_parts(n), kThreads, 0, s>>>(x, n, 0.0, parts);
  OCTET_CUDA_LAUNCH_CHECK();
}
void central_moments_launch(const float* x, size_t n, double mu, double* parts2, cudaStream_t s) {
  reduce_kernel<2><<<reduce_parts(n), kThreads, 0, s>>>(x, n, mu, parts2);
  OCTET_CUDA_LAUNCH_CHECK();
}
void sum_double_launch(const double* x, size_t n, double* parts, cudaStream_t s) {
  sum_double_kernel<<<reduce_parts(n), kThreads, 0, s>>>(x, n, parts);
  OCTET_CUDA_LAUNCH_CHECK();
}
void adamw_launch(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1,
                  float beta2, float eps, float wd, double bc1, double bc2, cudaStream_t s) {
  if (n == 0) return;
  adamw_kernel<<<reduce_parts(n) * 4, kThreads, 0, s>>>(p, g, m, v, n, lr, beta1, beta2, eps, wd,
                                                        bc1, bc2);
  OCTET_CUDA_LAUNCH_CHECK();
}

}  // namespace octet::cuda
