// src/train/optimizer.cpp — Optimizer (octet/optim.h): global-norm clipping and AdamW over the
// model's parameter tensors through the Backend, with the no-decay group and the step counter.
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

Optimizer::Optimizer(Model& model, const AdamWConfig& config) : model_(model), config_(config) {
  config_.validate();
  Backend& be = model_.backend();
  const Shape n{int64_t(model_.num_params())};
  m_ = be.alloc(DType::F32, n);
  v_ = be.alloc(DType::F32, n);
  norm_sq_ = be.alloc(DType::F64, {1});
}

void Optimizer::compute_grad_norm() {
  Backend& be = model_.backend();
  be.fill(norm_sq_, 0.0);
  be.sum_squares(model_.grad_data(), norm_sq_);
}

double Optimizer::grad_norm() { return std::sqrt(model_.backend().read_f64(norm_sq_)); }

void Optimizer::step(float lr, double grad_norm) {
  Backend& be = model_.backend();
  const Tensor grads = model_.grad_data();
  if (config_.grad_clip > 0 && grad_norm > config_.grad_clip)
    be.scale(float(config_.grad_clip / grad_norm), grads);
  steps_ += 1;
  const Tensor params = model_.param_data();
  for (const ParamInfo& p : model_.params()) {
    const int64_t off = int64_t(p.offset), n = int64_t(p.numel);
    auto part = [&](const Tensor& t) { return t.reshape({t.numel()}).slice(off, n); };
    be.adamw(part(params), part(grads), part(m_), part(v_), lr, config_.beta1, config_.beta2,
             config_.eps, p.decay ? config_.weight_decay : 0.0f, steps_);
  }
}

std::vector<float> Optimizer::download_m() {
  std::vector<float> h(model_.num_params());
  model_.backend().download(h.data(), m_);
  return h;
}

std::vector<float> Optimizer::download_v() {
  std::vector<float> h(model_.num_params());
  model_.backend().download(h.data(), v_);
  return h;
}

void Optimizer::load(const std::vector<float>& m, const std::vector<float>& v, int64_t steps) {
  OCTET_CHECK(m.size() == model_.num_params() && v.size() == model_.num_params(),
              "optimizer state: expected " + std::to_string(model_.num_params()) +
                  " moments each, got " + std::to_string(m.size()) + " and " +
                  std::to_string(v.size()));
  OCTET_CHECK(steps >= 0, "optimizer state: negative step count " + std::to_string(steps));
  model_.backend().upload(m_, m.data());
  model_.backend().upload(v_, v.data());
  steps_ = steps;
}

}  // namespace octet
