// src/cuda/attention/flash/flash_mma_sm89.cuh — the MMA flavor of the flash FP8 attention forward
// (flash_fwd_sm89.cu): warp-level mma.sync.m16n8k32 with E4M3 operands and FP32 accumulators
// (PTX ISA "Matrix fragments for mma.m16n8k32", valid on sm_89 and sm_90a), cp.async copies into
// shared memory, and the shared-memory layouts (swizzles) the fragment loads read without bank
// conflicts. The tile loop and the online softmax (flash_softmax.cuh) do not depend on it. docs/attention.md
// §"Forward".
//
// Fragments of one m16n8k32 (lane = 4·g + t, g = groupID 0..7, t = thread in group 0..3; an 8-bit
// register element i of a .b32 register sits in byte i):
//   A 16x32 (row-major): a0 = A[g][4t..4t+3], a1 = A[g+8][4t..4t+3],
//                        a2 = A[g][16+4t..16+4t+3], a3 = A[g+8][16+4t..16+4t+3];
//   B 32x8  (K-major per column n): b0 = B[4t..4t+3][g], b1 = B[16+4t..16+4t+3][g];
//   C 16x8  (FP32): c0, c1 = C[g][2t, 2t+1], c2, c3 = C[g+8][2t, 2t+1].
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace octet::cuda::flash {

/// c += a·b on one m16n8k32 tile: A 16x32 E4M3, B 32x8 E4M3 (K-major), C 16x8 FP32.
__device__ __forceinline__ void mma_e4m3_16832(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                               uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();  // FP8 mma.sync needs sm_89+; the CUDA preset builds sm_90a
#endif
}

/// 16-byte global -> shared copy (cp.async.cg, L2 only); src_bytes 0 writes 16 zero bytes (the
/// out-of-range chunks of a tile: a zero code, never an E4M3 NaN code, meets a masked P̃ = 0).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = unsigned(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/// The key order inside a tile's S accumulator. S = Q̂K̂ᵀ's n-tile nt (8 columns) reads, in column
/// n (= the groupID of the lane that loads B), the key row
///   key(nt, n) = 32·(nt/4) + 16·((nt/2)%2) + 4·(n/2) + 2·(nt%2) + n%2.
/// Then lane (g, t) holds, for row g (c0, c1) and g+8 (c2, c3), the keys 32kk + 4t + {0,1} in
/// n-tile 4kk, 4t + {2,3} in 4kk+1, 16 + 4t + {0,1} in 4kk+2 and 16 + 4t + {2,3} in 4kk+3: exactly
/// the A fragment of P̃V̂ over the 32 keys 32kk.. (a0 = keys 4t..4t+3, a2 = 16+4t..16+4t+3) with
/// V̂ᵀ read in its natural key order. So the S accumulator becomes P̃V̂'s A operand by converting
/// pairs of floats to E4M3 in place, with no shuffle or byte permute: the permutation is paid in
/// K̂'s row addresses, which a B-fragment load chooses freely (the sum over keys ignores order).
__device__ __forceinline__ int s_key(int nt, int n) {
  return 32 * (nt / 4) + 16 * ((nt / 2) % 2) + 4 * (n / 2) + 2 * (nt % 2) + n % 2;
}

/// Swizzled 16-byte chunk of a K̂ row (kD bytes: 64 or 128) in shared memory. One B-fragment load
/// reads the rows key(nt, 0..7) = base + {0,1,4,5,8,9,12,13} (base: bits 1 and >= 4), word t of
/// one chunk; the XOR spreads those 8 rows over distinct banks (bank = row·kD/4 + 4·chunk' + t).
/// It reads only row bits 0, 2, 3, which s_key(nt, g) takes from g alone: a lane's XOR is the same
/// in every n-tile (flash_fwd_sm89.cu hoists it).
template <int kD>
__device__ __forceinline__ int k_chunk(int row, int chunk) {
  static_assert(kD == 64 || kD == 128, "K row of 64 or 128 bytes");
  if constexpr (kD == 128)
    return chunk ^ ((row & 1) | ((row >> 1) & 6));
  else
    return chunk ^ ((row >> 2) & 3);
}
/// Swizzled 16-byte chunk of a V̂ᵀ row (one head_dim column; kBN keys, 64 or 128 bytes). One
/// B-fragment load reads the 8 consecutive rows 8·dn + g, word t of one chunk. It reads only row
/// bits 0-2, which g sets: a lane's XOR is the same for every dn.
template <int kBN>
__device__ __forceinline__ int v_chunk(int row, int chunk) {
  static_assert(kBN == 64 || kBN == 128, "V^T row of 64 or 128 bytes");
  if constexpr (kBN == 128)
    return chunk ^ (row & 7);
  else
    return chunk ^ ((row >> 1) & 3);
}

__device__ __forceinline__ uint32_t lds32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

/// ldmatrix.m8n8.xN (N = 1, 2, 4; .b16, no transpose): N 8x16-byte matrices from shared memory in
/// one instruction. Lane 8i + r gives the shared address of row r of matrix i (16-byte aligned); lane
/// (g, t) receives r[i] = bytes 4t..4t+3 of row g of matrix i — exactly an FP8 mma.sync A or B
/// fragment register read from a K-contiguous row (the lds32 of word t of row g), four at a time.
/// Conflict-free when the 8 rows of each matrix sit in distinct 16-byte bank groups (the swizzles
/// here are built for that). PTX ISA "ldmatrix".
template <int N>
__device__ __forceinline__ void ldsm(uint32_t (&r)[N], unsigned smem_addr) {
  if constexpr (N == 4)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr));
  else if constexpr (N == 2)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_addr));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(smem_addr));
}
/// The 32-bit shared-memory address of a generic pointer into shared memory (what ldsm takes).
__device__ __forceinline__ unsigned smem_u32(const void* p) { return unsigned(__cvta_generic_to_shared(p)); }

/// Swizzled 16-byte chunk of a row of the backward's P̃ᵀ / dŜᵀ tiles ([key][query] bytes, kBM =
/// 64 or 128 per key row). Written one byte per (key, query) from the S accumulator (a store
/// instruction covers the keys base + 4t + c, t = 0..3, and the queries g (+8): the XOR with key
/// bits 2 and 3 puts the 4 keys in 4 distinct chunks, so the 32 lanes hit distinct banks or the
/// same word) and read by ldmatrix as A fragments (8 consecutive key rows, one chunk: the XOR with
/// key bits 0-2 (kBM 128) or 1-2 and the row's half of the 128-byte line (kBM 64) gives 8 distinct
/// bank groups).
template <int kBM>
__device__ __forceinline__ int pt_chunk(int key, int chunk) {
  static_assert(kBM == 64 || kBM == 128, "P^T row of 64 or 128 bytes");
  if constexpr (kBM == 128)
    return chunk ^ ((key & 7) ^ ((key >> 3) & 1));
  else
    return chunk ^ (((key >> 1) & 3) ^ ((key >> 3) & 1));
}

/// exp(x) for x <= 0 (a softmax's exp(S − m)): 2^(x·log2 e) by the SFU's ex2.approx.ftz (one
/// multiply and one MUFU instead of expf's range reduction; PTX ex2.approx: max relative error
/// 2^-22 over its range, results below 2^-126 flush to 0, exp(−inf) = 0). The CPU twin computes
/// std::exp(x): the two agree to a few FP32 ulp (as expf did), the tolerance the tests state.
/// The backward's kernels compute P with this one function, so the delta pre-pass and the main
/// backward see the same bits (the forward folds the scale into one FFMA: flash_softmax.cuh).
__device__ __forceinline__ float exp_rel(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(__fmul_rn(x, 1.4426950408889634f)));
  return y;
}

}  // namespace octet::cuda::flash
