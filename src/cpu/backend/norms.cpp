// norms.cpp — RMSNorm and LayerNorm over the last dimension, forward and backward, CPU backend.
//
// RMSNorm (Zhang & Sennrich 2019, arXiv 1910.07467): rstd = 1/sqrt(mean(x²) + eps), y = x·rstd·w.
//   Backward, with g = dy·w:  dx = rstd·g − rstd³·x·mean(g·x);  dw += dy·x·rstd.
// LayerNorm (Ba, Kiros & Hinton 2016, arXiv 1607.06450): x̂ = (x − mean)·rstd, y = x̂·w + b,
//   rstd = 1/sqrt(var + eps) with the population variance.
//   Backward, with g = dy·w:  dx = rstd·(g − mean(g) − x̂·mean(g·x̂));  dw += dy·x̂;  db += dy.
// Row statistics and the backward's row means are accumulated in double; the saved mean/rstd
// are FP32 (what the backward of either backend reads). A null weight means w = 1 (FOG's
// non-trainable QK-norm), a null bias means b = 0; null dweight/dbias skip those gradients.
#include <cmath>
#include <string>

#include "cpu/backend/cpu_backend.h"
#include "octet/error.h"

namespace octet::cpu {
namespace {

void check_shape(const char* op, int64_t rows, int64_t dim) {
  OCTET_CHECK(rows >= 0 && dim >= 1, std::string(op) + ": need rows >= 0 and dim >= 1, got rows=" +
                                         std::to_string(rows) + " dim=" + std::to_string(dim));
}

inline float weight_at(const float* w, int64_t i) { return w ? w[i] : 1.0f; }

}  // namespace

void CpuBackend::rmsnorm_forward(const float* x, const float* weight, float* y, float* rstd,
                                 int64_t rows, int64_t dim, float eps) {
  check_shape("rmsnorm_forward", rows, dim);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double ss = 0.0;
    for (int64_t i = 0; i < dim; ++i) ss += double(xr[i]) * xr[i];
    const float rs = float(1.0 / std::sqrt(ss / double(dim) + double(eps)));
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * rs * weight_at(weight, i);
    rstd[r] = rs;
  }
}

void CpuBackend::rmsnorm_backward(const float* x, const float* weight, const float* rstd,
                                  const float* dy, float* dx, float* dweight, int64_t rows,
                                  int64_t dim) {
  check_shape("rmsnorm_backward", rows, dim);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float* dyr = dy + r * dim;
    float* dxr = dx + r * dim;
    const double rs = rstd[r];
    double gx = 0.0;  // Σ g·x
    for (int64_t i = 0; i < dim; ++i) gx += double(dyr[i]) * weight_at(weight, i) * xr[i];
    const double c = rs * rs * rs * gx / double(dim);
    for (int64_t i = 0; i < dim; ++i) {
      const double g = double(dyr[i]) * weight_at(weight, i);
      dxr[i] = float(rs * g - c * xr[i]);
      if (dweight) dweight[i] += float(double(dyr[i]) * xr[i] * rs);
    }
  }
}

void CpuBackend::layernorm_forward(const float* x, const float* weight, const float* bias,
                                   float* y, float* mean, float* rstd, int64_t rows, int64_t dim,
                                   float eps) {
  check_shape("layernorm_forward", rows, dim);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double s = 0.0;
    for (int64_t i = 0; i < dim; ++i) s += xr[i];
    const double mu = s / double(dim);
    double var = 0.0;
    for (int64_t i = 0; i < dim; ++i) var += (xr[i] - mu) * (xr[i] - mu);
    var /= double(dim);
    const double rs = 1.0 / std::sqrt(var + double(eps));
    for (int64_t i = 0; i < dim; ++i) {
      const double xhat = (xr[i] - mu) * rs;
      yr[i] = float(xhat * weight_at(weight, i) + (bias ? bias[i] : 0.0f));
    }
    mean[r] = float(mu);
    rstd[r] = float(rs);
  }
}

void CpuBackend::layernorm_backward(const float* x, const float* weight, const float* mean,
                                    const float* rstd, const float* dy, float* dx, float* dweight,
                                    float* dbias, int64_t rows, int64_t dim) {
  check_shape("layernorm_backward", rows, dim);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float* dyr = dy + r * dim;
    float* dxr = dx + r * dim;
    const double mu = mean[r], rs = rstd[r];
    double g_sum = 0.0, gxhat_sum = 0.0;
    for (int64_t i = 0; i < dim; ++i) {
      const double g = double(dyr[i]) * weight_at(weight, i);
      g_sum += g;
      gxhat_sum += g * (xr[i] - mu) * rs;
    }
    const double g_mean = g_sum / double(dim), gxhat_mean = gxhat_sum / double(dim);
    for (int64_t i = 0; i < dim; ++i) {
      const double xhat = (xr[i] - mu) * rs;
      const double g = double(dyr[i]) * weight_at(weight, i);
      dxr[i] = float(rs * (g - g_mean - xhat * gxhat_mean));
      if (dweight) dweight[i] += float(double(dyr[i]) * xhat);
      if (dbias) dbias[i] += dyr[i];
    }
  }
}

}  // namespace octet::cpu
