// src/cuda/attention/act_layout.h — where a row of an attention activation (q, k, v, o and their
// gradients) lies in the caller's memory, in either AttnLayout (octet/attention.h): the one
// address rule of every CUDA attention kernel that touches the caller's tensors (the operand glue,
// the flash and unfused epilogues, the stale delta, the gradients' unpadding).
#pragma once

#include <cstdint>

#include "octet/fp8.h"  // OCTET_HD

namespace octet::cuda {

/// Element offset of row (bh, t), bh = b·heads + h, of an activation with `heads` heads, T tokens
/// and D columns: ((b·heads + h)·T + t)·D heads-major [B, heads, T, D], ((b·T + t)·heads + h)·D
/// tokens-major [B, T, heads, D]. The row's D elements follow it contiguously in both. With b and h
/// given (a kernel that divides bh by heads once for many rows).
OCTET_HD int64_t act_row_offset_bh(bool tokens_major, int64_t b, int64_t h, int64_t t, int64_t heads,
                                   int64_t T, int64_t D) {
  return tokens_major ? ((b * T + t) * heads + h) * D : ((b * heads + h) * T + t) * D;
}

/// The same from bh (heads-major needs no division).
OCTET_HD int64_t act_row_offset(bool tokens_major, int64_t bh, int64_t t, int64_t heads, int64_t T,
                                int64_t D) {
  return tokens_major ? act_row_offset_bh(true, bh / heads, bh % heads, t, heads, T, D) : (bh * T + t) * D;
}

/// The inverse over rows: the (b·heads + h)·T + t of the row that lies r-th in memory (r =
/// offset / D), the index of that row's entry in a [B, heads, T] statistic (LSE, 1/l_i).
OCTET_HD int64_t act_stat_row(bool tokens_major, int64_t r, int64_t heads, int64_t T) {
  if (!tokens_major) return r;
  const int64_t bt = r / heads;  // b·T + t
  return (bt / T * heads + r % heads) * T + bt % T;
}

}  // namespace octet::cuda
