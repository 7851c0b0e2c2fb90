// src/cuda/loss.cu — softmax cross-entropy over the vocabulary, forward and backward fused, one
// thread block per token: m = max z, lse = m + log Σ exp(z − m) (sum in double), loss = lse − z_y,
// dz = (exp(z − lse) − [j = y])·grad_scale; targets < 0 are ignored (dz = 0, no loss).
// Twin of src/cpu/backend/loss.cpp. Every logit of a row is read (max, sum) before any dz of that
// row is written, so dlogits may alias logits.
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/check.h"
#include "cuda/ops.h"
#include "cuda/reduce_util.cuh"

namespace octet::cuda {
namespace {

constexpr int kThreads = 512;

__global__ void cross_entropy_kernel(const float* logits, const int32_t* targets, float* dlogits,
                                     double* row_loss, int64_t vocab, float grad_scale) {
  __shared__ double dscratch[32];
  __shared__ float fscratch[32];
  const int64_t i = blockIdx.x;
  const float* z = logits + i * vocab;
  const int32_t y = targets[i];
  if (y < 0) {
    if (dlogits)
      for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) dlogits[i * vocab + j] = 0.0f;
    if (threadIdx.x == 0) row_loss[i] = 0.0;
    return;
  }
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) m = fmaxf(m, z[j]);
  m = block_max(m, fscratch, -INFINITY);
  double sum = 0.0;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) sum += exp(double(z[j]) - double(m));
  sum = block_sum(sum, dscratch);  // synchronizes: every z[j] was read above
  const double lse = double(m) + log(sum);
  const double zy = z[y];
  __syncthreads();  // z[y] read by all threads before dz[y] may be written (aliasing)
  if (threadIdx.x == 0) row_loss[i] = lse - zy;
  if (dlogits) {
    float* dz = dlogits + i * vocab;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      const double p = exp(double(z[j]) - lse);
      dz[j] = float((p - (j == y ? 1.0 : 0.0)) * double(grad_scale));
    }
  }
}

__global__ void check_targets_kernel(const int32_t* t, int64_t n, int64_t vocab, int* bad) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    if (t[i] >= vocab) *bad = 1;
}

}  // namespace

void cross_entropy_launch(const float* logits, const int32_t* targets, float* dlogits,
                          double* row_loss, int64_t n, int64_t vocab, float grad_scale,
                          cudaStream_t s) {
  if (n == 0) return;
  cross_entropy_kernel<<<unsigned(n), kThreads, 0, s>>>(logits, targets, dlogits, row_loss, vocab,
                                                        grad_scale);
  OCTET_CUDA_LAUNCH_CHECK();
}

void check_targets_launch(const int32_t* targets, int64_t n, int64_t vocab, int* bad,
                          cudaStream_t s) {
  if (n == 0) return;
  check_targets_kernel<<<unsigned((n + 255) / 256 > 4096 ? 4096 : (n + 255) / 256), 256, 0, s>>>(
      targets, n, vocab, bad);
  OCTET_CUDA_LAUNCH_CHECK();
}

}  // namespace octet::cuda
