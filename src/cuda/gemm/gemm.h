// src/cuda/gemm/gemm.h — cuBLASLt GEMMs of the CUDA backend: FP8 (per-tensor, per-row, 1x128 and 128x128
// block scales) and BF16, FP32 accumulation, FP32 or BF16 output, strided batches for attention.
//
// Layout convention is octet's ("TN", include/octet/gemm.h): C[M, N] = A[M, K] · B[N, K]ᵀ with A and B
// row-major, K contiguous, C row-major, FP32 or BF16. A BF16 C is written by cuBLASLt's epilogue
// directly (the FP32 result rounded once, to nearest even: the rounding of an op's BF16 output,
// docs/design.md §"Typed tensors"), without an FP32 copy and a conversion pass; where cuBLASLt has
// no algorithm for a BF16 output, the FP32 result goes to scratch and is rounded by convert_launch
// (the same numbers). A BF16 C takes beta = 0 only (accumulations, dW += ..., stay FP32). In cuBLASLt's
// column-major terms that is Cᶜ[N, M] = op_T(B) · op_N(A), the only layout FP8 takes on Hopper, so cuBLASLt's
// "A" is our B. Scales: cuBLASLt reads the dequantization factors (scale_inv) from device memory through
// CUBLASLT_MATMUL_DESC_{A,B}_SCALE_POINTER, in the mode of each operand's ScaleLayout (qtensor.h):
// SCALAR_32F, OUTER_VEC_32F, VEC128_32F or BLK128x128_32F (CUDA >= 12.9 on sm_90). A mode cuBLASLt
// refuses at run time (e.g. 2D x 2D blocks, 1x32 MX blocks on sm_90) falls back to dequantizing both
// operands to FP32 and an FP32 GEMM; the first fallback of each kind is reported on stderr and
// counted (fallback_count()). Algorithms come from cuBLASLt's heuristic, cached per problem
// (shape, types, scale modes); one workspace is reused by every call.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "cuda/runtime/buffer.h"
#include "cuda/quantize/qtensor.h"
#include "octet/tensor.h"

namespace octet::cuda {

/// Strided batch description for batched GEMMs (strides in elements of each operand).
struct Batch {
  int count = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

class GemmEngine {
 public:
  explicit GemmEngine(cudaStream_t stream);
  ~GemmEngine();
  GemmEngine(const GemmEngine&) = delete;
  GemmEngine& operator=(const GemmEngine&) = delete;

  /// C = alpha·(A·Bᵀ) + beta·C with FP8 operands, A [M, K] and B [N, K] (A.cols == B.cols),
  /// C [M, N] FP32 row-major with leading dimension N. E5M2 x E5M2 is refused (octet::Error).
  /// Batched: each batch's operands follow at the given strides (scales: Tensor layout only).
  void fp8(const DevQTensor& A, const DevQTensor& B, float* C, float beta = 0.0f, float alpha = 1.0f,
           const Batch& batch = {});
  /// Same, C an F32 or BF16 tensor of M*N elements per batch (BF16: beta must be 0).
  void fp8(const DevQTensor& A, const DevQTensor& B, const Tensor& C, float beta = 0.0f, float alpha = 1.0f,
           const Batch& batch = {});

  /// D = alpha·(A·Bᵀ) + R: the FP8 GEMM with a residual R [M, N] added by cuBLASLt's epilogue (R is
  /// its C input with beta = 1; the FP32 sum rounded once into D). D and R are F32 or BF16 tensors of
  /// M·N elements of one dtype; R may be D (then copied first) but not overlap it otherwise. Where cuBLASLt
  /// takes no such problem (M or N not a multiple of 16, a refused scale mode), the sum is formed in FP32
  /// scratch and rounded into D (the same formula). Not batched. Throws octet::Error on a shape or dtype
  /// mismatch.
  void fp8_add(const DevQTensor& A, const DevQTensor& B, const Tensor& D, const Tensor& R,
               float alpha = 1.0f);

  /// C = alpha·opA(A)·opB(B) + beta·C with BF16 operands (bit patterns), FP32 accumulate/output.
  /// Row-major: A is [M, K] (or [K, M] if trans_a), B is [K, N] (or [N, K] if trans_b), C [M, N].
  void bf16(const uint16_t* A, bool trans_a, const uint16_t* B, bool trans_b, float* C, int64_t M, int64_t N,
            int64_t K, float beta = 0.0f, float alpha = 1.0f, const Batch& batch = {});
  /// Same, C an F32 or BF16 tensor of M*N elements per batch (BF16: beta must be 0).
  void bf16(const uint16_t* A, bool trans_a, const uint16_t* B, bool trans_b, const Tensor& C, int64_t M,
            int64_t N, int64_t K, float beta = 0.0f, float alpha = 1.0f, const Batch& batch = {});

  /// D = alpha·opA(A)·opB(B) + R with BF16 operands, as fp8_add (R the epilogue's C input, D and R
  /// [M, N] of one dtype, F32 or BF16; R may be D).
  void bf16_add(const uint16_t* A, bool trans_a, const uint16_t* B, bool trans_b, const Tensor& D,
                const Tensor& R, int64_t M, int64_t N, int64_t K, float alpha = 1.0f);

  /// Same, FP32 operands and CUBLAS_COMPUTE_32F (no TF32): the fallback path and reference.
  void f32(const float* A, bool trans_a, const float* B, bool trans_b, float* C, int64_t M, int64_t N,
           int64_t K, float beta = 0.0f, float alpha = 1.0f, const Batch& batch = {});

  /// How many FP8 GEMMs ran through the dequantize + FP32 fallback.
  int64_t fallback_count() const { return fallbacks_; }
  /// Forces the fallback for FP8 (tests compare both paths).
  void set_force_fallback(bool on) { force_fallback_ = on; }
  cudaStream_t stream() const { return stream_; }

  struct Plan;  // cached descriptors and algorithm of one problem
  /// A problem's identity (types, transposes, sizes, leading dimensions, batch, scale modes, and
  /// whether C is an input apart from D: fp8_add, bf16_add).
  using PlanKey = std::array<int64_t, 19>;

 private:
  // Runs a column-major cuBLASLt matmul described by `key`; returns false if no algorithm exists.
  // c_in: the epilogue's C input when it is not c (the output D).
  bool run(const PlanKey& key, const void* a, const void* b, void* c, const void* a_scale,
           const void* b_scale, float alpha, float beta, const void* c_in = nullptr);
  Plan* plan_for(const PlanKey& key);
  // FP8 through cuBLASLt with a C of `c_type` (CUDA_R_32F or CUDA_R_16BF); false (and the reason
  // in *why) where cuBLASLt has no algorithm.
  bool fp8_native(const DevQTensor& A, const DevQTensor& B, void* C, int c_type, float beta, float alpha,
                  const Batch& batch, std::string* why, const void* c_in = nullptr);
  // D and R of a *_add call: one dtype (F32 or BF16), mn elements each.
  static void check_add(const Tensor& D, const Tensor& R, int64_t mn, const char* what);
  // R's data as the epilogue's C input: a copy when R is D (cuBLASLt's in-place epilogue gave
  // other bits than a separate C on an H200; the copy keeps in place and apart the same) or when R
  // is not 256-byte aligned (what the plan's heuristic assumed).
  const void* residual_input(const Tensor& D, const Tensor& R);
  // The *_add fallback: R into FP32 scratch (or into an F32 D), then `gemm_beta1` adds the product
  // with beta = 1, then the sum rounded into a BF16 D.
  template <class F>
  void add_through_f32(const Tensor& D, const Tensor& R, int64_t mn, F&& gemm_beta1);
  // The FP32 result of a BF16-output GEMM where cuBLASLt takes no BF16 output: into scratch,
  // then rounded into C (enqueued).
  float* bf16_out_scratch(const Tensor& C, const Batch& batch, int64_t mn);
  void fp8_fallback(const DevQTensor& A, const DevQTensor& B, float* C, float beta, float alpha,
                    const Batch& batch, const std::string& why);

  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer<uint8_t> workspace_;
  DeviceBuffer<float> deq_a_, deq_b_, c32_;
  DeviceBuffer<uint8_t> c_pad_;   // a padded C (M or N not a multiple of 16), F32 or BF16
  DeviceBuffer<uint8_t> r_copy_;  // a *_add's residual copied first (residual_input)
  std::map<PlanKey, std::unique_ptr<Plan>> plans_;
  std::map<std::string, bool> warned_;
  int64_t fallbacks_ = 0;
  bool force_fallback_ = false;
};

}  // namespace octet::cuda
