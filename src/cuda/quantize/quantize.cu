// src/cuda/quantize/quantize.cu — the quantization kernels of quantize.h: a 128x128-tile cast kernel that
// writes the row-wise and the column-wise FP8 copy of a tile from one shared-memory staging (the
// row recipe's amax pre-pass is the same kernel, amax only), a lighter cast kernel for a tensor-wide
// scale (tensor-current, tensor-delayed, unit: each element encoded once, only the codes staged for
// the transpose; the same bytes as the tile kernel), and dequantization. The tensor amax
// pre-pass is tensor_amax.cu, the tensor-delayed state kernels quantize_delayed.cu. Memory-access
// plan and expected bandwidth: docs/cuda.md §"Memory-bound kernels".
//
// All rounding goes through octet/fp8.h (fp8_encode, scale_from_amax, bf16_round), the functions the
// CPU reference uses, so codes and scales match it bit for bit (the saturating cast through the
// hardware instruction that gives the same codes: see encode()). Amaxes are reduced as the bit
// patterns of |x| with unsigned max: for non-negative floats that order is the numeric order, and
// every NaN pattern compares above +inf, so a NaN anywhere makes the amax NaN (never dropped).
#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "cuda/runtime/check.h"
#include "cuda/runtime/kernel_attrs.h"
#include "cuda/quantize/fp8_device.cuh"
#include "cuda/quantize/quantize.h"

namespace octet::cuda {
namespace {

constexpr int kTile = 128;
constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
// Row stride of the staged tile: 132 floats keeps every row 16-byte aligned (float4 stores and
// loads) and, with lanes on consecutive columns, makes the column reads conflict-free.
constexpr int kLds = kTile + 4;
constexpr size_t kSmemBytes = sizeof(float) * (kTile * kLds + 4 * kTile * 4);

struct TileParams {
  const void* x;
  bool x_bf16;
  bool x_vec;          // 4-element vector loads: cols % 4 == 0 and x aligned for them
  bool x_vec16;        // 16-byte loads: every row starts 16-byte aligned (tensor-scaled cast)
  const int* skip_if;  // pre-pass: return at once if *skip_if > 0
  int64_t rows, cols;
  int64_t rows_pad, cols_pad;  // extent covered by tiles
  Format format;
  int margin;
  bool pow2, saturate;
  bool mx;               // OCP MX scales (mx_scale_e8m0) instead of scale_from_amax
  bool amax_only;        // pre-pass: only reduce amaxes
  bool accumulate_amax;  // cast pass: also reduce the tensor amax
  const float* scale_ptr;
  bool has_row, has_col;
  DevQTensor row, col;
  QuantAccum acc;
};

// The scale s of a block with this amax under the recipe's rule (fp8.h).
__device__ __forceinline__ float block_scale(float amax, const TileParams& p) {
  if (p.mx) return 1.0f / e8m0_decode(mx_scale_e8m0(amax, p.format));  // exact: a power of two
  return scale_from_amax(amax, p.format, p.margin, p.pow2);
}

// The amax of the block of `layout` that holds sub-block q (32 wide) of line i of the tile.
__device__ __forceinline__ unsigned block_bits(ScaleLayout layout, const unsigned* bits, int i, int q,
                                               unsigned tile_max) {
  switch (layout) {
    case ScaleLayout::Vec32:
      return bits[i * 4 + q];
    case ScaleLayout::Blk128:
      return tile_max;
    default:
      return max(max(bits[i * 4], bits[i * 4 + 1]), max(bits[i * 4 + 2], bits[i * 4 + 3]));
  }
}

// The block's scale range (QuantCounters::scale_min_flip / scale_max), reduced in shared memory
// and added to the device counters once per block.
struct ScaleRange {
  unsigned min_flip, max;
};

// Writes 1/s for the block of `q` holding element (r, c), once per block (the caller picks the
// thread: the first line and first 32-wide sub-block of the block inside this tile).
__device__ __forceinline__ void store_scale(const DevQTensor& q, int64_t r, int64_t c, float s,
                                            bool first_tile_row, bool first_tile_col, int i, int sub,
                                            ScaleRange* range) {
  if (r >= q.rows_pad || c >= q.ld) return;
  bool writer = false;
  switch (q.layout) {
    case ScaleLayout::Tensor:
      writer = first_tile_row && first_tile_col && i == 0 && sub == 0;
      break;
    case ScaleLayout::RowVector:
      writer = first_tile_col && sub == 0;
      break;
    case ScaleLayout::Vec128:
      writer = sub == 0;
      break;
    case ScaleLayout::Vec32:
      writer = true;
      break;
    case ScaleLayout::Blk128:
      writer = i == 0 && sub == 0;
      break;
  }
  if (!writer) return;
  const float inv = 1.0f / s;
  const int64_t at = q.scale_index(r, c);
  q.scale_inv[at] = inv;
  // Blk128: the grid's row stride is padded to a multiple of 4 blocks; the writer of a row's last
  // block also clears that padding, so every scale entry is written (operands are allocated
  // without zero-fill).
  if (q.layout == ScaleLayout::Blk128 && c / 128 == ceil_div(q.ld, 128) - 1)
    for (int64_t j = c / 128 + 1; j < q.scale_ld; ++j) q.scale_inv[at - c / 128 + j] = 0.0f;
  // The stats cover the blocks that hold data, as the CPU QTensor's grid: blocks made only of
  // padding rows/columns (scale 1) are not part of it.
  if (range && r < q.rows && c < q.cols) {
    // The stats' scale is 1/scale_inv (> 0 or NaN: bits order like values, NaN largest).
    const unsigned b = __float_as_uint(1.0f / inv);
    atomicMax(&range->min_flip, ~b);
    atomicMax(&range->max, b);
  }
}

// Four consecutive source elements of row gr from column gc (zeros outside the tensor), as FP32.
__device__ __forceinline__ float4 load4(const TileParams& p, int64_t gr, int64_t gc) {
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (gr >= p.rows || gc >= p.cols) return v;
  const int64_t k = gr * p.cols + gc;
  if (p.x_vec) {  // cols % 4 == 0: all four are inside the row
    if (p.x_bf16) {
      const uint2 b = *reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(p.x) + k);
      v.x = __uint_as_float(b.x << 16);
      v.y = __uint_as_float(b.x & 0xFFFF0000u);
      v.z = __uint_as_float(b.y << 16);
      v.w = __uint_as_float(b.y & 0xFFFF0000u);
    } else {
      v = *reinterpret_cast<const float4*>(static_cast<const float*>(p.x) + k);
    }
    return v;
  }
  float e[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int j = 0; j < 4 && gc + j < p.cols; ++j)
    e[j] = p.x_bf16 ? bf16_to_float(static_cast<const uint16_t*>(p.x)[k + j])
                    : static_cast<const float*>(p.x)[k + j];
  return make_float4(e[0], e[1], e[2], e[3]);
}

__device__ __forceinline__ unsigned abs_bits(float v) { return __float_as_uint(v) & 0x7FFFFFFFu; }

// fp8.h's fp8_encode(y, f, saturate); the saturating cast is the hardware's (fp8_device.cuh).
__device__ __forceinline__ uint8_t encode(float y, Format f, bool saturate) {
  return saturate ? fp8_encode_sat(y, f) : fp8_encode(y, f, false);
}

// One FP8 code of v·s, counting an underflow (a non-zero value that became ±0) and a saturation.
template <class Count>
__device__ __forceinline__ uint32_t encode_counted(float v, float s, const TileParams& p, Count& under,
                                                   Count& sat) {
  const float y = v * s;
  const uint8_t code = encode(y, p.format, p.saturate);
  under += (v != 0.0f) & ((code & 0x7F) == 0);
  sat += fp8_overflows(y, p.format);
  return code;
}

// The tensor scale of the TensorAmax cast (quantize_tile_kernel's s_row = s_col).
__device__ __forceinline__ float tensor_scale(const unsigned* amax_bits, Format f, int margin, bool pow2) {
  return scale_from_amax(amax_from_bits(*amax_bits), f, margin, pow2);
}

// One 128x128 tile of the source: staged in shared memory by 16-byte (F32) / 8-byte (BF16) loads
// (a warp reads 128 consecutive elements of a row), the row-wise copy written by 4-byte stores (a
// warp writes 128 consecutive codes), the column-wise copy by 16-byte stores of 16 codes (the
// lanes of a warp read consecutive columns: no bank conflicts).
template <int kSource>
__global__ void __launch_bounds__(kThreads, 2) quantize_tile_kernel(TileParams p) {
  extern __shared__ float smem[];
  float* tile = smem;                                                  // [128][132]
  unsigned* rbits = reinterpret_cast<unsigned*>(tile + kTile * kLds);  // [128][4] row sub-blocks
  unsigned* cbits = rbits + kTile * 4;                                 // [128][4] column sub-blocks
  float* rs = reinterpret_cast<float*>(cbits + kTile * 4);             // [128][4] row-wise scales
  float* cs = rs + kTile * 4;                                          // [128][4] column-wise scales
  __shared__ unsigned tile_max;
  __shared__ unsigned long long cnt[4];
  __shared__ ScaleRange range;

  if (p.skip_if && *p.skip_if > 0) return;  // uniform over the grid
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  if (tid == 0) tile_max = 0, range.min_flip = 0, range.max = 0;
  if (tid < 4) cnt[tid] = 0;

  // Stage the tile; the amax of each 32-wide row sub-block (8 lanes) by shuffles.
  float4 v[kTile / kWarps];
#pragma unroll
  for (int k = 0; k < kTile / kWarps; ++k) v[k] = load4(p, r0 + warp + kWarps * k, c0 + 4 * lane);
  unsigned wmax = 0;
#pragma unroll
  for (int k = 0; k < kTile / kWarps; ++k) {
    const int r = warp + kWarps * k;
    *reinterpret_cast<float4*>(tile + r * kLds + 4 * lane) = v[k];
    unsigned m = max(max(abs_bits(v[k].x), abs_bits(v[k].y)), max(abs_bits(v[k].z), abs_bits(v[k].w)));
    for (int off = 1; off < 8; off *= 2) m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, off));
    if (lane % 8 == 0) rbits[r * 4 + lane / 8] = m;
    wmax = max(wmax, m);
  }
  wmax = __reduce_max_sync(0xFFFFFFFFu, wmax);
  __syncthreads();  // the tile_max/range/cnt initialization is visible, the tile staged
  if (lane == 0) atomicMax(&tile_max, wmax);
  // Column sub-block amaxes (tile-local scales and the row recipe's pre-pass only): thread
  // (q, c) reduces rows 32q..32q+31 of column c; lanes on consecutive columns.
  if (kSource == int(ScaleSource::Tile)) {
    const int c = tid % kTile, q = tid / kTile;
    unsigned m = 0;
    for (int k = 0; k < 32; ++k) m = max(m, abs_bits(tile[(32 * q + k) * kLds + c]));
    cbits[c * 4 + q] = m;
  }
  __syncthreads();

  if (p.amax_only) {
    if (tid == 0) atomicMax(&p.acc.counters->amax_bits, tile_max);
    if (p.acc.row_amax && tid < kTile) {
      const unsigned mr =
          max(max(rbits[tid * 4], rbits[tid * 4 + 1]), max(rbits[tid * 4 + 2], rbits[tid * 4 + 3]));
      const unsigned mc =
          max(max(cbits[tid * 4], cbits[tid * 4 + 1]), max(cbits[tid * 4 + 2], cbits[tid * 4 + 3]));
      if (r0 + tid < p.rows_pad) atomicMax(&p.acc.row_amax[r0 + tid], mr);
      if (c0 + tid < p.cols_pad) atomicMax(&p.acc.col_amax[c0 + tid], mc);
    }
    return;
  }
  if (p.accumulate_amax && tid == 0) atomicMax(&p.acc.counters->amax_bits, tile_max);

  // Scales: thread (i, q) computes the row-wise scale of tile row i, sub-block q, and the
  // column-wise scale of tile column i, sub-block q (its 32 rows q*32..q*32+31).
  {
    const int i = tid / 4, q = tid % 4;
    float s_row, s_col;
    if (kSource == int(ScaleSource::Pointer)) {
      s_row = s_col = *p.scale_ptr;
    } else if (kSource == int(ScaleSource::TensorAmax)) {
      s_row = s_col = tensor_scale(&p.acc.counters->amax_bits, p.format, p.margin, p.pow2);
    } else if (kSource == int(ScaleSource::RowCol)) {
      s_row = r0 + i < p.rows_pad
                  ? scale_from_amax(amax_from_bits(p.acc.row_amax[r0 + i]), p.format, p.margin, p.pow2)
                  : 1.0f;
      s_col = c0 + i < p.cols_pad
                  ? scale_from_amax(amax_from_bits(p.acc.col_amax[c0 + i]), p.format, p.margin, p.pow2)
                  : 1.0f;
    } else {
      const ScaleLayout rl = p.has_row ? p.row.layout : p.col.layout;
      const ScaleLayout cl = p.has_col ? p.col.layout : p.row.layout;
      s_row = block_scale(amax_from_bits(block_bits(rl, rbits, i, q, tile_max)), p);
      s_col = block_scale(amax_from_bits(block_bits(cl, cbits, i, q, tile_max)), p);
    }
    rs[i * 4 + q] = s_row;
    cs[i * 4 + q] = s_col;
    if (p.has_row)
      store_scale(p.row, r0 + i, c0 + 32 * q, s_row, blockIdx.y == 0, blockIdx.x == 0, i, q, &range);
    if (p.has_col)
      store_scale(p.col, c0 + i, r0 + 32 * q, s_col, blockIdx.x == 0, blockIdx.y == 0, i, q,
                  p.has_row ? nullptr : &range);
  }
  __syncthreads();

  unsigned long long under_r = 0, sat_r = 0, under_c = 0, sat_c = 0;
  if (p.has_row) {  // warp: one tile row; lane: its 4 columns 4·lane..4·lane+3 (one 4-byte store)
    const int64_t gc = c0 + 4 * lane;
    for (int k = 0; k < kTile / kWarps; ++k) {
      const int r = warp + kWarps * k;
      const int64_t gr = r0 + r;
      if (gr >= p.row.rows_pad || gc >= p.row.ld) continue;
      const float s = rs[r * 4 + lane / 8];
      const float4 t = *reinterpret_cast<const float4*>(tile + r * kLds + 4 * lane);
      const float e[4] = {t.x, t.y, t.z, t.w};
      uint32_t word = 0;
      for (int j = 0; j < 4; ++j)
        if (gr < p.rows && gc + j < p.cols) word |= encode_counted(e[j], s, p, under_r, sat_r) << (8 * j);
      *reinterpret_cast<uint32_t*>(p.row.codes + gr * p.row.ld + gc) = word;
    }
  }
  if (p.has_col) {  // thread: tile column c, rows 16g..16g+15 (one 16-byte store); lanes on columns
    for (int idx = tid; idx < kTile * (kTile / 16); idx += kThreads) {
      const int c = idx % kTile, g = idx / kTile;
      const int64_t gc = c0 + c, gr = r0 + 16 * g;  // element (gc, gr) of the transpose
      if (gc >= p.col.rows_pad || gr >= p.col.ld) continue;
      const float s = cs[c * 4 + g / 2];
      uint32_t w[4] = {0, 0, 0, 0};
      for (int e = 0; e < 16; ++e)
        if (gc < p.cols && gr + e < p.rows)
          w[e / 4] |= encode_counted(tile[(16 * g + e) * kLds + c], s, p, under_c, sat_c) << (8 * (e % 4));
      *reinterpret_cast<uint4*>(p.col.codes + gc * p.col.ld + gr) = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
  for (int off = 16; off > 0; off /= 2) {
    under_r += __shfl_down_sync(0xFFFFFFFFu, under_r, off);
    sat_r += __shfl_down_sync(0xFFFFFFFFu, sat_r, off);
    under_c += __shfl_down_sync(0xFFFFFFFFu, under_c, off);
    sat_c += __shfl_down_sync(0xFFFFFFFFu, sat_c, off);
  }
  if (lane == 0 && (under_r | sat_r | under_c | sat_c)) {
    atomicAdd(&cnt[0], under_r);
    atomicAdd(&cnt[1], sat_r);
    atomicAdd(&cnt[2], under_c);
    atomicAdd(&cnt[3], sat_c);
  }
  __syncthreads();
  if (tid < 4 && cnt[tid]) atomicAdd(&p.acc.counters->counts[tid], cnt[tid]);
  if (tid == 4 && range.max) {
    atomicMax(&p.acc.counters->scale_min_flip, range.min_flip);
    atomicMax(&p.acc.counters->scale_max, range.max);
  }
}

template <int kSource>
void launch_tile(const TileParams& p, cudaStream_t stream) {
  opt_in_shared_memory(quantize_tile_kernel<kSource>, int(kSmemBytes));
  const dim3 grid(unsigned(ceil_div(p.cols_pad, kTile)), unsigned(ceil_div(p.rows_pad, kTile)));
  quantize_tile_kernel<kSource><<<grid, kThreads, kSmemBytes, stream>>>(p);
  OCTET_CUDA_LAUNCH_CHECK();
}

// ---- The tensor-scaled cast: ScaleSource::Pointer / TensorAmax with Tensor-layout copies ----
// One scale for the whole tensor, so an element's row-wise and column-wise codes are one code: each
// element is encoded once, and nothing needs the tile in FP32 (no sub-block amaxes). A block of
// kTtThreads threads owns a kTtRows x kTtCols tile; thread (rg, t) = (tid / 16, tid % 16) owns rows
// 4rg..4rg+3 and columns 8t..8t+7 of it: four rows of 8 elements loaded (16-byte loads; two per row
// for F32) before any is used, the row-wise codes stored from registers (8 bytes per row: a
// half-warp writes a 128-byte row segment), each 4x4 byte block transposed in registers (prmt) into
// column words (4 rows of one column) and staged in an 8 KiB shared tile [kTtCols][16 words], read
// back as 16-row runs of one column and written by 16-byte stores (4 threads: 64 bytes of a
// column-wise row). The under/saturation counts and the amax are per-thread registers, one warp
// reduction, one shared atomic per warp and one global atomic per block. docs/cuda.md
// §"Memory-bound kernels" has the byte and occupancy budget.
constexpr int kTtRows = 64, kTtCols = 128, kTtThreads = 256;
constexpr int kTtWords = kTtRows / 4;  // column words per tile column
static_assert(kTtThreads == (kTtRows / 4) * (kTtCols / 8), "one thread per 4x8 block of the tile");
static_assert(kTtCols * (kTtRows / 16) == 2 * kTtThreads, "two 16-byte column stores per thread");

// Physical slot of column word w (rows 4w..4w+3) of tile column cc in the shared tile. The XOR with
// bits of cc spreads both access patterns over the 32 banks: the stores (16 threads on columns 8
// apart, two row groups on columns of opposite parity) and the reads (8 adjacent columns x 4 runs).
__device__ __forceinline__ int tt_slot(int cc, int w) {
  return cc * kTtWords + (w ^ (((cc >> 1) ^ (cc >> 3)) & 15));
}

// Eight consecutive source elements of one row, as loaded (BF16 bits or FP32).
template <class T>
struct Row8;
template <>
struct Row8<uint16_t> {
  uint4 u;
  __device__ __forceinline__ float operator[](int j) const {
    const unsigned w = j < 2 ? u.x : j < 4 ? u.y : j < 6 ? u.z : u.w;
    return __uint_as_float(j % 2 ? w & 0xFFFF0000u : w << 16);
  }
};
template <>
struct Row8<float> {
  float4 a, b;
  __device__ __forceinline__ float operator[](int j) const {
    const float4& h = j < 4 ? a : b;
    const int k = j % 4;
    return k == 0 ? h.x : k == 1 ? h.y : k == 2 ? h.z : h.w;
  }
};

// Row gr, columns gc..gc+7 of the source (zeros outside it). x_vec16: cols is a multiple of the
// 16-byte vector (8 BF16 / 4 F32), so a vector starting inside the row lies inside it.
__device__ __forceinline__ void load_row8(const TileParams& p, int64_t gr, int64_t gc, Row8<uint16_t>& e) {
  e.u = make_uint4(0, 0, 0, 0);
  if (gr >= p.rows || gc >= p.cols) return;
  const uint16_t* x = static_cast<const uint16_t*>(p.x) + gr * p.cols + gc;
  if (p.x_vec16) {
    e.u = *reinterpret_cast<const uint4*>(x);
    return;
  }
  unsigned w[4] = {0, 0, 0, 0};
  for (int j = 0; j < 8 && gc + j < p.cols; ++j) w[j / 2] |= unsigned(x[j]) << (16 * (j % 2));
  e.u = make_uint4(w[0], w[1], w[2], w[3]);
}
__device__ __forceinline__ void load_row8(const TileParams& p, int64_t gr, int64_t gc, Row8<float>& e) {
  e.a = e.b = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (gr >= p.rows || gc >= p.cols) return;
  const float* x = static_cast<const float*>(p.x) + gr * p.cols + gc;
  if (p.x_vec16) {
    e.a = *reinterpret_cast<const float4*>(x);
    if (gc + 4 < p.cols) e.b = *reinterpret_cast<const float4*>(x + 4);
    return;
  }
  float f[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  for (int j = 0; j < 8 && gc + j < p.cols; ++j) f[j] = x[j];
  e.a = make_float4(f[0], f[1], f[2], f[3]);
  e.b = make_float4(f[4], f[5], f[6], f[7]);
}

// Rows 0..3 of a 4x4 byte block (byte i of r[k] = column i of row k) -> columns 0..3 (byte k of
// c[i] = row k of column i).
__device__ __forceinline__ void transpose4x4(const uint32_t r[4], uint32_t c[4]) {
  const uint32_t lo01 = __byte_perm(r[0], r[1], 0x5140), hi01 = __byte_perm(r[0], r[1], 0x7362);
  const uint32_t lo23 = __byte_perm(r[2], r[3], 0x5140), hi23 = __byte_perm(r[2], r[3], 0x7362);
  c[0] = __byte_perm(lo01, lo23, 0x5410);
  c[1] = __byte_perm(lo01, lo23, 0x7632);
  c[2] = __byte_perm(hi01, hi23, 0x5410);
  c[3] = __byte_perm(hi01, hi23, 0x7632);
}

// Four in-range values v·s as one word of saturating codes (byte i: v[i]), with encode_counted's
// underflow and saturation counts: fp8_encode_sat's codes, two per conversion instruction, its NaN
// rule (the input's sign with 0x7F) applied only when a NaN is present (fp8_device.cuh fp8x2).
template <bool kE5M2>
__device__ __forceinline__ uint32_t encode4_sat(const float (&v)[4], float s, unsigned& under,
                                                unsigned& sat) {
  constexpr Format kF = kE5M2 ? Format::E5M2 : Format::E4M3;
  float y[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) y[i] = v[i] * s;
  uint32_t word = fp8x2(y[0], y[1], kE5M2) | fp8x2(y[2], y[3], kE5M2) << 16;
  if ((y[0] != y[0]) | (y[1] != y[1]) | (y[2] != y[2]) | (y[3] != y[3])) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
      if (y[i] != y[i]) word = (word & ~(0xFFu << (8 * i))) | uint32_t(fp8_encode_sat(y[i], kF)) << (8 * i);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    under += (v[i] != 0.0f) & (((word >> (8 * i)) & 0x7Fu) == 0);
    sat += fp8_overflows(y[i], kF);
  }
  return word;
}

// kFmt: 0 = E4M3 and 1 = E5M2 with saturation (the training recipes: encode4_sat for every word
// inside the tensor), 2 = p.format / p.saturate read at run time (encode_counted per element).
template <class T, int kSource, int kFmt>
__global__ void __launch_bounds__(kTtThreads, sizeof(T) == 2 ? 6 : 4) quantize_tensor_kernel(TileParams p) {
  __shared__ uint32_t colw[kTtCols * kTtWords];
  __shared__ unsigned blk_under, blk_sat, blk_amax;
  __shared__ float blk_scale;
  const int tid = threadIdx.x, lane = tid % 32, t = tid % 16, rg = tid / 16;
  const int64_t tiles_x = ceil_div(p.cols_pad, kTtCols);
  const int64_t r0 = int64_t(blockIdx.x / tiles_x) * kTtRows, c0 = int64_t(blockIdx.x % tiles_x) * kTtCols;
  const int64_t gr0 = r0 + 4 * rg, gc = c0 + 8 * t;
  if (tid == 0) {  // the tensor scale, once per block (its registers are not live beside the loads)
    blk_under = 0, blk_sat = 0, blk_amax = 0;
    blk_scale = kSource == int(ScaleSource::Pointer)
                    ? *p.scale_ptr
                    : tensor_scale(&p.acc.counters->amax_bits, p.format, p.margin, p.pow2);
  }
  Row8<T> e[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) load_row8(p, gr0 + k, gc, e[k]);
  __syncthreads();  // blk_scale and the zeroed block counters are visible
  const float s = blk_scale;

  // Encode (padding elements: code 0, not counted), store the row-wise copy.
  unsigned under = 0, sat = 0, amax = 0;
  uint32_t w[2][4];  // w[h][k]: row k, columns 8t+4h..8t+4h+3
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const bool row_in = gr0 + k < p.rows;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t word = 0;
      float v[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        v[i] = e[k][4 * h + i];
        amax = max(amax, abs_bits(v[i]));
      }
      if (kFmt < 2 && row_in && gc + 4 * h + 4 <= p.cols) {
        word = encode4_sat<kFmt == 1>(v, s, under, sat);
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (row_in && gc + 4 * h + i < p.cols) word |= encode_counted(v[i], s, p, under, sat) << (8 * i);
      }
      w[h][k] = word;
    }
    if (p.has_row && gr0 + k < p.row.rows_pad && gc < p.row.ld)
      *reinterpret_cast<uint2*>(p.row.codes + (gr0 + k) * p.row.ld + gc) = make_uint2(w[0][k], w[1][k]);
  }
  // Column words into the shared tile; odd row groups visit the columns in pair-swapped order so
  // that the two row groups of a warp store to opposite column parities (conflict-free).
  if (p.has_col) {
    uint32_t cw[8];
    transpose4x4(w[0], cw);
    transpose4x4(w[1], cw + 4);
    const bool odd = rg % 2;
#pragma unroll
    for (int i = 0; i < 8; ++i) colw[tt_slot(8 * t + (i ^ odd), rg)] = odd ? cw[i ^ 1] : cw[i];
  }
  under = __reduce_add_sync(0xFFFFFFFFu, under);
  sat = __reduce_add_sync(0xFFFFFFFFu, sat);
  amax = __reduce_max_sync(0xFFFFFFFFu, amax);
  __syncthreads();  // the shared tile is complete
  if (lane == 0) {
    if (under) atomicAdd(&blk_under, under);
    if (sat) atomicAdd(&blk_sat, sat);
    if (p.accumulate_amax) atomicMax(&blk_amax, amax);
  }
  if (p.has_col) {  // thread: tile column cc, rows 16g..16g+15 (words 4g..4g+3)
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int idx = tid + kTtThreads * k, g = idx % 4, cc = idx / 4;
      const int64_t gcol = c0 + cc, grow = r0 + 16 * g;  // element (gcol, grow) of the transpose
      if (gcol >= p.col.rows_pad || grow >= p.col.ld) continue;
      const uint4 q = make_uint4(colw[tt_slot(cc, 4 * g)], colw[tt_slot(cc, 4 * g + 1)],
                                 colw[tt_slot(cc, 4 * g + 2)], colw[tt_slot(cc, 4 * g + 3)]);
      *reinterpret_cast<uint4*>(p.col.codes + gcol * p.col.ld + grow) = q;
    }
  }
  __syncthreads();
  QuantCounters* cnt = p.acc.counters;
  if (tid == 0 && blk_under) {
    if (p.has_row) atomicAdd(&cnt->counts[0], (unsigned long long)blk_under);
    if (p.has_col) atomicAdd(&cnt->counts[2], (unsigned long long)blk_under);
  }
  if (tid == 1 && blk_sat) {
    if (p.has_row) atomicAdd(&cnt->counts[1], (unsigned long long)blk_sat);
    if (p.has_col) atomicAdd(&cnt->counts[3], (unsigned long long)blk_sat);
  }
  if (tid == 2 && p.accumulate_amax) atomicMax(&cnt->amax_bits, blk_amax);
  if (tid == 3 && blockIdx.x == 0) {  // scale_inv and the scale range, as store_scale writes them
    const float inv = 1.0f / s;
    if (p.has_row) p.row.scale_inv[0] = inv;
    if (p.has_col) p.col.scale_inv[0] = inv;
    const unsigned b = __float_as_uint(1.0f / inv);
    if (b) {
      atomicMax(&cnt->scale_min_flip, ~b);
      atomicMax(&cnt->scale_max, b);
    }
  }
}

template <int kSource>
void launch_tensor(const TileParams& p, cudaStream_t stream) {
  const int64_t tiles = ceil_div(p.cols_pad, kTtCols) * ceil_div(p.rows_pad, kTtRows);
  OCTET_CHECK(tiles <= INT32_MAX, "quantize: tensor too large for one launch");
  // The element rule's compile-time forms: saturating E4M3 / E5M2, else the run-time one.
  const int fmt = !p.saturate ? 2 : p.format == Format::E5M2 ? 1 : 0;
  auto go = [&](auto t, auto f) {
    using T = decltype(t);
    constexpr int kFmt = decltype(f)::value;
    quantize_tensor_kernel<T, kSource, kFmt><<<unsigned(tiles), kTtThreads, 0, stream>>>(p);
  };
  auto formats = [&](auto t) {
    if (fmt == 0)
      go(t, std::integral_constant<int, 0>{});
    else if (fmt == 1)
      go(t, std::integral_constant<int, 1>{});
    else
      go(t, std::integral_constant<int, 2>{});
  };
  if (p.x_bf16)
    formats(uint16_t{});
  else
    formats(float{});
  OCTET_CUDA_LAUNCH_CHECK();
}

__global__ void dequantize_kernel(DevQTensor q, float* out) {
  const int64_t n = q.rows * q.cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / q.cols, c = i % q.cols;
    out[i] = fp8_decode(q.codes[r * q.ld + c], q.format) * q.scale_inv[q.scale_index(r, c)];
  }
}

int grid_for(int64_t n, int threads) {
  const int64_t b = ceil_div(n, threads);
  return int(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

// codes[i] = encode(x[i]·s): the tile cast's element rule with the whole tensor's scale.
__global__ void encode_piece_kernel(const float* x, int64_t n, const unsigned* amax_bits, Format f,
                                    int margin, bool pow2, bool saturate, uint8_t* codes) {
  const float s = tensor_scale(amax_bits, f, margin, pow2);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    codes[i] = encode(x[i] * s, f, saturate);
}

// One 32x32 tile of codes [rows, cols] per block (32x8 threads): the row-wise copy [rows_pad, ld]
// and the column-wise copy [cols_pad, ld_t] through shared memory, so that both the loads and the
// transposed stores are consecutive in a warp; the padding of both copies is written 0. Block (0,0)
// also writes scale_inv.
constexpr int kT = 32;
__global__ void install_codes_kernel(const uint8_t* codes, int64_t rows, int64_t cols,
                                     const unsigned* amax_bits, int margin, bool pow2, bool has_row,
                                     DevQTensor row, bool has_col, DevQTensor col) {
  __shared__ uint8_t tile[kT][kT + 1];
  const int64_t r0 = int64_t(blockIdx.y) * kT, c0 = int64_t(blockIdx.x) * kT;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int k = ty; k < kT; k += blockDim.y) {
    const int64_t r = r0 + k, c = c0 + tx;  // (r, c) inside the padded extent of the row-wise copy
    const uint8_t q = r < rows && c < cols ? codes[r * cols + c] : uint8_t(0);
    tile[k][tx] = q;
    if (has_row && r < row.rows_pad && c < row.ld) row.codes[r * row.ld + c] = q;
  }
  __syncthreads();
  if (has_col)
    for (int k = ty; k < kT; k += blockDim.y) {
      const int64_t cr = c0 + k, cc = r0 + tx;  // element (cr, cc) of the transpose = (cc, cr) of codes
      if (cr < col.rows_pad && cc < col.ld) col.codes[cr * col.ld + cc] = tile[tx][k];
    }
  if (blockIdx.x == 0 && blockIdx.y == 0 && tx == 0 && ty == 0) {
    const Format f = has_row ? row.format : col.format;
    const float inv = 1.0f / tensor_scale(amax_bits, f, margin, pow2);  // store_scale's 1/s
    if (has_row) row.scale_inv[0] = inv;
    if (has_col) col.scale_inv[0] = inv;
  }
}

}  // namespace

void quantize_launch(const QuantizeArgs& a, cudaStream_t stream) {
  OCTET_CHECK(a.rows >= 1 && a.cols >= 1, "quantize: empty tensor");
  OCTET_CHECK(a.rowwise || a.colwise, "quantize: no output copy requested");
  OCTET_CHECK(!(a.rowwise && a.colwise) || a.rowwise->format == a.colwise->format,
              "quantize: row-wise and column-wise copies must share the format");
  TileParams p{};
  p.x = a.x;
  p.x_bf16 = a.x_bf16;
  p.x_vec = a.cols % 4 == 0 && reinterpret_cast<uintptr_t>(a.x) % (a.x_bf16 ? 8 : 16) == 0;
  p.x_vec16 = a.cols % (a.x_bf16 ? 8 : 4) == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  p.skip_if = nullptr;
  p.rows = a.rows;
  p.cols = a.cols;
  p.rows_pad = round_up(a.rows, 16);
  p.cols_pad = round_up(a.cols, 16);
  p.format = a.rowwise ? a.rowwise->format : a.colwise->format;
  p.margin = a.margin;
  p.pow2 = a.pow2;
  p.saturate = a.saturate || a.mx;
  p.mx = a.mx;
  p.scale_ptr = a.scale_ptr;
  p.has_row = a.rowwise != nullptr;
  p.has_col = a.colwise != nullptr;
  if (p.has_row) {
    p.row = *a.rowwise;
    OCTET_CHECK(p.row.rows == a.rows && p.row.cols == a.cols, "quantize: row-wise copy shape");
  }
  if (p.has_col) {
    p.col = *a.colwise;
    OCTET_CHECK(p.col.rows == a.cols && p.col.cols == a.rows, "quantize: column-wise copy shape");
  }
  p.acc = a.accum;
  OCTET_CHECK(a.accum.counters, "quantize: no counters");
  OCTET_CUDA_CHECK(cudaMemsetAsync(a.accum.counters, 0, sizeof(QuantCounters), stream));
  const bool given = a.source == ScaleSource::TensorAmax && a.amax_given;
  const bool prepass =
      (a.source == ScaleSource::TensorAmax && !given) || a.source == ScaleSource::RowCol || a.amax_prepass;
  if (given)
    OCTET_CUDA_CHECK(cudaMemcpyAsync(&a.accum.counters->amax_bits, a.amax_given, sizeof(unsigned),
                                     cudaMemcpyDeviceToDevice, stream));
  if (a.source == ScaleSource::RowCol) {
    OCTET_CHECK(a.accum.row_amax && a.accum.col_amax, "quantize: row recipe needs amax scratch");
    OCTET_CUDA_CHECK(cudaMemsetAsync(a.accum.row_amax, 0, p.rows_pad * sizeof(unsigned), stream));
    OCTET_CUDA_CHECK(cudaMemsetAsync(a.accum.col_amax, 0, p.cols_pad * sizeof(unsigned), stream));
  } else {
    p.acc.row_amax = p.acc.col_amax = nullptr;
  }
  if (prepass) {
    if (a.source == ScaleSource::RowCol) {  // row and column amaxes: the tile kernel, amax only
      TileParams pre = p;
      pre.amax_only = true;
      launch_tile<int(ScaleSource::Tile)>(pre, stream);
    } else {  // one tensor amax: a streaming reduction
      tensor_amax_launch(a.x, a.x_bf16, a.rows * a.cols, a.skip_prepass_if, &a.accum.counters->amax_bits,
                         stream);
    }
    if (a.after_prepass) a.after_prepass(a.after_prepass_ctx, stream);
  }
  p.amax_only = false;
  p.accumulate_amax = (!prepass && !given) || a.skip_prepass_if != nullptr;  // given: read only
  // One scale for the whole tensor: the tensor-scaled kernel (no FP32 tile staging).
  const bool tensor_layouts = !a.tile_kernel && (!p.has_row || p.row.layout == ScaleLayout::Tensor) &&
                              (!p.has_col || p.col.layout == ScaleLayout::Tensor);
  switch (a.source) {
    case ScaleSource::Pointer:
      OCTET_CHECK(a.scale_ptr, "quantize: pointer scale source without a pointer");
      if (tensor_layouts)
        launch_tensor<int(ScaleSource::Pointer)>(p, stream);
      else
        launch_tile<int(ScaleSource::Pointer)>(p, stream);
      break;
    case ScaleSource::TensorAmax:
      if (tensor_layouts)
        launch_tensor<int(ScaleSource::TensorAmax)>(p, stream);
      else
        launch_tile<int(ScaleSource::TensorAmax)>(p, stream);
      break;
    case ScaleSource::RowCol:
      launch_tile<int(ScaleSource::RowCol)>(p, stream);
      break;
    case ScaleSource::Tile:
      launch_tile<int(ScaleSource::Tile)>(p, stream);
      break;
  }
}

void encode_piece_launch(const float* x, int64_t n, const unsigned* amax_bits, Format format, int margin,
                         bool pow2, bool saturate, uint8_t* codes, cudaStream_t stream) {
  OCTET_CHECK(n >= 1, "encode_piece: empty piece");
  encode_piece_kernel<<<grid_for(n, 256), 256, 0, stream>>>(x, n, amax_bits, format, margin, pow2, saturate,
                                                            codes);
  OCTET_CUDA_LAUNCH_CHECK();
}

void install_codes_launch(const uint8_t* codes, int64_t rows, int64_t cols, const unsigned* amax_bits,
                          int margin, bool pow2, DevQTensor* rowwise, DevQTensor* colwise,
                          cudaStream_t stream) {
  OCTET_CHECK(rows >= 1 && cols >= 1, "install_codes: empty tensor");
  OCTET_CHECK(rowwise || colwise, "install_codes: no output copy requested");
  const DevQTensor row = rowwise ? *rowwise : DevQTensor{}, col = colwise ? *colwise : DevQTensor{};
  OCTET_CHECK(!rowwise || (row.rows == rows && row.cols == cols && row.layout == ScaleLayout::Tensor),
              "install_codes: row-wise copy shape/layout");
  OCTET_CHECK(!colwise || (col.rows == cols && col.cols == rows && col.layout == ScaleLayout::Tensor),
              "install_codes: column-wise copy shape/layout");
  // The grid covers the padded extents of both copies (rows_pad x ld of one is ld x rows_pad of the other).
  const dim3 grid(unsigned(ceil_div(round_up(cols, 16), kT)), unsigned(ceil_div(round_up(rows, 16), kT)));
  install_codes_kernel<<<grid, dim3(kT, 8), 0, stream>>>(codes, rows, cols, amax_bits, margin, pow2,
                                                         rowwise != nullptr, row, colwise != nullptr, col);
  OCTET_CUDA_LAUNCH_CHECK();
}

void dequantize_launch(const DevQTensor& q, float* out, cudaStream_t stream) {
  dequantize_kernel<<<grid_for(q.rows * q.cols, 256), 256, 0, stream>>>(q, out);
  OCTET_CUDA_LAUNCH_CHECK();
}

}  // namespace octet::cuda
