// octet/names.h — the one vocabulary of CLI and config names (docs/design.md §"One vocabulary").
//
// Every enum that a user names on the command line or in a config has exactly one name table
// (src/core/names.cpp): Recipe, FormatPolicy, Format, Role, AmaxAlgo (quant.h / fp8.h);
// AttnPrecision, DeltaMode, AttnForm, QkvScaling, AttnInputDist (attention.h); NormKind,
// NormPlacement, PositionKind, MlpKind, MixerKind, Arm (model.h). Config parsing, the CLI's choices and help,
// the config printer and the named parse_* / to_string functions of those headers all read it.
// Include the header that defines the enum together with this one.
#pragma once

#include <string>
#include <vector>

namespace octet {

/// The value of enum E named `name`. Throws octet::Error "unknown <what> 'name' (expected one of:
/// a, b, c)" — the bad value and every accepted name — if there is none.
template <class E>
E parse_enum(const std::string& name);

/// The name of `value` ("?" for a value the table lacks, which would be a bug of the table).
template <class E>
std::string enum_name(E value);

/// Every accepted name of E, in table order (the CLI's choices).
template <class E>
std::vector<std::string> enum_names();

/// "a | b | c": the accepted names of E for help texts.
template <class E>
std::string enum_choices();

}  // namespace octet
