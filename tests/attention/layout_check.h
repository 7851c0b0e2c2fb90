// layout_check.h — the check of AttnLayout (octet/attention.h) on any backend: an attention of a
// shape in the tokens-major layout [B, T, heads, D], given the inputs of a heads-major one moved
// into that layout, returns bitwise the heads-major attention's O, LSE, dQ, dK, dV (moved back),
// and its row residual to FP64 rounding (the GPU sums it with atomics). The layout only changes
// where the kernels read and write, never a value. Used by tests/backend (the CPU backend) and
// tests/cuda (every CUDA form).
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "octet/attention.h"
#include "octet/backend.h"
#include "octet/fp8.h"

namespace octet::test {

struct LayoutRun {
  std::vector<float> o, lse, dq, dk, dv;  ///< heads-major, whatever the run's layout
  double residual[2] = {0.0, 0.0};
};

// One forward and backward of an attention of `s` on backend memory of dtype `act`; the inputs and
// results are heads-major host vectors (moved to and from s.layout here).
inline LayoutRun run_in_layout(Backend& be, const AttentionShape& s, const AttentionConfig& cfg, DType act,
                               const AttentionInputs& in) {
  const bool tm = s.layout == AttnLayout::TokensMajor;
  auto moved = [&](const std::vector<float>& x, int64_t heads, int64_t T, bool to_tm) {
    if (!tm) return x;
    std::vector<float> y(x.size());
    transpose_heads_tokens(x.data(), y.data(), s.batch, heads, T, s.head_dim, to_tm);
    return y;
  };
  auto upload = [&](const std::vector<float>& host, const Shape& shape) {
    Buffer b = be.alloc(act, shape);
    if (act == DType::BF16) {
      std::vector<uint16_t> bits(host.size());
      for (size_t i = 0; i < bits.size(); ++i) bits[i] = bf16_from_float(host[i]);
      be.upload(b, bits.data());
    } else {
      be.upload(b, host.data());
    }
    return b;
  };
  const int64_t H = s.n_heads, G = s.n_kv_heads, Tq = s.seq_q, Tk = s.seq_k;
  auto attn = be.make_attention(s, cfg);
  Buffer q = upload(moved(in.q, H, Tq, true), s.q_shape()),
         k = upload(moved(in.k, G, Tk, true), s.kv_shape()),
         v = upload(moved(in.v, G, Tk, true), s.kv_shape()),
         d_o = upload(moved(in.d_o, H, Tq, true), s.q_shape());
  Buffer o = be.alloc(act, s.q_shape()), lse = be.alloc(DType::F32, {s.batch, H, Tq});
  Buffer dq = be.alloc(act, s.q_shape()), dk = be.alloc(act, s.kv_shape()), dv = be.alloc(act, s.kv_shape());
  Buffer residual = be.alloc(DType::F64, {2});
  {
    const SavedAttention saved = attn->forward(q, k, v, o, lse);
    attn->backward(saved, d_o, dq, dk, dv, residual);
  }
  LayoutRun r;
  r.o = moved(be.download_f32(o), H, Tq, false);
  r.lse = be.download_f32(lse);
  r.dq = moved(be.download_f32(dq), H, Tq, false);
  r.dk = moved(be.download_f32(dk), G, Tk, false);
  r.dv = moved(be.download_f32(dv), G, Tk, false);
  be.download(r.residual, residual);
  return r;
}

/// The heads-major and tokens-major attentions of `shape` (its layout ignored) agree bitwise.
inline void expect_layouts_agree(Backend& be, AttentionShape shape, const AttentionConfig& cfg, DType act,
                                 const std::string& name) {
  shape.layout = AttnLayout::HeadsMajor;
  AttentionShape tokens = shape;
  tokens.layout = AttnLayout::TokensMajor;
  const AttentionInputs in = make_attention_inputs(shape, AttnInputDist::Normal, 7);
  const LayoutRun a = run_in_layout(be, shape, cfg, act, in), b = run_in_layout(be, tokens, cfg, act, in);
  for (auto [what, x, y] : {std::tuple{"o", &a.o, &b.o},
                            {"lse", &a.lse, &b.lse},
                            {"dq", &a.dq, &b.dq},
                            {"dk", &a.dk, &b.dk},
                            {"dv", &a.dv, &b.dv}}) {
    ASSERT_EQ(x->size(), y->size()) << name << " " << what;
    bool nonzero = false;
    for (size_t i = 0; i < x->size(); ++i) {
      nonzero |= (*x)[i] != 0.0f;
      ASSERT_TRUE(std::bit_cast<uint32_t>((*x)[i]) == std::bit_cast<uint32_t>((*y)[i]))
          << name << " " << what << " at " << i << ": heads-major " << (*x)[i] << ", tokens-major "
          << (*y)[i];
    }
    EXPECT_TRUE(nonzero) << name << " " << what << ": all zero (vacuous)";
  }
  // The row residual's FP64 sums are atomics on the GPU (their order varies run to run): equal to
  // FP64 rounding.
  for (int i = 0; i < 2; ++i)
    EXPECT_NEAR(a.residual[i], b.residual[i], 1e-12 * std::abs(a.residual[i])) << name << " residual " << i;
}

}  // namespace octet::test
