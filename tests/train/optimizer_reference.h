// tests/train/optimizer_reference.h — the optimizer step as octet computed it before the fused
// step (the reference the fused Optimizer must equal bit for bit, on either backend): the global
// norm read on the host, Backend::scale of the gradients when clipping, a host-side skip of a
// non-finite norm, and one Backend::adamw per parameter tensor's part of every shard piece.
// Also the equality check of an Optimizer against it over a tiny model (used by tests/train and
// tests/cuda).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "octet/backend.h"
#include "octet/model.h"
#include "octet/optim.h"

namespace octet::test {

/// One reference step over `shard` of model's parameters with gradients `grads` (F32
/// [shard.state_size], modified when clipping) and moments m, v. Returns false (nothing changed,
/// `steps` kept) when the norm is not finite.
inline bool reference_optimizer_step(Backend& be, Model& model, const ShardLayout& shard, const Tensor& grads,
                                     const Tensor& m, const Tensor& v, const AdamWConfig& c, float lr,
                                     int64_t& steps, double* norm = nullptr) {
  Buffer acc = be.alloc(DType::F64, {1});
  be.sum_squares(grads, acc);
  const double gnorm = std::sqrt(be.read_f64(acc));
  if (norm) *norm = gnorm;
  if (!std::isfinite(gnorm)) return false;
  if (c.grad_clip > 0 && gnorm > c.grad_clip) be.scale(float(c.grad_clip / gnorm), grads);
  steps += 1;
  const Tensor params = model.param_data().reshape({int64_t(model.num_params())});
  for (const ShardPiece& piece : shard.pieces)
    for (const ParamInfo& p : model.params()) {
      const int64_t lo = std::max(int64_t(p.offset), piece.begin);
      const int64_t hi = std::min(int64_t(p.offset + p.numel), piece.end);
      if (lo >= hi) continue;
      auto part = [&](const Tensor& t) { return t.slice(piece.state + lo - piece.begin, hi - lo); };
      be.adamw(params.slice(lo, hi - lo), part(grads), part(m), part(v), lr, c.beta1, c.beta2, c.eps,
               p.decay ? c.weight_decay : 0.0f, steps);
    }
  return true;
}

/// Copies model's gradients of every piece into the state layout of `grads` (padding zero).
inline void gather_shard_gradients(Backend& be, Model& model, const ShardLayout& shard, const Tensor& grads) {
  be.fill(grads, 0.0);
  const Tensor g = model.grad_data().reshape({int64_t(model.num_params())});
  for (const ShardPiece& p : shard.pieces)
    if (p.size() > 0) be.copy(grads.slice(p.state, p.size()), g.slice(p.begin, p.size()));
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// Trains two identical tiny models on `be` for `steps` steps, one with the fused Optimizer and one
/// with reference_optimizer_step, with grad_clip small enough that most steps clip, and a NaN
/// gradient injected at step `nan_step` (skipped by both); expects params and moments bitwise equal
/// after every step, and the Optimizer's counters to say what happened. shard: the whole model
/// (nullptr) or a ZeRO-1-like layout of pieces (gradients given through use_gradients).
inline void expect_fused_equals_reference(Backend& be, const ModelConfig& cfg, const PrecisionConfig& prec,
                                          const ShardLayout* shard, int steps, int nan_step) {
  const int64_t batch = 2;
  Model fused(cfg, prec, be, batch), ref(cfg, prec, be, batch);
  fused.init(7);
  ref.init(7);
  const int64_t n = int64_t(fused.num_params());
  const ShardLayout layout = shard ? *shard : ShardLayout::whole(n);
  AdamWConfig c;
  c.grad_clip = 0.05f;  // the tiny model's norm is larger: clipped steps
  c.weight_decay = 0.3f;
  Optimizer opt(fused, c, layout);
  Buffer fused_grads = be.alloc(DType::F32, {layout.state_size});
  if (shard) opt.use_gradients(fused_grads);
  Buffer ref_grads = be.alloc(DType::F32, {layout.state_size});
  Buffer rm = be.alloc(DType::F32, {layout.state_size}), rv = be.alloc(DType::F32, {layout.state_size});
  int64_t ref_steps = 0, skipped = 0, clipped = 0;
  std::vector<int32_t> ids(size_t(batch * cfg.seq_len)), targets(ids.size());
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < ids.size(); ++i) {
      ids[i] = int32_t((i * 7 + size_t(s) * 3) % size_t(cfg.vocab_size));
      targets[i] = int32_t((i * 5 + size_t(s)) % size_t(cfg.vocab_size));
    }
    for (Model* mdl : {&fused, &ref}) {
      mdl->zero_grad();
      mdl->forward_backward(ids.data(), targets.data(), true, 1.0f / float(ids.size()));
      mdl->update_quant_scales();
      if (s == nan_step) {
        const float nan = NAN;
        be.upload(mdl->grad_data().slice(int64_t(mdl->num_params()) - 1, 1),
                  &nan);  // inside every shard test
      }
    }
    gather_shard_gradients(be, ref, layout, ref_grads);
    if (shard) gather_shard_gradients(be, fused, layout, fused_grads);
    opt.compute_grad_norm();
    opt.step(1e-2f, fused.loss_sum());
    fused.take_loss();
    ref.take_loss();
    double norm = 0;
    const bool updated =
        reference_optimizer_step(be, ref, layout, ref_grads, rm, rv, c, 1e-2f, ref_steps, &norm);
    skipped += !updated;
    const Optimizer::Counters k = opt.counters();
    if (updated) {  // the device's norm and clip factor are the host's
      ASSERT_EQ(k.last_grad_norm, norm) << "step " << s;
      ASSERT_EQ(k.last_clip, norm > c.grad_clip ? float(c.grad_clip / norm) : 1.0f) << "step " << s;
      clipped += k.last_clip < 1.0f;
    }
    ASSERT_EQ(k.steps, ref_steps) << "step " << s;
    ASSERT_EQ(k.skipped, skipped) << "step " << s;
    ASSERT_EQ(k.last_skipped, !updated) << "step " << s;
    ASSERT_EQ(k.bad_in_a_row, updated ? 0 : 1) << "step " << s;
    ASSERT_TRUE(same_bits(fused.download_params(), ref.download_params()))
        << "params differ after step " << s;
    ASSERT_TRUE(same_bits(opt.download_m(), be.download_f32(rm))) << "m differs after step " << s;
    ASSERT_TRUE(same_bits(opt.download_v(), be.download_f32(rv))) << "v differs after step " << s;
  }
  EXPECT_EQ(skipped, nan_step >= 0 && nan_step < steps ? 1 : 0);
  EXPECT_GT(clipped, 0) << "no step clipped: the test does not cover clipping";
}

}  // namespace octet::test
