// octet/adamw_rule.h — the one definition of the AdamW update of one element and of the
// optimizer step's clip/skip decision, for host and device: the CPU backend (src/cpu/backend/
// adamw.cpp) and the CUDA kernels (src/cuda/ops/reduce.cu, src/cuda/ops/optim.cu) both call these, so the
// per-tensor path and the fused path compute the same bits on one backend.
//
// AdamW: Loshchilov & Hutter, arXiv 1711.05101 (Adam: Kingma & Ba, arXiv 1412.6980), bias
// correction of step t >= 1, decoupled weight decay on p before this step's update:
//   m = β1 m + (1−β1) g;  v = β2 v + (1−β2) g²;  p -= lr (m/(1−β1^t) / (√(v/(1−β2^t)) + ε) + wd·p)
// evaluated in double per element, each state stored in FP32.
// Global-norm clipping (Pascanu et al., arXiv 1211.5063): with norm = √Σg² over all gradients
// (all ranks), g is replaced by fp32(g · c), c = fp32(clip / norm), when clip > 0 and norm > clip.
// A step whose norm (or loss) is not finite is skipped: nothing changes and t does not advance.
#pragma once

#include <cmath>
#include <cstdint>

#include "octet/fp8.h"  // OCTET_HD

namespace octet {

/// 1 − β^t, the bias correction of AdamW's step t (host; the fused path takes a table of these).
inline double adamw_bias_correction(float beta, int64_t t) { return 1.0 - std::pow(double(beta), double(t)); }

/// The per-step constants of an AdamW update, in double.
struct AdamWCoef {
  double beta1, beta2, bc1, bc2, lr, eps;
};

/// One element's update (g already clipped); wd = the weight decay of its group (0: no decay).
OCTET_HD void adamw_element(float& p, float& m, float& v, double g, const AdamWCoef& c, double wd) {
  const double mi = c.beta1 * m + (1.0 - c.beta1) * g;
  const double vi = c.beta2 * v + (1.0 - c.beta2) * g * g;
  m = float(mi);
  v = float(vi);
  const double update = (mi / c.bc1) / (std::sqrt(vi / c.bc2) + c.eps);
  const double pi = p;
  p = float(pi - c.lr * (update + wd * pi));
}

/// The step's decision from the global Σg² (and, if has_loss, the step's summed loss).
struct StepDecision {
  bool skip;    ///< norm or loss not finite: leave params and moments, do not advance t
  float clip;   ///< the factor every gradient is multiplied by (1 when not clipping)
  double norm;  ///< √Σg²
};
OCTET_HD StepDecision decide_step(double norm_sq, bool has_loss, double loss_sum, float grad_clip) {
  StepDecision d;
  d.norm = std::sqrt(norm_sq);
  d.skip = !std::isfinite(d.norm) || (has_loss && !std::isfinite(loss_sum));
  d.clip = (!d.skip && grad_clip > 0 && d.norm > grad_clip) ? float(double(grad_clip) / d.norm) : 1.0f;
  return d;
}

/// Slots of the fused optimizer's device state (F64 [kOptStateSlots], backend memory), written by
/// Backend::adamw_prepare and read by Backend::adamw_apply and the host (Optimizer::counters).
/// Integers are held exactly (< 2^53).
enum OptStateSlot : int {
  kOptSteps = 0,      ///< successful updates t (the bias-correction step of the last update)
  kOptSkipped = 1,    ///< skipped steps since the state was set
  kOptBadInARow = 2,  ///< consecutive skipped steps up to the last one
  kOptSkip = 3,       ///< 1 if the last prepared step is skipped, else 0
  kOptClip = 4,       ///< the last step's clip factor (an FP32 value)
  kOptBc1 = 5,        ///< 1 − β1^t of the last update
  kOptBc2 = 6,        ///< 1 − β2^t
  kOptNorm = 7,       ///< the last step's global gradient norm √Σg²
  kOptStateSlots = 8
};

/// adamw_prepare's state update, the same on the host and the device: records the decision d in
/// `state` (kOptStateSlots values) and, unless it skips, advances t and takes the bias corrections
/// of step t from `bias_corr` (F64 [t_rows, 2]: 1 − β1^t, 1 − β2^t per row; NaN past its end).
OCTET_HD void record_step(const StepDecision& d, const double* bias_corr, int64_t t_rows, double* state) {
  state[kOptSkip] = d.skip ? 1.0 : 0.0;
  state[kOptClip] = d.clip;
  state[kOptNorm] = d.norm;
  if (d.skip) {
    state[kOptSkipped] += 1;
    state[kOptBadInARow] += 1;
    return;
  }
  state[kOptBadInARow] = 0;
  const double t = state[kOptSteps] += 1;
  const bool in_table = t <= double(t_rows);
  state[kOptBc1] = in_table ? bias_corr[2 * int64_t(t - 1)] : NAN;
  state[kOptBc2] = in_table ? bias_corr[2 * int64_t(t - 1) + 1] : NAN;
}

}  // namespace octet
