// octet/gemm.h — the CPU reference GEMMs: emulated FP8 (as an FP8 tensor core computes it), BF16,
// FP32, and an FP64 triple loop for tests.
//
// Layout convention ("TN", the only layout cuBLASLt FP8 GEMMs take on Hopper):
//   C[M, N] = A[M, K] · B[N, K]ᵀ, A and B row-major with K contiguous, C row-major FP32.
// The FP8 GEMM multiplies decoded codes and applies scale_inv per scale block exactly where a
// tensor core applies it: per tensor (after the whole K sum), per row, or per 1x128 / 128x128
// block (each 128-wide K chunk is summed unscaled in FP32, then multiplied by the product of the
// A and B block scales and added to the FP32 result, as in DeepSeek-V3 §3.3 and cuBLASLt's
// block-scaled mode). FP32 products use OpenBLAS (sgemm), so the reference can train models.
//
// Limited-precision accumulation (DeepSeek-V3 §3.3.2): Hopper's FP8 tensor cores keep about 14
// bits of the accumulator; an option truncates the running sum to `accum_mantissa_bits` after
// every addition and promotes it to an FP32 accumulator every `promote_interval` elements of K.
#pragma once

#include <cstdint>

#include "octet/quant.h"

namespace octet {

struct GemmOptions {
  bool limited_accumulation = false;  ///< emulate Hopper's FP8 accumulator (slow: a loop)
  int accum_mantissa_bits = 13;       ///< mantissa bits kept in the limited accumulator
  int promote_interval = 128;         ///< N_C: promote to FP32 every this many K elements (0: never)
};

/// C = beta*C + A·Bᵀ with FP8 operands. A is [M, K], B is [N, K] (A.cols == B.cols == K).
/// Scale blocks along K must be whole-K (tensor, row recipes) or 128-wide (block recipe) or
/// 32-wide (mx), and A's and B's K blocking must agree. Throws octet::Error on mismatch.
void gemm_fp8(const QTensor& A, const QTensor& B, float* C, float beta = 0.0f,
              const GemmOptions& options = {});

/// C = beta*C + round_bf16(A)·round_bf16(B)ᵀ with FP32 accumulation. A [M,K], B [N,K] FP32.
void gemm_bf16(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K, float beta = 0.0f);

/// C = beta*C + A·Bᵀ in FP32 (OpenBLAS sgemm). A [M,K], B [N,K].
void gemm_f32(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K, float beta = 0.0f);

/// C = A·Bᵀ in FP64, a plain triple loop: the oracle for tests. A [M,K], B [N,K].
void gemm_f64_reference(const double* A, const double* B, double* C, int64_t M, int64_t N, int64_t K);

}  // namespace octet
