// octet/saved_size.h — a saved state's size as a sum of terms in the sizes it depends on (a linear's
// row count M; an attention's batch, heads, head_dim and sequence lengths), so that a caller
// tracing with symbolic sizes (torch.compile's dynamic shapes) can write the size as an expression
// of them instead of asking for it at run time (octet/backend.h Linear::saved_size_terms and
// Attention::saved_size_terms, c_api.h octet_linear_saved_size_terms and
// octet_attention_saved_size_terms).
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

  /// This buffer's bytes for `rows` >= 1 rows; -1 if they do not fit in int64, or if the term is
  /// malformed (a negative byte count, step_rows or align below 1).
  int64_t bytes(int64_t rows) const {
    if (step_bytes < 0 || fixed_bytes < 0 || step_rows < 1 || align < 1) return -1;
    const int64_t steps = rows / step_rows + (rows % step_rows != 0);
    int64_t n = 0;
    if (__builtin_mul_overflow(step_bytes, steps, &n) || __builtin_add_overflow(n, fixed_bytes, &n) ||
        __builtin_add_overflow(n, align - 1, &n))
      return -1;
    return n / align * align;
  }
};

/// Σ terms[t].bytes(rows) for `rows` >= 1; -1 if the sum does not fit in int64 or a term is malformed.
inline int64_t saved_size(const std::vector<SavedSizeTerm>& terms, int64_t rows) {
  int64_t total = 0;
  for (const SavedSizeTerm& t : terms) {
    const int64_t n = t.bytes(rows);
    if (n < 0 || __builtin_add_overflow(total, n, &total)) return -1;
  }
  return total;
}

/// The sizes of an attention call that its saved state depends on (octet/attention.h
/// AttentionShape: batch, n_heads, n_kv_heads, head_dim, seq_q, seq_k).
struct AttnSizes {
  int64_t batch = 0, heads = 0, kv_heads = 0, head_dim = 0, seq_q = 0, seq_k = 0;
};

/// Which sizes an AttnSizeTerm multiplies (bits of AttnSizeTerm::dims).
enum AttnSizeDim : int64_t {
  kAttnBatch = 1,
  kAttnHeads = 2,
  kAttnKvHeads = 4,
  kAttnHeadDim = 8,
  kAttnSeqQ = 16,
  kAttnSeqK = 32,
  kAttnAllDims = 63,
};

/// One buffer of an attention's saved state: round_up(unit_bytes · Π, align) bytes, where Π is the
/// product of the sizes named in `dims`, each sequence length entering as ⌈seq / seq_step⌉ (a
/// buffer padded to 16 keys: unit_bytes counts the 16, seq_step is 16). unit_bytes >= 0, dims
/// within kAttnAllDims, seq_step and align >= 1.
struct AttnSizeTerm {
  int64_t unit_bytes = 0;
  int64_t dims = 0;
  int64_t seq_step = 1;
  int64_t align = 1;

  /// This buffer's bytes at sizes `s` (each >= 1); -1 if they do not fit in int64, or if the term
  /// is malformed (unit_bytes < 0, dims outside kAttnAllDims, seq_step or align below 1).
  int64_t bytes(const AttnSizes& s) const {
    if (unit_bytes < 0 || (dims & ~int64_t(kAttnAllDims)) != 0 || seq_step < 1 || align < 1) return -1;
    const auto steps = [&](int64_t seq) { return seq / seq_step + (seq % seq_step != 0); };
    const int64_t factor[6] = {s.batch, s.heads, s.kv_heads, s.head_dim, steps(s.seq_q), steps(s.seq_k)};
    int64_t n = unit_bytes;
    for (int i = 0; i < 6; ++i)
      if ((dims >> i & 1) && __builtin_mul_overflow(n, factor[i], &n)) return -1;
    if (__builtin_add_overflow(n, align - 1, &n)) return -1;
    return n / align * align;
  }
};

/// Σ terms[t].bytes(s); -1 if the sum does not fit in int64 or a term is malformed.
inline int64_t attention_saved_size(const std::vector<AttnSizeTerm>& terms, const AttnSizes& s) {
  int64_t total = 0;
  for (const AttnSizeTerm& t : terms) {
    const int64_t n = t.bytes(s);
    if (n < 0 || __builtin_add_overflow(total, n, &total)) return -1;
  }
  return total;
}

}  // namespace octet
