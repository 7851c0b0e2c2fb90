// src/cuda/attention/glue/glue.cu — the attention's operand glue (glue/glue.h): amax, pack, unpad.
//
// The rules are the CPU twin's (src/cpu/attention_quant.cpp, octet/fp8.h): per-tensor current
// scaling s = scale_from_amax(amax, format), codes fp8_encode(v·s, saturate) (here the hardware
// cast of fp8_device.cuh, the same codes), BF16 by bf16_round. Access plan (docs/attention.md
// §"Operand glue"):
//   amax    grid-stride over 8-element chunks (16-byte BF16 / 2x16-byte F32 loads), one atomicMax
//           per block (the row-factor form; without it attention.cpp calls tensor_amax_launch);
//           the flash backward's dO pass takes dO's amax and dO/l's together (pack_d_o_launch);
//   pack    one CTA per 64 t x 64 d tile of one head: each thread loads 8 consecutive d of one t,
//           writes their row-copy elements at once (8- or 16-byte stores) and stages the values
//           in shared memory; then each thread reads 16 (FP8) or 8 (BF16) consecutive t of one d
//           and writes them as one 16-byte store into the transposed copy. The staging order is
//           rotated by half a chunk in half of the lanes so that neither phase has bank conflicts.
//           A launch takes up to three tensors (grid z; the forward's Q, K, V), as does the amax;
//           dO's two copies go in one code-pack launch that reads each tile once (PackSet::paired);
//   unpad   grid-stride over 8-element chunks, 16-byte loads and stores, BF16 rounded once.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "cuda/attention/act_layout.h"
#include "cuda/attention/glue/glue.h"
#include "cuda/attention/glue/pack_tile.cuh"
#include "cuda/attention/row_factor.h"
#include "cuda/runtime/check.h"
#include "cuda/quantize/fp8_device.cuh"
#include "cuda/quantize/quantize.h"
#include "cuda/quantize/qtensor.h"
#include "cuda/ops/reduce_util.cuh"
#include "cuda/runtime/typed.cuh"
#include "octet/error.h"

namespace octet::cuda {
namespace {

constexpr int kThreads = kPackThreads;
constexpr int kTileT = kPackTileT, kTileD = kPackTileD;
constexpr int kLd = kTileD + 1;  // staging row stride (floats): consecutive t rows 1 bank apart

// Blocks for a grid-stride loop over n items: enough to fill every SM (2048 resident threads each).
unsigned grid_for(int64_t n) {
  static const int sms = [] {
    int dev = 0, count = 0;
    OCTET_CUDA_CHECK(cudaGetDevice(&dev));
    OCTET_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev));
    return count;
  }();
  const int64_t need = (n + kThreads - 1) / kThreads, full = int64_t(sms) * (2048 / kThreads);
  return unsigned(need < 1 ? 1 : (need < full ? need : full));
}

// amax of x_i · row_factor[row(i / D)] over `rows` rows of D (D % 8 == 0): 8-element chunks never
// straddle a row. row_factor is [B, heads, T]; x's row r is (b·heads + h)·T + t heads-major and
// (b·T + t)·heads + h tokens-major.
template <class T>
__global__ void __launch_bounds__(kThreads)
    row_scaled_amax_kernel(const T* x, const float* rf, int64_t rows, int64_t D, bool vec, unsigned* bits,
                           bool tokens_major, int64_t heads, int64_t T_) {
  __shared__ unsigned scratch[32];
  const int64_t chunks = rows * D / 8;
  unsigned m = 0;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < chunks;
       c += int64_t(gridDim.x) * blockDim.x) {
    float v[8];
    load8(x + 8 * c, vec, v);
    const float f = rf[act_stat_row(tokens_major, 8 * c / D, heads, T_)];
#pragma unroll
    for (int j = 0; j < 8; ++j) m = max(m, __float_as_uint(v[j] * f) & 0x7FFFFFFFu);
  }
  block_amax_out(m, scratch, bits);
}

// dO's two amaxes in one read (pack_d_o_launch): of x_i and of x_i · f_row, f = row_factor_of(l)
// from row_sum [B, heads, T], written to rf by the thread of each row's first chunk. Rows as in
// row_scaled_amax_kernel.
template <class T>
__global__ void __launch_bounds__(kThreads)
    row_pair_amax_kernel(const T* x, const float* row_sum, float* rf, int64_t rows, int64_t D, bool vec,
                         unsigned* bits, bool tokens_major, int64_t heads, int64_t T_) {
  __shared__ unsigned scratch[32];
  const int64_t chunks = rows * D / 8;
  unsigned m = 0, mf = 0;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < chunks;
       c += int64_t(gridDim.x) * blockDim.x) {
    float v[8];
    load8(x + 8 * c, vec, v);
    const int64_t r = act_stat_row(tokens_major, 8 * c / D, heads, T_);
    const float f = row_factor_of(row_sum[r]);
    if (8 * c % D == 0) rf[r] = f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      m = max(m, __float_as_uint(v[j]) & 0x7FFFFFFFu);
      mf = max(mf, __float_as_uint(v[j] * f) & 0x7FFFFFFFu);
    }
  }
  block_amax_out(m, scratch, bits);
  block_amax_out(mf, scratch, bits + 1);
}

// Up to three tensors' per-(head, block) amaxes in one launch (blockIdx.y: the tensor).
struct BlockAmaxSet {
  int count = 0;
  const void* x[3] = {};
  int64_t bh[3] = {}, T[3] = {}, heads[3] = {};
  unsigned* bits[3] = {};
  int64_t D = 0, block = 0;
  bool tokens_major = false;
};

// amax of each block of `block` tokens (all D) of each head of tensor blockIdx.y (act_layout.h):
// CTA k·nb-major, bits[blockIdx.x] written by thread 0 (8-element chunks never straddle a token:
// D % 8 == 0). CTAs past the tensor's bh·nb blocks do nothing.
template <class T>
__global__ void __launch_bounds__(kThreads) block_amax_kernel(const __grid_constant__ BlockAmaxSet set) {
  __shared__ unsigned scratch[32];
  const int z = blockIdx.y;
  const int64_t T_ = set.T[z], D = set.D, block = set.block, nb = ceil_div(T_, block);
  if (blockIdx.x >= set.bh[z] * nb) return;  // uniform over the block
  const T* x = static_cast<const T*>(set.x[z]);
  const bool vec = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const int64_t bh = blockIdx.x / nb, t0 = (blockIdx.x % nb) * block;
  const int64_t t1 = t0 + block < T_ ? t0 + block : T_;
  const int64_t chunks = (t1 - t0) * D / 8, cpr = D / 8;
  unsigned m = 0;
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
    float v[8];
    load8(x + act_row_offset(set.tokens_major, bh, t0 + c / cpr, set.heads[z], T_, D) + 8 * (c % cpr), vec,
          v);
#pragma unroll
    for (int j = 0; j < 8; ++j) m = max(m, __float_as_uint(v[j]) & 0x7FFFFFFFu);
  }
  m = block_max(m, scratch, 0u);
  if (threadIdx.x == 0) set.bits[z][blockIdx.x] = m;
}

// One packed element: the code or BF16 bits of value v under `kind` (pad elements: 0, also when
// s is NaN, as the CPU twin's zero padding).
__device__ __forceinline__ uint32_t pack_elem(float v, bool valid, PackKind kind, float s, Format f) {
  if (!valid) return 0u;
  switch (kind) {
    case PackKind::Fp8Code:
      return fp8_encode_sat(v * s, f);
    case PackKind::Bf16OfCode:
      return bf16_bits(fp8_decode(fp8_encode_sat(v * s, f), f));
    default:
      return bf16_bits(v);
  }
}

__device__ __forceinline__ int elem_bytes(PackKind k) { return k == PackKind::Fp8Code ? 1 : 2; }

// The 8 row-copy elements of v[0..7] (kBytes 1: 8 bytes; 2: 16 bytes) at element offset `at` (a
// multiple of 8) of `row`.
template <int kBytes>
__device__ __forceinline__ void store_row8(void* row, int64_t at, const float v[8], bool valid, PackKind kind,
                                           float s, Format f) {
  uint32_t w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int j = 0; j < 8; ++j)
    w[j * kBytes / 4] |= pack_elem(v[j], valid, kind, s, f) << (8 * ((j * kBytes) % 4));
  if (kBytes == 1)
    *reinterpret_cast<uint2*>(static_cast<uint8_t*>(row) + at) = make_uint2(w[0], w[1]);
  else
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(row) + at) = make_uint4(w[0], w[1], w[2], w[3]);
}

// One 16-byte chunk of the transposed copy: kE = 16 / kBytes consecutive t (ts ..) of staged
// column dl, from the tile rows c·kE ..; written at element offset `at` (a multiple of kE).
// In the chunks of the upper half (rotated) the reads go in the order kk = (k + kE/2) % kE, so
// that the 32 lanes of a warp hit 32 different banks; the 8-byte halves are swapped back before
// the store.
template <int kBytes>
__device__ __forceinline__ void store_trans_chunk(void* trans, int64_t at, const float* tile, int c, int dl,
                                                  bool rotated, int64_t ts, int64_t T, PackKind kind, float s,
                                                  Format f) {
  constexpr int kE = 16 / kBytes;
  uint32_t w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int k = 0; k < kE; ++k) {
    const int kk = rotated ? (k + kE / 2) % kE : k;  // element kk, at position k
    const uint32_t e = pack_elem(tile[(c * kE + kk) * kLd + dl], ts + kk < T, kind, s, f);
    w[k * kBytes / 4] |= e << (8 * ((k * kBytes) % 4));
  }
  // Position k holds element (k + kE/2) % kE when rotated: word j of the output is word (j+2) % 4.
  const uint4 out = rotated ? make_uint4(w[2], w[3], w[0], w[1]) : make_uint4(w[0], w[1], w[2], w[3]);
  *reinterpret_cast<uint4*>(static_cast<uint8_t*>(trans) + at * kBytes) = out;
}

// Grid: x = B·heads · ceil(D / 64) (head-major), y = ceil(T_p / 64) (the largest tensor's: CTAs
// past tensor blockIdx.z's tiles do nothing), z = the tensor; 256 threads.
template <class T>
__global__ void __launch_bounds__(kThreads) pack_kernel(const __grid_constant__ PackSet set) {
  __shared__ float tile[kTileT * kLd];  // [t][d]: the values v of this tile (0 outside x)
  const PackArgs& a = set.a[blockIdx.z];
  const int64_t ntd = (a.D + kTileD - 1) / kTileD;
  if (blockIdx.x >= a.B * a.heads * ntd || int64_t(blockIdx.y) * kTileT >= a.T_p) return;  // uniform
  const bool vec = reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  const int64_t bh = blockIdx.x / ntd;
  const int64_t d0 = (blockIdx.x % ntd) * kTileD, t0 = int64_t(blockIdx.y) * kTileT;
  const int tid = threadIdx.x;
  // The tile's scale: the tensor's, or its (head, token block)'s (a tile never straddles a block).
  const int64_t si = a.scale_block ? bh * ceil_div(a.T, a.scale_block) + t0 / a.scale_block : 0;
  const float s = a.fp8 ? scale_from_amax(amax_from_bits(a.amax_bits[si]), a.format) : 1.0f;
  const bool writes_scale = d0 == 0 && (a.scale_block ? t0 % a.scale_block == 0 : bh == 0 && t0 == 0);
  if (a.fp8 && writes_scale && tid == 0) a.scale_inv[si] = 1.0f / s;
  const T* x = static_cast<const T*>(a.x);

  // Phase 1: thread (tr, dc) loads d0 + 8dc .. +7 of rows t0 + tr and t0 + tr + 32.
  const int dc = tid % 8, tr = tid / 8;
  const bool rot = dc >= 4;  // staging rotation: stores of lanes dc and dc + 4 in other banks
  const int64_t d = d0 + 8 * dc;
  const int rb = a.row_kind == PackKind::None ? 0 : elem_bytes(a.row_kind);
#pragma unroll
  for (int pass = 0; pass < 2; ++pass) {
    const int tl = tr + 32 * pass;
    const int64_t t = t0 + tl;
    float v[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    const bool in = t < a.T && d < a.D;
    if (in) {
      load8(x + act_row_offset(a.tokens_major, bh, t, a.heads, a.T, a.D) + d, vec, v);
      if (a.row_factor) {
        const float f = a.row_factor[bh * a.T + t];
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] *= f;
      }
    }
    if (rb && t < a.T_p && d < a.D) {
      const int64_t at = (bh * a.T_p + t) * a.D + d;  // a multiple of 8 elements
      if (rb == 1)
        store_row8<1>(a.row, at, v, in, a.row_kind, s, a.format);
      else
        store_row8<2>(a.row, at, v, in, a.row_kind, s, a.format);
    }
    if (a.trans_kind != PackKind::None) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {  // column 8dc + jj, jj = j rotated by 4 in the rotated lanes
        const int jj = rot ? (j + 4) % 8 : j;
        tile[tl * kLd + 8 * dc + jj] = rot ? v[(j + 4) % 8] : v[j];
      }
    }
  }
  if (a.trans_kind == PackKind::None) return;  // uniform over the block
  __syncthreads();

  // Phase 2: chunk q = (dl, c) holds E = 16 / bytes consecutive t (t0 + cE ..) of column d0 + dl:
  // one 16-byte store at ((b·G + g)·D + d)·rep·T_p + l·T_p + t (a multiple of E elements).
  const int tb = elem_bytes(a.trans_kind), E = 16 / tb, cpr = kTileT / E;  // chunks per column
  const int64_t b = bh / a.heads, h = bh % a.heads, g = h / a.rep, l = h % a.rep;
  const int64_t G = a.heads / a.rep, width = a.rep * a.T_p;
  for (int q = tid; q < kTileD * cpr; q += kThreads) {
    const int c = q % cpr, dl = q / cpr;
    const int64_t dd = d0 + dl, ts = t0 + int64_t(c) * E;
    if (dd >= a.D || ts >= a.T_p) continue;  // T_p % 16 == 0: a chunk is all in or all out
    const bool rotated = c >= cpr / 2;
    const int64_t at = ((b * G + g) * a.D + dd) * width + l * a.T_p + ts;
    if (tb == 1)
      store_trans_chunk<1>(a.trans, at, tile, c, dl, rotated, ts, a.T, a.trans_kind, s, a.format);
    else
      store_trans_chunk<2>(a.trans, at, tile, c, dl, rotated, ts, a.T, a.trans_kind, s, a.format);
  }
}

// dst (act_layout.h: bh = B·heads rows of T tokens) = src [bh, T_p, D] · f, over 8-element chunks
// (D % 8 == 0).
template <class TD>
__global__ void __launch_bounds__(kThreads)
    unpad_scale_kernel(const float* src, TD* dst, int64_t bh, int64_t T, int64_t T_p, int64_t D, float alpha,
                       const float* sa, const float* sb, bool vec, bool tokens_major, int64_t heads) {
  const float f = alpha * (sa ? *sa : 1.0f) * (sb ? *sb : 1.0f);
  const int64_t chunks = bh * T * D / 8, cpr = D / 8;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < chunks;
       c += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = c / cpr, d = (c % cpr) * 8, i = row / T * T_p + row % T;
    float v[8];
    load8(src + i * D + d, vec, v);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] *= f;
    TD* const out = dst + act_row_offset(tokens_major, row / T, row % T, heads, T, D) + d;
    if (vec) {
      st8(out, v);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) st(out, j, v[j]);
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void pack_amax_launch(const void* x, DType dtype, int64_t n, unsigned* bits, cudaStream_t s,
                      const float* row_factor, int64_t D, bool tokens_major, int64_t heads, int64_t seq) {
  OCTET_CHECK(n >= 1, "attention amax: empty tensor");
  OCTET_CHECK(dtype == DType::F32 || dtype == DType::BF16,
              "attention amax: the input must be f32 or bf16, got " + to_string(dtype));
  OCTET_CUDA_CHECK(cudaMemsetAsync(bits, 0, sizeof(unsigned), s));
  if (!row_factor) {
    tensor_amax_launch(x, dtype == DType::BF16, n, nullptr, bits, s);
    return;
  }
  OCTET_CHECK(
      D >= 8 && D % 8 == 0 && n % D == 0,
      "attention amax: with a row factor, D must be a multiple of 8 dividing n, got D " + std::to_string(D));
  OCTET_CHECK(!tokens_major || (heads >= 1 && seq >= 1 && (n / D) % (heads * seq) == 0),
              "attention amax: tokens-major rows need heads and T >= 1 dividing the rows");
  const bool vec = aligned16(x);
  dispatch_act(
      [&](auto tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        row_scaled_amax_kernel<T><<<grid_for(n / 8), kThreads, 0, s>>>(
            static_cast<const T*>(x), row_factor, n / D, D, vec, bits, tokens_major, tokens_major ? heads : 1,
            tokens_major ? seq : 1);
      },
      dtype);
  OCTET_CUDA_LAUNCH_CHECK();
}

namespace {

// Checks one block-amax tensor and adds it to the set (amaxes at bits).
void add_block_amax(BlockAmaxSet& set, const void* x, DType dtype, int64_t bh, int64_t T, int64_t heads,
                    unsigned* bits) {
  OCTET_CHECK(dtype == DType::F32 || dtype == DType::BF16,
              "attention block amax: the input must be f32 or bf16, got " + to_string(dtype));
  OCTET_CHECK(bh >= 1 && T >= 1 && set.D >= 8 && set.D % 8 == 0 && set.block >= 1,
              "attention block amax: need heads, T >= 1, D a multiple of 8 and block >= 1");
  OCTET_CHECK(x && bits, "attention block amax: a null pointer");
  OCTET_CHECK(!set.tokens_major || (heads >= 1 && bh % heads == 0),
              "attention block amax: tokens-major needs heads >= 1 dividing bh");
  OCTET_CHECK(bh * ceil_div(T, set.block) <= 0x7FFFFFFF,
              "attention block amax: too many blocks for the grid");
  const int i = set.count++;
  set.x[i] = x;
  set.bh[i] = bh;
  set.T[i] = T;
  set.heads[i] = set.tokens_major ? heads : 1;
  set.bits[i] = bits;
}

void block_amax_set_launch(const BlockAmaxSet& set, DType dtype, cudaStream_t s) {
  int64_t blocks = 1;
  for (int i = 0; i < set.count; ++i) blocks = std::max(blocks, set.bh[i] * ceil_div(set.T[i], set.block));
  dispatch_act(
      [&](auto tag) {
        using T_ = std::remove_pointer_t<decltype(tag)>;
        block_amax_kernel<T_><<<dim3(unsigned(blocks), unsigned(set.count)), kThreads, 0, s>>>(set);
      },
      dtype);
  OCTET_CUDA_LAUNCH_CHECK();
}

void check_pack_args(const PackArgs& a) {
  OCTET_CHECK(a.B >= 1 && a.heads >= 1 && a.T >= 1 && a.D >= 1 && a.rep >= 1 && a.heads % a.rep == 0,
              "attention pack: need B, heads, T, D, rep >= 1 and heads a multiple of rep");
  OCTET_CHECK(a.D % 16 == 0, "attention pack: head_dim must be a multiple of 16, got " + std::to_string(a.D));
  OCTET_CHECK(a.T_p == (a.T + 15) / 16 * 16, "attention pack: T_p must be T rounded up to 16");
  OCTET_CHECK(a.scale_block >= 0 && a.scale_block % kTileT == 0,
              "attention pack: scale_block must be a multiple of 64 (the pack tile), got " +
                  std::to_string(a.scale_block));
  OCTET_CHECK(!(a.scale_block && a.row_factor),
              "attention pack: per-block scales take no row factor (pack_block_amax_launch "
              "measures the unscaled values)");
  OCTET_CHECK(a.x && (!a.fp8 || (a.amax_bits && a.scale_inv)),
              "attention pack: a null input, amax or scale_inv pointer");
  OCTET_CHECK((a.row_kind == PackKind::None || (a.row && aligned16(a.row))) &&
                  (a.trans_kind == PackKind::None || (a.trans && aligned16(a.trans))),
              "attention pack: the row and transposed outputs must be 16-byte aligned");
  OCTET_CHECK(a.x_dtype == DType::F32 || a.x_dtype == DType::BF16,
              "attention pack: the input must be f32 or bf16, got " + to_string(a.x_dtype));
}

// One pack launch over the tensors of `set` (checked; one input dtype).
void pack_set_launch(const PackSet& set, cudaStream_t s) {
  for (int i = 0; i < set.count; ++i) {
    check_pack_args(set.a[i]);
    OCTET_CHECK(set.a[i].x_dtype == set.a[0].x_dtype, "attention pack: one launch takes one input dtype");
  }
  const dim3 grid = pack_grid(set);
  if (chosen_pack_kernel(set.a[0].kernel) != PackKernel::Staged && pack_codes_takes(set)) {
    pack_codes_launch(set, s);
    return;
  }
  dispatch_act(
      [&](auto tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        pack_kernel<T><<<grid, kThreads, 0, s>>>(set);
      },
      set.a[0].x_dtype);
  OCTET_CUDA_LAUNCH_CHECK();
}

// The one-pass block pack of n tensors of one kind (amax entries at bits[i]) when it is chosen
// (PackKernel::Block) and takes them all; false (nothing launched) otherwise.
bool block_pack_launched(const PackArgs* args, int n, unsigned* const* bits, cudaStream_t s) {
  if (quantized_pack_kernel(args, n) != PackKernel::Block) return false;
  PackSet set;
  set.count = n;
  for (int i = 0; i < n; ++i) {
    set.a[i] = args[i];
    set.a[i].amax_bits = bits[i];
    set.amax_out[i] = bits[i];
  }
  for (int i = 0; i < n; ++i) {
    check_pack_args(set.a[i]);
    OCTET_CHECK(set.a[i].x_dtype == set.a[0].x_dtype, "attention pack: one launch takes one input dtype");
  }
  pack_block_launch(set, s);
  return true;
}

// Entries of a tensor's amax: 1, or one per (b, head, block).
int64_t amax_count(const PackArgs& a) {
  return a.scale_block ? a.B * a.heads * ceil_div(a.T, a.scale_block) : 1;
}

}  // namespace

PackKernel chosen_pack_kernel(PackKernel k) {
  if (k != PackKernel::Auto) return k;
  static const PackKernel from_env = [] {
    const char* env = std::getenv("OCTET_ATTN_PACK");
    const std::string v = env ? env : "";
    for (PackKernel k : {PackKernel::Staged, PackKernel::Codes})
      if (v == pack_kernel_name(k)) return k;
    OCTET_CHECK(v.empty() || v == pack_kernel_name(PackKernel::Block),
                "OCTET_ATTN_PACK must be staged, codes or block (or unset), got '" + v + "'");
    // block (the sets it cannot take go to the code pack): from BF16 with per-(head, block)
    // scales +2 to +18 % forward TFLOP/s on an H100, the other rows unchanged
    // (bench/results/2026-12-06-h100-attention-pack-block.jsonl)
    return PackKernel::Block;
  }();
  return from_env;
}

PackKernel quantized_pack_kernel(const PackArgs* args, int n) {
  OCTET_CHECK(
      args && n >= 1 && n <= kMaxPackSet,
      "attention pack: a set of 1 to " + std::to_string(kMaxPackSet) + " tensors, got " + std::to_string(n));
  PackSet set;
  set.count = n;
  for (int i = 0; i < n; ++i) set.a[i] = args[i];
  const PackKernel k = chosen_pack_kernel(args[0].kernel);
  if (k == PackKernel::Block && pack_block_takes(set)) return PackKernel::Block;
  if (k != PackKernel::Staged && pack_codes_takes(set)) return PackKernel::Codes;
  return PackKernel::Staged;
}

const char* pack_kernel_name(PackKernel k) {
  switch (k) {
    case PackKernel::Staged:
      return "staged";
    case PackKernel::Codes:
      return "codes";
    case PackKernel::Block:
      return "block";
    default:
      return "auto";
  }
}

void pack_block_amax_launch(const void* x, DType dtype, int64_t bh, int64_t T, int64_t D, int64_t block,
                            unsigned* bits, cudaStream_t s, bool tokens_major, int64_t heads) {
  BlockAmaxSet set;
  set.D = D;
  set.block = block;
  set.tokens_major = tokens_major;
  add_block_amax(set, x, dtype, bh, T, heads, bits);
  block_amax_set_launch(set, dtype, s);
}

void pack_quantized_launch(PackArgs a, unsigned* amax_bits, cudaStream_t s) {
  if (block_pack_launched(&a, 1, &amax_bits, s)) return;
  if (a.fp8 && a.scale_block)
    pack_block_amax_launch(a.x, a.x_dtype, a.B * a.heads, a.T, a.D, a.scale_block, amax_bits, s,
                           a.tokens_major, a.heads);
  else if (a.fp8)
    pack_amax_launch(a.x, a.x_dtype, a.B * a.heads * a.T * a.D, amax_bits, s, a.row_factor, a.D,
                     a.tokens_major, a.heads, a.T);
  a.amax_bits = amax_bits;
  pack_launch(a, s);
}

void pack_quantized_many_launch(const PackArgs* args, int n, unsigned* amax_bits, cudaStream_t s) {
  OCTET_CHECK(
      args && n >= 1 && n <= kMaxPackSet,
      "attention pack: a set of 1 to " + std::to_string(kMaxPackSet) + " tensors, got " + std::to_string(n));
  PackSet set;
  set.count = n;
  unsigned* bits[kMaxPackSet] = {};  // each tensor's amax entries
  int64_t at = 0;
  bool one_kind = true;  // one input dtype, every tensor FP8 or every one BF16, one scaling
  for (int i = 0; i < n; ++i) {
    set.a[i] = args[i];
    OCTET_CHECK(!args[i].row_factor, "attention pack: a packed set takes no row factor");
    one_kind = one_kind && args[i].x_dtype == args[0].x_dtype && args[i].fp8 == args[0].fp8 &&
               args[i].tokens_major == args[0].tokens_major && args[i].D == args[0].D &&
               args[i].scale_block == args[0].scale_block;
    bits[i] = amax_bits + at;
    set.a[i].amax_bits = bits[i];
    at += args[i].fp8 ? amax_count(args[i]) : 0;
  }
  if (!one_kind) {  // one tensor at a time: the same results
    for (int i = 0; i < n; ++i) pack_quantized_launch(set.a[i], bits[i], s);
    return;
  }
  if (block_pack_launched(set.a, n, bits, s)) return;
  for (int i = 0; i < n; ++i) check_pack_args(set.a[i]);
  const PackArgs& a0 = set.a[0];
  if (a0.fp8 && a0.scale_block) {
    BlockAmaxSet bs;
    bs.D = a0.D;
    bs.block = a0.scale_block;
    bs.tokens_major = a0.tokens_major;
    for (int i = 0; i < n; ++i)
      add_block_amax(bs, set.a[i].x, a0.x_dtype, set.a[i].B * set.a[i].heads, set.a[i].T, set.a[i].heads,
                     bits[i]);
    block_amax_set_launch(bs, a0.x_dtype, s);
  } else if (a0.fp8) {
    OCTET_CUDA_CHECK(cudaMemsetAsync(amax_bits, 0, sizeof(unsigned) * size_t(n), s));
    AmaxSet as;
    as.count = n;
    for (int i = 0; i < n; ++i) {
      as.x[i] = set.a[i].x;
      as.n[i] = set.a[i].B * set.a[i].heads * set.a[i].T * set.a[i].D;
      as.bits[i] = bits[i];
    }
    tensor_amax_many_launch(as, a0.x_dtype == DType::BF16, nullptr, s);
  }
  pack_set_launch(set, s);
}

void pack_d_o_launch(PackArgs rows, PackArgs trans, const float* row_sum, float* row_factor,
                     unsigned* amax_bits, cudaStream_t s) {
  OCTET_CHECK(row_sum && row_factor && amax_bits,
              "attention dO pack: a null row_sum, row_factor or amax pointer");
  OCTET_CHECK(static_cast<const void*>(row_factor) != static_cast<const void*>(row_sum),
              "attention dO pack: row_factor must not be row_sum (the pass reads l while it writes 1/l)");
  OCTET_CHECK(rows.x == trans.x && rows.x_dtype == trans.x_dtype && rows.tokens_major == trans.tokens_major &&
                  rows.B == trans.B && rows.heads == trans.heads && rows.T == trans.T && rows.D == trans.D,
              "attention dO pack: rows and trans must pack the same tensor");
  OCTET_CHECK(rows.fp8 && trans.fp8 && !rows.scale_block && !trans.scale_block,
              "attention dO pack: FP8 copies with one scale per tensor only");
  OCTET_CHECK(!rows.row_factor && trans.row_factor == row_factor,
              "attention dO pack: the row factor belongs to trans (and is the row_factor argument)");
  rows.amax_bits = amax_bits, trans.amax_bits = amax_bits + 1;
  check_pack_args(rows);
  check_pack_args(trans);
  OCTET_CUDA_CHECK(cudaMemsetAsync(amax_bits, 0, 2 * sizeof(unsigned), s));
  const int64_t n = rows.B * rows.heads * rows.T * rows.D;
  const bool vec = aligned16(rows.x);
  dispatch_act(
      [&](auto tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        row_pair_amax_kernel<T><<<grid_for(n / 8), kThreads, 0, s>>>(
            static_cast<const T*>(rows.x), row_sum, row_factor, n / rows.D, rows.D, vec, amax_bits,
            rows.tokens_major, rows.tokens_major ? rows.heads : 1, rows.tokens_major ? rows.T : 1);
      },
      rows.x_dtype);
  OCTET_CUDA_LAUNCH_CHECK();
  PackSet set;
  set.count = 2;
  set.a[0] = rows, set.a[1] = trans;
  // One read of dO for both copies where the code pack takes them; else one launch of two tensors.
  set.paired = rows.trans_kind == PackKind::None && trans.row_kind == PackKind::None &&
               chosen_pack_kernel(rows.kernel) != PackKernel::Staged && pack_codes_takes(set);
  if (set.paired)
    pack_codes_launch(set, s);
  else
    pack_set_launch(set, s);
}

void pack_launch(const PackArgs& a, cudaStream_t s) {
  PackSet set;
  set.count = 1;
  set.a[0] = a;
  pack_set_launch(set, s);
}

void unpad_scale_launch(const float* src, void* dst, DType dst_dtype, int64_t bh, int64_t T, int64_t T_p,
                        int64_t D, float alpha, const float* scale_a, const float* scale_b, cudaStream_t s,
                        bool tokens_major, int64_t heads) {
  OCTET_CHECK(D % 8 == 0 && T <= T_p, "attention unpad: D must be a multiple of 8 and T <= T_p");
  OCTET_CHECK(!tokens_major || (heads >= 1 && bh % heads == 0),
              "attention unpad: tokens-major needs heads >= 1 dividing bh");
  const int64_t n = bh * T * D;
  if (n == 0) return;
  const bool vec = aligned16(src) && aligned16(dst);
  dispatch_act(
      [&](auto tag) {
        using T_ = std::remove_pointer_t<decltype(tag)>;
        unpad_scale_kernel<T_><<<grid_for(n / 8), kThreads, 0, s>>>(src, static_cast<T_*>(dst), bh, T, T_p, D,
                                                                    alpha, scale_a, scale_b, vec,
                                                                    tokens_major, tokens_major ? heads : 1);
      },
      dst_dtype);
  OCTET_CUDA_LAUNCH_CHECK();
}

}  // namespace octet::cuda
