// src/core/adamw_args.h — the boundary checks of the fused optimizer step (octet/backend.h
// adamw_prepare / adamw_apply), written once for every backend.
#pragma once

#include "octet/tensor.h"

namespace octet {

/// Throws octet::Error naming the argument unless norm_sq is F64 [1], loss_sum is empty or F64 [1],
/// bias_corr is F64 [T, 2] with T >= 1 and state is F64 [kOptStateSlots].
void check_adamw_prepare_args(const Tensor& norm_sq, const Tensor& loss_sum, const Tensor& bias_corr,
                              const Tensor& state, float grad_clip);
/// Throws unless param, grad, m, v are F32 of one numel, segments F64 [k, 2] with k >= 1, state
/// F64 [kOptStateSlots] and the betas in [0, 1); returns the numel.
int64_t check_adamw_apply_args(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                               const Tensor& segments, const Tensor& state, float beta1, float beta2);

}  // namespace octet
