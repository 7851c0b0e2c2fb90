// adamw.cpp — the AdamW update on FP32 master weights, CPU backend: per tensor (adamw) and the
// fused step over a flat parameter vector (adamw_prepare + adamw_apply), both through the one
// per-element rule of octet/adamw_rule.h (AdamW: Loshchilov & Hutter, arXiv 1711.05101; Adam:
// Kingma & Ba, arXiv 1412.6980), so the two paths give the same bits. The CUDA twins are in
// src/cuda/ops/reduce.cu (adamw) and src/cuda/ops/optim.cu (the fused step).
#include <cmath>
#include <string>

#include "core/adamw_args.h"
#include "cpu/backend/act_io.h"
#include "cpu/backend/cpu_backend.h"
#include "octet/adamw_rule.h"
#include "octet/error.h"

namespace octet::cpu {

void CpuBackend::adamw(const Tensor& param_t, const Tensor& grad_t, const Tensor& m_t, const Tensor& v_t,
                       float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step) {
  const int64_t n = param_t.numel();
  float* param = req_f32(param_t, n, "adamw param");
  const float* grad = req_f32(grad_t, n, "adamw grad");
  float* m = req_f32(m_t, n, "adamw m");
  float* v = req_f32(v_t, n, "adamw v");
  OCTET_CHECK(step >= 1, "adamw: step must be >= 1, got " + std::to_string(step));
  OCTET_CHECK(beta1 >= 0.0f && beta1 < 1.0f && beta2 >= 0.0f && beta2 < 1.0f,
              "adamw: betas must lie in [0, 1), got beta1=" + std::to_string(beta1) +
                  " beta2=" + std::to_string(beta2));
  const AdamWCoef c{beta1, beta2, adamw_bias_correction(beta1, step), adamw_bias_correction(beta2, step),
                    lr,    eps};
  for (int64_t i = 0; i < n; ++i) adamw_element(param[i], m[i], v[i], grad[i], c, weight_decay);
}

void CpuBackend::adamw_prepare(const Tensor& norm_sq, const Tensor& loss_sum, const Tensor& bias_corr,
                               const Tensor& state_t, float grad_clip) {
  check_adamw_prepare_args(norm_sq, loss_sum, bias_corr, state_t, grad_clip);
  double* state = state_t.f64();
  const StepDecision d =
      decide_step(norm_sq.f64()[0], !loss_sum.empty(), loss_sum.empty() ? 0.0 : loss_sum.f64()[0], grad_clip);
  record_step(d, bias_corr.f64(), bias_corr.shape[0], state);
}

void CpuBackend::adamw_apply(const Tensor& param_t, const Tensor& grad_t, const Tensor& m_t,
                             const Tensor& v_t, const Tensor& segments, const Tensor& state_t, float lr,
                             float beta1, float beta2, float eps, float weight_decay) {
  const int64_t n = check_adamw_apply_args(param_t, grad_t, m_t, v_t, segments, state_t, beta1, beta2);
  const double* state = state_t.f64();
  if (state[kOptSkip] != 0.0) return;
  float* param = param_t.f32();
  const float* grad = grad_t.f32();
  float *m = m_t.f32(), *v = v_t.f32();
  const float clip = float(state[kOptClip]);
  const AdamWCoef c{beta1, beta2, state[kOptBc1], state[kOptBc2], lr, eps};
  const double* seg = segments.f64();
  const int64_t k = segments.shape[0];
  int64_t j = 0;  // the segment of element i: the first row whose end > i (the last if none)
  for (int64_t i = 0; i < n; ++i) {
    while (j + 1 < k && double(i) >= seg[2 * j]) ++j;
    const float g = grad[i] * clip;  // fp32(g·c), as Backend::scale
    adamw_element(param[i], m[i], v[i], g, c, seg[2 * j + 1] != 0.0 ? double(weight_decay) : 0.0);
  }
}

}  // namespace octet::cpu
