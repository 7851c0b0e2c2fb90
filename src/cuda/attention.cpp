// src/cuda/attention.cpp — CudaAttention: unfused FP8 (stale or matched delta) and BF16 attention,
// forward and backward, the twin of the CPU reference's whole-row form (src/cpu/attention_*.cpp).
//
// Every matrix product is a batched cuBLASLt GEMM over the B·G KV heads, the rep = H/G query heads
// of a KV head stacked along M (GQA without copies):
//   forward   S  = τ Q̂K̂ᵀ        FP8 x FP8   [rep·Tq, D] x [Tk, D]ᵀ
//             O  = P̃ V̂          FP8 x FP8   [rep·Tq, Tk] x [D, Tk]ᵀ   (V̂ᵀ packed at quantization)
//   backward  S  recomputed,  dP = dÔ V̂ᵀ    FP8 x FP8
//             dV = P̃ᵀ (dO/l)~   FP8 x FP8   [Tk, rep·Tq] x [D, rep·Tq]ᵀ  (P̃ from exp(S − m))
//             dQ = τ dŜ K̂,  dK = τ dŜᵀ Q̂   BF16 x BF16 on exact values: dŜ carries one power-of-two
//             scale per (block_q x block_k) tile (attention.h), which a per-tensor-scaled FP8 GEMM
//             cannot apply along K; dŜ's values are exact in BF16 and Q̂, K̂ enter as their decoded
//             codes with the tensor scale applied after the GEMM, so the products are the FP8 ones.
// Softmax, delta, dS and their diagnostics are row kernels (attention_kernels.h). S, dP and dS are
// materialized ([B, H, Tq, Tk] FP32): this is the reference-exact unfused form, not a flash kernel.
// Supported: precision fp8 and bf16, QkvScaling::Tensor, head_dim a multiple of 16; the tiled
// form's per-tile P rounding is a fused kernel's and is refused here with a clear error.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cuda/attention_kernels.h"
#include "cuda/buffer.h"
#include "cuda/check.h"
#include "cuda/cuda_backend.h"
#include "cuda/gemm.h"
#include "octet/error.h"

namespace octet::cuda {
namespace {

class CudaAttention final : public Attention {
 public:
  CudaAttention(const AttentionShape& shape, const AttentionConfig& cfg, GemmEngine& gemm)
      : shape_(shape), cfg_(cfg), gemm_(gemm), s_(gemm.stream()) {
    shape.validate();
    OCTET_CHECK(cfg.precision != AttnPrecision::FP64,
                "cuda attention: precision fp64 is CPU-only (use fp8 or bf16)");
    OCTET_CHECK(cfg.qkv_scaling == QkvScaling::Tensor,
                "cuda attention: qkv scaling per (head, 128-token block) is not implemented on "
                "CUDA (use per-tensor scaling)");
    OCTET_CHECK(cfg.form == AttnForm::Whole,
                "cuda attention: the unfused CUDA attention implements the whole-row form only "
                "(form 'tiled' rounds P per key tile, which needs the fused kernel)");
    OCTET_CHECK(shape.head_dim % 16 == 0,
                "cuda attention: head_dim must be a multiple of 16 for the FP8/BF16 tensor-core "
                "GEMMs, got " + std::to_string(shape.head_dim));
    OCTET_CHECK(cfg.block_q % 32 == 0 && cfg.block_k % 32 == 0 && cfg.block_q > 0 && cfg.block_k > 0,
                "cuda attention: block_q and block_k (the dS scale tiles) must be multiples of 32");
    OCTET_CHECK(cfg.p_scale > 0 && cfg.p_scale <= 448.0f && pow2_round_down(cfg.p_scale) == cfg.p_scale,
                "cuda attention: p_scale must be a power of two in (0, 448]");
    d_.B = shape.batch;
    d_.H = shape.n_heads;
    d_.G = shape.n_kv_heads;
    d_.rep = d_.H / d_.G;
    d_.Tq = shape.seq_q;
    d_.Tk = shape.seq_k;
    d_.Tq_p = (d_.Tq + 15) / 16 * 16;
    d_.Tk_p = (d_.Tk + 15) / 16 * 16;
    d_.D = shape.head_dim;
    d_.causal = shape.causal;
    fp8_ = cfg.precision == AttnPrecision::FP8;
    eb_ = fp8_ ? 1 : 2;
    const float host[2] = {1.0f / cfg.p_scale, 0.0f};
    scales_.reserve(6 * kScaleStride);  // sq, sk, sv, sdo, p_inv, sdv, each 128-byte aligned
    OCTET_CUDA_CHECK(cudaMemcpyAsync(p_inv(), host, sizeof(float), cudaMemcpyHostToDevice, s_));
    OCTET_CUDA_CHECK(cudaStreamSynchronize(s_));
    amax_.reserve(1);
  }

  void forward(const float* q, const float* k, const float* v, float* o, float* lse) override {
    const AttnDims& d = d_;
    const int64_t nq = d.B * d.H * d.Tq_p * d.D, nk = d.B * d.G * d.Tk_p * d.D;
    const PackKind rowk = fp8_ ? PackKind::Fp8Code : PackKind::Bf16OfValue;
    const PackKind transk16 = fp8_ ? PackKind::Bf16OfCode : PackKind::Bf16OfValue;
    pack(q, d.H, d.Tq, d.Tq_p, d.rep, Format::E4M3, sq(), rowk, q_rows_.reserve(size_t(nq * eb_)),
         transk16, q_t16_.reserve(size_t(nq)));
    pack(k, d.G, d.Tk, d.Tk_p, 1, Format::E4M3, sk(), rowk, k_rows_.reserve(size_t(nk * eb_)),
         transk16, k_t16_.reserve(size_t(nk)));
    pack(v, d.G, d.Tk, d.Tk_p, 1, Format::E4M3, sv(), rowk, v_rows_.reserve(size_t(nk * eb_)), rowk,
         v_t_.reserve(size_t(nk * eb_)));
    logits();
    const int64_t nrows = d.B * d.H * d.Tq;
    if (d.Tq_p != d.Tq)  // pad query rows of P̃ stay zero: dV's GEMM contracts over them
      OCTET_CUDA_CHECK(cudaMemsetAsync(P_.reserve(size_t(nS() * eb_)), 0, size_t(nS() * eb_), s_));
    softmax_forward_launch(d, S_.get(), fp8_, cfg_.p_scale, P_.reserve(size_t(nS() * eb_)),
                           lse_.reserve(size_t(nrows)), rinv_.reserve(size_t(nrows)), s_);
    // O = P̃ V̂ (unnormalized), then · 1/Σ P̃ and rounded to BF16.
    mm(P_.get(), Format::E4M3, p_inv(), v_t_.get(), Format::E4M3, sv(), o_acc_.reserve(size_t(nq)),
       d.rep * d.Tq_p, d.D, d.Tk_p, 1.0f);
    output_finalize_launch(d, o_acc_.get(), rinv_.get(), o, o_saved_.reserve(size_t(nrows * d.D)), s_);
    OCTET_CUDA_CHECK(cudaMemcpyAsync(lse, lse_.get(), size_t(nrows) * sizeof(float),
                                     cudaMemcpyDeviceToDevice, s_));
    has_forward_ = true;
  }

  AttentionStats backward(const float* d_o, float* dq, float* dk, float* dv) override {
    OCTET_CHECK(has_forward_, "attention: backward called before any forward");
    const AttnDims& d = d_;
    const int64_t nq = d.B * d.H * d.Tq_p * d.D, nk = d.B * d.G * d.Tk_p * d.D;
    const PackKind rowk = fp8_ ? PackKind::Fp8Code : PackKind::Bf16OfValue;
    pack(d_o, d.H, d.Tq, d.Tq_p, d.rep, cfg_.do_format, sdo(), rowk,
         do_rows_.reserve(size_t(nq * eb_)), PackKind::None, nullptr);
    logits();  // S recomputed from the saved Q̂, K̂
    mm(do_rows_.get(), cfg_.do_format, sdo(), v_rows_.get(), Format::E4M3, sv(),
       dP_.reserve(size_t(nS())), d.rep * d.Tq_p, d.Tk_p, d.D, 1.0f);
    const int64_t nrows = d.B * d.H * d.Tq;
    BackwardRowArgs a{};
    a.S = S_.get();
    a.dP = dP_.get();
    a.lse = lse_.get();
    a.o = o_saved_.get();
    a.d_o = d_o;
    a.do_rows = do_rows_.get();
    a.do_scale_inv = sdo();
    a.do_format = cfg_.do_format;
    a.fp8 = fp8_;
    a.matched = cfg_.delta == DeltaMode::Matched;
    a.p_scale = cfg_.p_scale;
    a.P = P_.get();
    a.residual = residual_.reserve(size_t(nrows));
    a.row_factor = row_factor_.reserve(size_t(nrows));
    backward_rows_launch(d, a, s_);
    // dV's operand dO_i / l_i (P without underflow: P̃ is exp(S − m)), its own per-tensor scale.
    pack(d_o, d.H, d.Tq, d.Tq_p, d.rep, cfg_.do_format, sdv(), PackKind::None, nullptr, rowk,
         do_t_.reserve(size_t(nq * eb_)), row_factor_.get());
    const int64_t ntiles = d.B * d.H * ((d.Tq + cfg_.block_q - 1) / cfg_.block_q) *
                           ((d.Tk + cfg_.block_k - 1) / cfg_.block_k);
    ds_quantize_launch(d, dP_.get(), fp8_, cfg_.ds_format, cfg_.block_q, cfg_.block_k,
                       tile_amax_.reserve(size_t(ntiles)), ds_rows_.reserve(size_t(nS())),
                       ds_t_.reserve(size_t(nS())), P_.get(), P_t_.reserve(size_t(nS() * eb_)),
                       int(eb_), s_);
    // dV = P̃ᵀ dÔ,  dQ = τ dŜ K̂,  dK = τ dŜᵀ Q̂ (the last two on exact BF16 values).
    mm(P_t_.get(), Format::E4M3, p_inv(), do_t_.get(), cfg_.do_format, sdv(),
       dv_acc_.reserve(size_t(nk)), d.Tk_p, d.D, d.rep * d.Tq_p, 1.0f);
    const float tau = shape_.tau();
    gemm_.bf16(ds_rows_.get(), false, k_t16_.get(), true, dq_acc_.reserve(size_t(nq)),
               d.rep * d.Tq_p, d.D, d.Tk_p, 0.0f, tau,
               {int(d.B * d.G), d.rep * d.Tq_p * d.Tk_p, d.D * d.Tk_p, d.rep * d.Tq_p * d.D});
    gemm_.bf16(ds_t_.get(), false, q_t16_.get(), true, dk_acc_.reserve(size_t(nk)), d.Tk_p, d.D,
               d.rep * d.Tq_p, 0.0f, tau,
               {int(d.B * d.G), d.Tk_p * d.rep * d.Tq_p, d.D * d.rep * d.Tq_p, d.Tk_p * d.D});
    unpad_scale_launch(dq_acc_.get(), dq, d.B * d.H, d.Tq, d.Tq_p, d.D, 1.0f, fp8_ ? sk() : nullptr,
                       nullptr, s_);
    unpad_scale_launch(dk_acc_.get(), dk, d.B * d.G, d.Tk, d.Tk_p, d.D, 1.0f, fp8_ ? sq() : nullptr,
                       nullptr, s_);
    unpad_scale_launch(dv_acc_.get(), dv, d.B * d.G, d.Tk, d.Tk_p, d.D, 1.0f, nullptr, nullptr, s_);
    // Diagnostics: r_i = |Σ_j dS_ij| / Σ_j P_ij(|dP_ij| + |D_i|) per row, max (NaN reported), mean.
    std::vector<double> res(static_cast<size_t>(nrows));
    OCTET_CUDA_CHECK(cudaMemcpyAsync(res.data(), residual_.get(), res.size() * sizeof(double),
                                     cudaMemcpyDeviceToHost, s_));
    OCTET_CUDA_CHECK(cudaStreamSynchronize(s_));
    AttentionStats st;
    double total = 0.0;
    for (double r : res) {
      double& mx = st.row_residual_max;
      if (r != r || (mx == mx && r > mx)) mx = r;
      total += r;
    }
    st.row_residual_mean = total / double(nrows);
    return st;
  }

 private:
  int64_t nS() const { return d_.B * d_.H * d_.Tq_p * d_.Tk_p; }
  // cuBLASLt refuses (NOT_SUPPORTED) scale pointers that are not 16-byte aligned: one per 128 B.
  static constexpr int64_t kScaleStride = 32;
  float* sq() { return scales_.get() + 0 * kScaleStride; }
  float* sk() { return scales_.get() + 1 * kScaleStride; }
  float* sv() { return scales_.get() + 2 * kScaleStride; }
  float* sdo() { return scales_.get() + 3 * kScaleStride; }
  float* p_inv() { return scales_.get() + 4 * kScaleStride; }
  float* sdv() { return scales_.get() + 5 * kScaleStride; }

  void pack(const float* x, int64_t heads, int64_t T, int64_t T_p, int64_t rep, Format f,
            float* scale_inv, PackKind row_kind, void* row, PackKind trans_kind, void* trans,
            const float* row_factor = nullptr) {
    PackArgs a;
    a.x = x;
    a.B = d_.B;
    a.heads = heads;
    a.T = T;
    a.T_p = T_p;
    a.D = d_.D;
    a.rep = rep;
    a.format = f;
    a.fp8 = fp8_;
    a.row_factor = row_factor;
    if (fp8_) amax_launch(x, d_.B * heads * T * d_.D, amax_.get(), s_, row_factor, d_.D);
    a.amax_bits = amax_.get();
    a.scale_inv = scale_inv;
    a.row_kind = row_kind;
    a.row = row;
    a.trans_kind = trans_kind;
    a.trans = trans;
    pack_launch(a, s_);
  }

  // S = τ Q̂K̂ᵀ for every head.
  void logits() {
    mm(q_rows_.get(), Format::E4M3, sq(), k_rows_.get(), Format::E4M3, sk(),
       S_.reserve(size_t(nS())), d_.rep * d_.Tq_p, d_.Tk_p, d_.D, shape_.tau());
  }

  // Batched over the B·G KV heads: C[M,N] = alpha · A[M,K]·B[N,K]ᵀ, FP8 (per-tensor scales) or BF16.
  void mm(const void* A, Format fa, const float* sa, const void* B, Format fb, const float* sb,
          float* C, int64_t M, int64_t N, int64_t K, float alpha) {
    const Batch batch{int(d_.B * d_.G), M * K, N * K, M * N};
    if (!fp8_) {
      gemm_.bf16(static_cast<const uint16_t*>(A), false, static_cast<const uint16_t*>(B), true, C,
                 M, N, K, 0.0f, alpha, batch);
      return;
    }
    DevQTensor a, b;
    a.format = fa;
    b.format = fb;
    a.set_shape(M, K);
    b.set_shape(N, K);
    a.codes = const_cast<uint8_t*>(static_cast<const uint8_t*>(A));
    b.codes = const_cast<uint8_t*>(static_cast<const uint8_t*>(B));
    a.scale_inv = const_cast<float*>(sa);
    b.scale_inv = const_cast<float*>(sb);
    gemm_.fp8(a, b, C, 0.0f, alpha, batch);
  }

  AttentionShape shape_;
  AttentionConfig cfg_;
  GemmEngine& gemm_;
  cudaStream_t s_;
  AttnDims d_{};
  bool fp8_ = true, has_forward_ = false;
  int64_t eb_ = 1;
  DeviceBuffer<float> scales_;
  DeviceBuffer<unsigned> amax_, tile_amax_;
  DeviceBuffer<uint8_t> q_rows_, k_rows_, v_rows_, v_t_, P_, P_t_, do_rows_, do_t_;
  DeviceBuffer<uint16_t> q_t16_, k_t16_, ds_rows_, ds_t_;
  DeviceBuffer<float> S_, dP_, o_acc_, rinv_, lse_, o_saved_, dq_acc_, dk_acc_, dv_acc_;
  DeviceBuffer<float> row_factor_;
  DeviceBuffer<double> residual_;
};

}  // namespace

std::unique_ptr<Attention> CudaBackend::make_attention(const AttentionShape& shape,
                                                       const AttentionConfig& config) {
  return std::make_unique<CudaAttention>(shape, config, *gemm_);
}

}  // namespace octet::cuda
