// src/cuda/loss.cu — softmax cross-entropy over the vocabulary, forward and backward fused, one
// thread block per token: m = max z, lse = m + log Σ exp(z − m) (sum in double), loss = lse − z_y,
// dz = (exp(z − lse) − [j = y])·grad_scale; targets < 0 are ignored (dz = 0, no loss).
// Twin of src/cpu/backend/loss.cpp. Every logit of a row is read (max, sum) before any dz of that
// row is written, so dlogits may alias logits. Logits and dlogits are F32 or BF16 (typed.cuh).
// A target >= vocab gives its row a NaN loss and NaN gradients (ops.h: no host check).
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/check.h"
#include "cuda/ops.h"
#include "cuda/reduce_util.cuh"
#include "cuda/typed.cuh"

namespace octet::cuda {
namespace {

constexpr int kThreads = 512;

template <class TL, class TD>
__global__ void cross_entropy_kernel(const TL* logits, const int32_t* targets, TD* dlogits,
                                     double* row_loss, int64_t vocab, float grad_scale) {
  __shared__ double dscratch[32];
  __shared__ float fscratch[32];
  const int64_t i = blockIdx.x;
  const TL* z = logits + i * vocab;
  const int32_t y = targets[i];
  if (y < 0 || y >= vocab) {  // ignored (0) or invalid (NaN)
    const float v = y < 0 ? 0.0f : NAN;
    if (dlogits)
      for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) st(dlogits, i * vocab + j, v);
    if (threadIdx.x == 0) row_loss[i] = double(v);
    return;
  }
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) m = fmaxf(m, ld(z, j));
  m = block_max(m, fscratch, -INFINITY);
  double sum = 0.0;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) sum += exp(double(ld(z, j)) - double(m));
  sum = block_sum(sum, dscratch);  // synchronizes: every z[j] was read above
  const double lse = double(m) + log(sum);
  const double zy = ld(z, y);
  __syncthreads();  // z[y] read by all threads before dz[y] may be written (aliasing)
  if (threadIdx.x == 0) row_loss[i] = lse - zy;
  if (dlogits) {
    TD* dz = dlogits + i * vocab;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      const double p = exp(double(ld(z, j)) - lse);
      st(dz, j, float((p - (j == y ? 1.0 : 0.0)) * double(grad_scale)));
    }
  }
}

}  // namespace

void cross_entropy_launch(const Tensor& logits, const int32_t* targets, const Tensor& dlogits,
                          double* row_loss, int64_t n, int64_t vocab, float grad_scale,
                          cudaStream_t s) {
  if (n == 0) return;
  const DType dt = dlogits.empty() ? logits.dtype : dlogits.dtype;
  dispatch_act([&](auto a, auto b) {
    using TL = std::remove_pointer_t<decltype(a)>;
    using TD = std::remove_pointer_t<decltype(b)>;
    cross_entropy_kernel<TL, TD><<<unsigned(n), kThreads, 0, s>>>(
        typed(logits, a), targets, dlogits.empty() ? nullptr : typed(dlogits, b), row_loss, vocab,
        grad_scale);
  }, logits.dtype, dt);
  OCTET_CUDA_LAUNCH_CHECK();
}

}  // namespace octet::cuda
