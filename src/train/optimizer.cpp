// src/train/optimizer.cpp — Optimizer (octet/optim.h): global-norm clipping and AdamW over the
// model's flat parameter vector through the Backend's fused step (one adamw_apply per shard piece,
// the no-decay group as a table of segments built once), the clip factor, the non-finite skip and
// the step counter decided on the device (octet/adamw_rule.h).
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "octet/adamw_rule.h"
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

int64_t ShardLayout::params() const {
  int64_t n = 0;
  for (const ShardPiece& p : pieces) n += p.size();
  return n;
}

Optimizer::Optimizer(Model& model, const AdamWConfig& config)
    : Optimizer(model, config, ShardLayout::whole(int64_t(model.num_params()))) {}

Optimizer::Optimizer(Model& model, const AdamWConfig& config, ShardLayout shard)
    : model_(model), config_(config), shard_(std::move(shard)) {
  config_.validate();
  const int64_t n = int64_t(model_.num_params());
  int64_t prev_end = 0, prev_state_end = 0;
  for (const ShardPiece& p : shard_.pieces) {
    OCTET_CHECK(p.begin >= prev_end && p.begin <= p.end && p.end <= n && p.state >= prev_state_end &&
                    p.state + p.size() <= shard_.state_size,
                "optimizer shard piece [" + std::to_string(p.begin) + ", " + std::to_string(p.end) +
                    ") at state " + std::to_string(p.state) + " overlaps another or leaves the model's " +
                    std::to_string(n) + " parameters or the " + std::to_string(shard_.state_size) +
                    " state slots");
    prev_end = p.end;
    prev_state_end = p.state + p.size();
  }
  Backend& be = model_.backend();
  const bool one_piece = shard_.pieces.size() == 1 && shard_.pieces[0].state == 0 &&
                         shard_.pieces[0].size() == shard_.state_size;
  if (one_piece) grads_ = model_.grad_data().reshape({n}).slice(shard_.pieces[0].begin, shard_.state_size);
  m_ = be.alloc(DType::F32, {shard_.state_size});
  v_ = be.alloc(DType::F32, {shard_.state_size});  // zeroed, padding slots included
  norm_sq_ = be.alloc(DType::F64, {1});
  state_ = be.alloc(DType::F64, {kOptStateSlots});  // zeroed: t = 0, no skips
  // The decay group per piece: the parameter tensors tile [0, n) in params() order; adjacent
  // tensors of one group merge into one segment.
  int64_t covered = 0;
  for (const ParamInfo& p : model_.params()) {
    OCTET_CHECK(int64_t(p.offset) == covered,
                "optimizer: parameter " + p.name + " does not follow its predecessor");
    covered += int64_t(p.numel);
  }
  OCTET_CHECK(covered == n, "optimizer: the parameter tensors do not cover the flat parameter vector");
  for (const ShardPiece& piece : shard_.pieces) {
    std::vector<double> rows;  // {end, decay} pairs, piece-relative
    for (const ParamInfo& p : model_.params()) {
      const int64_t lo = std::max(int64_t(p.offset), piece.begin),
                    hi = std::min(int64_t(p.offset + p.numel), piece.end);
      if (lo >= hi) continue;
      const double decay = p.decay ? 1.0 : 0.0;
      if (!rows.empty() && rows.back() == decay)
        rows[rows.size() - 2] = double(hi - piece.begin);
      else
        rows.insert(rows.end(), {double(hi - piece.begin), decay});
    }
    if (rows.empty()) rows = {0.0, 0.0};  // an empty piece: never applied
    segments_.push_back(be.alloc(DType::F64, {int64_t(rows.size() / 2), 2}));
    be.upload(segments_.back(), rows.data());
  }
  reserve_bias_corrections(1024);
}

void Optimizer::reserve_bias_corrections(int64_t t) {
  const int64_t have = bias_corr_.tensor().empty() ? 0 : bias_corr_.tensor().shape[0];
  if (t <= have) return;
  const int64_t rows = std::max(t, 2 * have);
  std::vector<double> h(size_t(2 * rows));
  for (int64_t i = 0; i < rows; ++i) {
    h[size_t(2 * i)] = adamw_bias_correction(config_.beta1, i + 1);
    h[size_t(2 * i + 1)] = adamw_bias_correction(config_.beta2, i + 1);
  }
  bias_corr_ = model_.backend().alloc(DType::F64, {rows, 2});  // the old table is freed stream-ordered
  model_.backend().upload(bias_corr_, h.data());
}

void Optimizer::use_gradients(const Tensor& grads) {
  check_dtype(grads, DType::F32, "optimizer gradients");
  check_numel(grads, shard_.state_size, "optimizer gradients (the shard's state size)");
  grads_ = grads.reshape({shard_.state_size});
}

void Optimizer::compute_grad_norm() {
  Backend& be = model_.backend();
  OCTET_CHECK(grads_.numel() == shard_.state_size,
              "optimizer: a sharded optimizer needs use_gradients() first");
  be.fill(norm_sq_, 0.0);
  if (shard_.state_size > 0) be.sum_squares(grads_, norm_sq_);
}

double Optimizer::grad_norm() { return std::sqrt(model_.backend().read_f64(norm_sq_)); }

void Optimizer::step(float lr, const Tensor& loss_sum) {
  Backend& be = model_.backend();
  OCTET_CHECK(grads_.numel() == shard_.state_size,
              "optimizer: a sharded optimizer needs use_gradients() first");
  t_bound_ += 1;
  reserve_bias_corrections(t_bound_);
  be.adamw_prepare(norm_sq_, loss_sum, bias_corr_, state_, config_.grad_clip);
  const Tensor params = model_.param_data().reshape({int64_t(model_.num_params())});
  for (size_t i = 0; i < shard_.pieces.size(); ++i) {
    const ShardPiece& piece = shard_.pieces[i];
    if (piece.size() == 0) continue;
    auto part = [&](const Tensor& t) { return t.slice(piece.state, piece.size()); };
    be.adamw_apply(params.slice(piece.begin, piece.size()), part(grads_), part(m_), part(v_), segments_[i],
                   state_, lr, config_.beta1, config_.beta2, config_.eps, config_.weight_decay);
  }
}

Optimizer::Counters Optimizer::counters() {
  double h[kOptStateSlots];
  model_.backend().download(h, state_);
  Counters c;
  c.steps = int64_t(h[kOptSteps]);
  c.skipped = int64_t(h[kOptSkipped]);
  c.bad_in_a_row = int64_t(h[kOptBadInARow]);
  c.last_skipped = h[kOptSkip] != 0.0;
  c.last_grad_norm = h[kOptNorm];
  c.last_clip = float(h[kOptClip]);
  t_bound_ = c.steps;
  return c;
}

std::vector<float> Optimizer::download_m() {
  std::vector<float> h(size_t(shard_.state_size));
  if (!h.empty()) model_.backend().download(h.data(), m_);
  return h;
}

std::vector<float> Optimizer::download_v() {
  std::vector<float> h(size_t(shard_.state_size));
  if (!h.empty()) model_.backend().download(h.data(), v_);
  return h;
}

void Optimizer::load(const std::vector<float>& m, const std::vector<float>& v, int64_t steps) {
  OCTET_CHECK(m.size() == model_.num_params() && v.size() == model_.num_params(),
              "optimizer state: expected " + std::to_string(model_.num_params()) + " moments each, got " +
                  std::to_string(m.size()) + " and " + std::to_string(v.size()));
  OCTET_CHECK(steps >= 0, "optimizer state: negative step count " + std::to_string(steps));
  for (const ShardPiece& p : shard_.pieces) {
    if (p.size() == 0) continue;
    model_.backend().upload(m_.tensor().slice(p.state, p.size()), m.data() + p.begin);
    model_.backend().upload(v_.tensor().slice(p.state, p.size()), v.data() + p.begin);
  }
  double state[kOptStateSlots] = {};
  state[kOptSteps] = double(steps);
  state[kOptClip] = 1.0;
  model_.backend().upload(state_, state);
  t_bound_ = steps;
}

}  // namespace octet
