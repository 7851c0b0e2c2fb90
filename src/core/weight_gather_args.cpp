// src/core/weight_gather_args.cpp — weight_gather_args.h.
#include "core/weight_gather_args.h"

#include <string>

#include "octet/error.h"

namespace octet {

void check_weight_piece_args(bool gathers, const LinearSpec& spec, const char* what, const Tensor& w_piece,
                             const Tensor& amax) {
  OCTET_CHECK(gathers,
              std::string("linear ") + what + ": needs an FP8 tensor-current linear with cache_weight");
  check_dtype(w_piece, DType::F32, what);
  OCTET_CHECK(
      w_piece.numel() >= 1 && w_piece.numel() <= spec.out_features * spec.in_features,
      std::string("linear ") + what + ": a piece of W must hold 1 to out*in values, got " + w_piece.str());
  check_dtype(amax, DType::I32, what);
  check_numel(amax, 1, what);
}

void check_weight_codes_args(Format format, const char* what, const Tensor& codes, int64_t n) {
  check_dtype(codes, format == Format::E4M3 ? DType::E4M3 : DType::E5M2, what);
  check_numel(codes, n, what);
}

void check_install_codes_args(bool gathers, Format format, const Tensor& codes, const Tensor& amax,
                              int64_t n) {
  OCTET_CHECK(gathers, "linear install_weight_codes: needs FP8 tensor-current with cache_weight");
  check_dtype(amax, DType::I32, "linear install_weight_codes: amax");
  check_numel(amax, 1, "linear install_weight_codes: amax");
  check_weight_codes_args(format, "linear install_weight_codes: codes", codes, n);
}

}  // namespace octet
