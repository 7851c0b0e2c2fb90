// src/cuda/ops/optim.cu — the fused optimizer step on the GPU (octet/backend.h adamw_prepare /
// adamw_apply): global-norm clipping (Pascanu et al., arXiv 1211.5063) and AdamW (Loshchilov &
// Hutter, arXiv 1711.05101) over a whole flat parameter vector in one launch, with the clip factor
// and the non-finite skip decided on the device from the Σg² accumulator, so the host enqueues the
// step without reading the norm. Both kernels call the rules of octet/adamw_rule.h; the CPU twin is
// src/cpu/backend/adamw.cpp (bitwise the same decisions; the per-element update in double).
#include <cuda_runtime.h>

#include "cuda/runtime/check.h"
#include "cuda/ops/ops.h"
#include "cuda/runtime/typed.cuh"
#include "octet/adamw_rule.h"

namespace octet::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void adamw_prepare_kernel(const double* norm_sq, const double* loss_sum, const double* bias_corr,
                                     int64_t t_rows, double* state, float grad_clip) {
  const StepDecision d =
      decide_step(norm_sq[0], loss_sum != nullptr, loss_sum ? loss_sum[0] : 0.0, grad_clip);
  record_step(d, bias_corr, t_rows, state);
}

// Grid-stride over the n elements; each thread keeps the segment [lo, hi) of its last element and
// binary-searches the table (F64 rows {end, decay}) only when an element leaves it. kVec: four
// consecutive elements per thread through 16-byte loads and stores (p, g, m, v 16-byte aligned),
// the remainder (n mod 4) element by element; the per-element rule is the same either way.
struct Segment {
  double lo = 1.0, hi = 0.0, w = 0.0;  // empty: the first element searches
  __device__ __forceinline__ void find(int64_t i, const double* seg, int64_t k, float wd) {
    const double x = double(i);
    if (x >= lo && x < hi) return;
    int64_t a = 0, b = k - 1;  // the first row with end > x, the last row if none
    while (a < b) {
      const int64_t mid = (a + b) / 2;
      if (seg[2 * mid] > x)
        b = mid;
      else
        a = mid + 1;
    }
    lo = a > 0 ? seg[2 * (a - 1)] : 0.0;
    hi = a + 1 < k ? seg[2 * a] : 1e300;
    w = seg[2 * a + 1] != 0.0 ? double(wd) : 0.0;
  }
};

template <bool kVec>
__global__ void adamw_apply_kernel(float* p, const float* g, float* m, float* v, int64_t n, const double* seg,
                                   int64_t k, const double* state, float lr, float beta1, float beta2,
                                   float eps, float wd) {
  if (state[kOptSkip] != 0.0) return;
  const float clip = float(state[kOptClip]);
  const AdamWCoef c{beta1, beta2, state[kOptBc1], state[kOptBc2], lr, eps};
  Segment sg;
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x,
                stride = int64_t(gridDim.x) * blockDim.x;
  int64_t tail = 0;
  if constexpr (kVec) {
    for (int64_t j = first; j < n / 4; j += stride) {
      const float4 g4 = reinterpret_cast<const float4*>(g)[j];
      float4 p4 = reinterpret_cast<float4*>(p)[j], m4 = reinterpret_cast<float4*>(m)[j],
             v4 = reinterpret_cast<float4*>(v)[j];
      float* pe = &p4.x;
      float* me = &m4.x;
      float* ve = &v4.x;
      const float* ge = &g4.x;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        sg.find(4 * j + e, seg, k, wd);
        adamw_element(pe[e], me[e], ve[e], ge[e] * clip, c, sg.w);  // fp32(g·c), as Backend::scale
      }
      reinterpret_cast<float4*>(p)[j] = p4;
      reinterpret_cast<float4*>(m)[j] = m4;
      reinterpret_cast<float4*>(v)[j] = v4;
    }
    tail = n / 4 * 4;
  }
  for (int64_t i = tail + first; i < n; i += stride) {
    sg.find(i, seg, k, wd);
    const float gi = g[i] * clip;  // fp32(g·c), as Backend::scale
    adamw_element(p[i], m[i], v[i], gi, c, sg.w);
  }
}

}  // namespace

void adamw_prepare_launch(const double* norm_sq, const double* loss_sum, const double* bias_corr,
                          int64_t t_rows, double* state, float grad_clip, cudaStream_t s) {
  adamw_prepare_kernel<<<1, 1, 0, s>>>(norm_sq, loss_sum, bias_corr, t_rows, state, grad_clip);
  OCTET_CUDA_LAUNCH_CHECK();
}

void adamw_apply_launch(float* p, const float* g, float* m, float* v, int64_t n, const double* segments,
                        int64_t k, const double* state, float lr, float beta1, float beta2, float eps,
                        float wd, cudaStream_t s) {
  if (n == 0) return;
  const int blocks = reduce_parts(size_t(n)) * 4;  // as adamw_launch: up to 4096 blocks of 256
  const bool vec = vec_ok({p, g, m, v});
  auto* kernel = vec ? adamw_apply_kernel<true> : adamw_apply_kernel<false>;
  kernel<<<blocks, kThreads, 0, s>>>(p, g, m, v, n, segments, k, state, lr, beta1, beta2, eps, wd);
  OCTET_CUDA_LAUNCH_CHECK();
}

}  // namespace octet::cuda
