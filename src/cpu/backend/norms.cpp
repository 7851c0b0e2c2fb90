// norms.cpp — RMSNorm and LayerNorm over the last dimension, forward and backward, CPU backend.
//
// RMSNorm (Zhang & Sennrich 2019, arXiv 1910.07467): rstd = 1/sqrt(mean(x²) + eps), y = x·rstd·w.
//   Backward, with g = dy·w:  dx = rstd·g − rstd³·x·mean(g·x);  dw += dy·x·rstd.
// LayerNorm (Ba, Kiros & Hinton 2016, arXiv 1607.06450): x̂ = (x − mean)·rstd, y = x̂·w + b,
//   rstd = 1/sqrt(var + eps) with the population variance.
//   Backward, with g = dy·w:  dx = rstd·(g − mean(g) − x̂·mean(g·x̂));  dw += dy·x̂;  db += dy.
// x, y, dy, dx are act tensors [rows, dim] (F32 or BF16, act_io.h); the statistics mean/rstd are
// F32 [rows] (what the backward of either backend reads), gains and biases F32 [dim]. Row
// statistics and the backward's row means are accumulated in double. An empty weight means w = 1
// (FOG's non-trainable QK-norm); empty dweight/dbias skip those gradients. With accumulate the
// backward adds dx's value as stored (act_stored) to what dx holds (backend.h).
#include <cmath>
#include <string>

#include "cpu/backend/act_io.h"
#include "cpu/backend/cpu_backend.h"
#include "octet/error.h"

namespace octet::cpu {
namespace {

struct Rows {
  int64_t rows, dim;
};

// x [rows, dim] and each other act tensor of the same numel and last dimension.
Rows check_rows(const char* op, const Tensor& x, std::initializer_list<const Tensor*> same) {
  check_activation(x, op);
  const Rows r{x.rows(), x.cols()};
  OCTET_CHECK(r.dim >= 1, std::string(op) + ": x must have a last dimension >= 1, got " + x.str());
  for (const Tensor* t : same)
    OCTET_CHECK(t->numel() == x.numel() && t->cols() == r.dim,
                std::string(op) + ": " + t->str() + " does not match x " + x.str());
  return r;
}

inline float weight_at(const float* w, int64_t i) { return w ? w[i] : 1.0f; }

}  // namespace

void CpuBackend::rmsnorm_forward(const Tensor& x_t, const Tensor& weight, const Tensor& y_t,
                                 const Tensor& rstd_t, float eps, const Tensor& amax) {
  const auto [rows, dim] = check_rows("rmsnorm_forward", x_t, {&y_t});
  check_amax_out(amax, "rmsnorm_forward amax");
  const float* w = opt_f32(weight, dim, "rmsnorm_forward weight");
  float* rstd = req_f32(rstd_t, rows, "rmsnorm_forward rstd");
  ActIn x(x_t, "rmsnorm_forward x");
  ActOut y(y_t, "rmsnorm_forward y");
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data + r * dim;
    float* yr = y.data + r * dim;
    double ss = 0.0;
    for (int64_t i = 0; i < dim; ++i) ss += double(xr[i]) * xr[i];
    const float rs = float(1.0 / std::sqrt(ss / double(dim) + double(eps)));
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * rs * weight_at(w, i);
    rstd[r] = rs;
  }
  y.store();
  accumulate_stored_amax(y_t, amax, "rmsnorm_forward amax");
}

void CpuBackend::rmsnorm_backward(const Tensor& x_t, const Tensor& weight, const Tensor& rstd_t,
                                  const Tensor& dy_t, const Tensor& dx_t, const Tensor& dweight,
                                  bool accumulate) {
  const auto [rows, dim] = check_rows("rmsnorm_backward", x_t, {&dy_t, &dx_t});
  OCTET_CHECK(dx_t.data != x_t.data && dx_t.data != dy_t.data, "rmsnorm_backward: dx must not alias x or dy");
  const float* w = opt_f32(weight, dim, "rmsnorm_backward weight");
  float* dw = opt_f32(dweight, dim, "rmsnorm_backward dweight");
  const float* rstd = req_f32(rstd_t, rows, "rmsnorm_backward rstd");
  ActIn x(x_t, "rmsnorm_backward x"), dy(dy_t, "rmsnorm_backward dy");
  ActOut dx(dx_t, "rmsnorm_backward dx", accumulate);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data + r * dim;
    const float* dyr = dy.data + r * dim;
    float* dxr = dx.data + r * dim;
    const double rs = rstd[r];
    double gx = 0.0;  // Σ g·x
    for (int64_t i = 0; i < dim; ++i) gx += double(dyr[i]) * weight_at(w, i) * xr[i];
    const double c = rs * rs * rs * gx / double(dim);
    for (int64_t i = 0; i < dim; ++i) {
      const double g = double(dyr[i]) * weight_at(w, i);
      const float v = float(rs * g - c * xr[i]);
      dxr[i] = accumulate ? dxr[i] + act_stored(dx_t.dtype, v) : v;
      if (dw) dw[i] += float(double(dyr[i]) * xr[i] * rs);
    }
  }
  dx.store();
}

void CpuBackend::layernorm_forward(const Tensor& x_t, const Tensor& weight, const Tensor& bias,
                                   const Tensor& y_t, const Tensor& mean_t, const Tensor& rstd_t, float eps,
                                   const Tensor& amax) {
  const auto [rows, dim] = check_rows("layernorm_forward", x_t, {&y_t});
  check_amax_out(amax, "layernorm_forward amax");
  const float* w = req_f32(weight, dim, "layernorm_forward weight");
  const float* b = opt_f32(bias, dim, "layernorm_forward bias");
  float* mean = req_f32(mean_t, rows, "layernorm_forward mean");
  float* rstd = req_f32(rstd_t, rows, "layernorm_forward rstd");
  ActIn x(x_t, "layernorm_forward x");
  ActOut y(y_t, "layernorm_forward y");
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data + r * dim;
    float* yr = y.data + r * dim;
    double s = 0.0;
    for (int64_t i = 0; i < dim; ++i) s += xr[i];
    const double mu = s / double(dim);
    double var = 0.0;
    for (int64_t i = 0; i < dim; ++i) var += (xr[i] - mu) * (xr[i] - mu);
    var /= double(dim);
    const double rs = 1.0 / std::sqrt(var + double(eps));
    for (int64_t i = 0; i < dim; ++i) {
      const double xhat = (xr[i] - mu) * rs;
      yr[i] = float(xhat * w[i] + (b ? b[i] : 0.0f));
    }
    mean[r] = float(mu);
    rstd[r] = float(rs);
  }
  y.store();
  accumulate_stored_amax(y_t, amax, "layernorm_forward amax");
}

void CpuBackend::layernorm_backward(const Tensor& x_t, const Tensor& weight, const Tensor& mean_t,
                                    const Tensor& rstd_t, const Tensor& dy_t, const Tensor& dx_t,
                                    const Tensor& dweight, const Tensor& dbias, bool accumulate) {
  const auto [rows, dim] = check_rows("layernorm_backward", x_t, {&dy_t, &dx_t});
  OCTET_CHECK(dx_t.data != x_t.data && dx_t.data != dy_t.data,
              "layernorm_backward: dx must not alias x or dy");
  const float* w = req_f32(weight, dim, "layernorm_backward weight");
  float* dw = opt_f32(dweight, dim, "layernorm_backward dweight");
  float* db = opt_f32(dbias, dim, "layernorm_backward dbias");
  const float* mean = req_f32(mean_t, rows, "layernorm_backward mean");
  const float* rstd = req_f32(rstd_t, rows, "layernorm_backward rstd");
  ActIn x(x_t, "layernorm_backward x"), dy(dy_t, "layernorm_backward dy");
  ActOut dx(dx_t, "layernorm_backward dx", accumulate);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data + r * dim;
    const float* dyr = dy.data + r * dim;
    float* dxr = dx.data + r * dim;
    const double mu = mean[r], rs = rstd[r];
    double g_sum = 0.0, gxhat_sum = 0.0;
    for (int64_t i = 0; i < dim; ++i) {
      const double g = double(dyr[i]) * w[i];
      g_sum += g;
      gxhat_sum += g * (xr[i] - mu) * rs;
    }
    const double g_mean = g_sum / double(dim), gxhat_mean = gxhat_sum / double(dim);
    for (int64_t i = 0; i < dim; ++i) {
      const double xhat = (xr[i] - mu) * rs;
      const double g = double(dyr[i]) * w[i];
      const float v = float(rs * (g - g_mean - xhat * gxhat_mean));
      dxr[i] = accumulate ? dxr[i] + act_stored(dx_t.dtype, v) : v;
      if (dw) dw[i] += float(double(dyr[i]) * xhat);
      if (db) db[i] += dyr[i];
    }
  }
  dx.store();
}

}  // namespace octet::cpu
