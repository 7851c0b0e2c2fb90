// src/cuda/attention/attention.cpp — CudaBackend::make_attention: which CUDA attention serves a
// config. The forms (octet/attention.h AttnForm) and their GPU implementations:
//   flash, fp8   the flash FP8 kernels (flash/flash_attention.cpp; twin src/cpu/attention_flash.cpp)
//   flash, bf16  cuDNN's fused SDPA (cudnn/cudnn_attention.cpp), or the unfused form where cuDNN
//                cannot take the shape
//   whole        the unfused cuBLASLt form (unfused/unfused.cpp; twin src/cpu/attention_whole.cpp)
// docs/attention.md.
#include <memory>

#include "cuda/attention/attention_base.h"
#include "cuda/attention/cudnn/cudnn_sdpa.h"
#include "cuda/runtime/cuda_backend.h"
#include "octet/error.h"

namespace octet::cuda {

std::unique_ptr<Attention> CudaBackend::make_attention(const AttentionShape& shape,
                                                       const AttentionConfig& config) {
  DeviceGuard g(device_);
  OCTET_CHECK(
      !config.dq_projection || (config.form == AttnForm::Flash && config.precision == AttnPrecision::FP8),
      "cuda attention: the dQ row-sum projection is implemented for the flash FP8 kernels "
      "(form 'flash', precision fp8) and the CPU reference (docs/delta-matching.md)");
  if (config.form == AttnForm::Flash && config.precision == AttnPrecision::BF16) {
    if (auto a = make_cudnn_sdpa_attention(shape, config, *this)) return a;
    AttentionConfig whole = config;
    whole.form = AttnForm::Whole;
    return make_unfused_attention(shape, whole, *this);
  }
  if (config.form == AttnForm::Flash) return make_flash_attention(shape, config, *this);
  return make_unfused_attention(shape, config, *this);
}

}  // namespace octet::cuda
