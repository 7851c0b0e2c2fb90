// src/cuda/attention/flash/flash_bwd_tile_sm89.cuh — what the flash FP8 attention backward's kernels
// (flash_bwd_delta_sm89.cu, flash_bwd_sm89.cu) share: the CTA geometry, the key-block loads into
// shared memory, the FP8 MMA in any E4M3/E5M2 operand pair, and one warp's share of a tile's
// S = τ·(Q̂K̂ᵀ)·sq·sk and dP = dÔV̂ᵀ·sdo·sv, the probabilities P = exp(S − m)/l and the masking —
// one definition, so every kernel gets the same bits for the same (i, j) (the matched delta's
// zero row sum needs the pre-pass's P and dP to be the main kernel's). docs/attention.md
// §"Backward"; CPU twin: src/cpu/attention_backward_tile.cpp compute_p_dp.
//
// A CTA is 8 warps on one (block_q = kBM) x (block_k = kBN) tile of one head. S phase: warp w
// owns the 16 query rows 16·(w % kQS).. and the kNK keys kNK·(w / kQS).. of the tile. Its S
// accumulator is the forward's: A = Q̂ rows (registers: from global memory, or by ldmatrix from the
// main kernel's staged query block), B = K̂ rows (ldmatrix) in the key order
// flash_mma_sm89.cuh s_key (so an accumulator row is, after an in-place FP8 conversion, the A
// fragment of the next product over keys), kD/32 MMAs over head_dim in order from a zero
// accumulator, then one rounded product by τ·sq·sk (the forward's S: the saved m is its row max bit
// for bit, l its Σ exp(S − m) to a few FP32 ulp). The kernels compute a tile's S (→ P) for all n-tiles first
// and its dP (→ dS, in the same registers) second, so that only one 16 x kNK FP32 array is live.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/runtime/check.h"
#include "cuda/runtime/kernel_attrs.h"
#include "cuda/attention/flash/flash_kernels.h"
#include "cuda/attention/flash/flash_mma_sm89.cuh"
#include "cuda/attention/flash/flash_persistent.h"
#include "cuda/attention/flash/flash_qkv_scales.cuh"
#include "cuda/quantize/fp8_device.cuh"
#include "octet/error.h"
#include "octet/fp8.h"

namespace octet::cuda::flash::bwd {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;

template <int kD, int kBM, int kBN>
struct Geom {
  static_assert((kD == 64 || kD == 128) && (kBM == 64 || kBM == 128) && (kBN == 64 || kBN == 128),
                "head_dim, block_q, block_k of 64 or 128");
  static constexpr int kQS = kBM / 16;      // S phase: query slabs of 16 rows
  static constexpr int kKP = kWarps / kQS;  // S phase: key parts (1 or 2)
  static constexpr int kNK = kBN / kKP;     // S phase: keys per warp (32, 64 or 128)
  static constexpr int kKS = kBN / 32;      // dK/dV phase: key slabs of 32 keys (two m-tiles)
  static constexpr int kDP = kWarps / kKS;  // dK/dV phase: head_dim parts (2 or 4)
  static constexpr int kDW = kD / kDP;      // dK/dV phase: head_dim columns per warp
  static constexpr int kKV = kBN * kD;      // bytes of one K̂, V̂ or K̂ᵀ tile
  static constexpr int kPT = kBN * kBM;     // bytes of one P̃ᵀ or dŜᵀ tile
  static_assert(kNK % 32 == 0 && kDW % 8 == 0, "warp tiles of whole MMAs");
};

/// Keys row i sees: all Tk, or causal bottom-right j <= i + Tk − Tq (0 for a pad row i >= Tq).
__device__ __forceinline__ int64_t visible_keys(const BackwardParams& p, int64_t i) {
  if (i >= p.Tq) return 0;
  if (!p.causal) return p.Tk;
  const int64_t n = i + p.Tk - p.Tq + 1;
  return n < 0 ? 0 : (n > p.Tk ? p.Tk : n);
}

/// True if every row of query block [i0, i0 + bm) sees every key of key block [j0, j0 + bn): all
/// rows are real (< Tq) and the first one, which sees the fewest keys, sees past the block. Then a
/// tile step needs no per-element visibility test.
__device__ __forceinline__ bool tile_full(const BackwardParams& p, int64_t i0, int64_t bm, int64_t j0,
                                          int64_t bn) {
  return i0 + bm <= p.Tq && visible_keys(p, i0) >= j0 + bn;
}

/// c += a·b on one m16n8k32 tile with A, B in E4M3 or E5M2 (flags warp-uniform), C FP32.
__device__ __forceinline__ void mma_fp8(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                        bool a_e5m2, bool b_e5m2) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define OCTET_MMA_FP8(TA, TB)                                                 \
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32." TA "." TB             \
               ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n" \
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])               \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
  if (a_e5m2) {
    if (b_e5m2)
      OCTET_MMA_FP8("e5m2", "e5m2");
    else
      OCTET_MMA_FP8("e5m2", "e4m3");
  } else {
    if (b_e5m2)
      OCTET_MMA_FP8("e4m3", "e5m2");
    else
      OCTET_MMA_FP8("e4m3", "e4m3");
  }
#undef OCTET_MMA_FP8
#else
  __trap();  // FP8 mma.sync needs sm_89+; the CUDA preset builds sm_90a
#endif
}

__device__ __forceinline__ uint32_t ldg32(const uint8_t* p) {
  return __ldg(reinterpret_cast<const unsigned int*>(p));
}

/// The A fragments of 16 rows [row0, row0 + 16) of a [*, kD] code matrix (rows >= n_rows: 0).
template <int kD>
__device__ __forceinline__ void load_row_frags(uint32_t (&a)[kD / 32][4], const uint8_t* base, int64_t row0,
                                               int64_t n_rows, int g, int t) {
#pragma unroll
  for (int kc = 0; kc < kD / 32; ++kc)
#pragma unroll
    for (int r = 0; r < 4; ++r) {  // a0: row g, a1: row g+8; a2, a3: +16 columns
      const int64_t i = row0 + g + 8 * (r % 2);
      a[kc][r] = i < n_rows ? ldg32(base + i * kD + 32 * kc + 16 * (r / 2) + 4 * t) : 0u;
    }
}

/// Starts the cp.async copies of query rows [i0, i0 + kBM) of head bh's Q̂ and dÔ codes into sq,
/// sdo ([kBM][kD] each, chunks v_chunk<kD>-swizzled: 8 consecutive rows of one chunk sit in 8
/// distinct bank groups). Rows >= Tq_p read as zero codes.
template <int kD, int kBM>
__device__ __forceinline__ void load_q_do(const BackwardParams& p, int64_t bh, int64_t i0, uint8_t* sq,
                                          uint8_t* sdo) {
  const uint8_t* gq = p.q + bh * p.Tq_p * kD;
  const uint8_t* gdo = p.d_o + bh * p.Tq_p * kD;
  for (int c = threadIdx.x; c < kBM * kD / 16; c += kThreads) {
    const int r = c / (kD / 16), cc = c % (kD / 16);
    const bool in = i0 + r < p.Tq_p;
    const int at = r * kD + 16 * v_chunk<kD>(r, cc);
    const int64_t src = in ? (i0 + r) * kD + 16 * cc : 0;
    cp_async16(sq + at, gq + src, in);
    cp_async16(sdo + at, gdo + src, in);
  }
}

/// The A fragments of a warp's 16 rows 16·qs.. of a staged [kBM][kD] tile (load_q_do's layout) by
/// ldmatrix: lane 8i + r reads row 16qs + 8(i % 2) + r, chunk 2kc + i/2 (a0..a3 of kc).
template <int kD>
__device__ __forceinline__ void ldsm_row_frags(uint32_t (&a)[kD / 32][4], const uint8_t* tile, int qs) {
  const int lane = threadIdx.x % 32, mi = lane / 8, mr = lane % 8;
  const unsigned row = smem_u32(tile) + unsigned((16 * qs + 8 * (mi % 2) + mr) * kD);
  const int cx = v_chunk<kD>(mr, 0) ^ (mi / 2);  // (2kc + i/2) ^ v = 2kc ^ (i/2 ^ v)
#pragma unroll
  for (int kc = 0; kc < kD / 32; ++kc) ldsm<4>(a[kc], row + 16 * (cx ^ (2 * kc)));
}

/// Starts the cp.async copies of key block [j0, j0 + kBN) of KV head bg: K̂ and V̂ rows into sk,
/// sv ([kBN][kD], chunks k_chunk-swizzled: the forward's K̂ layout) and, if skt is given, K̂ᵀ into
/// skt ([kD][kBN], v_chunk-swizzled: the forward's V̂ᵀ layout). Keys >= Tk_p read as zero codes.
template <int kD, int kBN>
__device__ __forceinline__ void load_kv(const BackwardParams& p, int64_t bg, int64_t j0, uint8_t* sk,
                                        uint8_t* sv, uint8_t* skt) {
  const uint8_t* gk = p.k + bg * p.Tk_p * kD;
  const uint8_t* gv = p.v + bg * p.Tk_p * kD;
  for (int c = threadIdx.x; c < kBN * kD / 16; c += kThreads) {
    const int r = c / (kD / 16), cc = c % (kD / 16);
    const bool in = j0 + r < p.Tk_p;
    const int at = r * kD + 16 * k_chunk<kD>(r, cc);
    const int64_t src = in ? (j0 + r) * kD + 16 * cc : 0;
    cp_async16(sk + at, gk + src, in);
    cp_async16(sv + at, gv + src, in);
  }
  if (skt == nullptr) return;
  const uint8_t* gkt = p.k_t + bg * kD * p.Tk_p;
  for (int c = threadIdx.x; c < kD * kBN / 16; c += kThreads) {
    const int r = c / (kBN / 16), cc = c % (kBN / 16);
    const bool in = j0 + 16 * cc < p.Tk_p;  // Tk_p is a multiple of 16: whole chunks
    cp_async16(skt + r * kBN + 16 * v_chunk<kBN>(r, cc), in ? gkt + r * p.Tk_p + j0 + 16 * cc : gkt, in);
  }
}

/// One n-tile (8 keys) of a warp's S = Q̂K̂ᵀ or dP = dÔV̂ᵀ on its 16 rows: acc = Σ_kc a[kc]·B, the
/// B fragments of key rows key0 + s_key(nt, n) of a shared [kBN][kD] K̂ or V̂ tile (k_chunk
/// swizzle) by ldmatrix (flash_mma_sm89.cuh ldsm; the forward's addressing: lane 8i + r reads key
/// row s_key(nt, r), chunk 4h + i), the MMAs over head_dim in order kc = 0, 1, ... from zero: the
/// forward's sequence, so S has its bits. `lane_row`: the tile's shared address plus
/// (key0 + s_key(0, r))·kD; kx: k_chunk(s_key(0, r), 0) ^ i (lane 8i + r). Element e of acc: row
/// e / 2 (g or g + 8), key key0 + s_key(nt, 2t + e % 2) = key0 + s_key(nt, 0) + 4t + e % 2.
template <int kD>
__device__ __forceinline__ void ntile_mma(unsigned lane_row, int kx, int nt, const uint32_t (&a)[kD / 32][4],
                                          bool a_e5m2, float (&acc)[4]) {
#pragma unroll
  for (int e = 0; e < 4; ++e) acc[e] = 0.0f;
#pragma unroll
  for (int h = 0; h < kD / 64; ++h) {
    uint32_t b[4];
    ldsm<4>(b, lane_row + s_key(nt, 0) * kD + 16 * (kx ^ (4 * h)));
    mma_fp8(acc, a[2 * h], b[0], b[1], a_e5m2, false);
    mma_fp8(acc, a[2 * h + 1], b[2], b[3], a_e5m2, false);
  }
}

/// The per-row state of one warp's two rows (g, g + 8) in a tile.
struct Rows {
  int64_t row[2];  ///< query rows (may be pads >= Tq)
  int64_t vis[2];  ///< keys each sees (0 for pads and rows without keys)
  float m[2], l[2];
  float rcp_l[2];  ///< 1/l rounded (div_rn's reciprocal)
  float delta[2];  ///< D_i (load_delta; 0 for rows without keys)

  __device__ __forceinline__ void init(const BackwardParams& p, int64_t bh, int64_t r0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row[r] = r0 + 8 * r;
      vis[r] = visible_keys(p, row[r]);
      m[r] = vis[r] > 0 ? p.row_max[bh * p.Tq + row[r]] : 0.0f;
      l[r] = vis[r] > 0 ? p.row_sum[bh * p.Tq + row[r]] : 1.0f;
      rcp_l[r] = __frcp_rn(l[r]);
      delta[r] = 0.0f;
    }
  }
  /// Reads D_i (run_delta's output) of the rows that see keys.
  __device__ __forceinline__ void load_delta(const BackwardParams& p, int64_t bh) {
#pragma unroll
    for (int r = 0; r < 2; ++r) delta[r] = vis[r] > 0 ? p.delta[bh * p.Tq + row[r]] : 0.0f;
  }
  /// How many keys from `jbase` on row r sees, clamped to [−1, 2^20] (32-bit compares against a
  /// tile-local key index: key jbase + k is visible iff k < lim).
  __device__ __forceinline__ int lim(int r, int64_t jbase) const {
    const int64_t n = vis[r] - jbase;
    return int(n < -1 ? -1 : (n > (1 << 20) ? (1 << 20) : n));
  }
  /// P = exp(S − m)/l of a visible key (`in`; 0 otherwise: masked, pad, a row without keys); *e
  /// gets exp(S − m) (dV's P̃ before rounding, <= 1). The CPU's and the unfused kernel's formula:
  /// exp by exp_rel (flash_mma_sm89.cuh), the division correctly rounded (div_rn).
  __device__ __forceinline__ float prob(int r, bool in, float s, float* e) const {
    const float x = exp_rel(s - m[r]);
    *e = in ? x : 0.0f;
    return in ? div_rn(x, l[r], rcp_l[r]) : 0.0f;
  }
  /// a / b rounded to nearest even from y = RN(1/b): q = RN(a·y), then one FMA residual step
  /// (Markstein's correction: q + (a − b·q)·y is the correctly rounded quotient when y is the
  /// correctly rounded reciprocal and no result is subnormal) — IEEE division's bits in 3
  /// instructions with the reciprocal hoisted per row.
  static __device__ __forceinline__ float div_rn(float a, float b, float y) {
    const float q = __fmul_rn(a, y);
    return __fmaf_rn(__fmaf_rn(-q, b, a), y, q);
  }
};

/// A warp's place in a CTA (lane (g, t); S phase: query slab qs, key part kp from key key0) and the
/// tile step's scalars (flash_qkv_scales.cuh tile_scales; set_scales before a tile's S and dP).
template <int kD, int kBM, int kBN>
struct Warp {
  using Gm = Geom<kD, kBM, kBN>;
  int warp, g, t, qs, kp, key0;
  int lane_row, kx;  ///< ldmatrix: (key0 + s_key(0, r))·kD and k_chunk(s_key(0, r), 0) ^ i
  float s_scale, dp_scale;
  bool do_e5m2, ds_e5m2;

  __device__ __forceinline__ explicit Warp(const BackwardParams& p)
      : warp(threadIdx.x / 32),
        g(threadIdx.x % 32 / 4),
        t(threadIdx.x % 4),
        qs(warp % Gm::kQS),
        kp(warp / Gm::kQS),
        key0(kp * Gm::kNK),
        lane_row((key0 + s_key(0, threadIdx.x % 8)) * kD),
        kx(k_chunk<kD>(s_key(0, threadIdx.x % 8), 0) ^ (threadIdx.x % 32 / 8)),
        s_scale(0.0f),
        dp_scale(0.0f),
        do_e5m2(p.do_format == Format::E5M2),
        ds_e5m2(p.ds_format == Format::E5M2) {}
  __device__ __forceinline__ void set_scales(const TileScales& sc) {
    s_scale = sc.s_scale;
    dp_scale = sc.dp_scale;
  }

  /// The query side of this warp's rows i0 + 16·qs + {g, g + 8} of head bh: their state and the Q̂
  /// and dÔ A fragments.
  __device__ __forceinline__ void load_rows(const BackwardParams& p, int64_t bh, int64_t i0, Rows& rows,
                                            uint32_t (&qa)[kD / 32][4], uint32_t (&da)[kD / 32][4]) const {
    rows.init(p, bh, i0 + 16 * qs + g);
    load_row_frags<kD>(qa, p.q + bh * p.Tq_p * kD, i0 + 16 * qs, p.Tq_p, g, t);
    load_row_frags<kD>(da, p.d_o + bh * p.Tq_p * kD, i0 + 16 * qs, p.Tq_p, g, t);
  }
  /// S of n-tile nt of this warp's share of the tile in sk (shared [kBN][kD] K̂ rows):
  /// (Q̂K̂ᵀ)·s_scale, a rounded product (never contracted).
  __device__ __forceinline__ void s_ntile(const uint8_t* sk, int nt, const uint32_t (&qa)[kD / 32][4],
                                          float (&s)[4]) const {
    ntile_mma<kD>(smem_u32(sk) + lane_row, kx, nt, qa, false, s);
#pragma unroll
    for (int e = 0; e < 4; ++e) s[e] = __fmul_rn(s[e], s_scale);
  }
  /// dP of n-tile nt from the V̂ rows in sv: (dÔV̂ᵀ)·dp_scale, a rounded product.
  __device__ __forceinline__ void dp_ntile(const uint8_t* sv, int nt, const uint32_t (&da)[kD / 32][4],
                                           float (&dp)[4]) const {
    ntile_mma<kD>(smem_u32(sv) + lane_row, kx, nt, da, do_e5m2, dp);
#pragma unroll
    for (int e = 0; e < 4; ++e) dp[e] = __fmul_rn(dp[e], dp_scale);
  }
};

/// The Q-block-major kernels' CTA -> (bh = b·H + h, first row i0, KV head bg): in each head group
/// (ForwardParams::head_group, resolved) the query blocks with the most keys (causal) first.
__device__ __forceinline__ void q_block_of(const BackwardParams& p, int64_t kBM, int64_t* bh, int64_t* i0,
                                           int64_t* bg) {
  const int64_t BH = p.B * p.H, n_qblocks = (p.Tq + kBM - 1) / kBM;
  const GridItem w = grouped_item(blockIdx.x, BH, n_qblocks, p.head_group);
  *bh = w.head;
  *i0 = (n_qblocks - 1 - w.block) * kBM;
  *bg = *bh / p.H * p.G + *bh % p.H / (p.H / p.G);
}

/// The key-block-major kernels' CTA (grid B·G·⌈Tk/kBN⌉) -> (KV head bg = b·G + g, first key j0): in
/// each head group (BackwardParams::key_head_group, resolved; of KV heads) key block 0, which the
/// most query blocks see (causal), first.
__device__ __forceinline__ void k_block_of(const BackwardParams& p, int64_t kBN, int64_t* bg, int64_t* j0) {
  const GridItem w = grouped_item(blockIdx.x, p.B * p.G, (p.Tk + kBN - 1) / kBN, p.key_head_group);
  *bg = w.head;
  *j0 = w.block * kBN;
}

/// The A fragments over keys of one warp's tile values v (the S accumulator layout) as FP8 codes of
/// v·scale in `f` (hardware cvt pairs, fp8_device.cuh fp8x2: fp8_encode's bits, saturating):
/// a[kk] covers the warp's keys 32kk.. in natural order (flash_mma_sm89.cuh s_key).
template <int kNK>
__device__ __forceinline__ void to_a_frags(const float (&v)[kNK / 8][4], float scale, Format f,
                                           uint32_t (&a)[kNK / 32][4]) {
  const bool e5m2 = f == Format::E5M2;
#pragma unroll
  for (int kk = 0; kk < kNK / 32; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int nt = 4 * kk + 2 * (r / 2), ro = r % 2;
      a[kk][r] = fp8x2(v[nt][2 * ro] * scale, v[nt][2 * ro + 1] * scale, e5m2) |
                 fp8x2(v[nt + 1][2 * ro] * scale, v[nt + 1][2 * ro + 1] * scale, e5m2) << 16;
    }
}

/// The CTA-wide amax of a tile from each thread's |x| bits (NaN largest), through slots[kWarps];
/// every thread gets it. Ends with a barrier; the caller's next write to slots must follow another.
__device__ __forceinline__ float cta_amax(unsigned bits, unsigned* slots) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) bits = max(bits, __shfl_xor_sync(0xFFFFFFFFu, bits, o));
  if (threadIdx.x % 32 == 0) slots[threadIdx.x / 32] = bits;
  __syncthreads();
  unsigned m = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) m = max(m, slots[w]);
  return m > 0x7F800000u ? NAN : __uint_as_float(m);
}

/// Calls f(head_dim, block_q, block_k) with the instantiated sizes as std::integral_constant (the
/// one place where the runtime sizes become template parameters; check_backward_supported first).
template <typename F>
void dispatch_sizes(const BackwardParams& p, F&& f) {
  using I64 = std::integral_constant<int, 64>;
  using I128 = std::integral_constant<int, 128>;
  auto tiles = [&](auto d) {
    if (p.block_q == 64)
      p.block_k == 64 ? f(d, I64{}, I64{}) : f(d, I64{}, I128{});
    else
      p.block_k == 64 ? f(d, I128{}, I64{}) : f(d, I128{}, I128{});
  };
  p.D == 64 ? tiles(I64{}) : tiles(I128{});
}

/// dQ += g_scale · acc for one warp's 16 x kD accumulator in the MMA lane layout (lane (g, t): rows g
/// and g + 8, columns 8dn + 2t, +1), by one 16-byte FP32 atomic add (sm_90) per lane and n-tile:
/// lanes t, t ^ 1 swap halves so that an even t holds row g, columns 8dn + 4(t/2)..+3, an odd t row
/// g + 8, the same columns. `dq` is this lane's row (g for an even t, g + 8 for an odd one) of the
/// FP32 accumulator at column 4(t/2); nothing is added where !vis (the row's dS is 0). (Selects, not
/// indices: a register array indexed by t would go to local memory.) Both backward kernels' dQ.
template <int kD>
__device__ __forceinline__ void atomic_add_dq(float* dq, const float (&acc)[kD / 8][4], float g_scale,
                                              bool odd, bool vis) {
#pragma unroll
  for (int dn = 0; dn < kD / 8; ++dn) {
    const float a0 = acc[dn][0] * g_scale, a1 = acc[dn][1] * g_scale;  // row g
    const float a2 = acc[dn][2] * g_scale, a3 = acc[dn][3] * g_scale;  // row g + 8
    const float y0 = __shfl_xor_sync(0xFFFFFFFFu, odd ? a0 : a2, 1);
    const float y1 = __shfl_xor_sync(0xFFFFFFFFu, odd ? a1 : a3, 1);
    if (vis)
      atomicAdd(reinterpret_cast<float4*>(dq + 8 * dn),
                odd ? make_float4(y0, y1, a2, a3) : make_float4(a0, a1, y0, y1));
  }
}

/// Launches kernel(p) on `blocks` CTAs of kThreads with `bytes` of dynamic shared memory (opting in
/// above 48 KiB, per function on the current device).
template <typename Kernel>
void launch_kernel(Kernel kernel, int64_t blocks, int bytes, const BackwardParams& p, cudaStream_t stream) {
  opt_in_shared_memory(kernel, bytes);
  OCTET_CHECK(blocks <= 0x7FFFFFFF, "flash attention backward: too many blocks (B·H·T/tile)");
  kernel<<<unsigned(blocks), kThreads, bytes, stream>>>(p);
  OCTET_CUDA_LAUNCH_CHECK();
}

}  // namespace octet::cuda::flash::bwd
