// reductions.cpp — whole-tensor reductions returned to the host, CPU backend.
//
// sum_squares: Σ x² in double (for gradient norms). moments: two passes in double, the mean first,
// then the central moments m2 = mean((x − μ)²) (the population variance) and m4 = mean((x − μ)⁴);
// kurtosis = m4 / m2² (Pearson's, not excess: 3 for a Gaussian, 1.8 for a uniform), 0 if m2 == 0.
// Activation kurtosis is FOG's early warning of divergence (arXiv 2505.20524).
#include "cpu/backend/cpu_backend.h"

namespace octet::cpu {

double CpuBackend::sum_squares(const float* x, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; ++i) s += double(x[i]) * x[i];
  return s;
}

Backend::Moments CpuBackend::moments(const float* x, size_t n) {
  Moments out;
  if (n == 0) return out;
  double s = 0.0;
  for (size_t i = 0; i < n; ++i) s += x[i];
  const double mu = s / double(n);
  double m2 = 0.0, m4 = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double d = double(x[i]) - mu, d2 = d * d;
    m2 += d2;
    m4 += d2 * d2;
  }
  m2 /= double(n);
  m4 /= double(n);
  out.mean = mu;
  out.variance = m2;
  out.kurtosis = m2 > 0.0 ? m4 / (m2 * m2) : 0.0;
  return out;
}

}  // namespace octet::cpu
