// src/cuda/quantize.cu — the quantization kernels of quantize.h: a 128x128-tile cast kernel that
// writes the row-wise and the column-wise FP8 copy of a tile from one shared-memory staging, an amax
// pre-pass (same kernel, amax-only), dequantization and the tensor-delayed record/update kernels.
//
// All rounding goes through octet/fp8.h (fp8_encode, scale_from_amax, bf16_round), the functions the
// CPU reference uses, so codes and scales match it bit for bit. Amaxes are reduced as the bit
// patterns of |x| with unsigned max: for non-negative floats that order is the numeric order, and
// every NaN pattern compares above +inf, so a NaN anywhere makes the amax NaN (never dropped).
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>

#include "cuda/check.h"
#include "cuda/quantize.h"

namespace octet::cuda {
namespace {

constexpr int kTile = 128;
constexpr int kThreads = 512;
constexpr int kLds = kTile + 1;  // padded row stride of the staged tile (no bank conflicts)
constexpr size_t kSmemBytes = sizeof(float) * (kTile * kLds + 4 * kTile * 4);

__device__ __forceinline__ float amax_from_bits(unsigned b) {
  return b > 0x7F800000u ? NAN : __uint_as_float(b);
}

struct TileParams {
  const void* x;
  bool x_bf16;
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
__device__ __forceinline__ unsigned block_bits(ScaleLayout layout, const unsigned* bits, int i,
                                               int q, unsigned tile_max) {
  switch (layout) {
    case ScaleLayout::Vec32: return bits[i * 4 + q];
    case ScaleLayout::Blk128: return tile_max;
    default: return max(max(bits[i * 4], bits[i * 4 + 1]), max(bits[i * 4 + 2], bits[i * 4 + 3]));
  }
}

// Writes 1/s for the block of `q` holding element (r, c), once per block (the caller picks the
// thread: the first line and first 32-wide sub-block of the block inside this tile).
__device__ __forceinline__ void store_scale(const DevQTensor& q, int64_t r, int64_t c, float s,
                                            bool first_tile_row, bool first_tile_col, int i,
                                            int sub, QuantCounters* range) {
  if (r >= q.rows_pad || c >= q.ld) return;
  bool writer = false;
  switch (q.layout) {
    case ScaleLayout::Tensor: writer = first_tile_row && first_tile_col && i == 0 && sub == 0; break;
    case ScaleLayout::RowVector: writer = first_tile_col && sub == 0; break;
    case ScaleLayout::Vec128: writer = sub == 0; break;
    case ScaleLayout::Vec32: writer = true; break;
    case ScaleLayout::Blk128: writer = i == 0 && sub == 0; break;
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
    atomicMax(&range->scale_min_flip, ~b);
    atomicMax(&range->scale_max, b);
  }
}

template <int kSource>
__global__ void __launch_bounds__(kThreads) quantize_tile_kernel(TileParams p) {
  extern __shared__ float smem[];
  float* tile = smem;                                        // [128][129]
  unsigned* rbits = reinterpret_cast<unsigned*>(tile + kTile * kLds);  // [128][4] row sub-blocks
  unsigned* cbits = rbits + kTile * 4;                       // [128][4] column sub-blocks
  float* rs = reinterpret_cast<float*>(cbits + kTile * 4);   // [128][4] row-wise scales
  float* cs = rs + kTile * 4;                                // [128][4] column-wise scales
  __shared__ unsigned tile_max;
  __shared__ unsigned long long cnt[4];

  if (p.skip_if && *p.skip_if > 0) return;  // uniform over the grid
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  if (tid == 0) tile_max = 0;
  if (tid < 4) cnt[tid] = 0;
  for (int idx = tid; idx < kTile * kTile; idx += kThreads) {
    const int r = idx / kTile, c = idx % kTile;
    const int64_t gr = r0 + r, gc = c0 + c;
    float v = 0.0f;
    if (gr < p.rows && gc < p.cols) {
      const int64_t k = gr * p.cols + gc;
      v = p.x_bf16 ? bf16_to_float(static_cast<const uint16_t*>(p.x)[k])
                   : static_cast<const float*>(p.x)[k];
    }
    tile[r * kLds + c] = v;
  }
  __syncthreads();

  // Amaxes of every 32-wide sub-block of each tile row and each tile column.
  unsigned wmax = 0;
  for (int k = 0; k < kTile / (kThreads / 32); ++k) {
    const int i = warp * (kTile / (kThreads / 32)) + k;
    for (int q = 0; q < 4; ++q) {
      const unsigned br = __float_as_uint(tile[i * kLds + lane + 32 * q]) & 0x7FFFFFFFu;
      const unsigned bc = __float_as_uint(tile[(lane + 32 * q) * kLds + i]) & 0x7FFFFFFFu;
      const unsigned mr = __reduce_max_sync(0xFFFFFFFFu, br);
      const unsigned mc = __reduce_max_sync(0xFFFFFFFFu, bc);
      if (lane == 0) {
        rbits[i * 4 + q] = mr;
        cbits[i * 4 + q] = mc;
      }
      wmax = max(wmax, mr);
    }
  }
  if (lane == 0) atomicMax(&tile_max, wmax);
  __syncthreads();

  if (p.amax_only) {
    if (tid == 0) atomicMax(&p.acc.counters->amax_bits, tile_max);
    if (p.acc.row_amax && tid < kTile) {
      const unsigned mr = max(max(rbits[tid * 4], rbits[tid * 4 + 1]),
                              max(rbits[tid * 4 + 2], rbits[tid * 4 + 3]));
      const unsigned mc = max(max(cbits[tid * 4], cbits[tid * 4 + 1]),
                              max(cbits[tid * 4 + 2], cbits[tid * 4 + 3]));
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
      s_row = s_col = scale_from_amax(amax_from_bits(p.acc.counters->amax_bits), p.format, p.margin, p.pow2);
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
      store_scale(p.row, r0 + i, c0 + 32 * q, s_row, blockIdx.y == 0, blockIdx.x == 0, i, q,
                  p.acc.counters);
    if (p.has_col)
      store_scale(p.col, c0 + i, r0 + 32 * q, s_col, blockIdx.x == 0, blockIdx.y == 0, i, q,
                  p.has_row ? nullptr : p.acc.counters);
  }
  __syncthreads();

  unsigned long long under_r = 0, sat_r = 0, under_c = 0, sat_c = 0;
  if (p.has_row) {
    for (int idx = tid; idx < kTile * kTile / 4; idx += kThreads) {
      const int r = idx / (kTile / 4), c = (idx % (kTile / 4)) * 4;
      const int64_t gr = r0 + r, gc = c0 + c;
      if (gr >= p.row.rows_pad || gc >= p.row.ld) continue;
      const float s = rs[r * 4 + c / 32];
      uint32_t word = 0;
      for (int e = 0; e < 4; ++e) {
        if (gr >= p.rows || gc + e >= p.cols) continue;
        const float v = tile[r * kLds + c + e];
        const float y = v * s;
        const uint8_t code = fp8_encode(y, p.format, p.saturate);
        under_r += (v != 0.0f) & ((code & 0x7F) == 0);
        sat_r += fp8_overflows(y, p.format);
        word |= uint32_t(code) << (8 * e);
      }
      *reinterpret_cast<uint32_t*>(p.row.codes + gr * p.row.ld + gc) = word;
    }
  }
  if (p.has_col) {
    for (int idx = tid; idx < kTile * kTile / 4; idx += kThreads) {
      const int c = idx / (kTile / 4), r = (idx % (kTile / 4)) * 4;
      const int64_t gc = c0 + c, gr = r0 + r;  // element (gc, gr) of the transpose
      if (gc >= p.col.rows_pad || gr >= p.col.ld) continue;
      const float s = cs[c * 4 + r / 32];
      uint32_t word = 0;
      for (int e = 0; e < 4; ++e) {
        if (gc >= p.cols || gr + e >= p.rows) continue;
        const float v = tile[(r + e) * kLds + c];
        const float y = v * s;
        const uint8_t code = fp8_encode(y, p.format, p.saturate);
        under_c += (v != 0.0f) & ((code & 0x7F) == 0);
        sat_c += fp8_overflows(y, p.format);
        word |= uint32_t(code) << (8 * e);
      }
      *reinterpret_cast<uint32_t*>(p.col.codes + gc * p.col.ld + gr) = word;
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
}

template <int kSource>
void launch_tile(const TileParams& p, cudaStream_t stream) {
  // The shared-memory opt-in is per device: set it once for each device this process uses.
  static std::atomic<uint64_t> configured{0};  // bit d: device d (ordinals < 64 cached)
  int dev = 0;
  OCTET_CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = dev < 64 ? uint64_t(1) << dev : 0;
  if (!(configured.load() & bit)) {
    OCTET_CUDA_CHECK(cudaFuncSetAttribute(quantize_tile_kernel<kSource>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(kSmemBytes)));
    configured.fetch_or(bit);
  }
  const dim3 grid(unsigned(ceil_div(p.cols_pad, kTile)), unsigned(ceil_div(p.rows_pad, kTile)));
  quantize_tile_kernel<kSource><<<grid, kThreads, kSmemBytes, stream>>>(p);
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

// tensor-delayed (quantize.h): the scale of this quantization, after the amax pre-pass.
// Non-empty history or a non-finite amax: the delayed scale; else this tensor's own amax.
__global__ void delayed_select_kernel(const unsigned* amax_bits, const int* st, float* scale,
                                      Format format, int margin, bool pow2) {
  const float amax = amax_from_bits(*amax_bits);
  const bool finite = amax < INFINITY;
  scale[1] = (finite && st[0] == 0) ? scale_from_amax(amax, format, margin, pow2) : scale[0];
}

__global__ void delayed_record_kernel(const unsigned* amax_bits, unsigned* pending, int* st) {
  *pending = st[4] ? max(*pending, *amax_bits) : *amax_bits;
  st[4] = 1;
}

__global__ void delayed_update_kernel(unsigned* pending, float* history, int hist_len, int* st,
                                      float* scale, Format format, int margin, bool pow2,
                                      bool most_recent) {
  if (!st[4]) return;  // nothing recorded since the last update
  const float amax = amax_from_bits(*pending);
  st[4] = 0;
  *pending = 0;
  if (!(amax < INFINITY)) {  // NaN or inf: keep the scale, the history does not advance
    st[2] = 1;
    st[3] += 1;
    return;
  }
  st[2] = 0;
  history[st[1]] = amax;
  st[1] = (st[1] + 1) % hist_len;
  st[0] = min(st[0] + 1, hist_len);
  float reduced = amax;
  if (!most_recent)
    for (int i = 0; i < st[0]; ++i) reduced = fmaxf(reduced, history[i]);
  scale[0] = scale_from_amax(reduced, format, margin, pow2);
}

__global__ void delayed_set_pending_kernel(unsigned* pending, int* st, float amax) {
  const bool none = amax < 0.0f;  // NaN compares false: recorded
  *pending = none ? 0u : (__float_as_uint(amax) & 0x7FFFFFFFu);
  st[4] = none ? 0 : 1;
}

// Cross-rank amax exchange form (fp8/linear_state.h amax_to_exchange): −1 none, else the bits.
__global__ void delayed_get_exchange_kernel(const unsigned* pending, const int* st, int* out) {
  *out = st[4] ? int(*pending & 0x7FFFFFFFu) : -1;
}

__global__ void delayed_set_exchange_kernel(unsigned* pending, int* st, const int* in) {
  const int v = *in;
  *pending = v < 0 ? 0u : unsigned(v);
  st[4] = v < 0 ? 0 : 1;
}

int grid_for(int64_t n, int threads) {
  const int64_t b = ceil_div(n, threads);
  return int(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
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
  const bool prepass = a.source == ScaleSource::TensorAmax || a.source == ScaleSource::RowCol ||
                       a.amax_prepass;
  if (a.source == ScaleSource::RowCol) {
    OCTET_CHECK(a.accum.row_amax && a.accum.col_amax, "quantize: row recipe needs amax scratch");
    OCTET_CUDA_CHECK(cudaMemsetAsync(a.accum.row_amax, 0, p.rows_pad * sizeof(unsigned), stream));
    OCTET_CUDA_CHECK(cudaMemsetAsync(a.accum.col_amax, 0, p.cols_pad * sizeof(unsigned), stream));
  } else {
    p.acc.row_amax = p.acc.col_amax = nullptr;
  }
  if (prepass) {
    TileParams pre = p;
    pre.amax_only = true;
    pre.skip_if = a.skip_prepass_if;
    launch_tile<int(ScaleSource::Tile)>(pre, stream);
    if (a.after_prepass) a.after_prepass(a.after_prepass_ctx, stream);
  }
  p.amax_only = false;
  p.accumulate_amax = !prepass || a.skip_prepass_if != nullptr;
  switch (a.source) {
    case ScaleSource::Pointer:
      OCTET_CHECK(a.scale_ptr, "quantize: pointer scale source without a pointer");
      launch_tile<int(ScaleSource::Pointer)>(p, stream);
      break;
    case ScaleSource::TensorAmax: launch_tile<int(ScaleSource::TensorAmax)>(p, stream); break;
    case ScaleSource::RowCol: launch_tile<int(ScaleSource::RowCol)>(p, stream); break;
    case ScaleSource::Tile: launch_tile<int(ScaleSource::Tile)>(p, stream); break;
  }
}

void dequantize_launch(const DevQTensor& q, float* out, cudaStream_t stream) {
  dequantize_kernel<<<grid_for(q.rows * q.cols, 256), 256, 0, stream>>>(q, out);
  OCTET_CUDA_LAUNCH_CHECK();
}

void delayed_select_launch(const unsigned* amax_bits, const int* state_i, float* scale,
                           Format format, int margin, bool pow2, cudaStream_t stream) {
  delayed_select_kernel<<<1, 1, 0, stream>>>(amax_bits, state_i, scale, format, margin, pow2);
  OCTET_CUDA_LAUNCH_CHECK();
}

void delayed_record_launch(const unsigned* amax_bits, unsigned* pending, int* state_i,
                           cudaStream_t stream) {
  delayed_record_kernel<<<1, 1, 0, stream>>>(amax_bits, pending, state_i);
  OCTET_CUDA_LAUNCH_CHECK();
}

void delayed_update_launch(unsigned* pending, float* history, int hist_len, int* state_i,
                           float* scale, Format format, int margin, bool pow2, bool most_recent,
                           cudaStream_t stream) {
  delayed_update_kernel<<<1, 1, 0, stream>>>(pending, history, hist_len, state_i, scale, format,
                                             margin, pow2, most_recent);
  OCTET_CUDA_LAUNCH_CHECK();
}

void delayed_set_pending_launch(unsigned* pending, int* state_i, float amax, cudaStream_t stream) {
  delayed_set_pending_kernel<<<1, 1, 0, stream>>>(pending, state_i, amax);
  OCTET_CUDA_LAUNCH_CHECK();
}

void delayed_get_exchange_launch(const unsigned* pending, const int* state_i, int* out,
                                 cudaStream_t stream) {
  delayed_get_exchange_kernel<<<1, 1, 0, stream>>>(pending, state_i, out);
  OCTET_CUDA_LAUNCH_CHECK();
}

void delayed_set_exchange_launch(unsigned* pending, int* state_i, const int* in, cudaStream_t stream) {
  delayed_set_exchange_kernel<<<1, 1, 0, stream>>>(pending, state_i, in);
  OCTET_CUDA_LAUNCH_CHECK();
}

}  // namespace octet::cuda
