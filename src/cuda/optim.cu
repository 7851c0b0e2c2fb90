// src/cuda/optim.cu — the fused optimizer step on the GPU (octet/backend.h adamw_prepare /
// adamw_apply): global-norm clipping (Pascanu et al., arXiv 1211.5063) and AdamW (Loshchilov &
// Hutter, arXiv 1711.05101) over a whole flat parameter vector in one launch, with the clip factor
// and the non-finite skip decided on the device from the Σg² accumulator, so the host enqueues the
// step without reading the norm. Both kernels call the rules of octet/adamw_rule.h; the CPU twin is
// src/cpu/backend/adamw.cpp (bitwise the same decisions; the per-element update in double).
#include <cuda_runtime.h>

#include "cuda/check.h"
#include "cuda/ops.h"
#include "octet/adamw_rule.h"

namespace octet::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void adamw_prepare_kernel(const double* norm_sq, const double* loss_sum, const double* bias_corr,
                                     int64_t t_rows, double* state, float grad_clip) {
  const StepDecision d = decide_step(norm_sq[0], loss_sum != nullptr, loss_sum ? loss_sum[0] : 0.0, grad_clip);
  record_step(d, bias_corr, t_rows, state);
}

// Grid-stride over the n elements; each thread keeps the segment [lo, hi) of its last element and
// binary-searches the table (F64 rows {end, decay}) only when an element leaves it.
__global__ void adamw_apply_kernel(float* p, const float* g, float* m, float* v, int64_t n, const double* seg,
                                   int64_t k, const double* state, float lr, float beta1, float beta2, float eps,
                                   float wd) {
  if (state[kOptSkip] != 0.0) return;
  const float clip = float(state[kOptClip]);
  const AdamWCoef c{beta1, beta2, state[kOptBc1], state[kOptBc2], lr, eps};
  double lo = 1.0, hi = 0.0, w = 0.0;  // empty: the first element searches
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const double x = double(i);
    if (!(x >= lo && x < hi)) {
      int64_t a = 0, b = k - 1;  // the first row with end > x, the last row if none
      while (a < b) {
        const int64_t mid = (a + b) / 2;
        if (seg[2 * mid] > x) b = mid; else a = mid + 1;
      }
      lo = a > 0 ? seg[2 * (a - 1)] : 0.0;
      hi = a + 1 < k ? seg[2 * a] : 1e300;
      w = seg[2 * a + 1] != 0.0 ? double(wd) : 0.0;
    }
    const float gi = g[i] * clip;  // fp32(g·c), as Backend::scale
    adamw_element(p[i], m[i], v[i], gi, c, w);
  }
}

}  // namespace

void adamw_prepare_launch(const double* norm_sq, const double* loss_sum, const double* bias_corr,
                          int64_t t_rows, double* state, float grad_clip, cudaStream_t s) {
  adamw_prepare_kernel<<<1, 1, 0, s>>>(norm_sq, loss_sum, bias_corr, t_rows, state, grad_clip);
  OCTET_CUDA_LAUNCH_CHECK();
}

void adamw_apply_launch(float* p, const float* g, float* m, float* v, int64_t n, const double* segments,
                        int64_t k, const double* state, float lr, float beta1, float beta2, float eps, float wd,
                        cudaStream_t s) {
  if (n == 0) return;
  const int blocks = reduce_parts(size_t(n)) * 4;  // as adamw_launch: up to 4096 blocks of 256
  adamw_apply_kernel<<<blocks, kThreads, 0, s>>>(p, g, m, v, n, segments, k, state, lr, beta1, beta2, eps, wd);
  OCTET_CUDA_LAUNCH_CHECK();
}

}  // namespace octet::cuda
