// src/cuda/attention/flash/flash_wgmma_sm90.cuh — the Hopper (sm_90a) building blocks of the wgmma flavors of
// the flash FP8 attention forward (flash_fwd_sm90.cu) and backward (flash_bwd_sm90.cu): warpgroup MMA with
// E4M3/E5M2 operands and FP32 accumulators, A from registers ("RS") or from
// shared memory ("SS") and B from shared memory through a matrix descriptor, the fences and groups around it,
// the 128-/64-byte swizzled K-major shared-memory layout the descriptor names, and the mbarrier / setmaxnreg
// primitives of the warp-specialized pipeline (PTX ISA "mbarrier", "setmaxnreg") with TMA loads into it. PTX
// ISA §9.7.15 "Asynchronous Warpgroup Level Matrix Multiply-Accumulate" (wgmma.mma_async, its register
// fragments, matrix descriptors and shared-memory layouts). docs/attention.md §"Forward".
//
// Fragments of one m64nNk32 (128 threads; warp w of the warpgroup owns rows 16w..16w+15; lane =
// 4g + t): A (registers, 4 x .b32 of 4 E4M3 codes) a0 = A[g][4t..4t+3], a1 = A[g+8][4t..4t+3],
// a2 = A[g][16+4t..], a3 = A[g+8][16+4t..] — mma.sync m16n8k32's A fragment (flash_mma_sm89.cuh);
// D (FP32) d[i][0..1] = D[g][8i+2t, +1], d[i][2..3] = D[g+8][8i+2t, +1] — mma.sync's C fragment of
// n-tile i. So a warp's part of an m64nN accumulator is exactly the float[N/8][4] of N/8 mma.sync
// n-tiles, and the tile code written for those (flash_fwd_tile_sm89.cuh) serves both flavors.
// B (shared memory, K-major: B[n][k] at row n, the 32 k-bytes of one instruction contiguous):
// rows of W = 64 or 128 bytes in atoms of 8 rows (8·W bytes), 16-byte chunk c of row r stored at
// chunk c ^ (r mod 8) (W = 128, "128B swizzle") or c ^ ((r / 2) mod 4) (W = 64, "64B swizzle"):
// the hardware applies that XOR to the byte address bits [4, 7) ^= [7, 10) (resp. [4, 6) ^= [7, 9)),
// so a tile must start on a 1024-byte boundary, and the k-th 32-byte step of a row is addressed by
// adding 32·k to the descriptor's start address (FP16: a k16 step is 32 bytes too; rows longer than
// 128 bytes are split into 64-column blocks, each its own swizzled tile). An A operand in shared
// memory (SS) uses the same K-major layout and descriptor: its 64 rows (M) are 8 atoms.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace octet::cuda::flash {

/// Byte offset of logical byte `off` = row·W + column of a K-major tile with rows of W bytes
/// (64 or 128), as the W-byte swizzle stores it (the same XOR the hardware applies on reading).
template <int W>
__device__ __forceinline__ int swizzle(int off) {
  static_assert(W == 64 || W == 128, "64- or 128-byte swizzle");
  return off ^ (((off >> 7) & (W / 16 - 1)) << 4);
}

/// The wgmma matrix descriptor of a K-major, W-byte-swizzled tile starting at shared address
/// `smem_addr` (1024-byte aligned, or that plus 32·k for the k-th k-step): start address >> 4
/// (bits 0-13), leading byte offset 1 (unused by swizzled K-major layouts; bits 16-29), stride byte
/// offset = one 8-row atom, 8·W bytes >> 4 (bits 32-45), base offset 0 (bits 49-51), swizzle mode
/// 1 = 128B, 2 = 64B (bits 62-63).
template <int W>
__device__ __forceinline__ uint64_t kmajor_desc(unsigned smem_addr) {
  static_assert(W == 64 || W == 128, "64- or 128-byte swizzle");
  constexpr uint64_t mode = W == 128 ? 1 : 2;
  return uint64_t((smem_addr >> 4) & 0x3FFFu) | (uint64_t(1) << 16) | (uint64_t((8 * W) >> 4) << 32) |
         (mode << 62);
}

/// wgmma.fence: orders this warpgroup's earlier register accesses (accumulators, A fragments)
/// before the wgmma that follow. Needed before the first wgmma of a batch.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
/// Closes the batch of wgmma issued since the last commit into one group.
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
/// Waits until at most N groups of this warpgroup are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/// Keeps the compiler from moving reads or writes of an accumulator across a wgmma_wait (the
/// wgmma asm "writes" its accumulators when issued; the values exist only after the wait).
template <int R>
__device__ __forceinline__ void fence_regs(float (&d)[R][4]) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
}
/// The same for an A fragment read from registers: ties its registers' life to after the wait
/// (the tensor core reads them asynchronously; nothing may reuse them before wgmma_wait).
template <int R>
__device__ __forceinline__ void fence_regs(uint32_t (&a)[R][4]) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[i][e])::"memory");
}
/// Makes this thread's generic-proxy shared-memory writes (st.shared, cp.async) visible to the
/// async proxy that wgmma reads shared memory through; then a barrier publishes them to the CTA.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/// Two floats to shared address `addr` (8-byte aligned; st.shared.v2.f32): a 32-bit address, where a
/// generic pointer's store computes 64-bit ones.
__device__ __forceinline__ void st_shared_f32x2(unsigned addr, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(x), "f"(y) : "memory");
}

/// mbarrier (PTX ISA §9.7.13.15) at shared address `bar`: initialized with the number of arrivals
/// that complete a phase; fence_mbar_init then a CTA barrier publish the initialization.
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
/// One arrival (release semantics: this thread's earlier memory accesses happen before the phase
/// completes for a waiter).
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar)
               : "memory");
}
/// Makes the phase also wait for this thread's cp.async copies issued so far (pending count + 1
/// now, − 1 when they land: no net arrival; CUTLASS's cp.async pipelines do the same).
__device__ __forceinline__ void mbar_arrive_on_cp_async(unsigned bar) {
  asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
/// Waits until the phase of parity `parity` has completed (phase k has parity k mod 2).
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
/// One arrival that also announces `bytes` more to be delivered by asynchronous copies (TMA's
/// complete_tx) before the phase can complete: the producer's arrival on a full barrier.
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
/// TMA (PTX ISA §9.7.9.25 cp.async.bulk.tensor): one box of the tensor map at generic address
/// `map` (a __grid_constant__ kernel parameter, cuda/runtime/tensor_map.h), coordinates innermost
/// first, into shared address `dst` (the map's swizzle applied by address: 1024-byte aligned for
/// the 128-byte swizzle); completes `bytes` of the mbarrier's transaction count (the whole box,
/// zero-filled elements included).
__device__ __forceinline__ void tma_load_3d(unsigned dst, const void* map, unsigned bar, int c0, int c1,
                                            int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
      "[%2];\n" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
__device__ __forceinline__ void tma_load_5d(unsigned dst, const void* map, unsigned bar, int c0, int c1,
                                            int c2, int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
      "%6, "
      "%7}], [%2];\n" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}
/// TMA reduce (PTX ISA "cp.reduce.async.bulk.tensor", .add; PTX ISA 8.0, sm_90): adds the box of the FP32
/// tensor map at `map` at coordinates (c0, c1, c2) in elements, innermost first, from shared address
/// `src` (laid out as the map's swizzle stores a box: aligned to the swizzle's whole pattern, 1024
/// bytes for the 128-byte swizzle and 512 for the 64-byte one) into
/// global memory, element by element atomically (elements outside the map are not written); the
/// issuing thread's bulk async-group tracks it (bulk_commit, bulk_wait_read). `src` must hold the
/// values when it is issued: the writers' fence_proxy_async_smem, then a barrier, come first.
__device__ __forceinline__ void tma_reduce_add_3d(const void* map, unsigned src, int c0, int c1, int c2) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::
          "l"(map),
      "r"(src), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
/// Closes this thread's bulk copies and reduces issued since the last commit into one bulk
/// async-group (cp.async.bulk.commit_group).
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
/// Waits until at most N of this thread's bulk async-groups still read their shared-memory source
/// (cp.async.bulk.wait_group.read): after it, the source may be overwritten.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
/// Waits until at most N of this thread's bulk async-groups are pending at all (their writes to
/// global memory performed).
template <int N>
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
/// Hands registers back to (dec) or takes them from (inc) the CTA's pool, for the whole warpgroup
/// (warp specialization: the producer needs few, the consumers' accumulators many).
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

// Named barrier `id` (1..15; 0 is __syncthreads') of `threads` threads, a multiple of 32 (PTX ISA
// "bar, barrier"): sync waits until that many have arrived or synced on it, arrive counts this warp
// without waiting. FlashAttention-3's ping-pong hands a GEMM turn between warpgroups with them.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// The accumulator operands of an m64nN wgmma, written once per N: the asm list "{%0, ..., %(N/2 − 1)}"
// and the "+f" constraints of d[N/8][4] in the accumulator's register order.
#define OCTET_WGMMA_D64_REGS                                                \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31} "
#define OCTET_WGMMA_D64_OUTS(d)                                                                            \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), \
      "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]),            \
      "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]),            \
      "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]),            \
      "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]),            \
      "+f"(d[7][3])
#define OCTET_WGMMA_D128_REGS                                                        \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "          \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63} "
#define OCTET_WGMMA_D128_OUTS(d)                                                                      \
  OCTET_WGMMA_D64_OUTS(d), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), \
      "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]),    \
      "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), \
      "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), \
      "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), \
      "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
// m64n72 and m64n136: the head_dim columns of O plus 8 (P̃V̂ with l̃'s column of ones, flash_fwd_sm90.cu).
#define OCTET_WGMMA_D72_REGS                                                         \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "          \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35} "
#define OCTET_WGMMA_D72_OUTS(d) \
  OCTET_WGMMA_D64_OUTS(d), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3])
#define OCTET_WGMMA_D136_REGS                                                        \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "          \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
  "%64, %65, %66, %67} "
#define OCTET_WGMMA_D136_OUTS(d) \
  OCTET_WGMMA_D128_OUTS(d), "+f"(d[16][0]), "+f"(d[16][1]), "+f"(d[16][2]), "+f"(d[16][3])
// One RS wgmma: the N/2 accumulators, then A's 4 registers and B's descriptor (A_DESC, e.g.
// "{%32, %33, %34, %35}, %36" at N = 64), scale_d as predicate (SCALE, "%37"), the immediates IMM.
// Inside WgmmaRS::run and WgmmaFp8::rs only (it names their d, a, desc_b, scale_d).
#define OCTET_WGMMA_RS(INSTR, N, A_DESC, SCALE, IMM)                                                \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE ", 0;\n" INSTR " " OCTET_WGMMA_D##N##_REGS \
               ", " A_DESC ", p, " IMM ";\n}\n"                                                     \
               : OCTET_WGMMA_D##N##_OUTS(d)                                                         \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))

/// d (+)= A·Bᵀ on one m64nNk32 tile: A 64x32 E4M3 from registers (this warp's 16 rows), B N x 32
/// E4M3 K-major by descriptor, D FP32; scale_d = 0 ignores d's old value (D = A·Bᵀ). Asynchronous:
/// d holds the result only after wgmma_commit + wgmma_wait (and a, d must not be touched before).
/// N ∈ {64, 72, 128, 136}.
template <int N>
struct WgmmaRS;
template <>
struct WgmmaRS<64> {
  __device__ __forceinline__ static void run(float (&d)[8][4], const uint32_t (&a)[4], uint64_t desc_b,
                                             int scale_d) {
    OCTET_WGMMA_RS("wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3", 64, "{%32, %33, %34, %35}, %36",
                   "%37", "1, 1");
  }
};
template <>
struct WgmmaRS<128> {
  __device__ __forceinline__ static void run(float (&d)[16][4], const uint32_t (&a)[4], uint64_t desc_b,
                                             int scale_d) {
    OCTET_WGMMA_RS("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3", 128, "{%64, %65, %66, %67}, %68",
                   "%69", "1, 1");
  }
};
template <>
struct WgmmaRS<72> {
  __device__ __forceinline__ static void run(float (&d)[9][4], const uint32_t (&a)[4], uint64_t desc_b,
                                             int scale_d) {
    OCTET_WGMMA_RS("wgmma.mma_async.sync.aligned.m64n72k32.f32.e4m3.e4m3", 72, "{%36, %37, %38, %39}, %40",
                   "%41", "1, 1");
  }
};
template <>
struct WgmmaRS<136> {
  __device__ __forceinline__ static void run(float (&d)[17][4], const uint32_t (&a)[4], uint64_t desc_b,
                                             int scale_d) {
    OCTET_WGMMA_RS("wgmma.mma_async.sync.aligned.m64n136k32.f32.e4m3.e4m3", 136, "{%68, %69, %70, %71}, %72",
                   "%73", "1, 1");
  }
};

// One SS wgmma: the N/2 accumulators, A's and B's descriptors, scale_d (SCALE), the immediates.
#define OCTET_WGMMA_SS(INSTR, N, DESCS, SCALE, IMM)                                                 \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE ", 0;\n" INSTR " " OCTET_WGMMA_D##N##_REGS \
               ", " DESCS ", p, " IMM ";\n}\n"                                                      \
               : OCTET_WGMMA_D##N##_OUTS(d)                                                         \
               : "l"(desc_a), "l"(desc_b), "r"(scale_d))
// The four FP8 operand-type pairs of one shape, chosen at compile time by kAE5M2, kBE5M2.
#define OCTET_WGMMA_FP8_TYPES(MACRO, SHAPE, N, OPS, SCALE)                                \
  if constexpr (kAE5M2 && kBE5M2)                                                         \
    MACRO("wgmma.mma_async.sync.aligned." SHAPE ".f32.e5m2.e5m2", N, OPS, SCALE, "1, 1"); \
  else if constexpr (kAE5M2)                                                              \
    MACRO("wgmma.mma_async.sync.aligned." SHAPE ".f32.e5m2.e4m3", N, OPS, SCALE, "1, 1"); \
  else if constexpr (kBE5M2)                                                              \
    MACRO("wgmma.mma_async.sync.aligned." SHAPE ".f32.e4m3.e5m2", N, OPS, SCALE, "1, 1"); \
  else                                                                                    \
    MACRO("wgmma.mma_async.sync.aligned." SHAPE ".f32.e4m3.e4m3", N, OPS, SCALE, "1, 1")

/// d (+)= A·Bᵀ on one m64nNk32 tile with FP8 operands in either format (kAE5M2, kBE5M2: E5M2 if
/// true, else E4M3), D FP32, A from registers (WgmmaRS's fragment) or from shared memory by
/// descriptor (SS; K-major like B), B by descriptor. scale_d = 0: D = A·Bᵀ (the old d ignored).
/// Asynchronous, as WgmmaRS. N ∈ {64, 128}. (PTX ISA §9.7.15.5.2: wgmma with .e4m3/.e5m2 takes
/// both operands K-major and no transpose immediates.)
template <int N, bool kAE5M2, bool kBE5M2>
struct WgmmaFp8;
template <bool kAE5M2, bool kBE5M2>
struct WgmmaFp8<64, kAE5M2, kBE5M2> {
  __device__ __forceinline__ static void rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t desc_b,
                                            int scale_d) {
    OCTET_WGMMA_FP8_TYPES(OCTET_WGMMA_RS, "m64n64k32", 64, "{%32, %33, %34, %35}, %36", "%37");
  }
  __device__ __forceinline__ static void ss(float (&d)[8][4], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    OCTET_WGMMA_FP8_TYPES(OCTET_WGMMA_SS, "m64n64k32", 64, "%32, %33", "%34");
  }
};
template <bool kAE5M2, bool kBE5M2>
struct WgmmaFp8<128, kAE5M2, kBE5M2> {
  __device__ __forceinline__ static void rs(float (&d)[16][4], const uint32_t (&a)[4], uint64_t desc_b,
                                            int scale_d) {
    OCTET_WGMMA_FP8_TYPES(OCTET_WGMMA_RS, "m64n128k32", 128, "{%64, %65, %66, %67}, %68", "%69");
  }
  __device__ __forceinline__ static void ss(float (&d)[16][4], uint64_t desc_a, uint64_t desc_b,
                                            int scale_d) {
    OCTET_WGMMA_FP8_TYPES(OCTET_WGMMA_SS, "m64n128k32", 128, "%64, %65", "%66");
  }
};

#undef OCTET_WGMMA_FP8_TYPES
#undef OCTET_WGMMA_SS
#undef OCTET_WGMMA_RS
#undef OCTET_WGMMA_D64_REGS
#undef OCTET_WGMMA_D64_OUTS
#undef OCTET_WGMMA_D72_REGS
#undef OCTET_WGMMA_D72_OUTS
#undef OCTET_WGMMA_D136_REGS
#undef OCTET_WGMMA_D136_OUTS
#undef OCTET_WGMMA_D128_REGS
#undef OCTET_WGMMA_D128_OUTS

}  // namespace octet::cuda::flash
