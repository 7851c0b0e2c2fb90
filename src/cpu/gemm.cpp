// src/cpu/gemm.cpp — the CPU reference GEMMs of gemm.h: emulated FP8 (scales applied where an FP8
// tensor core applies them), BF16, FP32 (OpenBLAS sgemm) and the FP64 triple loop.
// FP8: the codes are decoded unscaled (exact in FP32), each K chunk of one scale block is one
// sgemm, and its FP32 result is multiplied by sa·sb and added to C (DeepSeek-V3 §3.3, cuBLASLt
// block scaling); a per-tensor or per-row scale is one chunk spanning all of K (D = sa·sb·(A·Bᵀ)).
#include <cblas.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cpu/gemm_accum.h"
#include "fp8/lut.h"
#include "octet/error.h"
#include "octet/gemm.h"

namespace octet {
namespace {

thread_local std::vector<float> t_a, t_b, t_p, t_sa, t_sb;  // scratch, reused across calls

void check_dims(int64_t M, int64_t N, int64_t K, const char* what) {
  OCTET_CHECK(M >= 1 && N >= 1 && K >= 1, std::string(what) + ": empty shape M=" + std::to_string(M) +
                                              " N=" + std::to_string(N) + " K=" + std::to_string(K));
}

void check_qtensor(const QTensor& q, const char* name) {
  OCTET_CHECK(q.rows >= 1 && q.cols >= 1 && int64_t(q.codes.size()) == q.rows * q.cols &&
                  int64_t(q.scale_inv.size()) == q.grid_rows() * q.grid_cols(),
              std::string("gemm_fp8: operand ") + name + " is not a quantized tensor (" +
                  std::to_string(q.rows) + "x" + std::to_string(q.cols) + ")");
}

void decode_unscaled(const QTensor& q, float* out) {
  const float* lut = detail::fp8_decode_lut(q.format);
  const size_t n = q.codes.size();
  for (size_t i = 0; i < n; ++i) out[i] = lut[q.codes[i]];
}

// The width of one K chunk of an operand: K if one scale spans all of K, else its block width.
int64_t k_block(const QTensor& q) { return q.grid_cols() == 1 ? q.cols : q.block.cols; }

// scale_inv of each row of q for K chunk c (a whole-K operand has chunk 0 only).
void chunk_scales(const QTensor& q, int64_t c, std::vector<float>& s) {
  s.resize(size_t(q.rows));
  const int64_t gc = q.grid_cols(), col = gc == 1 ? 0 : c;
  for (int64_t i = 0; i < q.rows; ++i) s[size_t(i)] = q.scale_inv[size_t((i / q.block.rows) * gc + col)];
}

// C = beta·C + v, where beta == 0 never reads C (BLAS semantics: C may hold garbage).
inline float axpby(float beta, float c, float v) { return beta == 0.0f ? v : beta * c + v; }

}  // namespace

void gemm_fp8(const QTensor& A, const QTensor& B, float* C, float beta, const GemmOptions& options) {
  check_qtensor(A, "A");
  check_qtensor(B, "B");
  const int64_t M = A.rows, N = B.rows, K = A.cols;
  OCTET_CHECK(A.cols == B.cols, "gemm_fp8: K mismatch, A is " + std::to_string(A.rows) + "x" +
                                    std::to_string(A.cols) + ", B is " + std::to_string(B.rows) + "x" +
                                    std::to_string(B.cols) + " (C = A·Bᵀ)");
  const int64_t ka = k_block(A), kb = k_block(B);
  OCTET_CHECK((ka >= K && kb >= K) || ka == kb, "gemm_fp8: A and B scale blocks along K disagree (" +
                                                    std::to_string(ka) + " vs " + std::to_string(kb) +
                                                    " elements)");
  const int64_t kc = std::min(ka, K), chunks = (K + kc - 1) / kc;

  t_a.resize(size_t(M * K));
  t_b.resize(size_t(N * K));
  decode_unscaled(A, t_a.data());
  decode_unscaled(B, t_b.data());

  if (options.limited_accumulation) {
    LimitedAccumulator acc(options);
    for (int64_t c = 0; c < chunks; ++c) {
      chunk_scales(A, c, t_sa);
      chunk_scales(B, c, t_sb);
      const int64_t k0 = c * kc, kw = std::min(kc, K - k0);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          const float v = acc.dot(t_a.data() + i * K + k0, t_b.data() + j * K + k0, kw,
                                  t_sa[size_t(i)] * t_sb[size_t(j)]);
          float& cij = C[i * N + j];
          cij = c == 0 ? axpby(beta, cij, v) : cij + v;
        }
    }
    return;
  }

  t_p.resize(size_t(M * N));
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t k0 = c * kc, kw = std::min(kc, K - k0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(M), int(N), int(kw), 1.0f, t_a.data() + k0,
                int(K), t_b.data() + k0, int(K), 0.0f, t_p.data(), int(N));
    chunk_scales(A, c, t_sa);
    chunk_scales(B, c, t_sb);
    for (int64_t i = 0; i < M; ++i) {
      const float sa = t_sa[size_t(i)];
      const float* p = t_p.data() + i * N;
      float* ci = C + i * N;
      for (int64_t j = 0; j < N; ++j) {
        const float v = p[j] * (sa * t_sb[size_t(j)]);
        ci[j] = c == 0 ? axpby(beta, ci[j], v) : ci[j] + v;
      }
    }
  }
}

void gemm_bf16(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K, float beta) {
  check_dims(M, N, K, "gemm_bf16");
  t_a.resize(size_t(M * K));
  t_b.resize(size_t(N * K));
  std::transform(A, A + M * K, t_a.begin(), [](float x) { return bf16_round(x); });
  std::transform(B, B + N * K, t_b.begin(), [](float x) { return bf16_round(x); });
  gemm_f32(t_a.data(), t_b.data(), C, M, N, K, beta);
}

void gemm_f32(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K, float beta) {
  check_dims(M, N, K, "gemm_f32");
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(M), int(N), int(K), 1.0f, A, int(K), B, int(K),
              beta, C, int(N));
}

void gemm_f64_reference(const double* A, const double* B, double* C, int64_t M, int64_t N, int64_t K) {
  check_dims(M, N, K, "gemm_f64_reference");
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0.0;
      for (int64_t k = 0; k < K; ++k) s += A[i * K + k] * B[j * K + k];
      C[i * N + j] = s;
    }
}

}  // namespace octet
