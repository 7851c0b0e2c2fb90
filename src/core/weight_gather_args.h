// src/core/weight_gather_args.h — the boundary checks of the linears' FP8 weight all-gather entry
// points (octet/backend.h Linear::weight_piece_amax / encode_weight_piece / install_weight_codes;
// docs/distributed.md §"FP8 all-gather"), written once for every backend.
#pragma once

#include <cstdint>

#include "octet/backend.h"
#include "octet/tensor.h"

namespace octet {

/// Throws octet::Error naming `what` unless the linear gathers weight codes (`gathers`: an FP8
/// tensor-current linear with cache_weight), w_piece is F32 with 1 to out·in values and amax is
/// I32 [1].
void check_weight_piece_args(bool gathers, const LinearSpec& spec, const char* what, const Tensor& w_piece,
                             const Tensor& amax);
/// Throws unless codes has the weight slot's FP8 dtype (E4M3 or E5M2 for `format`) and n values.
void check_weight_codes_args(Format format, const char* what, const Tensor& codes, int64_t n);
/// install_weight_codes' checks: the linear gathers weight codes, amax is I32 [1], codes as above
/// with n = out·in values.
void check_install_codes_args(bool gathers, Format format, const Tensor& codes, const Tensor& amax,
                              int64_t n);

}  // namespace octet
