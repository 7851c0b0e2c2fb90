// src/cuda/attention/unfused/unfused.cpp — the unfused CUDA attention: FP8 (stale or matched
// delta) and BF16, forward and backward, the twin of the CPU reference's whole-row form
// (src/cpu/attention_whole.cpp). docs/attention.md §"Unfused form".
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
// Softmax, delta, dS and their diagnostics are row kernels (unfused.h). S, dP and dS are
// materialized ([B, H, Tq, Tk] FP32): the reference-exact form, for checking and for shapes the
// flash kernels do not take. Supported: precision fp8 and bf16, QkvScaling::Tensor, head_dim a
// multiple of 16. Only the stale delta's row kernel widens O and dO to FP32 scratch (exact), and O
// goes through FP32 scratch rounded once (it is BF16-valued already).
#include <memory>

#include "cuda/attention/attention_base.h"
#include "cuda/attention/unfused/unfused.h"
#include "cuda/gemm/gemm.h"
#include "cuda/ops/ops.h"
#include "cuda/quantize/qtensor.h"
#include "cuda/runtime/act_f32.h"
#include "octet/error.h"

namespace octet::cuda {
namespace {

class UnfusedAttention final : public AttentionBase {
 public:
  UnfusedAttention(const AttentionShape& shape, const AttentionConfig& cfg, CudaBackend& backend)
      : AttentionBase(shape, cfg, backend, /*trans_fp8=*/false), gemm_(backend.gemm()) {
    OCTET_CHECK(!cfg.dq_projection,
                "cuda attention: the dQ row-sum projection is implemented for the flash FP8 "
                "kernels (form 'flash', precision fp8) and the CPU reference "
                "(docs/delta-matching.md)");
    OCTET_CHECK(cfg.qkv_scaling == QkvScaling::Tensor || cfg.precision != AttnPrecision::FP8,
                "cuda attention: qkv scaling per (head, 128-token block) runs on the flash FP8 "
                "kernels (form 'flash'); the unfused form 'whole' takes one scale per tensor");
  }

 private:
  int64_t nS() const { return d_.B * d_.H * d_.Tq_p * d_.Tk_p; }
  float* f32_out(const Tensor& t) { return cuda::f32_out(t, out_, s_); }

  void forward_impl(AttnState& st, const Tensor& o, const Tensor& lse) override {
    const AttnDims& d = d_;
    const int64_t nq = this->nq();
    logits(st);
    uint8_t* P = P_.reserve(size_t(nS() * eb_), s_);
    if (d.Tq_p != d.Tq)  // pad query rows of P̃ stay zero: dV's GEMM contracts over them
      OCTET_CUDA_CHECK(cudaMemsetAsync(P, 0, size_t(nS() * eb_), s_));
    softmax_forward_launch(d, S_.get(), fp8_, cfg_.p_scale, P, lse.f32(), rinv_.reserve(size_t(st.rows), s_),
                           st.row_max(), st.row_sum(), s_);
    // O = P̃ V̂ (unnormalized), then · 1/Σ P̃ and rounded to BF16.
    mm(P, Format::E4M3, p_inv(), v_t_.get(), Format::E4M3, st.sv(), o_acc_.reserve(size_t(nq), s_),
       d.rep * d.Tq_p, d.D, d.Tk_p, 1.0f);
    output_finalize_launch(d, o_acc_.get(), rinv_.get(), f32_out(o), nullptr, s_);
    f32_out_finish(o, out_, s_);
  }

  void backward_impl(const AttnState& st, const SavedAttention& saved, const Tensor& d_o, const Tensor& dq,
                     const Tensor& dk, const Tensor& dv, const Tensor& residual) override {
    const AttnDims& d = d_;
    const int64_t nq = this->nq(), nk = this->nk();
    pack(d_o, d.H, d.Tq, d.Tq_p, d.rep, cfg_.do_format, sdo(), row_kind(),
         do_rows_.reserve(size_t(nq * eb_), s_), PackKind::None, nullptr);
    logits(st);
    mm(do_rows_.get(), cfg_.do_format, sdo(), st.v_rows.tensor().data, Format::E4M3, st.sv(),
       dP_.reserve(size_t(nS()), s_), d.rep * d.Tq_p, d.Tk_p, d.D, 1.0f);
    const int64_t nrows = st.rows;
    BackwardRowArgs a{};
    a.S = S_.get();
    a.dP = dP_.get();
    a.row_max = st.row_max();
    a.row_sum = st.row_sum();
    const bool stale = cfg_.delta == DeltaMode::Stale;  // the row kernel reads O and dO in FP32
    a.o = stale ? f32_in(saved.o, in_k_, s_) : nullptr;
    a.d_o = stale ? f32_in(d_o, in_q_, s_) : nullptr;
    a.fp8 = fp8_;
    a.matched = cfg_.delta == DeltaMode::Matched;
    a.p_scale = cfg_.p_scale;
    a.P = P_.reserve(size_t(nS() * eb_), s_);
    if (d.Tq_p != d.Tq)  // as in the forward: this object may not have run the forward of this state
      OCTET_CUDA_CHECK(cudaMemsetAsync(a.P, 0, size_t(nS() * eb_), s_));
    a.residual = residual_.reserve(size_t(nrows), s_);
    a.row_factor = row_factor_.reserve(size_t(nrows), s_);
    backward_rows_launch(d, a, s_);
    // dV's operand dO_i / l_i (P without underflow: P̃ is exp(S − m)), its own per-tensor scale.
    pack(d_o, d.H, d.Tq, d.Tq_p, d.rep, cfg_.do_format, sdv(), PackKind::None, nullptr, row_kind(),
         do_t_.reserve(size_t(nq * eb_), s_), row_factor_.get());
    const int64_t ntiles = d.B * d.H * ceil_div(d.Tq, cfg_.block_q) * ceil_div(d.Tk, cfg_.block_k);
    ds_quantize_launch(d, dP_.get(), fp8_, cfg_.ds_format, cfg_.block_q, cfg_.block_k,
                       tile_amax_.reserve(size_t(ntiles), s_), ds_rows_.reserve(size_t(nS()), s_),
                       ds_t_.reserve(size_t(nS()), s_), P_.get(), P_t_.reserve(size_t(nS() * eb_), s_),
                       int(eb_), s_);
    // dV = P̃ᵀ dÔ,  dQ = τ dŜ K̂,  dK = τ dŜᵀ Q̂ (the last two on exact BF16 values).
    mm(P_t_.get(), Format::E4M3, p_inv(), do_t_.get(), cfg_.do_format, sdv(), dv_acc_.reserve(size_t(nk), s_),
       d.Tk_p, d.D, d.rep * d.Tq_p, 1.0f);
    const float tau = shape_.tau();
    gemm_.bf16(ds_rows_.get(), false, st.k_t.tensor().bf16(), true, dq_acc_.reserve(size_t(nq), s_),
               d.rep * d.Tq_p, d.D, d.Tk_p, 0.0f, tau,
               {int(d.B * d.G), d.rep * d.Tq_p * d.Tk_p, d.D * d.Tk_p, d.rep * d.Tq_p * d.D});
    gemm_.bf16(ds_t_.get(), false, st.q_t.tensor().bf16(), true, dk_acc_.reserve(size_t(nk), s_), d.Tk_p, d.D,
               d.rep * d.Tq_p, 0.0f, tau,
               {int(d.B * d.G), d.Tk_p * d.rep * d.Tq_p, d.D * d.rep * d.Tq_p, d.Tk_p * d.D});
    // Unpadded into the F32 or BF16 outputs (rounded once); FP8: dQ × sk and dK × sq (the GEMMs ran
    // on codes).
    const float* sk = fp8_ ? st.sk() : nullptr;
    const float* sq = fp8_ ? st.sq() : nullptr;
    const bool tm = d.tokens_major;
    unpad_scale_launch(dq_acc_.get(), dq.data, dq.dtype, d.B * d.H, d.Tq, d.Tq_p, d.D, 1.0f, sk, nullptr, s_,
                       tm, d.H);
    unpad_scale_launch(dk_acc_.get(), dk.data, dk.dtype, d.B * d.G, d.Tk, d.Tk_p, d.D, 1.0f, sq, nullptr, s_,
                       tm, d.G);
    unpad_scale_launch(dv_acc_.get(), dv.data, dv.dtype, d.B * d.G, d.Tk, d.Tk_p, d.D, 1.0f, nullptr, nullptr,
                       s_, tm, d.G);
    // Diagnostics: r_i = |Σ_j dS_ij| / Σ_j P_ij(|dP_ij| + |D_i|) per row -> max and mean, added
    // into the caller's accumulator on the device.
    if (!residual.empty()) residual_accumulate_launch(residual_.get(), nrows, residual.f64(), s_);
  }

  // S = τ Q̂K̂ᵀ for every head, from a forward's saved operands.
  void logits(const AttnState& st) {
    mm(st.q_rows.tensor().data, Format::E4M3, st.sq(), st.k_rows.tensor().data, Format::E4M3, st.sk(),
       S_.reserve(size_t(nS()), s_), d_.rep * d_.Tq_p, d_.Tk_p, d_.D, shape_.tau());
  }

  // Batched over the B·G KV heads: C[M,N] = alpha · A[M,K]·B[N,K]ᵀ, FP8 (per-tensor scales) or BF16.
  void mm(const void* A, Format fa, const float* sa, const void* B, Format fb, const float* sb, float* C,
          int64_t M, int64_t N, int64_t K, float alpha) {
    const Batch batch{int(d_.B * d_.G), M * K, N * K, M * N};
    if (!fp8_) {
      gemm_.bf16(static_cast<const uint16_t*>(A), false, static_cast<const uint16_t*>(B), true, C, M, N, K,
                 0.0f, alpha, batch);
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

  GemmEngine& gemm_;
  DeviceBuffer<unsigned> tile_amax_;
  DeviceBuffer<uint8_t> P_, P_t_, do_t_;
  DeviceBuffer<uint16_t> ds_rows_, ds_t_;
  DeviceBuffer<float> S_, dP_, o_acc_, rinv_, dq_acc_, dk_acc_, dv_acc_, in_q_, in_k_, out_;
  DeviceBuffer<float> row_factor_;
  DeviceBuffer<double> residual_;
};

}  // namespace

std::unique_ptr<Attention> make_unfused_attention(const AttentionShape& shape, const AttentionConfig& cfg,
                                                  CudaBackend& backend) {
  return std::make_unique<UnfusedAttention>(shape, cfg, backend);
}

}  // namespace octet::cuda
