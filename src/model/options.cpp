// src/model/options.cpp — names, validation and the precision arms of model.h.
//
// The arm table follows DESIGN.md §4 (bf16 / fp8-linear / fp8-stale / fp8-matched, as the
// Delta-Matching paper names them baseline / MP / SD / DM); the internal fp32 arm is the reference
// for gradient checks. Kept-high-precision parts follow DeepSeek-V3 §3.3 (arXiv 2412.19437).
#include <cmath>

#include "octet/error.h"
#include "octet/model.h"

namespace octet {

namespace {
template <class E, size_t N>
E parse_name(const std::string& s, const char* what, const std::pair<const char*, E> (&table)[N]) {
  std::string names;
  for (auto& [n, v] : table) {
    if (s == n) return v;
    names += names.empty() ? n : std::string(", ") + n;
  }
  OCTET_FAIL(std::string("unknown ") + what + " '" + s + "' (expected one of: " + names + ")");
}
template <class E, size_t N>
std::string name_of(E v, const std::pair<const char*, E> (&table)[N]) {
  for (auto& [n, e] : table)
    if (e == v) return n;
  return "?";
}
constexpr std::pair<const char*, NormKind> kNorms[] = {{"rmsnorm", NormKind::RMSNorm},
                                                       {"layernorm", NormKind::LayerNorm}};
constexpr std::pair<const char*, NormPlacement> kPlacements[] = {
    {"pre", NormPlacement::Pre}, {"post", NormPlacement::Post}, {"output", NormPlacement::Output}};
constexpr std::pair<const char*, PositionKind> kPositions[] = {
    {"rope", PositionKind::RoPE}, {"learned", PositionKind::Learned}, {"nope", PositionKind::NoPE}};
constexpr std::pair<const char*, MlpKind> kMlps[] = {{"swiglu", MlpKind::SwiGLU},
                                                     {"gelu", MlpKind::GELU}};
constexpr std::pair<const char*, Arm> kArms[] = {{"bf16", Arm::BF16},
                                                 {"fp8-linear", Arm::FP8Linear},
                                                 {"fp8-stale", Arm::FP8Stale},
                                                 {"fp8-matched", Arm::FP8Matched},
                                                 {"fp32", Arm::FP32}};
}  // namespace

NormKind parse_norm_kind(const std::string& s) { return parse_name(s, "norm", kNorms); }
NormPlacement parse_norm_placement(const std::string& s) {
  return parse_name(s, "norm placement", kPlacements);
}
PositionKind parse_position_kind(const std::string& s) {
  return parse_name(s, "position encoding", kPositions);
}
MlpKind parse_mlp_kind(const std::string& s) { return parse_name(s, "mlp", kMlps); }
Arm parse_arm(const std::string& s) { return parse_name(s, "arm", kArms); }
std::string to_string(NormKind v) { return name_of(v, kNorms); }
std::string to_string(NormPlacement v) { return name_of(v, kPlacements); }
std::string to_string(PositionKind v) { return name_of(v, kPositions); }
std::string to_string(MlpKind v) { return name_of(v, kMlps); }
std::string to_string(Arm a) { return name_of(a, kArms); }

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
}

void PrecisionConfig::validate() const {
  OCTET_CHECK(is_activation_dtype(activations),
              "precision.activations must be f32 or bf16, got " + to_string(activations));
  OCTET_CHECK(std::isfinite(p_scale) && p_scale > 0 && pow2_round_down(p_scale) == p_scale,
              "precision.p_scale must be a positive power of two");
  OCTET_CHECK(quant.amax_history_len >= 1, "precision.amax_history_len must be >= 1");
  OCTET_CHECK(std::isfinite(quant.unit_scale) && quant.unit_scale > 0,
              "precision.unit_scale must be > 0");
  OCTET_CHECK(quant.margin >= 0 && quant.margin <= 32, "precision.margin must be in [0, 32]");
}

LinearPrecision linear_precision(Arm arm) {
  switch (arm) {
    case Arm::BF16: return LinearPrecision::BF16;
    case Arm::FP32: return LinearPrecision::FP32;
    default: return LinearPrecision::FP8;
  }
}

LinearPrecision head_precision(Arm arm) {
  return arm == Arm::FP32 ? LinearPrecision::FP32 : LinearPrecision::BF16;
}

AttentionConfig attention_config(const PrecisionConfig& p) {
  AttentionConfig a;
  a.form = p.attn_form;
  a.qkv_scaling = p.qkv_scaling;
  a.p_scale = p.p_scale;
  const Format grad_format = format_for(p.quant.formats, Role::Gradient);
  a.do_format = grad_format;
  a.ds_format = grad_format;
  switch (p.arm) {
    case Arm::FP32: a.precision = AttnPrecision::FP64; a.delta = DeltaMode::Matched; break;
    case Arm::BF16:
    case Arm::FP8Linear: a.precision = AttnPrecision::BF16; a.delta = DeltaMode::Stale; break;
    case Arm::FP8Stale: a.precision = AttnPrecision::FP8; a.delta = DeltaMode::Stale; break;
    case Arm::FP8Matched: a.precision = AttnPrecision::FP8; a.delta = DeltaMode::Matched; break;
  }
  return a;
}

double LayerDiag::kurtosis_max() const {
  double m = kurtosis_attn_in;
  for (double k : {kurtosis_mlp_in, kurtosis_mlp_hidden, kurtosis_out}) m = k > m ? k : m;
  return m;
}

}  // namespace octet
