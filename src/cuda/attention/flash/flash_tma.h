// src/cuda/attention/flash/flash_tma.h — the TMA boxes the Hopper flash kernels load
// (flash_fwd_sm90.cu, flash_bwd_sm90.cu): a tensor map's dimensions, byte strides and box, the
// arguments of cuda/runtime/tensor_map.h make_tensor_map (CUDA Driver API
// cuTensorMapEncodeTiled; PTX ISA §9.7.9.25: a box lands in shared memory in dimension order,
// innermost first), for the three layouts of FP8 codes they read. Plain C++, no CUDA types: the
// CPU tests walk the boxes (tests/attention/flash_tma_test.cpp).
#pragma once

#include <cstdint>

namespace octet::cuda::flash {

/// One tensor map's geometry over 8-bit codes: `rank` dimensions, innermost first; dims in
/// elements, strides[i] the byte stride of dimension i + 1, box the elements one copy moves.
struct TmaTiles {
  int rank = 0;
  uint64_t dims[5] = {};
  uint64_t strides[4] = {};
  uint32_t box[5] = {};
};

/// [batches][rows][d] codes (rows of d bytes): a box is box_rows whole rows of one batch, landing
/// as [box_rows][d]; rows past `rows` read as zero. Coordinates (0, first row, batch).
inline TmaTiles row_tiles(int64_t d, int64_t rows, int64_t batches, int box_rows) {
  TmaTiles t;
  t.rank = 3;
  t.dims[0] = uint64_t(d), t.dims[1] = uint64_t(rows), t.dims[2] = uint64_t(batches);
  t.strides[0] = uint64_t(d), t.strides[1] = uint64_t(d * rows);
  t.box[0] = uint32_t(d), t.box[1] = uint32_t(box_rows), t.box[2] = 1;
  return t;
}

/// The rows of [total_rows][d] codes (total_rows a multiple of 16) with each 16-row group
/// permuted: rows 16G + 4t + 2j + e as the dimensions (e, t, j, G), so box row 8j + 2t + e holds
/// row 16G + 4t + 2j + e — row r of a box is row s_key(r / 8, r % 8) of its 16-row group's block
/// (flash_mma_sm89.cuh), the order in which a wgmma accumulator's columns convert in place into A
/// fragments. A box is box_rows rows (a multiple of 16) from group coordinate first_row / 16;
/// rows past total_rows read as zero (a box that runs past one batch's rows reads the next
/// batch's). Coordinates (0, 0, 0, 0, first row / 16).
inline TmaTiles permuted_row_tiles(int64_t d, int64_t total_rows, int box_rows) {
  TmaTiles t;
  t.rank = 5;
  const uint64_t D = uint64_t(d);
  const uint64_t dims[5] = {D, 2, 4, 2, uint64_t(total_rows / 16)};
  const uint64_t strides[4] = {D, 4 * D, 2 * D, 16 * D};
  const uint32_t box[5] = {uint32_t(d), 2, 4, 2, uint32_t(box_rows / 16)};
  for (int i = 0; i < 5; ++i) t.dims[i] = dims[i], t.box[i] = box[i];
  for (int i = 0; i < 4; ++i) t.strides[i] = strides[i];
  return t;
}

/// [batches][d][cols] codes (a transposed operand: d rows of cols bytes): a box is box_cols
/// columns of all d rows of one batch, landing as [d][box_cols]; columns past `cols` read as zero.
/// Coordinates (first column, 0, batch).
inline TmaTiles column_tiles(int64_t cols, int64_t d, int64_t batches, int box_cols) {
  TmaTiles t;
  t.rank = 3;
  t.dims[0] = uint64_t(cols), t.dims[1] = uint64_t(d), t.dims[2] = uint64_t(batches);
  t.strides[0] = uint64_t(cols), t.strides[1] = uint64_t(d * cols);
  t.box[0] = uint32_t(box_cols), t.box[1] = uint32_t(d), t.box[2] = 1;
  return t;
}

/// The group transposes of Q̂ and (dO/l)~: [rows][rep][T_p] codes, rows = B·G·d (one per KV head
/// and head_dim element), rep query heads per KV head; element (row, r, i) at row·rep·T_p + r·T_p + i.
/// A box is box_queries queries of one head r and the d rows of one KV head, landing as
/// [d][box_queries]; queries past T_p read as 0. Coordinates (first query, r, KV head · d).
inline TmaTiles group_transpose_tiles(int64_t T_p, int64_t rep, int64_t rows, int64_t d, int box_queries) {
  TmaTiles t;
  t.rank = 3;
  t.dims[0] = uint64_t(T_p), t.dims[1] = uint64_t(rep), t.dims[2] = uint64_t(rows);
  t.strides[0] = uint64_t(T_p), t.strides[1] = uint64_t(rep * T_p);
  t.box[0] = uint32_t(box_queries), t.box[1] = 1, t.box[2] = uint32_t(d);
  return t;
}

}  // namespace octet::cuda::flash
