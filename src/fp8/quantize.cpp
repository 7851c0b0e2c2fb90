// src/fp8/quantize.cpp — the Quantizer of quant.h: every recipe is a grid of scale blocks (the
// whole tensor, a row, a 1x128 tile, a 128x128 block, a 1x32 MX block); each block gets its amax,
// a scale from its recipe's rule, and its codes from one tight, format-specialized loop.
// Rules follow TE DelayedScaling / Float8CurrentScaling / Float8BlockScaling, DeepSeek-V3 §3.3
// (arXiv 2412.19437) and OCP MX v1.0 §6.3; the scale math itself lives in fp8.h.
#include <algorithm>
#include <cmath>

#include "fp8/lut.h"
#include "octet/error.h"
#include "octet/quant.h"

namespace octet {

BlockShape block_shape(Recipe recipe, Role role, int64_t rows, int64_t cols) {
  switch (recipe) {
    case Recipe::Row:
      return {1, cols};
    case Recipe::Block:
      return role == Role::Weight ? BlockShape{128, 128} : BlockShape{1, 128};
    case Recipe::MX:
      return {1, 32};
    case Recipe::TensorDelayed:
    case Recipe::TensorCurrent:
    case Recipe::Unit:
      break;
  }
  return {rows, cols};
}

namespace {

struct Scale {
  float s, s_inv;  // q = cast(x·s); x ≈ decode(q)·s_inv
};

Scale from_scale(float s) { return {s, 1.0f / s}; }  // NaN stays NaN

// max |x| over a block; NaN if the block holds a NaN (a NaN is never dropped by the max).
float block_amax(const float* x, int64_t ld, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  float amax = 0.0f;
  bool nan = false;
  for (int64_t r = r0; r < r1; ++r) {
    const float* row = x + r * ld;
    for (int64_t c = c0; c < c1; ++c) {
      const float a = std::fabs(row[c]);
      amax = a > amax ? a : amax;
      nan |= a != a;
    }
  }
  return nan ? NAN : amax;
}

struct Counts {
  int64_t underflow = 0, saturated = 0;
};

// Codes of one block: q = cast(x·s). F and SAT are compile-time so the cast inlines branch-light.
template <Format F, bool SAT>
void encode_block(const float* x, int64_t ld, int64_t r0, int64_t r1, int64_t c0, int64_t c1, float s,
                  uint8_t* codes, Counts& n) {
  int64_t under = 0, sat = 0;
  for (int64_t r = r0; r < r1; ++r) {
    const float* row = x + r * ld;
    uint8_t* q = codes + r * ld;
    for (int64_t c = c0; c < c1; ++c) {
      const float v = row[c] * s;
      const uint8_t code = fp8_encode(v, F, SAT);
      q[c] = code;
      sat += fp8_overflows(v, F);
      under += (row[c] != 0.0f) & ((code & 0x7F) == 0);
    }
  }
  n.underflow += under;
  n.saturated += sat;
}

using EncodeFn = void (*)(const float*, int64_t, int64_t, int64_t, int64_t, int64_t, float, uint8_t*,
                          Counts&);
EncodeFn encoder(Format f, bool saturate) {
  if (f == Format::E4M3)
    return saturate ? encode_block<Format::E4M3, true> : encode_block<Format::E4M3, false>;
  return saturate ? encode_block<Format::E5M2, true> : encode_block<Format::E5M2, false>;
}

// Cache-blocked transpose: dst[cols, rows] = src[rows, cols]ᵀ.
void transpose(const float* src, int64_t rows, int64_t cols, float* dst) {
  constexpr int64_t T = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += T)
    for (int64_t c0 = 0; c0 < cols; c0 += T) {
      const int64_t r1 = std::min(rows, r0 + T), c1 = std::min(cols, c0 + T);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) dst[c * rows + r] = src[r * cols + c];
    }
}

}  // namespace

Quantizer::Quantizer(const QuantConfig& config, Role role) : config_(config), role_(role) {
  config.validate();
  if (config.recipe == Recipe::TensorDelayed) history_.reserve(size_t(config.amax_history_len));
}

float Quantizer::scale_for_tensor(float amax) {
  const Format f = format();
  switch (config_.recipe) {
    case Recipe::Unit:
      return config_.unit_scale;
    case Recipe::TensorDelayed: {
      // Record (max; a NaN sticks), then quantize with the current scale.
      if (pending_amax_ == pending_amax_ && (amax != amax || amax > pending_amax_)) pending_amax_ = amax;
      if (!history_.empty() || !std::isfinite(amax)) return delayed_scale_;
      return scale_from_amax(amax, f, config_.margin, config_.pow2_scales);
    }
    default:
      return scale_from_amax(amax, f, config_.margin, config_.pow2_scales);
  }
}

void Quantizer::update() {
  if (config_.recipe != Recipe::TensorDelayed || pending_amax_ == -1.0f) return;
  const float amax = pending_amax_;
  pending_amax_ = -1.0f;
  last_overflow_ = !std::isfinite(amax);
  if (last_overflow_) {  // keep the scale, do not advance the history
    ++overflow_count_;
    return;
  }
  if (int64_t(history_.size()) == config_.amax_history_len) history_.erase(history_.begin());
  history_.push_back(amax);
  const float reduced = config_.amax_algo == AmaxAlgo::MostRecent
                            ? history_.back()
                            : *std::max_element(history_.begin(), history_.end());
  delayed_scale_ = scale_from_amax(reduced, format(), config_.margin, config_.pow2_scales);
}

void Quantizer::run(const float* x, int64_t rows, int64_t cols, QTensor& out) {
  const Format f = format();
  const Recipe recipe = config_.recipe;
  out.rows = rows;
  out.cols = cols;
  out.format = f;
  out.block = block_shape(recipe, role_, rows, cols);
  out.codes.resize(size_t(rows * cols));
  out.scale_inv.resize(size_t(out.grid_rows() * out.grid_cols()));
  out.amax = 0.0f;
  const bool mx = recipe == Recipe::MX;
  const EncodeFn encode = encoder(f, config_.saturate || mx);
  const bool tensor_recipe =
      recipe == Recipe::TensorCurrent || recipe == Recipe::TensorDelayed || recipe == Recipe::Unit;
  Counts n;
  const int64_t br = out.block.rows, bc = out.block.cols, gc = out.grid_cols();
  for (int64_t r0 = 0; r0 < rows; r0 += br) {
    const int64_t r1 = std::min(rows, r0 + br);
    for (int64_t c0 = 0; c0 < cols; c0 += bc) {
      const int64_t c1 = std::min(cols, c0 + bc);
      const float amax = block_amax(x, cols, r0, r1, c0, c1);
      Scale sc;
      if (mx) {
        sc.s_inv = e8m0_decode(mx_scale_e8m0(amax, f));
        sc.s = 1.0f / sc.s_inv;  // exact: a power of two in [2^-127, 2^126]
      } else if (tensor_recipe) {
        sc = from_scale(scale_for_tensor(amax));
      } else {
        sc = from_scale(scale_from_amax(amax, f, config_.margin, config_.pow2_scales));
      }
      out.scale_inv[size_t((r0 / br) * gc + c0 / bc)] = sc.s_inv;
      encode(x, cols, r0, r1, c0, c1, sc.s, out.codes.data(), n);
      if (out.amax == out.amax) out.amax = (amax != amax || amax > out.amax) ? amax : out.amax;
    }
  }
  out.n_underflow = n.underflow;
  out.n_saturated = n.saturated;
}

void Quantizer::quantize(const float* x, int64_t rows, int64_t cols, QTensor& out) {
  OCTET_CHECK(rows >= 1 && cols >= 1,
              "quantize: empty shape " + std::to_string(rows) + "x" + std::to_string(cols));
  OCTET_CHECK(x != nullptr, "quantize: null input");
  run(x, rows, cols, out);
}

void Quantizer::quantize_transposed(const float* x, int64_t rows, int64_t cols, QTensor& out) {
  OCTET_CHECK(rows >= 1 && cols >= 1,
              "quantize_transposed: empty shape " + std::to_string(rows) + "x" + std::to_string(cols));
  OCTET_CHECK(x != nullptr, "quantize_transposed: null input");
  transpose_buf_.resize(size_t(rows * cols));
  transpose(x, rows, cols, transpose_buf_.data());
  run(transpose_buf_.data(), cols, rows, out);
}

void dequantize(const QTensor& q, float* out) {
  const float* lut = detail::fp8_decode_lut(q.format);
  const int64_t bc = q.block.cols, gc = q.grid_cols();
  for (int64_t r = 0; r < q.rows; ++r) {
    const float* sinv = q.scale_inv.data() + (r / q.block.rows) * gc;
    const uint8_t* codes = q.codes.data() + r * q.cols;
    float* o = out + r * q.cols;
    for (int64_t c0 = 0, b = 0; c0 < q.cols; c0 += bc, ++b) {
      const int64_t c1 = std::min(q.cols, c0 + bc);
      const float s = sinv[b];
      for (int64_t c = c0; c < c1; ++c) o[c] = lut[codes[c]] * s;
    }
  }
}

}  // namespace octet
