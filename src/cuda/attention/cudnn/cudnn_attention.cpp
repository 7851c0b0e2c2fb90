// src/cuda/attention/cudnn/cudnn_attention.cpp — the CUDA backend's BF16 attention in form 'flash': cuDNN's
// fused BF16 SDPA (cudnn_sdpa.h) behind octet::Attention. The bf16 and fp8-linear arms run it on
// CUDA by default (default_attn_form); form 'whole' runs the unfused BF16 path (unfused/unfused.cpp),
// which stays the cross-check and the fallback (docs/attention.md §"cuDNN SDPA"), as for a config
// cuDNN cannot run: the matched delta, or a shape sdpa_unsupported() names.
//
// Twin: the CPU reference in precision bf16 (attention.h): Q, K, V rounded to BF16, S and the
// softmax in FP32, P rounded to BF16 for the PV product, O stored BF16, the LSE in FP32 natural log;
// backward with the stale delta D_i = Σ_c dO_ic O_ic (the CPU arms' bf16 delta too), dS rounded to
// BF16 for dQ and dK. cuDNN normalizes P by the FP32 row sum rather than the sum of the rounded P
// and orders its sums differently, so it equals the twin to BF16 rounding, not bitwise
// (tests/cuda/attention/cudnn/cudnn_sdpa_test.cpp states the tolerance). The backward is cuDNN's
// deterministic one (identical bits run to run, as octet's trainer promises; if cuDNN refuses that graph, its
// default one, with a note on stderr). It does not measure the softmax gradient's row residual (dS stays
// inside cuDNN): the residual accumulator is left unchanged. Saved state (docs/design.md §"Saved state"):
// BF16 copies of Q, K, V and cuDNN's LSE; O is the caller's (read by the backward, as the unfused stale path
// reads it). Act tensors may be F32 or BF16 each: F32 inputs are rounded to BF16 (RNE), F32 outputs widened
// from cuDNN's BF16 (exact).
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda/runtime/buffer.h"
#include "cuda/runtime/check.h"
#include "cuda/runtime/cuda_backend.h"
#include "cuda/runtime/saved_placement.h"
#include "cuda/attention/cudnn/cudnn_sdpa.h"
#include "cuda/ops/ops.h"
#include "octet/error.h"

namespace octet::cuda {
namespace {

struct CudnnState final : SavedState {
  const void* owner = nullptr;  // the attention that made it (validation only)
  Buffer q, k, v;               // BF16, the caller's layouts
  Buffer lse;                   // F32 [B, H, Tq], cuDNN's Stats
};

SdpaDims sdpa_dims(const AttentionShape& s) {
  SdpaDims d;
  d.B = s.batch, d.H = s.n_heads, d.G = s.n_kv_heads, d.Tq = s.seq_q, d.Tk = s.seq_k;
  d.D = s.head_dim, d.causal = s.causal, d.tau = s.tau();
  d.tokens_major = s.layout == AttnLayout::TokensMajor;
  return d;
}

class CudnnSdpaAttention final : public Attention {
 public:
  CudnnSdpaAttention(const AttentionShape& shape, CudaBackend& backend)
      : shape_(shape),
        dims_(sdpa_dims(shape)),
        be_(backend),
        s_(backend.stream()),
        engine_(backend.sdpa()),
        saved_bytes_(attention_saved_bytes(saved_size_terms(), shape)) {}

  SavedAttention forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                         const Tensor& lse) override {
    return run_forward(q, k, v, o, lse, SavedPlacement::allocating(be_, false));
  }

  // Saved state in caller memory (backend.h): BF16 Q, K, V and cuDNN's statistics, in
  // place_state's order.
  int64_t saved_bytes() const override { return saved_bytes_; }
  std::vector<AttnSizeTerm> saved_size_terms() const override {
    constexpr int64_t a = SavedPlacement::kAlign;
    constexpr int64_t q = kAttnBatch | kAttnHeads | kAttnSeqQ, k = kAttnBatch | kAttnKvHeads | kAttnSeqK;
    return {
        {2, q | kAttnHeadDim, 1, a}, {2, k | kAttnHeadDim, 1, a}, {2, k | kAttnHeadDim, 1, a}, {4, q, 1, a}};
  }
  SavedAttention forward_to(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                            const Tensor& lse, const Tensor& memory) override {
    return run_forward(q, k, v, o, lse,
                       SavedPlacement::into(memory, saved_bytes(), "attention forward_to: memory"));
  }
  SavedAttention saved_from(const Tensor& o, const Tensor& lse, const Tensor& memory) const override {
    check_act(o, qs(), "attention saved_from: o");
    check_dtype(lse, DType::F32, "attention saved_from: lse");
    check_numel(lse, rows(), "attention saved_from: lse [B, H, Tq]");
    SavedPlacement at = SavedPlacement::into(memory, saved_bytes(), "attention saved_from: memory");
    return SavedAttention{Tensor(), Tensor(), Tensor(), o, lse, place_state(at)};
  }

  bool measures_row_residual() const override { return false; }  // dS stays inside cuDNN

  void backward(const SavedAttention& saved, const Tensor& d_o, const Tensor& dq, const Tensor& dk,
                const Tensor& dv, const Tensor& residual) override {
    DeviceGuard g(be_.device());
    const auto* st = dynamic_cast<const CudnnState*>(saved.state.get());
    OCTET_CHECK(st && st->owner == this,
                "attention backward: the saved state does not come from this attention's forward");
    check_act(d_o, qs(), "attention backward: d_o");
    check_act(dq, qs(), "attention backward: dq");
    check_act(dk, ks(), "attention backward: dk");
    check_act(dv, ks(), "attention backward: dv");
    if (!residual.empty()) {  // validated as on every backend, not written (header comment)
      check_dtype(residual, DType::F64, "attention backward: residual");
      check_numel(residual, 2, "attention backward: residual");
    }
    SdpaBf16Backward a;
    a.q = st->q.tensor().data, a.k = st->k.tensor().data, a.v = st->v.tensor().data;
    a.o = bf16_in(saved.o, o_);
    a.d_o = bf16_in(d_o, do_);
    a.lse = st->lse.tensor().f32();
    a.dq = bf16_out(dq, dq_), a.dk = bf16_out(dk, dk_), a.dv = bf16_out(dv, dv_);
    if (deterministic_) {
      try {
        engine_.bf16_backward(dims_, a, true);
      } catch (const Error& e) {  // cuDNN refused the deterministic graph: its default, said once
        deterministic_ = false;
        static std::atomic<bool> said{false};
        if (!said.exchange(true))
          std::fprintf(stderr,
                       "octet: cuda attention: cuDNN's deterministic SDPA backward is "
                       "unavailable (%s); using its default backward (not bitwise repeatable)\n",
                       e.what());
      }
    }
    if (!deterministic_) engine_.bf16_backward(dims_, a, false);
    bf16_finish(dq, dq_);
    bf16_finish(dk, dk_);
    bf16_finish(dv, dv_);
  }

 private:
  Shape qs() const { return shape_.q_shape(); }  // in the call's layout; the saved copies too
  Shape ks() const { return shape_.kv_shape(); }
  int64_t rows() const { return shape_.batch * shape_.n_heads * shape_.seq_q; }
  static void check_act(const Tensor& t, const Shape& want, const char* what) {
    check_activation(t, what);
    check_shape(t, want, what);
  }
  // BF16 views of act tensors: t itself if BF16, else rounded (RNE) into `buf`; outputs are written
  // to `buf` and widened into t by bf16_finish (exact).
  const void* bf16_in(const Tensor& t, DeviceBuffer<uint16_t>& buf) {
    if (t.dtype == DType::BF16) return t.data;
    const Tensor b(buf.reserve(size_t(t.numel()), s_), DType::BF16, t.shape);
    convert_launch(b, t, s_);
    return b.data;
  }
  void* bf16_out(const Tensor& t, DeviceBuffer<uint16_t>& buf) {
    return t.dtype == DType::BF16 ? t.data : buf.reserve(size_t(t.numel()), s_);
  }
  void bf16_finish(const Tensor& t, DeviceBuffer<uint16_t>& buf) {
    if (t.dtype != DType::BF16) convert_launch(t, Tensor(buf.get(), DType::BF16, t.shape), s_);
  }

  std::unique_ptr<CudnnState> place_state(SavedPlacement& at) const {
    auto st = std::make_unique<CudnnState>();
    st->owner = this;
    st->q = at.take(DType::BF16, qs());
    st->k = at.take(DType::BF16, ks());
    st->v = at.take(DType::BF16, ks());
    st->lse = at.take(DType::F32, {rows()});
    OCTET_CHECK(at.bytes() == saved_bytes(), "attention saved state: placed " + std::to_string(at.bytes()) +
                                                 " bytes where its size terms give " +
                                                 std::to_string(saved_bytes()) + " (a layout bug)");
    return st;
  }

  SavedAttention run_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                             const Tensor& lse, SavedPlacement at) {
    DeviceGuard g(be_.device());
    check_act(q, qs(), "attention forward: q");
    check_act(k, ks(), "attention forward: k");
    check_act(v, ks(), "attention forward: v");
    check_act(o, qs(), "attention forward: o");
    check_dtype(lse, DType::F32, "attention forward: lse");
    check_numel(lse, rows(), "attention forward: lse [B, H, Tq]");
    std::unique_ptr<CudnnState> st = place_state(at);
    for (auto [dst, src] : {std::pair{&st->q, &q}, {&st->k, &k}, {&st->v, &v}})
      convert_launch(dst->tensor(), *src, s_);
    SdpaBf16Forward a;
    a.q = st->q.tensor().data, a.k = st->k.tensor().data, a.v = st->v.tensor().data;
    a.o = bf16_out(o, o_);
    a.lse = st->lse.tensor().f32();
    engine_.bf16_forward(dims_, a);
    bf16_finish(o, o_);
    OCTET_CUDA_CHECK(
        cudaMemcpyAsync(lse.data, a.lse, size_t(rows()) * sizeof(float), cudaMemcpyDeviceToDevice, s_));
    return SavedAttention{q, k, v, o, lse, std::move(st)};
  }

  AttentionShape shape_;
  SdpaDims dims_;
  CudaBackend& be_;
  cudaStream_t s_;
  SdpaEngine& engine_;
  int64_t saved_bytes_;        // the terms' value at shape_, once (place_state checks every placement)
  bool deterministic_ = true;  // cuDNN's deterministic backward, unless cuDNN refuses its graph
  DeviceBuffer<uint16_t> o_, do_, dq_, dk_, dv_;  // BF16 scratch for F32 act tensors
};

}  // namespace

std::unique_ptr<Attention> make_cudnn_sdpa_attention(const AttentionShape& shape,
                                                     const AttentionConfig& config, CudaBackend& backend) {
  shape.validate();
  config.validate();
  OCTET_CHECK(config.precision == AttnPrecision::BF16 && config.form == AttnForm::Flash,
              "cuda attention: cuDNN's fused SDPA serves precision bf16 in form flash only");
  const std::string why = config.delta == DeltaMode::Matched
                              ? "the matched delta (cuDNN's backward computes the stale one)"
                              : sdpa_unsupported(sdpa_dims(shape), false);
  if (!why.empty()) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      std::fprintf(stderr,
                   "octet: cuda attention: cuDNN's fused BF16 SDPA does not take %s; running the "
                   "unfused BF16 attention\n",
                   why.c_str());
    return nullptr;
  }
  return std::make_unique<CudnnSdpaAttention>(shape, backend);
}

}  // namespace octet::cuda
