// adamw.cpp — the AdamW update on FP32 master weights, CPU backend.
//
// AdamW (Loshchilov & Hutter, arXiv 1711.05101; Adam: Kingma & Ba, arXiv 1412.6980), with the
// bias correction of step t >= 1 and decoupled weight decay, exactly as octet/backend.h states:
//   m = β1 m + (1−β1) g;  v = β2 v + (1−β2) g²;  m̂ = m/(1−β1^t);  v̂ = v/(1−β2^t);
//   p -= lr (m̂/(√v̂ + ε) + wd·p)      (the decay uses p before this step's update).
// Each element is updated in double and stored in FP32; param, grad, m and v are F32 [n].
#include <cmath>
#include <string>

#include "cpu/backend/act_io.h"
#include "cpu/backend/cpu_backend.h"
#include "octet/error.h"

namespace octet::cpu {

void CpuBackend::adamw(const Tensor& param_t, const Tensor& grad_t, const Tensor& m_t,
                       const Tensor& v_t, float lr, float beta1, float beta2, float eps,
                       float weight_decay, int64_t step) {
  const int64_t n = param_t.numel();
  float* param = req_f32(param_t, n, "adamw param");
  const float* grad = req_f32(grad_t, n, "adamw grad");
  float* m = req_f32(m_t, n, "adamw m");
  float* v = req_f32(v_t, n, "adamw v");
  OCTET_CHECK(step >= 1, "adamw: step must be >= 1, got " + std::to_string(step));
  OCTET_CHECK(beta1 >= 0.0f && beta1 < 1.0f && beta2 >= 0.0f && beta2 < 1.0f,
              "adamw: betas must lie in [0, 1), got beta1=" + std::to_string(beta1) +
                  " beta2=" + std::to_string(beta2));
  const double b1 = beta1, b2 = beta2;
  const double bc1 = 1.0 - std::pow(b1, double(step));
  const double bc2 = 1.0 - std::pow(b2, double(step));
  for (int64_t i = 0; i < n; ++i) {
    const double g = grad[i];
    const double mi = b1 * m[i] + (1.0 - b1) * g;
    const double vi = b2 * v[i] + (1.0 - b2) * g * g;
    m[i] = float(mi);
    v[i] = float(vi);
    const double update = (mi / bc1) / (std::sqrt(vi / bc2) + double(eps));
    const double p = param[i];
    param[i] = float(p - double(lr) * (update + double(weight_decay) * p));
  }
}

}  // namespace octet::cpu
