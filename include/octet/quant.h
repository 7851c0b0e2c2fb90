// octet/quant.h — scaling recipes: how a high-precision tensor becomes FP8 codes plus scales.
//
// One quantizer interface behind six recipes (docs/numerics.md):
//   tensor-delayed  one scale per tensor from an amax history (Transformer Engine DelayedScaling)
//   tensor-current  one scale per tensor from this tensor's amax (TE Float8CurrentScaling, torchao)
//   row             one scale per row (torchao rowwise)
//   block           1x128 tiles for activations and gradients, 128x128 blocks for weights
//                   (DeepSeek-V3, arXiv 2412.19437 §3.3; TE Float8BlockScaling)
//   mx              1x32 blocks with power-of-two E8M0 scales (OCP Microscaling Formats v1.0)
//   unit            a static scale fixed by the model (Unit Scaling; u-mu-P / "μnit Scaling",
//                   arXiv 2502.05967)
// Convention: a tensor is row-major [rows, cols] and the GEMM contracts over cols (K is the
// contiguous dimension), so 1xB tiles run along K. A tensor that a GEMM needs transposed is
// quantized from its high-precision source with quantize_transposed(), never re-quantized from FP8.
// Codes satisfy x ≈ decode(q) * scale_inv, with q = cast(x * scale) and scale_inv = 1/scale.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "octet/fp8.h"

namespace octet {

enum class Recipe { TensorDelayed, TensorCurrent, Row, Block, MX, Unit };
/// `e4m3` everywhere (DeepSeek-V3) or `hybrid`: E4M3 for forward tensors, E5M2 for gradients (TE).
enum class FormatPolicy { E4M3, Hybrid };
/// What a tensor is: decides the block shape (block recipe) and the format (hybrid policy).
enum class Role { Activation, Weight, Gradient };
/// How tensor-delayed scaling reduces its amax history (TE's amax_compute_algo).
enum class AmaxAlgo { Max, MostRecent };

/// Parses/prints the CLI names: "tensor-delayed", "tensor-current", "row", "block", "mx", "unit";
/// "e4m3", "hybrid"; "e4m3", "e5m2". Parsing throws octet::Error naming the unknown value.
Recipe parse_recipe(const std::string& name);
std::string to_string(Recipe r);
FormatPolicy parse_format_policy(const std::string& name);
std::string to_string(FormatPolicy p);
Format parse_format(const std::string& name);
std::string to_string(Format f);

/// Settings of one quantizer.
struct QuantConfig {
  Recipe recipe = Recipe::TensorCurrent;
  FormatPolicy formats = FormatPolicy::E4M3;
  int amax_history_len = 1024;         ///< tensor-delayed: history length H (1 to 2^20)
  AmaxAlgo amax_algo = AmaxAlgo::Max;  ///< tensor-delayed: reduce the history by max or most recent
  int margin = 0;                      ///< s = fp8_max / amax / 2^margin
  bool pow2_scales = false;            ///< round scales down to powers of two (always on for mx)
  float unit_scale = 1.0f;             ///< unit recipe: the static scale s (> 0, finite)
  bool saturate = true;                ///< saturating cast (OFP8 "satfinite") or not
  /// The longest amax history validate() accepts.
  static constexpr int kMaxAmaxHistory = 1 << 20;
  /// The recipe rules every quantizer and config shares: amax_history_len in [1, 2^20], margin in
  /// [-32, 32], unit_scale finite and > 0. Throws octet::Error naming the field as
  /// key_prefix + field (e.g. "precision.margin").
  void validate(const std::string& key_prefix = "") const;
};

/// The element format a policy gives a role: E4M3, or E5M2 for gradients under `hybrid`.
Format format_for(FormatPolicy policy, Role role);

/// Scale granularity, in elements: one scale covers block_rows x block_cols (edge blocks are
/// partial). Tensor recipes give {rows, cols}; row {1, cols}; block {1,128} or {128,128} for
/// weights; mx {1,32}.
struct BlockShape {
  int64_t rows = 1, cols = 1;
};
BlockShape block_shape(Recipe recipe, Role role, int64_t rows, int64_t cols);

/// An FP8 tensor: codes, and one scale_inv per block of the scale grid.
struct QTensor {
  int64_t rows = 0, cols = 0;  ///< logical shape, row-major
  Format format = Format::E4M3;
  BlockShape block;              ///< scale granularity
  std::vector<uint8_t> codes;    ///< rows*cols FP8 codes
  std::vector<float> scale_inv;  ///< grid_rows()*grid_cols(), row-major over blocks
  float amax = 0.0f;             ///< amax of the source tensor (NaN if it held a NaN)
  int64_t n_underflow = 0;       ///< non-zero inputs that became code 0
  int64_t n_saturated = 0;       ///< inputs whose |x*scale| exceeded fp8_max
  int64_t grid_rows() const { return (rows + block.rows - 1) / block.rows; }
  int64_t grid_cols() const { return (cols + block.cols - 1) / block.cols; }
  /// scale_inv of the block holding element (r, c).
  float scale_inv_at(int64_t r, int64_t c) const {
    return scale_inv[(r / block.rows) * grid_cols() + c / block.cols];
  }
};

/// The state of one tensor-delayed quantizer slot that its next quantize() depends on: what a
/// checkpoint must hold for a resumed run to scale bitwise like an uninterrupted one.
struct DelayedState {
  std::vector<float> history;  ///< finite amaxes of the last quantize() calls, most recent last (<= H)
  float scale = 1.0f;          ///< the scale the next quantize() uses (Quantizer::delayed_state)
  int64_t overflow_count = 0;  ///< NaN/inf amaxes seen so far
};

/// Throws octet::Error naming `what` and the problem unless `state` could have come from a
/// tensor-delayed quantizer with history length `history_len`: at most that many amaxes, each
/// finite and >= 0, a finite scale > 0, a non-negative overflow count.
void check_delayed_state(const DelayedState& state, int history_len, const std::string& what);

/// Serializes slots (Linear::quant_state's layout, backend.h): for each slot in order
/// [n, history[0], ..., history[n-1] (most recent last), scale, overflow_count], n + 3 floats
/// (n and the count are exact as floats up to 2^24).
std::vector<float> pack_delayed_states(const std::vector<DelayedState>& slots);
/// The inverse for exactly `count` slots with histories of at most `history_len`. Validates all
/// of `data` before returning; throws octet::Error naming the slot and the mismatch: too few or
/// too many values, n not an integer in [0, history_len], a negative or non-finite amax, a
/// non-positive or non-finite scale, an overflow count that is not a non-negative integer.
std::vector<DelayedState> unpack_delayed_states(const std::vector<float>& data, int count, int history_len);

/// A stateful quantizer for one tensor slot (one operand of one layer): tensor-delayed keeps its
/// amax history here; the other recipes are stateless.
///
/// Scales per recipe (s = scale, q = cast(x·s), scale_inv = 1/s):
///  - tensor-current: s = scale_from_amax(amax of x); row/block: the same per row/tile/block;
///  - tensor-delayed, quantize-then-update (TransformerEngine's DelayedScaling with
///    amax_and_scale_update): quantize() and quantize_transposed() use the current scale
///    s = scale_from_amax(reduce(history)) (max or most recent of the last H amaxes) and only
///    record their amax (the max over the calls since the last update). update() then folds the
///    recorded amax into the history and computes the scale of the next quantizations. While the
///    history is empty (a fresh quantizer, before its first successful update) a quantization uses
///    its own tensor's amax, as tensor-current does. Both orientations of one tensor therefore
///    always share one scale, and so do all micro-batches between two updates;
///  - mx: scale_inv = 2^(floor(log2 amax) − emax_elem) as E8M0 (mx_scale_e8m0 in fp8.h); the cast
///    always saturates (values up to 2·2^emax_elem clamp to fp8_max, as OCP MX v1.0 §6.3 defines);
///  - unit: s = unit_scale, no amax involved.
///
/// Degenerate inputs (each a documented rule, see scale_from_amax in fp8.h):
///  - zero tensor / zero row / zero block: scale 1, codes 0, dequantizes to 0;
///  - tiny amax: scale clamped to 2^126;
///  - NaN/inf amax, tensor-delayed: the quantization uses the current scale (1 while the history
///    is empty); at update() a non-finite recorded amax keeps the scale, does not advance the
///    history, counts an overflow and sets last_overflow(); other recipes: the block's scale_inv
///    is NaN, so the NaN is carried, never silently dropped.
class Quantizer {
 public:
  /// Throws octet::Error for an invalid config (history length < 1, non-positive unit scale).
  Quantizer(const QuantConfig& config, Role role);

  /// Quantizes x[rows, cols] (row-major) into `out` (buffers reused). Throws on rows or cols < 1.
  void quantize(const float* x, int64_t rows, int64_t cols, QTensor& out);
  /// Quantizes the transpose: x is [rows, cols], out is xᵀ [cols, rows] with blocks along rows of
  /// x. tensor-delayed: the same scale as quantize() (both record their amax).
  void quantize_transposed(const float* x, int64_t rows, int64_t cols, QTensor& out);
  /// tensor-delayed: folds the amax recorded since the last update into the history and computes
  /// the next scale (see the class comment); nothing recorded: no change. Other recipes: no-op.
  void update();

  const QuantConfig& config() const { return config_; }
  Role role() const { return role_; }
  Format format() const { return format_for(config_.formats, role_); }
  /// tensor-delayed: the max amax recorded since the last update (NaN if any was NaN), or -1 if
  /// none was recorded. A distributed trainer max-reduces it across ranks (set_pending_amax)
  /// before update(), so that every rank computes the same scale.
  float pending_amax() const { return pending_amax_; }
  /// Replaces the recorded amax (>= 0 or non-finite; -1: none). For the cross-rank reduction.
  void set_pending_amax(float amax) { pending_amax_ = amax; }
  /// tensor-delayed: true if the last update() saw a NaN/inf amax (step marked overflowed).
  bool last_overflow() const { return last_overflow_; }
  int64_t overflow_count() const { return overflow_count_; }
  /// tensor-delayed: the scale the next quantization uses once the history is non-empty (1 before
  /// the first update).
  float delayed_scale() const { return delayed_scale_; }
  const std::vector<float>& amax_history() const { return history_; }
  /// tensor-delayed: the state to checkpoint (history, next scale, overflow count); amaxes
  /// recorded since the last update are not part of it. Throws octet::Error for the stateless
  /// recipes.
  DelayedState delayed_state() const;
  /// tensor-delayed: restores a delayed_state() (a history longer than amax_history_len or an
  /// invalid value throws octet::Error). Afterwards the quantizer acts exactly like the one that
  /// saved it; the recorded amax and the last-overflow flag are cleared. Throws for the stateless
  /// recipes.
  void load_delayed_state(const DelayedState& state);

 private:
  float scale_for_tensor(float amax);  // tensor recipes: the scale to use; records the amax
  void run(const float* x, int64_t rows, int64_t cols, QTensor& out);
  QuantConfig config_;
  Role role_;
  std::vector<float> history_;  // most recent last
  float delayed_scale_ = 1.0f;
  float pending_amax_ = -1.0f;        // recorded since the last update (-1: none)
  std::vector<float> transpose_buf_;  // quantize_transposed's scratch, reused
  bool last_overflow_ = false;
  int64_t overflow_count_ = 0;
};

/// Dequantizes: out[r*cols + c] = decode(codes) * scale_inv of its block. out has rows*cols floats.
void dequantize(const QTensor& q, float* out);

}  // namespace octet
