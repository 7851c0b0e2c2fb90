// src/cuda/gemm/gemm.cpp — GemmEngine (gemm.h): cuBLASLt matmul plans cached per problem, FP8 with
// per-tensor / per-row / block scale modes, BF16 and FP32, and the dequantize fallback.
#include "cuda/gemm/gemm.h"

#include <cstdint>
#include <cstdio>

#include "cuda/runtime/check.h"
#include "cuda/ops/ops.h"
#include "cuda/quantize/quantize.h"
#include "octet/error.h"

namespace octet::cuda {

namespace {
constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // cuBLAS's recommendation for Hopper

// One column-major cuBLASLt problem; key() is the plan-cache key (no per-call string work).
struct Spec {
  cudaDataType_t a_type = CUDA_R_32F, b_type = CUDA_R_32F, c_type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  Batch batch;
  int a_scale_mode = -1, b_scale_mode = -1;  // -1: not an FP8 problem
  bool c_in = false;                         // C is an input apart from D (*_add)

  GemmEngine::PlanKey key() const {
    return {int64_t(a_type),
            int64_t(b_type),
            int64_t(c_type),
            int64_t(compute),
            trans_a,
            trans_b,
            m,
            n,
            k,
            lda,
            ldb,
            ldc,
            batch.count,
            batch.stride_a,
            batch.stride_b,
            batch.stride_c,
            a_scale_mode,
            b_scale_mode,
            c_in};
  }
};

cudaDataType_t fp8_type(Format f) { return f == Format::E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }

int32_t cublas_scale_mode(ScaleLayout l) {
  switch (l) {
    case ScaleLayout::Tensor:
      return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    case ScaleLayout::RowVector:
      return CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    case ScaleLayout::Vec128:
      return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    case ScaleLayout::Blk128:
      return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    case ScaleLayout::Vec32:
      return CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0;  // never on sm_90
  }
  return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
}

const char* layout_name(ScaleLayout l) {
  switch (l) {
    case ScaleLayout::Tensor:
      return "tensor";
    case ScaleLayout::RowVector:
      return "row (outer vector)";
    case ScaleLayout::Vec128:
      return "1x128";
    case ScaleLayout::Blk128:
      return "128x128";
    case ScaleLayout::Vec32:
      return "1x32 (mx)";
  }
  return "?";
}

// C of a GEMM: F32 or BF16 with at least `count` elements; BF16 only with beta == 0.
void check_out(const Tensor& C, int64_t count, float beta, const char* what) {
  OCTET_CHECK(C.dtype == DType::F32 || C.dtype == DType::BF16,
              std::string(what) + ": C must be f32 or bf16, got " + C.str());
  OCTET_CHECK(C.data && C.numel() >= count, std::string(what) + ": C " + C.str() + " holds fewer than " +
                                                std::to_string(count) + " elements");
  OCTET_CHECK(C.dtype == DType::F32 || beta == 0.0f,
              std::string(what) + ": a BF16 C takes beta = 0 only (accumulate in FP32)");
}

// Row-major C[M,N] = opA(A)·opB(B) expressed column-major: Cᶜ[N,M] = op(B)ᶜ · op(A)ᶜ.
Spec row_major_spec(cudaDataType_t type, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                    const Batch& batch) {
  Spec s;
  s.a_type = s.b_type = type;
  s.trans_a = trans_b;  // cuBLAS A is our B
  s.trans_b = trans_a;
  s.m = N;
  s.n = M;
  s.k = K;
  s.lda = trans_b ? K : N;
  s.ldb = trans_a ? M : K;
  s.ldc = N;
  s.batch = {batch.count, batch.stride_b, batch.stride_a, batch.stride_c};
  return s;
}
}  // namespace

struct GemmEngine::Plan {
  Spec spec;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;
  std::string why;  // reason when !ok
  ~Plan() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
  }
};

namespace {
void make_layout(cublasLtMatrixLayout_t* l, cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld,
                 int count, int64_t stride) {
  OCTET_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(l, t, uint64_t(rows), uint64_t(cols), ld));
  if (count > 1) {
    int32_t c = count;
    OCTET_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &c, sizeof(c)));
    OCTET_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                        &stride, sizeof(stride)));
  }
}
}  // namespace

GemmEngine::GemmEngine(cudaStream_t stream) : stream_(stream) {
  OCTET_CUBLAS_CHECK(cublasLtCreate(&handle_));
  workspace_.reserve(kWorkspaceBytes, stream_);
}

GemmEngine::~GemmEngine() {
  plans_.clear();
  if (handle_) cublasLtDestroy(handle_);
}

GemmEngine::Plan* GemmEngine::plan_for(const PlanKey& key) {
  auto it = plans_.find(key);
  return it == plans_.end() ? nullptr : it->second.get();
}

// a_scale / b_scale: the scale pointers (cuBLASLt's A and B); vector scale modes are refused at
// heuristic time without them (CUBLAS_STATUS_INVALID_VALUE), so they are set before the query.
static std::unique_ptr<GemmEngine::Plan> build_plan(cublasLtHandle_t handle, const Spec& s,
                                                    const void* a_scale = nullptr,
                                                    const void* b_scale = nullptr) {
  auto p = std::make_unique<GemmEngine::Plan>();
  p->spec = s;
  OCTET_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, s.compute, CUDA_R_32F));
  const cublasOperation_t ta = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  OCTET_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  OCTET_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (s.a_scale_mode >= 0) {
    int32_t am = s.a_scale_mode, bm = s.b_scale_mode;
    if (cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &am, sizeof(am)) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bm, sizeof(bm)) !=
            CUBLAS_STATUS_SUCCESS) {
      p->why = "scale mode not accepted by this cuBLASLt";
      return p;
    }
    OCTET_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale,
                                                      sizeof(a_scale)));
    OCTET_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale,
                                                      sizeof(b_scale)));
  }
  // Stored shapes: op(A) is m x k, op(B) is k x n, C is m x n (column-major).
  make_layout(&p->la, s.a_type, s.trans_a ? s.k : s.m, s.trans_a ? s.m : s.k, s.lda, s.batch.count,
              s.batch.stride_a);
  make_layout(&p->lb, s.b_type, s.trans_b ? s.n : s.k, s.trans_b ? s.k : s.n, s.ldb, s.batch.count,
              s.batch.stride_b);
  make_layout(&p->lc, s.c_type, s.m, s.n, s.ldc, s.batch.count, s.batch.stride_c);
  cublasLtMatmulPreference_t pref;
  OCTET_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = kWorkspaceBytes;
  OCTET_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    p->why = std::string("no cuBLASLt algorithm (") + cublasLtGetStatusName(st) + ")";
    // Diagnose: would a BF16 output be taken?
    if ((s.a_scale_mode > 0 || s.b_scale_mode > 0) && s.c_type != CUDA_R_16BF) {
      cublasLtMatrixLayout_t lc16 = nullptr;
      cublasLtMatmulPreference_t pref2;
      OCTET_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref2));
      OCTET_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref2, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                              &ws, sizeof(ws)));
      make_layout(&lc16, CUDA_R_16BF, s.m, s.n, s.ldc, s.batch.count, s.batch.stride_c);
      int found16 = 0;
      const cublasStatus_t st16 = cublasLtMatmulAlgoGetHeuristic(handle, p->desc, p->la, p->lb, lc16, lc16,
                                                                 pref2, 1, &result, &found16);
      p->why += std::string("; with a BF16 output: ") + (st16 == CUBLAS_STATUS_SUCCESS && found16 > 0
                                                             ? "an algorithm exists"
                                                             : cublasLtGetStatusName(st16));
      cublasLtMatrixLayoutDestroy(lc16);
      cublasLtMatmulPreferenceDestroy(pref2);
    }
    return p;
  }
  p->algo = result.algo;
  p->ok = true;
  return p;
}

bool GemmEngine::run(const PlanKey& key, const void* a, const void* b, void* c, const void* a_scale,
                     const void* b_scale, float alpha, float beta, const void* c_in) {
  Plan* p = plan_for(key);
  OCTET_CHECK(p != nullptr, "GEMM plan missing");
  if (!p->ok) return false;
  if (p->spec.a_scale_mode >= 0) {
    OCTET_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale,
                                                      sizeof(a_scale)));
    OCTET_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale,
                                                      sizeof(b_scale)));
  }
  const cublasStatus_t st =
      cublasLtMatmul(handle_, p->desc, &alpha, a, p->la, b, p->lb, &beta, c_in ? c_in : c, p->lc, c, p->lc,
                     &p->algo, workspace_.get(), kWorkspaceBytes, stream_);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
    p->ok = false;
    p->why = "cublasLtMatmul returned CUBLAS_STATUS_NOT_SUPPORTED";
    return false;
  }
  OCTET_CUBLAS_CHECK(st);
  return true;
}

void GemmEngine::fp8(const DevQTensor& A, const DevQTensor& B, float* C, float beta, float alpha,
                     const Batch& batch) {
  fp8(A, B, Tensor(C, DType::F32, {(batch.count - 1) * batch.stride_c + A.rows * B.rows}), beta, alpha,
      batch);
}

void GemmEngine::fp8(const DevQTensor& A, const DevQTensor& B, const Tensor& C, float beta, float alpha,
                     const Batch& batch) {
  OCTET_CHECK(A.cols == B.cols && A.ld == B.ld,
              "FP8 GEMM: A is [" + std::to_string(A.rows) + ", " + std::to_string(A.cols) + "] but B is [" +
                  std::to_string(B.rows) + ", " + std::to_string(B.cols) + "]: K must agree (C = A·Bᵀ)");
  OCTET_CHECK(!(A.format == Format::E5M2 && B.format == Format::E5M2),
              "FP8 GEMM: E5M2 x E5M2 is not supported by cuBLASLt (quantize one operand as E4M3)");
  OCTET_CHECK(batch.count == 1 || (A.layout == ScaleLayout::Tensor && B.layout == ScaleLayout::Tensor),
              "batched FP8 GEMM: per-tensor scales only");
  OCTET_CHECK(batch.count == 1 || (A.rows_pad == A.rows && B.rows_pad == B.rows),
              "batched FP8 GEMM: M and N must be multiples of 16");
  const int64_t count = (batch.count - 1) * batch.stride_c + A.rows * B.rows;
  check_out(C, count, beta, "FP8 GEMM");
  std::string why = "fallback forced";
  if (C.dtype == DType::BF16) {
    if (!force_fallback_ && fp8_native(A, B, C.data, CUDA_R_16BF, 0.0f, alpha, batch, &why)) return;
    float* tmp = bf16_out_scratch(C, batch, A.rows * B.rows);
    fp8(A, B, Tensor(tmp, DType::F32, {count}), 0.0f, alpha, batch);
    convert_launch(Tensor(C.data, DType::BF16, {count}), Tensor(tmp, DType::F32, {count}), stream_);
    return;
  }
  if (!force_fallback_ && fp8_native(A, B, C.data, CUDA_R_32F, beta, alpha, batch, &why)) return;
  if (!force_fallback_)
    why = std::string("cuBLASLt refused FP8 GEMM (A ") + layout_name(A.layout) + ", B " +
          layout_name(B.layout) + " scales): " + why;
  fp8_fallback(A, B, C.f32(), beta, alpha, batch, why);
}

bool GemmEngine::fp8_native(const DevQTensor& A, const DevQTensor& B, void* C, int c_type, float beta,
                            float alpha, const Batch& batch, std::string* why, const void* c_in) {
  const int64_t M = A.rows, N = B.rows;
  const bool padded = A.rows_pad != M || B.rows_pad != N;
  if (padded && c_in) {
    *why = "a separate C input with M or N not a multiple of 16";
    return false;
  }
  Spec s;
  s.a_type = fp8_type(B.format);
  s.b_type = fp8_type(A.format);
  s.c_type = cudaDataType_t(c_type);
  s.trans_a = true;
  s.trans_b = false;
  s.m = B.rows_pad;
  s.n = A.rows_pad;
  s.k = A.ld;
  s.lda = B.ld;
  s.ldb = A.ld;
  s.ldc = s.m;
  s.batch = {batch.count, batch.stride_b, batch.stride_a, batch.stride_c};
  s.a_scale_mode = cublas_scale_mode(B.layout);
  s.b_scale_mode = cublas_scale_mode(A.layout);
  s.c_in = c_in != nullptr;
  const PlanKey key = s.key();
  Plan* plan = plan_for(key);
  if (!plan) plan = (plans_[key] = build_plan(handle_, s, B.scale_inv, A.scale_inv)).get();
  if (!plan->ok) {
    *why = plan->why;
    return false;
  }
  // A padded problem computes into a [rows_pad of B, rows_pad of A] scratch C and copies the
  // M x N block out (and in first, for beta != 0).
  const size_t elem = c_type == CUDA_R_16BF ? 2 : 4;
  void* target = C;
  if (padded) {
    target = c_pad_.reserve(size_t(s.m * s.n) * elem, stream_);
    if (beta != 0.0f)
      OCTET_CUDA_CHECK(cudaMemcpy2DAsync(target, size_t(s.m) * elem, C, size_t(N) * elem, size_t(N) * elem,
                                         size_t(M), cudaMemcpyDeviceToDevice, stream_));
  }
  if (!run(key, B.codes, A.codes, target, B.scale_inv, A.scale_inv, alpha, beta, c_in)) {
    *why = plan->why;
    return false;
  }
  if (padded)
    OCTET_CUDA_CHECK(cudaMemcpy2DAsync(C, size_t(N) * elem, target, size_t(s.m) * elem, size_t(N) * elem,
                                       size_t(M), cudaMemcpyDeviceToDevice, stream_));
  return true;
}

void GemmEngine::check_add(const Tensor& D, const Tensor& R, int64_t mn, const char* what) {
  check_out(D, mn, 0.0f, what);
  OCTET_CHECK(R.dtype == D.dtype && R.data && R.numel() == D.numel() && D.numel() == mn,
              std::string(what) + ": the residual R must be a " + to_string(D.dtype) + " tensor of " +
                  std::to_string(mn) + " elements like D " + D.str() + ", got " + R.str());
  const auto* r = static_cast<const char*>(R.data);
  const auto* d = static_cast<const char*>(D.data);
  OCTET_CHECK(r == d || r + R.bytes() <= d || d + D.bytes() <= r,
              std::string(what) + ": the residual R overlaps D without being D");
}

template <class F>
void GemmEngine::add_through_f32(const Tensor& D, const Tensor& R, int64_t mn, F&& gemm_beta1) {
  const Tensor r(R.data, R.dtype, {mn});
  if (D.dtype == DType::F32) {
    convert_launch(Tensor(D.data, DType::F32, {mn}), r, stream_);  // a copy (none when R is D)
    gemm_beta1(D.f32());
    return;
  }
  const Tensor t(c32_.reserve(size_t(mn), stream_), DType::F32, {mn});
  convert_launch(t, r, stream_);
  gemm_beta1(t.f32());
  convert_launch(Tensor(D.data, DType::BF16, {mn}), t, stream_);
}

const void* GemmEngine::residual_input(const Tensor& D, const Tensor& R) {
  // a C less aligned than cuBLASLt's heuristic assumes (256 bytes) could fail at run time and mark
  // the shared plan unusable: such an R is copied into aligned scratch as well
  if (R.data != D.data && reinterpret_cast<uintptr_t>(R.data) % 256 == 0) return R.data;
  void* copy = r_copy_.reserve(R.bytes(), stream_);
  OCTET_CUDA_CHECK(cudaMemcpyAsync(copy, R.data, R.bytes(), cudaMemcpyDeviceToDevice, stream_));
  return copy;
}

void GemmEngine::fp8_add(const DevQTensor& A, const DevQTensor& B, const Tensor& D, const Tensor& R,
                         float alpha) {
  const int64_t mn = A.rows * B.rows;
  check_add(D, R, mn, "FP8 GEMM with residual");
  std::string why;
  const int c_type = D.dtype == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
  if (!force_fallback_ && fp8_native(A, B, D.data, c_type, 1.0f, alpha, {}, &why, residual_input(D, R)))
    return;
  add_through_f32(D, R, mn, [&](float* c) { fp8(A, B, c, 1.0f, alpha); });
}

void GemmEngine::bf16_add(const uint16_t* A, bool trans_a, const uint16_t* B, bool trans_b, const Tensor& D,
                          const Tensor& R, int64_t M, int64_t N, int64_t K, float alpha) {
  check_add(D, R, M * N, "BF16 GEMM with residual");
  Spec s = row_major_spec(CUDA_R_16BF, trans_a, trans_b, M, N, K, {});
  s.c_type = D.dtype == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
  s.c_in = true;
  const PlanKey key = s.key();
  if (!plan_for(key)) plans_[key] = build_plan(handle_, s);
  if (run(key, B, A, D.data, nullptr, nullptr, alpha, 1.0f, residual_input(D, R))) return;
  add_through_f32(D, R, M * N, [&](float* c) { bf16(A, trans_a, B, trans_b, c, M, N, K, 1.0f, alpha); });
}

float* GemmEngine::bf16_out_scratch(const Tensor& C, const Batch& batch, int64_t mn) {
  OCTET_CHECK(C.dtype == DType::BF16, "GEMM: BF16 output scratch for a " + C.str());
  // The rounding pass covers [0, count): batches must be back to back (no gaps to overwrite).
  OCTET_CHECK(batch.count == 1 || batch.stride_c == mn,
              "GEMM: a batched BF16 output without a BF16-output algorithm needs stride_c == M*N");
  return c32_.reserve(size_t((batch.count - 1) * batch.stride_c + mn), stream_);
}

void GemmEngine::fp8_fallback(const DevQTensor& A, const DevQTensor& B, float* C, float beta, float alpha,
                              const Batch& batch, const std::string& why) {
  ++fallbacks_;
  const std::string kind = std::string(layout_name(A.layout)) + "/" + layout_name(B.layout);
  if (!force_fallback_ && !warned_[kind]) {
    warned_[kind] = true;
    std::fprintf(stderr,
                 "octet cuda: %s; falling back to dequantize + FP32 GEMM for %s scales "
                 "(correct, slow)\n",
                 why.c_str(), kind.c_str());
  }
  const int64_t M = A.rows, N = B.rows, K = A.cols;
  float* da = deq_a_.reserve(size_t(M * K), stream_);
  float* db = deq_b_.reserve(size_t(N * K), stream_);
  for (int i = 0; i < batch.count; ++i) {
    DevQTensor a = A, b = B;
    a.codes += i * batch.stride_a;
    b.codes += i * batch.stride_b;
    dequantize_launch(a, da, stream_);
    dequantize_launch(b, db, stream_);
    f32(da, false, db, true, C + i * batch.stride_c, M, N, K, beta, alpha);
  }
}

void GemmEngine::bf16(const uint16_t* A, bool trans_a, const uint16_t* B, bool trans_b, float* C, int64_t M,
                      int64_t N, int64_t K, float beta, float alpha, const Batch& batch) {
  bf16(A, trans_a, B, trans_b, Tensor(C, DType::F32, {(batch.count - 1) * batch.stride_c + M * N}), M, N, K,
       beta, alpha, batch);
}

void GemmEngine::bf16(const uint16_t* A, bool trans_a, const uint16_t* B, bool trans_b, const Tensor& C,
                      int64_t M, int64_t N, int64_t K, float beta, float alpha, const Batch& batch) {
  const int64_t count = (batch.count - 1) * batch.stride_c + M * N;
  check_out(C, count, beta, "BF16 GEMM");
  Spec s = row_major_spec(CUDA_R_16BF, trans_a, trans_b, M, N, K, batch);
  s.c_type = C.dtype == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
  const PlanKey key = s.key();
  Plan* plan = plan_for(key);
  if (!plan) plan = (plans_[key] = build_plan(handle_, s)).get();
  if (run(key, B, A, C.data, nullptr, nullptr, alpha, beta)) return;
  const std::string what = "BF16 GEMM [" + std::to_string(M) + "x" + std::to_string(N) + "x" +
                           std::to_string(K) + "]: " + plan->why;
  OCTET_CHECK(C.dtype == DType::BF16, what);
  float* tmp = bf16_out_scratch(C, batch, M * N);  // no BF16-output algorithm: FP32, then round
  bf16(A, trans_a, B, trans_b, Tensor(tmp, DType::F32, {count}), M, N, K, 0.0f, alpha, batch);
  convert_launch(Tensor(C.data, DType::BF16, {count}), Tensor(tmp, DType::F32, {count}), stream_);
}

void GemmEngine::f32(const float* A, bool trans_a, const float* B, bool trans_b, float* C, int64_t M,
                     int64_t N, int64_t K, float beta, float alpha, const Batch& batch) {
  const Spec s = row_major_spec(CUDA_R_32F, trans_a, trans_b, M, N, K, batch);
  const PlanKey key = s.key();
  if (!plan_for(key)) plans_[key] = build_plan(handle_, s);
  OCTET_CHECK(run(key, B, A, C, nullptr, nullptr, alpha, beta),
              "FP32 GEMM [" + std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) +
                  "]: " + plan_for(key)->why);
}

}  // namespace octet::cuda
