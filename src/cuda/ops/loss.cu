// src/cuda/ops/loss.cu — softmax cross-entropy over the vocabulary, forward and backward fused, one
// thread block per token: lse = log Σ exp(z), loss = lse − z_y, dz = (exp(z − lse) − [j = y])·
// grad_scale; targets < 0 are ignored (dz = 0, no loss). Twin of src/cpu/backend/loss.cpp.
//
// Two reads of the row, one write: pass 1 keeps a running max m and Σ exp(z − m) per thread (the
// online softmax of Milakov & Gimelshein, arXiv 1805.02867; the sum rescaled by exp(m_old − m_new)
// when the max grows), combined over the block; pass 2 writes dz. exp runs in FP32 (expf), sums
// and lse in double: the CPU twin takes exp in double too; FP64 exp made this kernel compute-bound
// (2.9 ms for 8192 x 50304 on an H200). The loss differs from the twin's by ~1e-7 relative, dz by
// FP32 rounding (docs/cuda.md §"Memory-bound kernels"). Rows are read 8 logits at a time (16-byte
// loads for BF16) when the vocabulary is a multiple of 8 and the tensors are aligned.
// Every logit of a row is read (pass 1) before any dz of that row is written, and each thread
// writes in pass 2 only what it reads there, so dlogits may alias logits. Logits and dlogits are F32
// or BF16 (typed.cuh). A target >= vocab gives its row a NaN loss and NaN gradients (ops.h).
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/runtime/check.h"
#include "cuda/ops/ops.h"
#include "cuda/ops/reduce_util.cuh"
#include "cuda/runtime/typed.cuh"

namespace octet::cuda {
namespace {

constexpr int kThreads = 512;

// Adds the values v[0..k) to the running (m, s) of one thread: s = Σ exp(z − m) over what it has seen.
__device__ __forceinline__ void online_add(const float* v, int k, float& m, double& s) {
  float mx = m;
  for (int j = 0; j < k; ++j) mx = fmaxf(mx, v[j]);
  if (mx > m) {                 // (a NaN logit never raises m: fmaxf drops it; it still reaches s below)
    s *= double(expf(m - mx));  // m = −inf: exp(−inf) = 0 and s was 0
    m = mx;
  }
  for (int j = 0; j < k; ++j) s += double(expf(v[j] - m));
}

template <int kVec, class TL, class TD>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_kernel(const TL* logits, const int32_t* targets, TD* dlogits, double* row_loss,
                         int64_t vocab, float grad_scale) {
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
  const int64_t nv = vocab / kVec;  // kVec divides vocab
  float m = -INFINITY;
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
    float v[kVec];
    if constexpr (kVec == 8)
      ld8(z + 8 * j, v);
    else
      v[0] = ld(z, j);
    online_add(v, kVec, m, s);
  }
  // Block combine: the row max, each thread's sum moved onto it.
  const float row_max = block_max(m, fscratch, -INFINITY);
  if (s != 0.0) s *= double(expf(m - row_max));
  s = block_sum(s, dscratch);  // synchronizes: every z[j] was read above
  const double lse = double(row_max) + log(s);
  const double zy = ld(z, y);
  __syncthreads();  // z[y] read by all threads before dz[y] may be written (aliasing)
  if (threadIdx.x == 0) row_loss[i] = lse - zy;
  if (!dlogits) return;
  TD* dz = dlogits + i * vocab;
  for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
    float v[kVec];
    if constexpr (kVec == 8)
      ld8(z + 8 * j, v);
    else
      v[0] = ld(z, j);
    for (int e = 0; e < kVec; ++e) {
      const int64_t col = kVec * j + e;
      const float p = expf(float(double(v[e]) - lse));
      v[e] = (col == y ? p - 1.0f : p) * grad_scale;
    }
    if constexpr (kVec == 8)
      st8(dz + 8 * j, v);
    else
      st(dz, j, v[0]);
  }
}

}  // namespace

void cross_entropy_launch(const Tensor& logits, const int32_t* targets, const Tensor& dlogits,
                          double* row_loss, int64_t n, int64_t vocab, float grad_scale, cudaStream_t s) {
  if (n == 0) return;
  const DType dt = dlogits.empty() ? logits.dtype : dlogits.dtype;
  const bool vec = vocab % 8 == 0 && vec_ok({logits.data, dlogits.data});
  dispatch_act(
      [&](auto a, auto b) {
        using TL = std::remove_pointer_t<decltype(a)>;
        using TD = std::remove_pointer_t<decltype(b)>;
        TD* dz = dlogits.empty() ? nullptr : typed(dlogits, b);
        if (vec)
          cross_entropy_kernel<8, TL, TD>
              <<<unsigned(n), kThreads, 0, s>>>(typed(logits, a), targets, dz, row_loss, vocab, grad_scale);
        else
          cross_entropy_kernel<1, TL, TD>
              <<<unsigned(n), kThreads, 0, s>>>(typed(logits, a), targets, dz, row_loss, vocab, grad_scale);
      },
      logits.dtype, dt);
  OCTET_CUDA_LAUNCH_CHECK();
}

}  // namespace octet::cuda
