// octet/optim.h — the optimizer of a training step: global gradient-norm clipping and AdamW
// (Loshchilov & Hutter, arXiv 1711.05101) on the Model's FP32 master weights, with the no-decay
// group (ParamInfo::decay false: norm gains and biases) and the step counter of the bias
// correction. Used by the trainer (train.h) and by `octet bench train`. (docs/design.md
// §"The trainer in parts")
//
// All work is enqueued on the model's backend: Σg² (Backend::sum_squares), then the fused step
// (Backend::adamw_prepare + one adamw_apply per shard piece; octet/adamw_rule.h): the clip factor,
// the skip of a step whose gradient norm (or loss) is not finite, and the step counter t of the
// bias correction all live on the device, so a step needs no host read. The host learns them when
// it asks (counters(), steps(), grad_norm(): each synchronizes). Moments m and v are F32 backend
// tensors over the optimizer's shard of the parameters (all of them in one process; a ZeRO-1
// rank's part: docs/distributed.md).
// Errors: invalid hyperparameters or moment sizes throw octet::Error naming the value.
#pragma once

#include <cstdint>
#include <vector>

#include "octet/backend.h"
#include "octet/model.h"

namespace octet {

struct TrainConfig;

/// One piece of an optimizer's shard: the flat parameters [begin, end) (params() order), whose
/// gradients and moments sit at [state, state + size()) of the optimizer's state vectors.
struct ShardPiece {
  int64_t begin = 0, end = 0, state = 0;
  int64_t size() const { return end - begin; }
};

/// The parameters whose optimizer state one rank keeps under ZeRO-1 (octet/dist.h BucketPlan,
/// docs/distributed.md §"Gradient buckets"): disjoint pieces in increasing `begin`, laid out in state vectors
/// of state_size floats (state slots between pieces are padding: zero, never updated). whole(n):
/// one piece {0, n, 0}, state_size n — every parameter, as in one process.
struct ShardLayout {
  std::vector<ShardPiece> pieces;
  int64_t state_size = 0;
  static ShardLayout whole(int64_t n) { return {{ShardPiece{0, n, 0}}, n}; }
  int64_t params() const;  ///< Σ piece sizes (the parameters this shard updates)
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
  /// Allocates zeroed moments [shard.state_size] for `model`'s parameters in `shard` (default: all
  /// of them) on its backend. Throws on invalid hyperparameters, or pieces that overlap, are not in
  /// increasing order or leave [0, num_params] or [0, state_size].
  Optimizer(Model& model, const AdamWConfig& config);
  Optimizer(Model& model, const AdamWConfig& config, ShardLayout shard);

  const ShardLayout& shard() const { return shard_; }
  /// Where the shard's gradients are read from: F32 [shard().state_size] backend memory in the
  /// shard's state layout (padding slots zero). By default — a shard of one piece at state 0 — the
  /// model's own grad_data() slice; under ZeRO-1 the reduce-scattered sums (octet/dist.h), which
  /// must be given before compute_grad_norm().
  void use_gradients(const Tensor& grads);
  /// Enqueues Σ g² of the shard's gradients into the optimizer's F64 accumulator (reset first).
  void compute_grad_norm();
  /// The F64 [1] accumulator compute_grad_norm() fills (for a sum over ranks).
  const Tensor& grad_norm_sq() const { return norm_sq_; }
  /// sqrt of the accumulator (NaN/inf propagate). Synchronizes.
  double grad_norm();
  /// Enqueues one optimizer step with learning rate lr, decided on the device from grad_norm_sq()
  /// as compute_grad_norm() (and any sum over ranks) left it, and from loss_sum (F64 [1] backend
  /// accumulator, e.g. Model::loss_sum(); empty: not checked): a non-finite norm or loss skips the
  /// step (params, moments and t unchanged; the skip counters advance); else, if grad_clip > 0 and
  /// norm > grad_clip, every gradient g is used as fp32(g · fp32(grad_clip / norm)) (the gradient
  /// memory is not written), t advances and AdamW updates the shard (weight decay on the decay
  /// group). No host synchronization.
  void step(float lr, const Tensor& loss_sum = {});

  /// What the device knows after the enqueued steps (octet/adamw_rule.h OptStateSlot).
  struct Counters {
    int64_t steps = 0;         ///< successful updates (bias-correction step of the last one)
    int64_t skipped = 0;       ///< skipped steps since construction or load()
    int64_t bad_in_a_row = 0;  ///< consecutive skipped steps up to the last one
    bool last_skipped = false;
    double last_grad_norm = 0;  ///< √Σg² of the last step
    float last_clip = 1;        ///< the last step's clip factor (1: not clipped)
  };
  /// Synchronizes.
  Counters counters();
  /// Successful updates so far (AdamW's bias-correction step t of the next update is steps() + 1).
  /// Synchronizes.
  int64_t steps() { return counters().steps; }
  /// The moments, F32 [shard().state_size] backend tensors (the shard's state layout).
  const Tensor& m() const { return m_; }
  const Tensor& v() const { return v_; }
  /// Host copies of the moments (shard().state_size floats, state layout). Synchronize.
  std::vector<float> download_m();
  std::vector<float> download_v();
  /// Restores a checkpoint's moments of ALL num_params parameters (params() order; this shard's
  /// pieces are kept) and step counter; throws on a size mismatch.
  void load(const std::vector<float>& m, const std::vector<float>& v, int64_t steps);

 private:
  void reserve_bias_corrections(int64_t t);  // bias_corr_ holds rows for every t <= this

  Model& model_;
  AdamWConfig config_;
  ShardLayout shard_;
  Tensor grads_;
  Buffer m_, v_, norm_sq_;
  Buffer state_;                  // F64 [kOptStateSlots] (adamw_rule.h OptStateSlot)
  Buffer bias_corr_;              // F64 [T, 2]: row t−1 = {1−β1^t, 1−β2^t}
  std::vector<Buffer> segments_;  // per shard piece: F64 [k, 2] rows {end, decay}, piece-relative
  int64_t t_bound_ = 0;           // the largest t the enqueued steps can have reached
};

}  // namespace octet
