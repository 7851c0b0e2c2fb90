// attention.cpp — CpuAttention: one attention layer on the CPU backend, a thin wrapper around the
// reference attention of octet/attention.h (FP64, BF16 or FP8; stale or matched delta; whole or
// flash form). The forward returns a SavedAttention whose state owns the reference's
// AttentionSaved (the quantized-dequantized Q̂, K̂, V̂, O, LSE), as a flash kernel keeps them in its
// workspace, so any number of forwards may precede their backwards; forward_to / saved_from copy
// those arrays to and from one block of caller memory (backend.h). The backward accumulates the
// softmax-gradient row residual of Delta-Matching (arXiv 2609.37852; docs/design.md §"The two deltas") into
// the caller's F64 [2] tensor. q, k, v, o, dO, dQ, dK, dV are act tensors (F32 or BF16, act_io.h:
// read as FP32, rounded once on store) in the shape's layout (a tokens-major call is moved to and
// from the reference's heads-major arrays here); lse is F32.
#include <cmath>
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cpu/backend/act_io.h"
#include "cpu/backend/cpu_backend.h"
#include "octet/attention.h"
#include "octet/error.h"

namespace octet::cpu {
namespace {

class CpuAttention;

struct CpuAttentionState final : SavedState {
  const CpuAttention* owner = nullptr;
  AttentionSaved saved;
};

class CpuAttention final : public Attention {
 public:
  CpuAttention(const AttentionShape& shape, const AttentionConfig& config)
      : shape_(shape), ref_(shape), config_(config) {
    shape_.validate();
    ref_.layout = AttnLayout::HeadsMajor;
  }

  SavedAttention forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                         const Tensor& lse) override {
    check_operands(
        q, k, v, o,
        {"attention forward q", "attention forward k", "attention forward v", "attention forward o"});
    check_dtype(lse, DType::F32, "attention forward lse");
    check_numel(lse, shape_.batch * shape_.n_heads * shape_.seq_q, "attention forward lse");
    auto state = std::make_unique<CpuAttentionState>();
    state->owner = this;
    ActIn qi(q, "attention forward q"), ki(k, "attention forward k"), vi(v, "attention forward v");
    ActOut oo(o, "attention forward o");
    const int64_t H = shape_.n_heads, G = shape_.n_kv_heads, Tq = shape_.seq_q, Tk = shape_.seq_k;
    std::vector<float> qb, kb, vb, ob;
    float* o_ref = tokens_major() ? resized(ob, oo.t.numel()) : oo.data;
    attention_forward(ref_, config_, heads_major(qi.data, H, Tq, qb), heads_major(ki.data, G, Tk, kb),
                      heads_major(vi.data, G, Tk, vb), o_ref, lse.f32(), &state->saved);
    to_layout(o_ref, oo.data, H, Tq);
    oo.store();
    SavedAttention saved;
    saved.q = q, saved.k = k, saved.v = v, saved.o = o, saved.lse = lse;
    saved.state = std::move(state);
    return saved;
  }

  // Saved state in caller memory (backend.h): the AttentionSaved's arrays one after another, each
  // its elements' bytes (host memory, no alignment needed); copied in, and out by saved_from.
  int64_t saved_bytes() const override { return attention_saved_bytes(saved_size_terms(), shape_); }
  std::vector<AttnSizeTerm> saved_size_terms() const override {
    std::vector<AttnSizeTerm> terms;
    AttentionSaved types;
    each_array_dims(types, [&](auto& a, int64_t dims) {
      terms.push_back(AttnSizeTerm{int64_t(sizeof(a[0])), dims, 1, 1});
    });
    return terms;
  }

  SavedAttention forward_to(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                            const Tensor& lse, const Tensor& memory) override {
    auto* at = image(memory, "attention forward_to: memory");
    SavedAttention saved = forward(q, k, v, o, lse);
    auto& st = static_cast<CpuAttentionState&>(*saved.state).saved;
    each_array(st, [&](auto& a, size_t n) {
      OCTET_CHECK(a.size() == n, "attention forward_to: the reference saved an array of another size");
      std::memcpy(at, a.data(), n * sizeof(a[0]));
      at += n * sizeof(a[0]);
    });
    return saved;
  }

  SavedAttention saved_from(const Tensor& o, const Tensor& lse, const Tensor& memory) const override {
    check_act(o, shape_.q_shape(), "attention saved_from: o");
    check_dtype(lse, DType::F32, "attention saved_from: lse");
    check_numel(lse, shape_.batch * shape_.n_heads * shape_.seq_q, "attention saved_from: lse");
    const auto* at = image(memory, "attention saved_from: memory");
    auto state = std::make_unique<CpuAttentionState>();
    state->owner = this;
    state->saved.shape = ref_, state->saved.config = config_;
    each_array(state->saved, [&](auto& a, size_t n) {
      a.resize(n);
      std::memcpy(a.data(), at, n * sizeof(a[0]));
      at += n * sizeof(a[0]);
    });
    SavedAttention saved;
    saved.o = o, saved.lse = lse;
    saved.state = std::move(state);
    return saved;
  }

  void backward(const SavedAttention& saved, const Tensor& d_o, const Tensor& dq, const Tensor& dk,
                const Tensor& dv, const Tensor& residual) override {
    const auto* st = dynamic_cast<const CpuAttentionState*>(saved.state.get());
    OCTET_CHECK(st != nullptr,
                "attention backward: the SavedAttention does not come from a CPU "
                "attention's forward");
    OCTET_CHECK(st->owner == this,
                "attention backward: the SavedAttention comes from another "
                "attention layer's forward");
    check_operands(dq, dk, dv, d_o,
                   {"attention backward dq", "attention backward dk", "attention backward dv",
                    "attention backward d_o"});
    if (!residual.empty()) {
      check_dtype(residual, DType::F64, "attention backward residual");
      check_numel(residual, 2, "attention backward residual");
    }
    ActIn g(d_o, "attention backward d_o");
    ActOut dqo(dq, "attention backward dq"), dko(dk, "attention backward dk"),
        dvo(dv, "attention backward dv");
    AttentionStats stats;
    const int64_t H = shape_.n_heads, G = shape_.n_kv_heads, Tq = shape_.seq_q, Tk = shape_.seq_k;
    std::vector<float> gb, dqb, dkb, dvb;
    const bool tm = tokens_major();
    float* dq_ref = tm ? resized(dqb, dqo.t.numel()) : dqo.data;
    float* dk_ref = tm ? resized(dkb, dko.t.numel()) : dko.data;
    float* dv_ref = tm ? resized(dvb, dvo.t.numel()) : dvo.data;
    attention_backward(st->saved, heads_major(g.data, H, Tq, gb), dq_ref, dk_ref, dv_ref,
                       residual.empty() ? nullptr : &stats);
    to_layout(dq_ref, dqo.data, H, Tq), to_layout(dk_ref, dko.data, G, Tk),
        to_layout(dv_ref, dvo.data, G, Tk);
    dqo.store(), dko.store(), dvo.store();
    if (!residual.empty()) {
      double* r = residual.f64();
      const double m = stats.row_residual_max;  // a NaN stays (as on the GPU), never dropped
      r[0] = (m != m || r[0] != r[0]) ? NAN : std::max(r[0], m);
      r[1] += stats.row_residual_mean;
    }
  }

 private:
  // Query-shaped a, d [B,H,Tq,D] and key-shaped b, c [B,G,Tk,D]; names for the errors.
  void check_operands(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& d,
                      const std::array<const char*, 4>& names) const {
    check_act(a, shape_.q_shape(), names[0]);
    check_act(b, shape_.kv_shape(), names[1]);
    check_act(c, shape_.kv_shape(), names[2]);
    check_act(d, shape_.q_shape(), names[3]);
  }
  bool tokens_major() const { return shape_.layout == AttnLayout::TokensMajor; }
  static float* resized(std::vector<float>& v, int64_t n) {
    v.resize(size_t(n));
    return v.data();
  }
  // The reference's heads-major view of an act of `heads` heads and `seq` tokens: x itself, or its
  // tokens-major values moved into buf.
  const float* heads_major(const float* x, int64_t heads, int64_t seq, std::vector<float>& buf) const {
    if (!tokens_major()) return x;
    transpose_heads_tokens(x, resized(buf, shape_.batch * heads * seq * shape_.head_dim), shape_.batch, heads,
                           seq, shape_.head_dim, /*to_tokens_major=*/false);
    return buf.data();
  }
  // The reference's heads-major result into the caller's layout (nothing when they are the same).
  void to_layout(const float* ref, float* out, int64_t heads, int64_t seq) const {
    if (tokens_major())
      transpose_heads_tokens(ref, out, shape_.batch, heads, seq, shape_.head_dim, /*to_tokens_major=*/true);
  }
  // An act tensor of exactly `want` elements laid out as `want` (any shape of equal numel and
  // last dimension is accepted: the reference reads flat memory).
  static void check_act(const Tensor& t, const Shape& want, const char* what) {
    check_activation(t, what);
    OCTET_CHECK(t.numel() == want.numel() && t.cols() == want.back(),
                std::string(what) + ": expected " + want.str() + ", got " + t.str());
  }

  // f(array, dims) for each array of an AttentionSaved of this attention, in member order, dims
  // the sizes whose product is its length (saved_size.h AttnSizeDim); o_fp64 only in precision
  // fp64 (the reference fills it there only). The one statement of the image's layout.
  template <typename F>
  void each_array_dims(AttentionSaved& s, F&& f) const {
    constexpr int64_t rows = kAttnBatch | kAttnHeads | kAttnSeqQ, q = rows | kAttnHeadDim;
    constexpr int64_t k = kAttnBatch | kAttnKvHeads | kAttnSeqK | kAttnHeadDim;
    f(s.q_hat, q), f(s.k_hat, k), f(s.v_hat, k), f(s.o, q), f(s.lse, rows);
    f(s.row_max, rows), f(s.row_sum, rows);
    if (config_.precision == AttnPrecision::FP64) f(s.o_fp64, q);
  }
  // f(array, elements) for each array, as each_array_dims.
  template <typename F>
  void each_array(AttentionSaved& s, F&& f) const {
    each_array_dims(s, [&](auto& a, int64_t dims) {
      f(a, size_t(AttnSizeTerm{1, dims, 1, 1}.bytes(attn_sizes(shape_))));
    });
  }
  // The byte image's start: checks that `memory` holds saved_bytes().
  uint8_t* image(const Tensor& memory, const char* what) const {
    OCTET_CHECK(!memory.empty(), std::string(what) + ": no memory given");
    OCTET_CHECK(int64_t(memory.bytes()) >= saved_bytes(),
                std::string(what) + ": " + std::to_string(memory.bytes()) +
                    " bytes given, the saved state needs " + std::to_string(saved_bytes()));
    return static_cast<uint8_t*>(memory.data);
  }

  AttentionShape shape_;
  AttentionShape ref_;  ///< shape_ in the reference's heads-major layout
  AttentionConfig config_;
};

}  // namespace

std::unique_ptr<Attention> CpuBackend::make_attention(const AttentionShape& shape,
                                                      const AttentionConfig& config) {
  return std::make_unique<CpuAttention>(shape, config);
}

}  // namespace octet::cpu
