// octet/optim.h — the optimizer of a training step: global gradient-norm clipping and AdamW
// (Loshchilov & Hutter, arXiv 1711.05101) on the Model's FP32 master weights, with the no-decay
// group (ParamInfo::decay false: norm gains and biases) and the step counter of the bias
// correction. Used by the trainer (train.h) and by `octet bench train`. (docs/design.md
// §"The trainer in parts")
//
// All work is enqueued on the model's backend (Backend::sum_squares, scale, adamw); the only host
// read is grad_norm(), once per step. Moments m and v are F32 backend tensors over the optimizer's
// shard of the parameters (all of them in one process; a ZeRO-1 rank's part: docs/distributed.md).
// Errors: invalid hyperparameters or moment sizes throw octet::Error naming the value.
#pragma once

#include <cstdint>
#include <vector>

#include "octet/backend.h"
#include "octet/model.h"

namespace octet {

struct TrainConfig;

/// A contiguous range [begin, end) of the model's flat parameters (params() order): the part whose
/// optimizer state one rank keeps under ZeRO-1 (octet/dist.h shard_range); {0, num_params} is all.
struct ShardRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

/// AdamW's hyperparameters (the [train] section of a run's config).
struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay = 0.1f;  ///< decoupled; params with ParamInfo::decay only
  float grad_clip = 1.0f;     ///< clip to this global gradient norm; 0 disables
  void validate() const;      ///< betas in [0, 1), eps > 0, weight_decay >= 0, grad_clip >= 0
};
/// The AdamW settings of a run's train config.
AdamWConfig adamw_config(const TrainConfig& t);

class Optimizer {
 public:
  /// Allocates zeroed moments for `model`'s parameters in `shard` (default: all of them) on its
  /// backend. Throws on invalid hyperparameters or a shard outside [0, num_params].
  Optimizer(Model& model, const AdamWConfig& config);
  Optimizer(Model& model, const AdamWConfig& config, ShardRange shard);

  const ShardRange& shard() const { return shard_; }
  /// Where the shard's gradients are read from: F32 [shard().size()] backend memory; by default
  /// the model's own grad_data() slice, under ZeRO-1 the reduce-scattered sums (octet/dist.h).
  void use_gradients(const Tensor& grads);
  /// Enqueues Σ g² of the shard's gradients into the optimizer's F64 accumulator (reset first).
  void compute_grad_norm();
  /// The F64 [1] accumulator compute_grad_norm() fills (for a sum over ranks).
  const Tensor& grad_norm_sq() const { return norm_sq_; }
  /// sqrt of the accumulator (NaN/inf propagate). Synchronizes.
  double grad_norm();
  /// One update with learning rate lr, given the step's global gradient norm: if grad_clip > 0
  /// and grad_norm > grad_clip the shard's gradients are scaled by grad_clip / grad_norm; then the
  /// step counter advances and AdamW updates the shard's part of every parameter tensor (weight
  /// decay on the decay group).
  void step(float lr, double grad_norm);

  /// Successful updates so far (AdamW's bias-correction step t of the next update is steps() + 1).
  int64_t steps() const { return steps_; }
  /// The moments, F32 [shard().size()] backend tensors.
  const Tensor& m() const { return m_; }
  const Tensor& v() const { return v_; }
  /// Host copies of the moments (shard().size() floats). Synchronize.
  std::vector<float> download_m();
  std::vector<float> download_v();
  /// Restores a checkpoint's moments of ALL num_params parameters (this shard's part is kept) and
  /// step counter; throws on a size mismatch.
  void load(const std::vector<float>& m, const std::vector<float>& v, int64_t steps);

 private:
  Model& model_;
  AdamWConfig config_;
  ShardRange shard_;
  Tensor grads_;
  Buffer m_, v_, norm_sq_;
  int64_t steps_ = 0;
};

}  // namespace octet
