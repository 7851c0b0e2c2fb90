// src/core/names.cpp — the name table of every enum a user names (octet/names.h), in the one table
// form of name_table.h, and the named parse_* / to_string functions the area headers declare
// (quant.h, attention.h, model.h), all reading these tables. Arms follow docs/design.md §"Precision arms"
// (the Delta-Matching paper's baseline / MP / SD / DM, plus the internal fp32 reference); recipes and formats
// docs/numerics.md.
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "core/name_table.h"
#include "octet/attention.h"
#include "octet/model.h"
#include "octet/names.h"
#include "octet/quant.h"

namespace octet {
namespace {

using detail::NameTable;

/// Names<E>::table lists every value of E once; Names<E>::what is the word an error uses.
template <class E>
struct Names;

#define OCTET_NAMES(E, WHAT, ...)                                                          \
  template <>                                                                              \
  struct Names<E> {                                                                        \
    static constexpr const char* what = WHAT;                                              \
    static constexpr auto table = std::to_array<std::pair<const char*, E>>({__VA_ARGS__}); \
  }

OCTET_NAMES(Recipe, "recipe", {"tensor-delayed", Recipe::TensorDelayed},
            {"tensor-current", Recipe::TensorCurrent}, {"row", Recipe::Row}, {"block", Recipe::Block},
            {"mx", Recipe::MX}, {"unit", Recipe::Unit});
OCTET_NAMES(FormatPolicy, "format policy", {"e4m3", FormatPolicy::E4M3}, {"hybrid", FormatPolicy::Hybrid});
OCTET_NAMES(Format, "format", {"e4m3", Format::E4M3}, {"e5m2", Format::E5M2});
OCTET_NAMES(Role, "role", {"activation", Role::Activation}, {"weight", Role::Weight},
            {"gradient", Role::Gradient});
OCTET_NAMES(AmaxAlgo, "amax algo", {"max", AmaxAlgo::Max}, {"most_recent", AmaxAlgo::MostRecent});
OCTET_NAMES(AttnPrecision, "attention precision", {"fp64", AttnPrecision::FP64},
            {"bf16", AttnPrecision::BF16}, {"fp8", AttnPrecision::FP8});
OCTET_NAMES(DeltaMode, "delta mode", {"stale", DeltaMode::Stale}, {"matched", DeltaMode::Matched});
OCTET_NAMES(AttnForm, "attention form", {"whole", AttnForm::Whole}, {"flash", AttnForm::Flash});
OCTET_NAMES(QkvScaling, "qkv scaling", {"tensor", QkvScaling::Tensor}, {"head-block", QkvScaling::HeadBlock});
OCTET_NAMES(AttnInputDist, "input distribution", {"normal", AttnInputDist::Normal},
            {"heavy", AttnInputDist::Heavy}, {"sink", AttnInputDist::Sink});
OCTET_NAMES(NormKind, "norm", {"rmsnorm", NormKind::RMSNorm}, {"layernorm", NormKind::LayerNorm});
OCTET_NAMES(NormPlacement, "norm placement", {"pre", NormPlacement::Pre}, {"post", NormPlacement::Post},
            {"output", NormPlacement::Output});
OCTET_NAMES(PositionKind, "position encoding", {"rope", PositionKind::RoPE},
            {"learned", PositionKind::Learned}, {"nope", PositionKind::NoPE});
OCTET_NAMES(MlpKind, "mlp", {"swiglu", MlpKind::SwiGLU}, {"gelu", MlpKind::GELU});
OCTET_NAMES(MixerKind, "mixer", {"attention", MixerKind::Attention}, {"hybrid", MixerKind::Hybrid});
OCTET_NAMES(Arm, "arm", {"bf16", Arm::BF16}, {"fp8-linear", Arm::FP8Linear}, {"fp8-stale", Arm::FP8Stale},
            {"fp8-matched", Arm::FP8Matched}, {"fp32", Arm::FP32});
#undef OCTET_NAMES

}  // namespace

template <class E>
E parse_enum(const std::string& name) {
  return detail::parse_name(Names<E>::table, name, Names<E>::what);
}
// "tiled" is the flash form's former name: configs, run folders and scripts written before the
// rename keep working (to_string writes "flash").
template <>
AttnForm parse_enum<AttnForm>(const std::string& name) {
  return name == "tiled" ? AttnForm::Flash
                         : detail::parse_name(Names<AttnForm>::table, name, Names<AttnForm>::what);
}
template <class E>
std::string enum_name(E value) {
  return detail::name_of(Names<E>::table, value);
}
template <class E>
std::vector<std::string> enum_names() {
  return detail::names_in(Names<E>::table);
}
template <class E>
std::string enum_choices() {
  return detail::join_names(Names<E>::table, " | ");
}

// The enums of octet/names.h: the templates exist for these and no others.
#define OCTET_ENUM(E)                                \
  template E parse_enum<E>(const std::string&);      \
  template std::string enum_name<E>(E);              \
  template std::vector<std::string> enum_names<E>(); \
  template std::string enum_choices<E>()
OCTET_ENUM(Recipe);
OCTET_ENUM(FormatPolicy);
OCTET_ENUM(Format);
OCTET_ENUM(Role);
OCTET_ENUM(AmaxAlgo);
OCTET_ENUM(AttnPrecision);
OCTET_ENUM(DeltaMode);
OCTET_ENUM(AttnForm);
OCTET_ENUM(QkvScaling);
OCTET_ENUM(AttnInputDist);
OCTET_ENUM(NormKind);
OCTET_ENUM(NormPlacement);
OCTET_ENUM(PositionKind);
OCTET_ENUM(MlpKind);
OCTET_ENUM(MixerKind);
OCTET_ENUM(Arm);
#undef OCTET_ENUM

// The named functions of quant.h, attention.h and model.h: thin spellings of the templates.
Recipe parse_recipe(const std::string& s) { return parse_enum<Recipe>(s); }
FormatPolicy parse_format_policy(const std::string& s) { return parse_enum<FormatPolicy>(s); }
Format parse_format(const std::string& s) { return parse_enum<Format>(s); }
AttnPrecision parse_attn_precision(const std::string& s) { return parse_enum<AttnPrecision>(s); }
DeltaMode parse_delta_mode(const std::string& s) { return parse_enum<DeltaMode>(s); }
AttnForm parse_attn_form(const std::string& s) { return parse_enum<AttnForm>(s); }
AttnInputDist parse_attn_input_dist(const std::string& s) { return parse_enum<AttnInputDist>(s); }
NormKind parse_norm_kind(const std::string& s) { return parse_enum<NormKind>(s); }
NormPlacement parse_norm_placement(const std::string& s) { return parse_enum<NormPlacement>(s); }
PositionKind parse_position_kind(const std::string& s) { return parse_enum<PositionKind>(s); }
MlpKind parse_mlp_kind(const std::string& s) { return parse_enum<MlpKind>(s); }
MixerKind parse_mixer_kind(const std::string& s) { return parse_enum<MixerKind>(s); }
Arm parse_arm(const std::string& s) { return parse_enum<Arm>(s); }
std::string to_string(Recipe v) { return enum_name(v); }
std::string to_string(FormatPolicy v) { return enum_name(v); }
std::string to_string(Format v) { return enum_name(v); }
std::string to_string(AttnPrecision v) { return enum_name(v); }
std::string to_string(DeltaMode v) { return enum_name(v); }
std::string to_string(AttnForm v) { return enum_name(v); }
std::string to_string(AttnInputDist v) { return enum_name(v); }
std::string to_string(NormKind v) { return enum_name(v); }
std::string to_string(NormPlacement v) { return enum_name(v); }
std::string to_string(PositionKind v) { return enum_name(v); }
std::string to_string(MlpKind v) { return enum_name(v); }
std::string to_string(MixerKind v) { return enum_name(v); }
std::string to_string(Arm v) { return enum_name(v); }

}  // namespace octet
