// src/cuda/attention/flash/flash_attention.cpp — the CUDA backend's attention in form 'flash': the
// flash FP8 kernels (flash.h) behind octet::Attention. Its CPU twin is the flash form
// (src/cpu/attention_flash.cpp). docs/attention.md.
//
// The forward saves the packed operands and softmax statistics (attention_base.h) plus FP8 group
// transposes of Q̂ and K̂, and runs flash::run_forward; the backward fills BackwardParams from the
// forward's (no field copied by hand: BackwardParams extends ForwardParams) and hands the whole
// sequence (dO's glue included) to flash::run_backward. Beyond the inputs, outputs and the dQ
// accumulator it allocates O(T) per head (no S x S buffer).
#include <cstdint>
#include <memory>

#include "cuda/attention/attention_base.h"
#include "cuda/attention/flash/flash.h"
#include "cuda/ops/ops.h"
#include "cuda/runtime/buffer.h"
#include "octet/error.h"

namespace octet::cuda {
namespace {

class FlashAttention final : public AttentionBase {
 public:
  FlashAttention(const AttentionShape& shape, const AttentionConfig& cfg, CudaBackend& backend)
      : AttentionBase(shape, cfg, backend, /*trans_fp8=*/true) {
    OCTET_CHECK(cfg.precision == AttnPrecision::FP8,
                "cuda attention: form 'flash' (the flash kernels) is implemented for precision fp8 "
                "only (bf16 in form 'flash' runs cuDNN's SDPA)");
    if (cfg.dq_projection) {  // its row sums come from the wgmma backward
      flash::BackwardParams p;
      p.D = shape.head_dim, p.block_q = cfg.block_q, p.block_k = cfg.block_k;
      p.Tq = shape.seq_q, p.Tk = shape.seq_k;
      OCTET_CHECK(flash::select_backward_kernel(p) == flash::BackwardKernel::Wgmma,
                  "cuda attention: the dQ row-sum projection needs the wgmma backward (an sm_90 "
                  "GPU, head_dim 64 or 128, block_q = block_k = 128 or 64, OCTET_FLASH_BACKWARD unset "
                  "or wgmma)");
    }
  }

 private:
  // The forward's parameters over a forward's saved Q̂, K̂, V̂ᵀ and statistics.
  flash::ForwardParams forward_params(const AttnState& st) {
    flash::ForwardParams p;
    p.q = static_cast<const uint8_t*>(st.q_rows.tensor().data);
    p.k = static_cast<const uint8_t*>(st.k_rows.tensor().data);
    p.v_t = v_t_.get();
    p.q_scale_inv = st.sq();
    p.k_scale_inv = st.sk();
    p.v_scale_inv = st.sv();
    p.qkv_head_block = head_block_;
    p.row_max = st.row_max();
    p.row_sum = st.row_sum();
    p.B = d_.B, p.H = d_.H, p.G = d_.G, p.Tq = d_.Tq, p.Tk = d_.Tk, p.Tq_p = d_.Tq_p, p.Tk_p = d_.Tk_p,
    p.D = d_.D;
    p.causal = d_.causal;
    p.tokens_major = d_.tokens_major;
    p.tau = shape_.tau();
    p.p_scale = cfg_.p_scale;
    p.block_k = cfg_.block_k;
    return p;
  }

  void forward_impl(AttnState& st, const Tensor& o, const Tensor& lse) override {
    flash::ForwardParams p = forward_params(st);
    // O as given where the kernel's epilogue can store it: BF16 pairs need 4-byte alignment, FP32
    // pairs 8. Otherwise (a tensor at an odd element offset) the kernel writes FP32 scratch and
    // one pass moves it into O: a BF16 O rounded once, an FP32 O copied.
    const uintptr_t at = reinterpret_cast<uintptr_t>(o.data);
    const bool direct = o.dtype == DType::F32 ? (at & 7u) == 0 : (at & 3u) == 0;
    if (!direct)
      p.o = out_.reserve(size_t(o.numel()), s_);
    else if (o.dtype == DType::BF16)
      p.o_bf16 = o.bf16();
    else
      p.o = o.f32();
    p.lse = lse.f32();
    flash::run_forward(p, s_);
    if (!direct) convert_launch(o, Tensor(out_.get(), DType::F32, o.shape), s_);
  }

  void backward_impl(const AttnState& st, const SavedAttention& saved, const Tensor& d_o, const Tensor& dq,
                     const Tensor& dk, const Tensor& dv, const Tensor& residual) override {
    const int64_t nq = this->nq(), nk = this->nk(), nrows = st.rows;
    flash::BackwardParams p;
    static_cast<flash::ForwardParams&>(p) = forward_params(st);
    p.v_t = nullptr;  // the backward reads V̂'s rows
    p.q_t = static_cast<const uint8_t*>(st.q_t.tensor().data);
    p.k_t = static_cast<const uint8_t*>(st.k_t.tensor().data);
    p.v = static_cast<const uint8_t*>(st.v_rows.tensor().data);
    p.matched = cfg_.delta == DeltaMode::Matched;
    if (!p.matched) {  // the stale delta reads O and dO as they are (F32 or BF16)
      if (saved.o.dtype == DType::BF16)
        p.o_bf16 = saved.o.bf16();
      else
        p.o = saved.o.f32();
      if (d_o.dtype == DType::BF16)
        p.d_o_bf16 = d_o.bf16();
      else
        p.d_o_f32 = d_o.f32();
    }
    p.delta = delta_.reserve(size_t(nrows), s_);
    p.row_factor = row_factor_.reserve(size_t(nrows), s_);
    p.dq_acc = dq_acc_.reserve(size_t(nq), s_);
    p.dk_acc = dk_acc_.reserve(size_t(nk), s_);
    p.dv_acc = dv_acc_.reserve(size_t(nk), s_);
    p.res_sums = residual.empty() ? nullptr : res_sums_.reserve(size_t(2 * nrows), s_);
    p.ds_row_sum = cfg_.dq_projection ? ds_row_sum_.reserve(size_t(nrows), s_) : nullptr;
    p.do_format = cfg_.do_format;
    p.ds_format = cfg_.ds_format;
    p.block_q = cfg_.block_q;
    flash::BackwardIo io;
    io.d_o = d_o.data, io.d_o_dtype = d_o.dtype;
    io.dq = dq.data, io.dq_dtype = dq.dtype;
    io.dk = dk.data, io.dk_dtype = dk.dtype;
    io.dv = dv.data, io.dv_dtype = dv.dtype;
    io.residual = residual.empty() ? nullptr : residual.f64();
    io.residual_rows = residual.empty() ? nullptr : residual_rows_.reserve(size_t(nrows), s_);
    io.amax = amax_.get();  // two entries at least (the forward's Q, K, V hold three)
    io.d_o_rows = do_rows_.reserve(size_t(nq), s_);
    io.do_scale_inv = sdo();
    io.dv_o_t = do_t_.reserve(size_t(nq), s_);
    io.dvo_scale_inv = sdv();
    flash::run_backward(p, io, s_);
  }

  DeviceBuffer<uint8_t> do_t_;
  DeviceBuffer<float> dq_acc_, dk_acc_, dv_acc_, row_factor_, delta_, out_;
  DeviceBuffer<double> residual_rows_, res_sums_;
  DeviceBuffer<float> ds_row_sum_;  // the dQ row-sum projection's r̂
};

}  // namespace

std::unique_ptr<Attention> make_flash_attention(const AttentionShape& shape, const AttentionConfig& cfg,
                                                CudaBackend& backend) {
  // The flash kernels' own limits first: their message names the supported sizes.
  flash::check_forward_supported(shape.head_dim, cfg.block_k);
  flash::check_backward_supported(shape.head_dim, cfg.block_q, cfg.block_k);
  return std::make_unique<FlashAttention>(shape, cfg, backend);
}

}  // namespace octet::cuda
