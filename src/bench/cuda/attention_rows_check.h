// src/bench/cuda/attention_rows_check.h — the correctness half of an attention case
// (octet/attention_cases.h): the error of a GPU attention's O and dQ against the FP64 oracle on
// sampled query rows, and the same error of the CPU reference in the same precision — the two
// numbers of FlashAttention-3's test rule (a low-precision kernel's error at most ~2× a naive
// implementation's in the same precision, plus a floor). Used by `octet bench attention` (every
// row prints it) and tests/cuda/attention/cases_test.cpp (which asserts the rule).
//
// Which rows: the last n query rows of every query head of two (batch, KV head) groups, the first
// and the last. Those rows with all Tk keys form an exact sub-problem (batch 1, the group's rep =
// H/G query heads, 1 KV head, Tq' = n; a causal mask is aligned to the bottom-right, so each row
// sees the keys it sees in the full problem): its O and dQ are the full problem's for those rows,
// at a cost of n·Tk·D per head instead of Tq·Tk·D. (dK and dV sum over every row and are left to
// the GPU tests against the CPU twin.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "octet/attention.h"
#include "octet/tensor.h"

namespace octet::cuda {

/// Relative L2 errors ‖x − x_ref‖ / ‖x_ref‖ over the sampled rows (‖x‖ where the reference is 0,
/// e.g. dQ of rows that see one key: an absolute error then).
struct RowsError {
  double o = 0, dq = 0;
  /// The larger of the two; NaN if either is NaN (a NaN output never reads as a small error).
  double max() const { return o != o || dq != dq ? o + dq : (o > dq ? o : dq); }
  /// Each error within `bound`'s (false for a NaN).
  bool within(const RowsError& bound) const { return o <= bound.o && dq <= bound.dq; }
};

class AttentionRowsCheck {
 public:
  /// Reads the sampled rows of q and d_o and the sampled K, V heads from device tensors in the
  /// layouts of octet/attention.h (F32, BF16, or E4M3 codes times code_scale) on `stream`, and runs
  /// the FP64 oracle on each sub-problem. rows: query rows per head (at most Tq). Throws
  /// octet::Error on another dtype.
  AttentionRowsCheck(const AttentionShape& shape, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& d_o, cudaStream_t stream, int64_t rows = 64, float code_scale = 1.0f);

  /// The errors of device tensors o and dq [B, H, Tq, D] (F32, BF16, or E4M3 × code_scale).
  RowsError error(const Tensor& o, const Tensor& dq, cudaStream_t stream, float code_scale = 1.0f) const;

  /// The errors of the CPU reference with `config` on the same sub-problems and inputs (its FP8
  /// scales, and the placement of its per-block scales and dS tiles, are the sub-problem's own: a
  /// twin of the same rows in the statistical sense, not in bits).
  RowsError twin_error(const AttentionConfig& config) const;

  /// The rule's bound, per output, for a kernel whose CPU twin has error `twin`: 2·twin + floor (the
  /// floor, 1e-3, covers a twin that happens to be nearly exact on a small sample).
  static RowsError bound(const RowsError& twin) { return {2.0 * twin.o + 1e-3, 2.0 * twin.dq + 1e-3}; }

 private:
  struct Group {
    int64_t b, g;
    AttentionInputs in;         // the sub-problem's inputs (FP32 holds BF16/E4M3 values exactly)
    std::vector<double> o, dq;  // its oracle outputs
  };
  std::vector<float> rows_of(const Tensor& t, int64_t b, int64_t g, cudaStream_t stream,
                             float code_scale) const;
  RowsError compare(const std::vector<std::vector<float>>& o,
                    const std::vector<std::vector<float>>& dq) const;

  AttentionShape shape_, sub_;
  int64_t n_ = 0;
  std::vector<Group> groups_;
};

}  // namespace octet::cuda
