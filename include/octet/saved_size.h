// octet/saved_size.h — a saved state's size as a sum of terms in the row count M, so that a caller
// tracing with a symbolic M (torch.compile's dynamic shapes) can write the size as an expression
// of M instead of asking for it at run time (octet/backend.h Linear::saved_size_terms, c_api.h
// octet_linear_saved_size_terms).
#pragma once

#include <cstdint>
#include <vector>

namespace octet {

/// One buffer of a saved state: round_up(step_bytes · ⌈rows / step_rows⌉ + fixed_bytes, align)
/// bytes for a forward of `rows` rows. Every field is >= 0, step_rows and align >= 1.
struct SavedSizeTerm {
  int64_t step_bytes = 0;   ///< bytes per step of step_rows rows
  int64_t step_rows = 1;    ///< rows per step
  int64_t fixed_bytes = 0;  ///< bytes that do not depend on rows
  int64_t align = 1;        ///< the buffer's size is rounded up to a multiple of this

  /// This buffer's bytes for `rows` >= 1 rows; -1 if they do not fit in int64.
  int64_t bytes(int64_t rows) const {
    const int64_t steps = rows / step_rows + (rows % step_rows != 0);
    int64_t n = 0;
    if (__builtin_mul_overflow(step_bytes, steps, &n) || __builtin_add_overflow(n, fixed_bytes, &n) ||
        __builtin_add_overflow(n, align - 1, &n))
      return -1;
    return n / align * align;
  }
};

/// Σ terms[t].bytes(rows) for `rows` >= 1; -1 if the sum does not fit in int64.
inline int64_t saved_size(const std::vector<SavedSizeTerm>& terms, int64_t rows) {
  int64_t total = 0;
  for (const SavedSizeTerm& t : terms) {
    const int64_t n = t.bytes(rows);
    if (n < 0 || __builtin_add_overflow(total, n, &total)) return -1;
  }
  return total;
}

}  // namespace octet
