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
// Supported: precision fp8 and bf16, QkvScaling::Tensor (HeadBlock: the fused kernels only),
// head_dim a multiple of 16. Form 'tiled'
// (FP8 only; head_dim, block_q and block_k 64 or 128) runs forward and backward as the fused
// kernels of src/cuda/flash/ (twin: the CPU tiled form; no S, P or dS buffer): the forward saves
// the same operands and softmax statistics plus FP8 (not BF16) group transposes of Q̂ and K̂, and
// the backward recomputes S with the forward's MMA sequence (flash_backward.h). Form 'tiled' with
// precision bf16 is cuDNN's fused SDPA (cudnn_sdpa.h; make_attention below), this file's unfused
// BF16 path where cuDNN cannot take the shape.
// Saved state (docs/design.md §"Saved state"): forward returns Q̂, K̂, V̂ (row copies, the
// BF16-of-code transposes the dQ/dK GEMMs read), their scales and the softmax statistics (m_i,
// l_i) per row in a SavedAttention; O and the LSE are the caller's tensors (the backward reads O
// for the stale delta, never the LSE: its P = exp(S − m) / l sums to 1 at any logit size,
// docs/delta-matching.md). The backward reads only those and its own scratch, so any number
// of forwards may be outstanding. q, k, v, o, dO, dQ, dK, dV are F32 or BF16 each: the operand
// glue (attention_glue.h: amax, pack, unpad) reads and writes them as they are; only the unfused
// stale delta's row kernel widens O and dO to FP32 scratch (exact), and O goes through FP32 scratch
// rounded once (it is BF16-valued already). The row residual accumulates into the caller's F64 [2]
// on the device; nothing waits.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cuda/attention_glue.h"
#include "cuda/attention_kernels.h"
#include "cuda/buffer.h"
#include "cuda/act_f32.h"
#include "cuda/check.h"
#include "cuda/cuda_backend.h"
#include "cuda/cudnn_sdpa.h"
#include "cuda/flash/flash_backward.h"
#include "cuda/flash/flash_forward.h"
#include "cuda/gemm.h"
#include "cuda/ops.h"
#include "cuda/qtensor.h"
#include "octet/error.h"

namespace octet::cuda {
namespace {

// cuBLASLt refuses (NOT_SUPPORTED) scale pointers that are not 16-byte aligned: one per 128 B.
constexpr int64_t kScaleStride = 32;

// What a forward keeps for its backward: the quantized (FP8) or rounded (BF16) Q, K, V and the
// softmax statistics of every query row.
struct AttnState final : SavedState {
  const void* owner = nullptr;  // the CudaAttention that made it (validation only)
  Buffer q_rows, k_rows, v_rows;  // [B, heads, T_p, D]: FP8 codes or BF16
  // Group transposes: BF16 of code (FP8) or of value (BF16); FP8 codes for the fused backward.
  Buffer q_t, k_t;
  Buffer scales;                  // F32: sq, sk, sv (one each, or one per block) at sk_at, sv_at
  int64_t sk_at = kScaleStride, sv_at = 2 * kScaleStride;
  Buffer softmax;                 // F32 [2, B·H·Tq]: m_i = max_j S_ij, then l_i = Σ_j exp(S_ij − m_i)
  int64_t rows = 0;               // B·H·Tq
  float* sq() const { return scales.tensor().f32(); }
  float* sk() const { return scales.tensor().f32() + sk_at; }
  float* sv() const { return scales.tensor().f32() + sv_at; }
  float* row_max() const { return softmax.tensor().f32(); }
  float* row_sum() const { return softmax.tensor().f32() + rows; }
};

class CudaAttention final : public Attention {
 public:
  CudaAttention(const AttentionShape& shape, const AttentionConfig& cfg, CudaBackend& backend)
      : shape_(shape), cfg_(cfg), be_(backend), gemm_(backend.gemm()), s_(backend.stream()) {
    shape.validate();
    OCTET_CHECK(cfg.precision != AttnPrecision::FP64,
                "cuda attention: precision fp64 is CPU-only (use fp8 or bf16)");
    OCTET_CHECK(!cfg.dq_projection || (cfg.form == AttnForm::Tiled && cfg.precision == AttnPrecision::FP8),
                "cuda attention: the dQ row-sum projection is implemented for the fused FP8 "
                "kernels (form 'tiled', precision fp8) and the CPU reference (docs/delta-matching.md)");
    // (BF16 has no scales: the option does not apply, as on the CPU.)
    OCTET_CHECK(cfg.qkv_scaling == QkvScaling::Tensor || cfg.precision != AttnPrecision::FP8 ||
                    cfg.form == AttnForm::Tiled,
                "cuda attention: qkv scaling per (head, 128-token block) runs on the fused FP8 "
                "kernels (form 'tiled'); the unfused form 'whole' takes one scale per tensor");
    OCTET_CHECK(cfg.form == AttnForm::Whole || cfg.precision == AttnPrecision::FP8,
                "cuda attention: form 'tiled' (the fused kernel) is implemented for precision fp8 "
                "only (use form 'whole' for bf16)");
    fused_ = cfg.form == AttnForm::Tiled;
    if (fused_) {
      flash::check_forward_supported(shape.head_dim, cfg.block_k);
      flash::check_backward_supported(shape.head_dim, cfg.block_q, cfg.block_k);
      if (cfg.dq_projection) {  // its row sums come from the wgmma backward
        flash::BackwardParams p;
        p.D = shape.head_dim, p.block_q = cfg.block_q, p.block_k = cfg.block_k;
        p.Tq = shape.seq_q, p.Tk = shape.seq_k;
        OCTET_CHECK(flash::select_backward_kernel(p) == flash::BackwardKernel::Wgmma,
                    "cuda attention: the dQ row-sum projection needs the wgmma backward (an sm_90 "
                    "GPU, head_dim 64 or 128, block_q = block_k = 128, OCTET_FLASH_BACKWARD unset "
                    "or wgmma)");
      }
    }
    OCTET_CHECK(shape.head_dim % 16 == 0,
                "cuda attention: head_dim must be a multiple of 16 for the FP8/BF16 tensor-core "
                "GEMMs, got " + std::to_string(shape.head_dim));
    OCTET_CHECK(cfg.block_q % 32 == 0 && cfg.block_k % 32 == 0 && cfg.block_q > 0 && cfg.block_k > 0,
                "cuda attention: block_q and block_k (the dS scale tiles) must be multiples of 32");
    cfg.validate();  // block sizes, p_scale: the rules of every backend (src/core)
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
    scales_.reserve(3 * kScaleStride, s_);  // sdo, p_inv, sdv, each 128-byte aligned
    fill_launch(Tensor(p_inv(), DType::F32, {1}), 1.0 / double(cfg.p_scale), s_);
    head_block_ = fp8_ && cfg.qkv_scaling == QkvScaling::HeadBlock;
    // One amax (and scale) per tensor, or per (b, head, 128-token block) of Q, K, V.
    amax_.reserve(size_t(head_block_ ? std::max(q_scales(), k_scales()) : 1), s_);
  }

  SavedAttention forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                         const Tensor& lse) override {
    DeviceGuard g(be_.device());
    const AttnDims& d = d_;
    const Shape qs{d.B, d.H, d.Tq, d.D}, ks{d.B, d.G, d.Tk, d.D};
    check_act(q, qs, "attention forward: q");
    check_act(k, ks, "attention forward: k");
    check_act(v, ks, "attention forward: v");
    check_act(o, qs, "attention forward: o");
    check_dtype(lse, DType::F32, "attention forward: lse");
    check_numel(lse, d.B * d.H * d.Tq, "attention forward: lse [B, H, Tq]");
    const int64_t nq = d.B * d.H * d.Tq_p * d.D, nk = d.B * d.G * d.Tk_p * d.D;
    const DType elem = fp8_ ? DType::E4M3 : DType::BF16;
    auto st = std::make_unique<AttnState>();
    st->owner = this;
    st->q_rows = be_.alloc(elem, {nq});
    st->k_rows = be_.alloc(elem, {nk});
    st->v_rows = be_.alloc(elem, {nk});
    st->q_t = be_.alloc(fused_ ? DType::E4M3 : DType::BF16, {nq});
    st->k_t = be_.alloc(fused_ ? DType::E4M3 : DType::BF16, {nk});
    if (head_block_) {  // each array 128-byte aligned
      st->sk_at = round_up(q_scales(), kScaleStride);
      st->sv_at = st->sk_at + round_up(k_scales(), kScaleStride);
    }
    const int64_t sv_len = head_block_ ? round_up(k_scales(), kScaleStride) : kScaleStride;
    st->scales = be_.alloc(DType::F32, {st->sv_at + sv_len});
    const PackKind rowk = fp8_ ? PackKind::Fp8Code : PackKind::Bf16OfValue;
    const PackKind transk = fused_ ? PackKind::Fp8Code
                            : fp8_ ? PackKind::Bf16OfCode : PackKind::Bf16OfValue;
    const int64_t blk = head_block_ ? kQkvScaleBlock : 0;
    pack(q, d.H, d.Tq, d.Tq_p, d.rep, Format::E4M3, st->sq(), rowk, st->q_rows.tensor().data,
         transk, st->q_t.tensor().data, nullptr, blk);
    pack(k, d.G, d.Tk, d.Tk_p, 1, Format::E4M3, st->sk(), rowk, st->k_rows.tensor().data, transk,
         st->k_t.tensor().data, nullptr, blk);
    pack(v, d.G, d.Tk, d.Tk_p, 1, Format::E4M3, st->sv(), rowk,
         st->v_rows.tensor().data, rowk, v_t_.reserve(size_t(nk * eb_), s_), nullptr, blk);
    const int64_t nrows = d.B * d.H * d.Tq;
    st->rows = nrows;
    st->softmax = be_.alloc(DType::F32, {2 * nrows});
    if (fused_) {
      fused_forward(*st, o, lse);
      return SavedAttention{q, k, v, o, lse, std::move(st)};
    }
    logits(*st);
    uint8_t* P = P_.reserve(size_t(nS() * eb_), s_);
    if (d.Tq_p != d.Tq)  // pad query rows of P̃ stay zero: dV's GEMM contracts over them
      OCTET_CUDA_CHECK(cudaMemsetAsync(P, 0, size_t(nS() * eb_), s_));
    softmax_forward_launch(d, S_.get(), fp8_, cfg_.p_scale, P, lse.f32(),
                           rinv_.reserve(size_t(nrows), s_), st->row_max(), st->row_sum(), s_);
    // O = P̃ V̂ (unnormalized), then · 1/Σ P̃ and rounded to BF16.
    mm(P, Format::E4M3, p_inv(), v_t_.get(), Format::E4M3, st->sv(),
       o_acc_.reserve(size_t(nq), s_), d.rep * d.Tq_p, d.D, d.Tk_p, 1.0f);
    output_finalize_launch(d, o_acc_.get(), rinv_.get(), f32_out(o), nullptr, s_);
    finish(o);
    return SavedAttention{q, k, v, o, lse, std::move(st)};
  }

  void backward(const SavedAttention& saved, const Tensor& d_o, const Tensor& dq,
                const Tensor& dk, const Tensor& dv, const Tensor& residual) override {
    DeviceGuard g(be_.device());
    const auto* st = dynamic_cast<const AttnState*>(saved.state.get());
    OCTET_CHECK(st && st->owner == this,
                "attention backward: the saved state does not come from this attention's forward");
    const AttnDims& d = d_;
    const Shape qs{d.B, d.H, d.Tq, d.D}, ks{d.B, d.G, d.Tk, d.D};
    check_act(d_o, qs, "attention backward: d_o");
    check_act(dq, qs, "attention backward: dq");
    check_act(dk, ks, "attention backward: dk");
    check_act(dv, ks, "attention backward: dv");
    if (!residual.empty()) {
      check_dtype(residual, DType::F64, "attention backward: residual");
      check_numel(residual, 2, "attention backward: residual");
    }
    const int64_t nq = d.B * d.H * d.Tq_p * d.D, nk = d.B * d.G * d.Tk_p * d.D;
    const PackKind rowk = fp8_ ? PackKind::Fp8Code : PackKind::Bf16OfValue;
    pack(d_o, d.H, d.Tq, d.Tq_p, d.rep, cfg_.do_format, sdo(), rowk,
         do_rows_.reserve(size_t(nq * eb_), s_), PackKind::None, nullptr);
    if (fused_) {
      fused_backward(*st, saved, d_o, dq, dk, dv, residual);
      return;
    }
    logits(*st);
    mm(do_rows_.get(), cfg_.do_format, sdo(), st->v_rows.tensor().data, Format::E4M3, st->sv(),
       dP_.reserve(size_t(nS()), s_), d.rep * d.Tq_p, d.Tk_p, d.D, 1.0f);
    const int64_t nrows = d.B * d.H * d.Tq;
    BackwardRowArgs a{};
    a.S = S_.get();
    a.dP = dP_.get();
    a.row_max = st->row_max();
    a.row_sum = st->row_sum();
    const bool stale = cfg_.delta == DeltaMode::Stale;  // the row kernel reads O and dO in FP32
    a.o = stale ? as_f32(saved.o, in_k_) : nullptr;
    a.d_o = stale ? as_f32(d_o, in_q_) : nullptr;
    a.fp8 = fp8_;
    a.matched = cfg_.delta == DeltaMode::Matched;
    a.p_scale = cfg_.p_scale;
    a.P = P_.reserve(size_t(nS() * eb_), s_);
    a.residual = residual_.reserve(size_t(nrows), s_);
    a.row_factor = row_factor_.reserve(size_t(nrows), s_);
    backward_rows_launch(d, a, s_);
    // dV's operand dO_i / l_i (P without underflow: P̃ is exp(S − m)), its own per-tensor scale.
    pack(d_o, d.H, d.Tq, d.Tq_p, d.rep, cfg_.do_format, sdv(), PackKind::None, nullptr, rowk,
         do_t_.reserve(size_t(nq * eb_), s_), row_factor_.get());
    const int64_t ntiles = d.B * d.H * ((d.Tq + cfg_.block_q - 1) / cfg_.block_q) *
                           ((d.Tk + cfg_.block_k - 1) / cfg_.block_k);
    ds_quantize_launch(d, dP_.get(), fp8_, cfg_.ds_format, cfg_.block_q, cfg_.block_k,
                       tile_amax_.reserve(size_t(ntiles), s_), ds_rows_.reserve(size_t(nS()), s_),
                       ds_t_.reserve(size_t(nS()), s_), P_.get(),
                       P_t_.reserve(size_t(nS() * eb_), s_), int(eb_), s_);
    // dV = P̃ᵀ dÔ,  dQ = τ dŜ K̂,  dK = τ dŜᵀ Q̂ (the last two on exact BF16 values).
    mm(P_t_.get(), Format::E4M3, p_inv(), do_t_.get(), cfg_.do_format, sdv(),
       dv_acc_.reserve(size_t(nk), s_), d.Tk_p, d.D, d.rep * d.Tq_p, 1.0f);
    const float tau = shape_.tau();
    gemm_.bf16(ds_rows_.get(), false, st->k_t.tensor().bf16(), true, dq_acc_.reserve(size_t(nq), s_),
               d.rep * d.Tq_p, d.D, d.Tk_p, 0.0f, tau,
               {int(d.B * d.G), d.rep * d.Tq_p * d.Tk_p, d.D * d.Tk_p, d.rep * d.Tq_p * d.D});
    gemm_.bf16(ds_t_.get(), false, st->q_t.tensor().bf16(), true, dk_acc_.reserve(size_t(nk), s_),
               d.Tk_p, d.D, d.rep * d.Tq_p, 0.0f, tau,
               {int(d.B * d.G), d.Tk_p * d.rep * d.Tq_p, d.D * d.rep * d.Tq_p, d.Tk_p * d.D});
    write_gradients(*st, dq, dk, dv);
    // Diagnostics: r_i = |Σ_j dS_ij| / Σ_j P_ij(|dP_ij| + |D_i|) per row -> max and mean, added
    // into the caller's accumulator on the device.
    if (!residual.empty()) residual_accumulate_launch(residual_.get(), nrows, residual.f64(), s_);
  }

 private:
  int64_t nS() const { return d_.B * d_.H * d_.Tq_p * d_.Tk_p; }
  // Per-block scale counts: B·H·⌈Tq/128⌉ of Q, B·G·⌈Tk/128⌉ of K and V.
  int64_t q_scales() const { return d_.B * d_.H * ceil_div(d_.Tq, kQkvScaleBlock); }
  int64_t k_scales() const { return d_.B * d_.G * ceil_div(d_.Tk, kQkvScaleBlock); }
  float* sdo() { return scales_.get() + 0 * kScaleStride; }
  float* p_inv() { return scales_.get() + 1 * kScaleStride; }
  float* sdv() { return scales_.get() + 2 * kScaleStride; }

  static void check_act(const Tensor& t, const Shape& want, const char* what) {
    check_activation(t, what);
    check_shape(t, want, what);
  }
  const float* as_f32(const Tensor& t, DeviceBuffer<float>& buf) { return f32_in(t, buf, s_); }
  float* f32_out(const Tensor& t) { return cuda::f32_out(t, out_, s_); }
  void finish(const Tensor& t) { f32_out_finish(t, out_, s_); }

  // x (F32 or BF16, as given) -> its amax (FP8; per tensor, or per (b, head, block of
  // scale_block tokens)) and its packed row / transposed copies.
  void pack(const Tensor& x, int64_t heads, int64_t T, int64_t T_p, int64_t rep, Format f,
            float* scale_inv, PackKind row_kind, void* row, PackKind trans_kind, void* trans,
            const float* row_factor = nullptr, int64_t scale_block = 0) {
    PackArgs a;
    a.x = x.data;
    a.x_dtype = x.dtype;
    a.B = d_.B;
    a.heads = heads;
    a.T = T;
    a.T_p = T_p;
    a.D = d_.D;
    a.rep = rep;
    a.format = f;
    a.fp8 = fp8_;
    a.row_factor = row_factor;
    a.scale_block = scale_block;
    if (fp8_ && scale_block)
      pack_block_amax_launch(x.data, x.dtype, d_.B * heads, T, d_.D, scale_block, amax_.get(), s_);
    else if (fp8_)
      pack_amax_launch(x.data, x.dtype, d_.B * heads * T * d_.D, amax_.get(), s_, row_factor, d_.D);
    a.amax_bits = amax_.get();
    a.scale_inv = scale_inv;
    a.row_kind = row_kind;
    a.row = row;
    a.trans_kind = trans_kind;
    a.trans = trans;
    pack_launch(a, s_);
  }

  // The fused forward's parameters over a forward's saved Q̂, K̂ (no V̂ᵀ: the forward adds this
  // call's scratch copy).
  flash::ForwardParams flash_params(const AttnState& st) {
    flash::ForwardParams p;
    p.q = static_cast<const uint8_t*>(st.q_rows.tensor().data);
    p.k = static_cast<const uint8_t*>(st.k_rows.tensor().data);
    p.q_scale_inv = st.sq();
    p.k_scale_inv = st.sk();
    p.qkv_head_block = head_block_;
    p.B = d_.B, p.H = d_.H, p.G = d_.G, p.Tq = d_.Tq, p.Tk = d_.Tk, p.Tq_p = d_.Tq_p,
    p.Tk_p = d_.Tk_p, p.D = d_.D;
    p.causal = d_.causal;
    p.tau = shape_.tau();
    p.p_scale = cfg_.p_scale;
    p.block_k = cfg_.block_k;
    return p;
  }

  // The fused FP8 forward (src/cuda/flash/) from the packed Q̂, K̂, V̂ᵀ: O, LSE, m, l.
  void fused_forward(const AttnState& st, const Tensor& o, const Tensor& lse) {
    flash::ForwardParams p = flash_params(st);
    p.v_t = v_t_.get();
    p.v_scale_inv = st.sv();
    p.o = f32_out(o);
    p.lse = lse.f32();
    p.row_max = st.row_max();
    p.row_sum = st.row_sum();
    flash::forward_launch(p, s_);
    finish(o);
  }

  // dQ, dK, dV from the padded accumulators: unpadded, dQ × sk and dK × sq (FP8 with per-tensor
  // scales: the GEMMs ran on codes; per-block scales were applied per tile), written straight into
  // the F32 or BF16 outputs (rounded once).
  void write_gradients(const AttnState& st, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
    const AttnDims& d = d_;
    const bool scale_out = fp8_ && !head_block_;
    unpad_scale_launch(dq_acc_.get(), dq.data, dq.dtype, d.B * d.H, d.Tq, d.Tq_p, d.D, 1.0f,
                       scale_out ? st.sk() : nullptr, nullptr, s_);
    unpad_scale_launch(dk_acc_.get(), dk.data, dk.dtype, d.B * d.G, d.Tk, d.Tk_p, d.D, 1.0f,
                       scale_out ? st.sq() : nullptr, nullptr, s_);
    unpad_scale_launch(dv_acc_.get(), dv.data, dv.dtype, d.B * d.G, d.Tk, d.Tk_p, d.D, 1.0f,
                       nullptr, nullptr, s_);
  }

  // The fused FP8 backward (src/cuda/flash/flash_backward.h) after a fused forward, dÔ rows
  // packed: the delta pre-pass (D_i, 1/l_i), dV's operand (dO/l)~ packed with its own scale, the
  // main kernels into the padded accumulators, then write_gradients and the row residual. Beyond
  // the inputs, outputs and dQ accumulator it allocates O(T) per head (no S x S buffer).
  void fused_backward(const AttnState& st, const SavedAttention& saved, const Tensor& d_o,
                      const Tensor& dq, const Tensor& dk, const Tensor& dv,
                      const Tensor& residual) {
    const AttnDims& d = d_;
    const int64_t nq = d.B * d.H * d.Tq_p * d.D, nk = d.B * d.G * d.Tk_p * d.D;
    const int64_t nrows = d.B * d.H * d.Tq;
    const flash::ForwardParams f = flash_params(st);
    flash::BackwardParams p;
    p.q = f.q, p.k = f.k, p.q_scale_inv = f.q_scale_inv, p.k_scale_inv = f.k_scale_inv;
    p.qkv_head_block = f.qkv_head_block;
    p.q_t = static_cast<const uint8_t*>(st.q_t.tensor().data);
    p.k_t = static_cast<const uint8_t*>(st.k_t.tensor().data);
    p.v = static_cast<const uint8_t*>(st.v_rows.tensor().data);
    p.v_scale_inv = st.sv();
    p.d_o = do_rows_.get();
    p.do_scale_inv = sdo();
    p.row_max = st.row_max();
    p.row_sum = st.row_sum();
    p.matched = cfg_.delta == DeltaMode::Matched;
    if (!p.matched) {  // the stale delta reads O and dO as they are (F32 or BF16)
      if (saved.o.dtype == DType::BF16) p.o_bf16 = saved.o.bf16(); else p.o = saved.o.f32();
      if (d_o.dtype == DType::BF16) p.d_o_bf16 = d_o.bf16(); else p.d_o_f32 = d_o.f32();
    }
    p.delta = delta_.reserve(size_t(nrows), s_);
    p.row_factor = row_factor_.reserve(size_t(nrows), s_);
    p.B = f.B, p.H = f.H, p.G = f.G, p.Tq = f.Tq, p.Tk = f.Tk, p.Tq_p = f.Tq_p, p.Tk_p = f.Tk_p,
    p.D = f.D;
    p.causal = f.causal;
    p.do_format = cfg_.do_format;
    p.ds_format = cfg_.ds_format;
    p.tau = f.tau;
    p.p_scale = cfg_.p_scale;
    p.block_q = cfg_.block_q;
    p.block_k = cfg_.block_k;
    flash::delta_launch(p, s_);
    pack(d_o, d.H, d.Tq, d.Tq_p, d.rep, cfg_.do_format, sdv(), PackKind::None, nullptr,
         PackKind::Fp8Code, do_t_.reserve(size_t(nq), s_), row_factor_.get());
    p.dv_o_t = do_t_.get();
    p.dvo_scale_inv = sdv();
    p.dq_acc = dq_acc_.reserve(size_t(nq), s_);
    p.dk_acc = dk_acc_.reserve(size_t(nk), s_);
    p.dv_acc = dv_acc_.reserve(size_t(nk), s_);
    p.res_sums = residual.empty() ? nullptr : res_sums_.reserve(size_t(2 * nrows), s_);
    p.ds_row_sum = cfg_.dq_projection ? ds_row_sum_.reserve(size_t(nrows), s_) : nullptr;
    flash::backward_launch(p, s_);
    if (cfg_.dq_projection) flash::dq_projection_launch(p, s_);
    write_gradients(st, dq, dk, dv);
    if (residual.empty()) return;
    flash::residual_finish_launch(res_sums_.get(), nrows, residual_.reserve(size_t(nrows), s_), s_);
    residual_accumulate_launch(residual_.get(), nrows, residual.f64(), s_);
  }

  // S = τ Q̂K̂ᵀ for every head, from a forward's saved operands.
  void logits(const AttnState& st) {
    mm(st.q_rows.tensor().data, Format::E4M3, st.sq(), st.k_rows.tensor().data, Format::E4M3,
       st.sk(), S_.reserve(size_t(nS()), s_), d_.rep * d_.Tq_p, d_.Tk_p, d_.D, shape_.tau());
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
  CudaBackend& be_;
  GemmEngine& gemm_;
  cudaStream_t s_;
  AttnDims d_{};
  bool fp8_ = true;
  bool fused_ = false;  // form 'tiled': the fused FP8 forward and backward
  bool head_block_ = false;  // QkvScaling::HeadBlock: Q, K, V scales per (b, head, 128 tokens)
  int64_t eb_ = 1;
  // Scratch, reused in stream order by every call (nothing here outlives one call's use).
  DeviceBuffer<float> scales_;
  DeviceBuffer<unsigned> amax_, tile_amax_;
  DeviceBuffer<uint8_t> v_t_, P_, P_t_, do_rows_, do_t_;
  DeviceBuffer<uint16_t> ds_rows_, ds_t_;
  DeviceBuffer<float> S_, dP_, o_acc_, rinv_, dq_acc_, dk_acc_, dv_acc_, in_q_, in_k_, out_;
  DeviceBuffer<float> row_factor_, delta_;
  DeviceBuffer<double> residual_, res_sums_;
  DeviceBuffer<float> ds_row_sum_;  // the dQ row-sum projection's r̂ (fused backward)
};

}  // namespace

std::unique_ptr<Attention> CudaBackend::make_attention(const AttentionShape& shape,
                                                       const AttentionConfig& config) {
  DeviceGuard g(device_);
  // BF16 in form 'tiled': cuDNN's fused SDPA (cudnn_sdpa.h), or this file's unfused path where
  // cuDNN cannot take the shape.
  // (The dQ row-sum projection is not cuDNN's: CudaAttention refuses it for BF16 with an error.)
  if (config.precision == AttnPrecision::BF16 && config.form == AttnForm::Tiled && !config.dq_projection) {
    if (auto a = make_cudnn_sdpa_attention(shape, config, *this)) return a;
    AttentionConfig whole = config;
    whole.form = AttnForm::Whole;
    return std::make_unique<CudaAttention>(shape, whole, *this);
  }
  return std::make_unique<CudaAttention>(shape, config, *this);
}

}  // namespace octet::cuda
