// src/core/attention_rules.cpp — the shape and configuration rules of attention (octet/attention.h),
// written once for the CPU reference, the CUDA backend, config validation and the CLI: sizes >= 1,
// GQA (n_kv_heads divides n_heads), a finite softmax scale, block sizes >= 1 and the p_scale rule
// (docs/design.md §"Where every GEMM operand is quantized": the static power-of-two scale of P before its
// E4M3 cast).
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <tuple>
#include <utility>

#include "octet/attention.h"
#include "octet/error.h"
#include "octet/fp8.h"

namespace octet {

float AttentionShape::tau() const {
  return softmax_scale != 0.0f ? softmax_scale : 1.0f / std::sqrt(float(head_dim));
}

Shape AttentionShape::q_shape() const {
  return layout == AttnLayout::TokensMajor ? Shape{batch, seq_q, n_heads, head_dim}
                                           : Shape{batch, n_heads, seq_q, head_dim};
}

Shape AttentionShape::kv_shape() const {
  return layout == AttnLayout::TokensMajor ? Shape{batch, seq_k, n_kv_heads, head_dim}
                                           : Shape{batch, n_kv_heads, seq_k, head_dim};
}

void check_heads_major(const AttentionShape& shape, const char* what) {
  OCTET_CHECK(shape.layout == AttnLayout::HeadsMajor,
              std::string(what) +
                  ": the reference reads heads-major [batch, heads, seq, head_dim] arrays (layout "
                  "tokens-major is for a backend's Attention)");
}

void AttentionShape::validate() const {
  const std::pair<const char*, int64_t> sizes[] = {{"batch", batch},         {"heads", n_heads},
                                                   {"kv-heads", n_kv_heads}, {"seq", seq_q},
                                                   {"kv-seq", seq_k},        {"dim", head_dim}};
  for (auto& [name, v] : sizes)
    OCTET_CHECK(v >= 1, "attention shape: " + std::string(name) + " must be >= 1, got " + std::to_string(v));
  OCTET_CHECK(n_heads % n_kv_heads == 0, "attention shape: kv-heads (" + std::to_string(n_kv_heads) +
                                             ") must divide heads (" + std::to_string(n_heads) + ")");
  // Every size computed from the shape (elements, bytes of the saved state's copies, padded
  // layouts) stays far inside int64: at most 2^56 elements per tensor.
  for (const auto& [what, heads, seq] : {std::tuple{"batch·heads·seq·dim", n_heads, seq_q},
                                         std::tuple{"batch·kv-heads·kv-seq·dim", n_kv_heads, seq_k}}) {
    int64_t n = batch;
    const bool overflow = __builtin_mul_overflow(n, heads, &n) || __builtin_mul_overflow(n, seq, &n) ||
                          __builtin_mul_overflow(n, head_dim, &n) || n > (int64_t(1) << 56);
    OCTET_CHECK(!overflow, std::string("attention shape: ") + what + " is beyond 2^56 elements");
  }
  (void)softmax_scale_fp32(softmax_scale, "attention shape: softmax scale");
}

float softmax_scale_fp32(double scale, const std::string& name) {
  constexpr double lo = std::numeric_limits<float>::min(), hi = std::numeric_limits<float>::max();
  if (!(scale == 0.0 || (scale >= lo && scale <= hi))) {
    char msg[160];
    std::snprintf(msg, sizeof(msg),
                  " must be 0 (1/sqrt(head_dim)) or a positive FP32 normal number, %.7g to %.7g (got %.9g)",
                  lo, hi, scale);
    OCTET_FAIL(name + msg);
  }
  return float(scale);
}

void validate_p_scale(float p_scale, const std::string& name) {
  // The largest power of two that keeps P = 1 finite in E4M3 (448 = 1.75·2^8): 256.
  const float max_scale = pow2_round_down(fp8_max(Format::E4M3));
  OCTET_CHECK(std::isfinite(p_scale) && p_scale >= 1.0f && p_scale <= max_scale &&
                  pow2_round_down(p_scale) == p_scale,
              name +
                  " must be a power of two in [1, 256] (P in [0, 1] times p_scale must fit "
                  "E4M3, whose largest value is 448), got " +
                  std::to_string(p_scale));
}

void AttentionConfig::validate() const {
  OCTET_CHECK(block_k >= 1 && block_q >= 1, "attention block sizes must be >= 1 (block_q " +
                                                std::to_string(block_q) + ", block_k " +
                                                std::to_string(block_k) + ")");
  validate_p_scale(p_scale);
}

}  // namespace octet
