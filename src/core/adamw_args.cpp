// src/core/adamw_args.cpp — the boundary checks of the fused optimizer step (adamw_args.h).
#include "core/adamw_args.h"

#include <string>
#include <utility>

#include "octet/adamw_rule.h"
#include "octet/error.h"

namespace octet {
namespace {

void check_f64(const Tensor& t, int64_t numel, const char* what) {
  check_dtype(t, DType::F64, what);
  check_numel(t, numel, what);
}

}  // namespace

void check_adamw_prepare_args(const Tensor& norm_sq, const Tensor& loss_sum, const Tensor& bias_corr,
                              const Tensor& state, float grad_clip) {
  check_f64(norm_sq, 1, "adamw_prepare: norm_sq");
  if (!loss_sum.empty()) check_f64(loss_sum, 1, "adamw_prepare: loss_sum");
  check_dtype(bias_corr, DType::F64, "adamw_prepare: bias_corr");
  OCTET_CHECK(bias_corr.shape.rank == 2 && bias_corr.shape[1] == 2 && bias_corr.shape[0] >= 1,
              "adamw_prepare: bias_corr must be [T >= 1, 2], got " + bias_corr.str());
  check_f64(state, kOptStateSlots, "adamw_prepare: state");
  OCTET_CHECK(grad_clip >= 0,
              "adamw_prepare: grad_clip must be >= 0 (0 disables), got " + std::to_string(grad_clip));
}

int64_t check_adamw_apply_args(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                               const Tensor& segments, const Tensor& state, float beta1, float beta2) {
  const int64_t n = param.numel();
  check_dtype(param, DType::F32, "adamw_apply: param");
  for (const auto& [t, what] :
       {std::pair{&grad, "adamw_apply: grad"}, {&m, "adamw_apply: m"}, {&v, "adamw_apply: v"}}) {
    check_dtype(*t, DType::F32, what);
    check_numel(*t, n, what);
  }
  check_dtype(segments, DType::F64, "adamw_apply: segments");
  OCTET_CHECK(segments.shape.rank == 2 && segments.shape[1] == 2 && segments.shape[0] >= 1,
              "adamw_apply: segments must be [k >= 1, 2] rows {end, decay}, got " + segments.str());
  check_f64(state, kOptStateSlots, "adamw_apply: state");
  OCTET_CHECK(beta1 >= 0.0f && beta1 < 1.0f && beta2 >= 0.0f && beta2 < 1.0f,
              "adamw_apply: betas must lie in [0, 1), got beta1=" + std::to_string(beta1) +
                  " beta2=" + std::to_string(beta2));
  return n;
}

}  // namespace octet
