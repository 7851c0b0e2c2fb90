// src/train/optimizer.cpp — Optimizer (octet/optim.h): global-norm clipping and AdamW over the
// model's parameter tensors through the Backend, with the no-decay group and the step counter.
#include <algorithm>
#include <cmath>
#include <string>

#include "octet/error.h"
#include "octet/optim.h"
#include "octet/train.h"

namespace octet {

void AdamWConfig::validate() const {
  OCTET_CHECK(beta1 >= 0 && beta1 < 1, "adamw: beta1 must be in [0, 1), got " + std::to_string(beta1));
  OCTET_CHECK(beta2 >= 0 && beta2 < 1, "adamw: beta2 must be in [0, 1), got " + std::to_string(beta2));
  OCTET_CHECK(eps > 0, "adamw: eps must be > 0, got " + std::to_string(eps));
  OCTET_CHECK(weight_decay >= 0, "adamw: weight_decay must be >= 0, got " + std::to_string(weight_decay));
  OCTET_CHECK(grad_clip >= 0, "adamw: grad_clip must be >= 0 (0 disables), got " + std::to_string(grad_clip));
}

AdamWConfig adamw_config(const TrainConfig& t) {
  AdamWConfig c;
  c.beta1 = t.beta1;
  c.beta2 = t.beta2;
  c.eps = t.eps;
  c.weight_decay = t.weight_decay;
  c.grad_clip = t.grad_clip;
  return c;
}

Optimizer::Optimizer(Model& model, const AdamWConfig& config)
    : Optimizer(model, config, ShardRange{0, int64_t(model.num_params())}) {}

Optimizer::Optimizer(Model& model, const AdamWConfig& config, ShardRange shard)
    : model_(model), config_(config), shard_(shard) {
  config_.validate();
  const int64_t n = int64_t(model_.num_params());
  OCTET_CHECK(shard.begin >= 0 && shard.begin <= shard.end && shard.end <= n,
              "optimizer shard [" + std::to_string(shard.begin) + ", " + std::to_string(shard.end) +
                  ") is outside the model's " + std::to_string(n) + " parameters");
  Backend& be = model_.backend();
  grads_ = model_.grad_data().reshape({n}).slice(shard.begin, shard.size());
  m_ = be.alloc(DType::F32, {shard.size()});
  v_ = be.alloc(DType::F32, {shard.size()});
  norm_sq_ = be.alloc(DType::F64, {1});
}

void Optimizer::use_gradients(const Tensor& grads) {
  check_dtype(grads, DType::F32, "optimizer gradients");
  check_numel(grads, shard_.size(), "optimizer gradients (the shard's size)");
  grads_ = grads.reshape({shard_.size()});
}

void Optimizer::compute_grad_norm() {
  Backend& be = model_.backend();
  be.fill(norm_sq_, 0.0);
  if (shard_.size() > 0) be.sum_squares(grads_, norm_sq_);
}

double Optimizer::grad_norm() { return std::sqrt(model_.backend().read_f64(norm_sq_)); }

void Optimizer::step(float lr, double grad_norm) {
  Backend& be = model_.backend();
  if (config_.grad_clip > 0 && grad_norm > config_.grad_clip && shard_.size() > 0)
    be.scale(float(config_.grad_clip / grad_norm), grads_);
  steps_ += 1;
  const Tensor params = model_.param_data().reshape({int64_t(model_.num_params())});
  for (const ParamInfo& p : model_.params()) {  // each tensor's part inside the shard
    const int64_t lo = std::max(int64_t(p.offset), shard_.begin);
    const int64_t hi = std::min(int64_t(p.offset + p.numel), shard_.end);
    if (lo >= hi) continue;
    auto part = [&](const Tensor& t) { return t.slice(lo - shard_.begin, hi - lo); };
    be.adamw(params.slice(lo, hi - lo), part(grads_), part(m_), part(v_), lr, config_.beta1, config_.beta2,
             config_.eps, p.decay ? config_.weight_decay : 0.0f, steps_);
  }
}

std::vector<float> Optimizer::download_m() {
  std::vector<float> h(size_t(shard_.size()));
  if (!h.empty()) model_.backend().download(h.data(), m_);
  return h;
}

std::vector<float> Optimizer::download_v() {
  std::vector<float> h(size_t(shard_.size()));
  if (!h.empty()) model_.backend().download(h.data(), v_);
  return h;
}

void Optimizer::load(const std::vector<float>& m, const std::vector<float>& v, int64_t steps) {
  OCTET_CHECK(m.size() == model_.num_params() && v.size() == model_.num_params(),
              "optimizer state: expected " + std::to_string(model_.num_params()) +
                  " moments each, got " + std::to_string(m.size()) + " and " +
                  std::to_string(v.size()));
  OCTET_CHECK(steps >= 0, "optimizer state: negative step count " + std::to_string(steps));
  if (shard_.size() > 0) {
    model_.backend().upload(m_, m.data() + shard_.begin);
    model_.backend().upload(v_, v.data() + shard_.begin);
  }
  steps_ = steps;
}

}  // namespace octet
