// src/cpu/gemm_accum.h — emulation of Hopper's limited-precision FP8 accumulation (DeepSeek-V3,
// arXiv 2412.19437 §3.3.2): the tensor core keeps only about 14 bits of its running sum; DeepSeek
// promotes the partial sum to an FP32 accumulator on the CUDA cores every N_C = 128 elements of K.
#pragma once

#include <cstdint>

#include "octet/gemm.h"

namespace octet {

class LimitedAccumulator {
 public:
  /// Throws octet::Error unless 1 <= accum_mantissa_bits <= 23 and promote_interval >= 0.
  explicit LimitedAccumulator(const GemmOptions& options);

  /// Σ a[k]·b[k] over one scale block of width n, times `scale`: the running sum is truncated
  /// (toward zero) to `accum_mantissa_bits` mantissa bits after every addition, and is promoted —
  /// multiplied by `scale` and added to an FP32 sum — every promote_interval elements (0: never)
  /// and at the end of the block (scales differ between blocks, so a block always ends a run).
  float dot(const float* a, const float* b, int64_t n, float scale) const;

 private:
  int bits_;
  int64_t interval_;
};

}  // namespace octet
