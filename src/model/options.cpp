// src/model/options.cpp — validation and the precision arms of model.h (the names are src/core's).
//
// The arm table follows docs/design.md §"Precision arms" (bf16 / fp8-linear / fp8-stale / fp8-matched, as the
// Delta-Matching paper names them baseline / MP / SD / DM); the internal fp32 arm is the reference
// for gradient checks. Kept-high-precision parts follow DeepSeek-V3 §3.3 (arXiv 2412.19437).
#include <cmath>
#include <string>

#include "octet/error.h"
#include "octet/model.h"

namespace octet {

void ModelConfig::validate() const {
  auto positive = [](int64_t v, const char* name) {
    OCTET_CHECK(v >= 1, std::string("model.") + name + " must be >= 1 (got " + std::to_string(v) + ")");
  };
  positive(n_layer, "n_layer");
  positive(d_model, "d_model");
  positive(n_head, "n_head");
  positive(n_kv_head, "n_kv_head");
  positive(d_ff, "d_ff");
  positive(vocab_size, "vocab_size");
  positive(seq_len, "seq_len");
  OCTET_CHECK(d_model % n_head == 0, "model.n_head (" + std::to_string(n_head) +
                                         ") must divide model.d_model (" + std::to_string(d_model) + ")");
  OCTET_CHECK(n_head % n_kv_head == 0, "model.n_kv_head (" + std::to_string(n_kv_head) +
                                           ") must divide model.n_head (" + std::to_string(n_head) + ")");
  OCTET_CHECK(positions != PositionKind::RoPE || head_dim() % 2 == 0,
              "RoPE needs an even head_dim (d_model / n_head = " + std::to_string(head_dim()) + ")");
  OCTET_CHECK(std::isfinite(init_std) && init_std > 0, "model.init_std must be > 0");
  OCTET_CHECK(std::isfinite(norm_eps) && norm_eps > 0, "model.norm_eps must be > 0");
  OCTET_CHECK(std::isfinite(rope_theta) && rope_theta > 1, "model.rope_theta must be > 1");
  OCTET_CHECK(residual_tau > 0 && residual_tau < 1, "model.residual_tau must be in (0, 1)");
  OCTET_CHECK(gdn_chunk >= 1, "model.gdn_chunk must be >= 1 (got " + std::to_string(gdn_chunk) + ")");
}

void PrecisionConfig::validate() const {
  OCTET_CHECK(is_activation_dtype(activations),
              "precision.activations must be f32 or bf16, got " + to_string(activations));
  validate_p_scale(p_scale, "precision.p_scale");
  OCTET_CHECK(attn_tile == 64 || attn_tile == 128,
              "precision.attn_tile must be 64 or 128, got " + std::to_string(attn_tile));
  quant.validate("precision.");
}

AttentionShape attention_shape(const ModelConfig& m, int64_t batch) {
  AttentionShape shape;
  shape.batch = batch;
  shape.n_heads = m.n_head;
  shape.n_kv_heads = m.n_kv_head;
  shape.seq_q = shape.seq_k = m.seq_len;
  shape.head_dim = m.head_dim();
  shape.causal = true;
  shape.layout = AttnLayout::TokensMajor;  // the projections' rows as they lie (no layout copies)
  return shape;
}

void validate_model_precision(const ModelConfig& m, const PrecisionConfig& p, int64_t batch) {
  m.validate();
  p.validate();
  OCTET_CHECK(batch >= 1, "batch must be >= 1 (got " + std::to_string(batch) + ")");
  // What the model hands its attention and linears, checked by their own rules (src/core).
  attention_shape(m, batch).validate();
  attention_config(p).validate();
}

LinearPrecision linear_precision(Arm arm) {
  switch (arm) {
    case Arm::BF16:
      return LinearPrecision::BF16;
    case Arm::FP32:
      return LinearPrecision::FP32;
    default:
      return LinearPrecision::FP8;
  }
}

LinearPrecision head_precision(Arm arm) {
  return arm == Arm::FP32 ? LinearPrecision::FP32 : LinearPrecision::BF16;
}

LinearPrecision recurrent_precision(Arm arm) { return head_precision(arm); }

AttentionConfig attention_config(const PrecisionConfig& p) {
  AttentionConfig a;
  a.form = p.attn_form;
  a.qkv_scaling = p.qkv_scaling;
  a.p_scale = p.p_scale;
  a.block_q = a.block_k = p.attn_tile;
  const Format grad_format = format_for(p.quant.formats, Role::Gradient);
  a.do_format = grad_format;
  a.ds_format = grad_format;
  switch (p.arm) {
    case Arm::FP32:
      a.precision = AttnPrecision::FP64;
      a.delta = DeltaMode::Matched;
      break;
    case Arm::BF16:
    case Arm::FP8Linear:
      a.precision = AttnPrecision::BF16;
      a.delta = DeltaMode::Stale;
      break;
    case Arm::FP8Stale:
      a.precision = AttnPrecision::FP8;
      a.delta = DeltaMode::Stale;
      break;
    case Arm::FP8Matched:
      a.precision = AttnPrecision::FP8;
      a.delta = DeltaMode::Matched;
      break;
  }
  return a;
}

AttnForm default_attn_form(const ModelConfig& m, const PrecisionConfig& p, const std::string& backend_name) {
  const AttentionConfig a = attention_config(p);
  const bool fused_fp8 = a.precision == AttnPrecision::FP8 && flash_attention_size_supported(a.block_q) &&
                         flash_attention_size_supported(a.block_k);
  const bool fused_bf16 = a.precision == AttnPrecision::BF16;  // cuDNN's fused SDPA
  const bool fused =
      backend_name == "cuda" && flash_attention_size_supported(m.head_dim()) && (fused_fp8 || fused_bf16);
  return fused ? AttnForm::Flash : AttnForm::Whole;
}

double LayerDiag::kurtosis_max() const {
  double m = kurtosis_attn_in;
  for (double k : {kurtosis_mlp_in, kurtosis_mlp_hidden, kurtosis_out}) m = k > m ? k : m;
  return m;
}

}  // namespace octet
