// reductions.cpp — whole-tensor reductions, CPU backend.
//
// sum_squares: Σ x² in double, added to an F64 [1] accumulator (gradient norms; the trainer reads
// it once per step). moments: two passes in double, the mean first, then the central moments
// m2 = mean((x − μ)²) (the population variance) and m4 = mean((x − μ)⁴); kurtosis = m4 / m2²
// (Pearson's, not excess: 3 for a Gaussian, 1.8 for a uniform), 0 if m2 == 0. Activation kurtosis
// is FOG's early warning of divergence (arXiv 2505.20524). x is act or param (F32 or BF16).
#include "cpu/backend/act_io.h"
#include "cpu/backend/cpu_backend.h"

namespace octet::cpu {

void CpuBackend::sum_squares(const Tensor& x_t, const Tensor& out) {
  check_dtype(out, DType::F64, "sum_squares out");
  check_numel(out, 1, "sum_squares out");
  ActIn x(x_t, "sum_squares x");
  double s = 0.0;
  for (int64_t i = 0; i < x_t.numel(); ++i) s += double(x[i]) * x[i];
  out.f64()[0] += s;
}

Backend::Moments CpuBackend::moments(const Tensor& x_t) {
  ActIn x(x_t, "moments x");
  const int64_t n = x_t.numel();
  Moments out;
  if (n == 0) return out;
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  const double mu = s / double(n);
  double m2 = 0.0, m4 = 0.0;
  for (int64_t i = 0; i < n; ++i) {
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
