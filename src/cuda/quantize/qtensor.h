// src/cuda/quantize/qtensor.h — an FP8 operand in device memory, in the layout cuBLASLt's FP8 GEMMs read.
//
// Codes are row-major [rows, cols] with K = cols contiguous ("TN" operands, gemm.h), padded for the
// tensor cores: the leading dimension `ld` is cols rounded up to 16 and there are `rows_pad` = rows
// rounded up to 16 rows; padding codes are 0 (they add nothing to a dot product). scale_inv holds one
// dequantization factor per scale block, laid out as cuBLASLt (CUDA >= 12.9, sm_90) reads it:
//   Tensor     one float                                  (CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F)
//   RowVector  [rows_pad], one per row                    (..._OUTER_VEC_32F; the `row` recipe)
//   Vec128     [ceil(ld/128)][rows_pad]: 1x128 tiles      (..._VEC128_32F, "M-major")
//   Blk128     [ceil(rows_pad/128)][roundup(ceil(ld/128), 4)]: 128x128 blocks (..._BLK128x128_32F)
//   Vec32      [rows_pad][ceil(ld/32)]: 1x32 MX blocks (no sm_90 GEMM mode: dequantized fallback)
// These are the layouts Transformer Engine calls GEMM_READY. octet's host QTensor (quant.h) stores the
// same scales row-major over blocks; to_host() converts.
#pragma once

#include <cstdint>
#include <vector>

#include "octet/fp8.h"
#include "octet/quant.h"
#include "octet/saved_size.h"

namespace octet::cuda {

enum class ScaleLayout : int { Tensor = 0, RowVector = 1, Vec128 = 2, Blk128 = 3, Vec32 = 4 };

OCTET_HD int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
OCTET_HD int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }

/// The scale layout a recipe and role give (block: 128x128 for weights, 1x128 otherwise).
inline ScaleLayout scale_layout_for(Recipe recipe, Role role) {
  switch (recipe) {
    case Recipe::Row:
      return ScaleLayout::RowVector;
    case Recipe::Block:
      return role == Role::Weight ? ScaleLayout::Blk128 : ScaleLayout::Vec128;
    case Recipe::MX:
      return ScaleLayout::Vec32;
    default:
      return ScaleLayout::Tensor;
  }
}

/// Non-owning view of a device FP8 operand (see the file comment for the layouts).
struct DevQTensor {
  int64_t rows = 0, cols = 0;    ///< logical shape
  int64_t rows_pad = 0, ld = 0;  ///< padded row count and leading dimension (multiples of 16)
  Format format = Format::E4M3;
  ScaleLayout layout = ScaleLayout::Tensor;
  uint8_t* codes = nullptr;    ///< rows_pad * ld bytes
  float* scale_inv = nullptr;  ///< scale_count() floats
  int64_t scale_ld = 0;        ///< row stride of the scale grid (layout-specific)

  /// Sets rows/cols and derives the padded sizes and the scale stride of `layout`.
  OCTET_HD void set_shape(int64_t r, int64_t c) {
    rows = r;
    cols = c;
    rows_pad = round_up(r, 16);
    ld = round_up(c, 16);
    switch (layout) {
      case ScaleLayout::Tensor:
        scale_ld = 1;
        break;
      case ScaleLayout::RowVector:
        scale_ld = 1;
        break;
      case ScaleLayout::Vec128:
        scale_ld = rows_pad;
        break;
      case ScaleLayout::Blk128:
        scale_ld = round_up(ceil_div(ld, 128), 4);
        break;
      case ScaleLayout::Vec32:
        scale_ld = ceil_div(ld, 32);
        break;
    }
  }
  OCTET_HD int64_t code_count() const { return rows_pad * ld; }
  OCTET_HD int64_t scale_count() const {
    switch (layout) {
      case ScaleLayout::Tensor:
        return 1;
      case ScaleLayout::RowVector:
        return rows_pad;
      case ScaleLayout::Vec128:
        return ceil_div(ld, 128) * rows_pad;
      case ScaleLayout::Blk128:
        return ceil_div(rows_pad, 128) * scale_ld;
      case ScaleLayout::Vec32:
        return rows_pad * scale_ld;
    }
    return 1;
  }
  /// Index into scale_inv of the block holding element (r, c).
  OCTET_HD int64_t scale_index(int64_t r, int64_t c) const {
    switch (layout) {
      case ScaleLayout::Tensor:
        return 0;
      case ScaleLayout::RowVector:
        return r;
      case ScaleLayout::Vec128:
        return (c / 128) * scale_ld + r;
      case ScaleLayout::Blk128:
        return (r / 128) * scale_ld + c / 128;
      case ScaleLayout::Vec32:
        return r * scale_ld + c / 32;
    }
    return 0;
  }
  /// Block shape in octet's host convention (quant.h BlockShape).
  BlockShape block() const {
    switch (layout) {
      case ScaleLayout::Tensor:
        return {rows, cols};
      case ScaleLayout::RowVector:
        return {1, cols};
      case ScaleLayout::Vec128:
        return {1, 128};
      case ScaleLayout::Blk128:
        return {128, 128};
      case ScaleLayout::Vec32:
        return {1, 32};
    }
    return {rows, cols};
  }
};

/// The buffers of a DevQTensor of `rows` rows and n columns as saved-size terms in n
/// (octet/saved_size.h), each rounded up to `align` bytes: the codes (code_count(): rows_pad ·
/// round_up(n, 16) bytes), then the scales (scale_count() floats). For every n >= 1 the two terms'
/// bytes equal those counts (tests/backend/devq_size_terms_test.cpp).
inline std::vector<SavedSizeTerm> size_terms_by_cols(int64_t rows, ScaleLayout layout, int64_t align) {
  const int64_t rows_pad = round_up(rows, 16), f = int64_t(sizeof(float));
  const SavedSizeTerm codes{16 * rows_pad, 16, 0, align};
  SavedSizeTerm scales{0, 1, f, align};  // Tensor: one float
  switch (layout) {
    case ScaleLayout::Tensor:
      break;
    case ScaleLayout::RowVector:  // [rows_pad]
      scales = {0, 1, f * rows_pad, align};
      break;
    case ScaleLayout::Vec128:  // [ceil(ld / 128)][rows_pad], ceil(round_up(n, 16) / 128) = ceil(n / 128)
      scales = {f * rows_pad, 128, 0, align};
      break;
    case ScaleLayout::Blk128:  // [ceil(rows_pad / 128)][round_up(ceil(n / 128), 4)]: 4 floats per 512
      scales = {4 * f * ceil_div(rows_pad, 128), 512, 0, align};
      break;
    case ScaleLayout::Vec32:  // [rows_pad][ceil(n / 32)]
      scales = {f * rows_pad, 32, 0, align};
      break;
  }
  return {codes, scales};
}

}  // namespace octet::cuda
