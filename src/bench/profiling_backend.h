// src/bench/profiling_backend.h — a Backend decorator that times every operation of the wrapped
// backend (octet/backend.h) by op class, for `octet bench train --profile`: where a training step's
// time goes (linear forward/backward per shape and precision, attention forward/backward, norms,
// activations, layouts, loss, optimizer, reductions, copies).
//
// Method: the wrapped backend is synchronized after every call and the host wall clock is read
// around it (the previous call has already been synchronized), so each op's time includes its
// launch latency and one synchronization (~10 µs); the per-op times add up to slightly more than an
// unprofiled step. Good enough to rank the costs; not a replacement for the unprofiled step time.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "octet/backend.h"

namespace octet {

class ProfilingBackend final : public Backend {
 public:
  struct Stat {
    int64_t calls = 0;
    double seconds = 0;
  };
  explicit ProfilingBackend(Backend& inner) : inner_(inner) {}

  /// Accumulated time per op name since the last reset().
  const std::map<std::string, Stat>& stats() const { return stats_; }
  void reset() { stats_.clear(); }
  /// Runs fn() between two synchronizations of the wrapped backend and adds its time to `op`.
  template <typename Fn>
  auto timed(const std::string& op, Fn&& fn);

  std::string name() const override { return inner_.name(); }
  DType preferred_activation_dtype() const override { return inner_.preferred_activation_dtype(); }
  Buffer alloc(DType dtype, Shape shape) override;
  void release(void* p) override;
  void upload(const Tensor& dst, const void* host_src) override;
  void download(void* host_dst, const Tensor& src) override;
  void fill(const Tensor& x, double value) override;
  void copy(const Tensor& dst, const Tensor& src) override;
  void copy_spans(const Tensor& dst, const Tensor& src, const std::vector<CopySpan>& spans) override;
  void synchronize() override;
  void axpy(float a, const Tensor& x, const Tensor& y) override;
  void scale(float a, const Tensor& x) override;
  void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) override;
  void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) override;
  void rmsnorm_forward(const Tensor& x, const Tensor& weight, const Tensor& y, const Tensor& rstd, float eps,
                       const Tensor& amax = {}) override;
  void rmsnorm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy,
                        const Tensor& dx, const Tensor& dweight, bool accumulate) override;
  void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                         const Tensor& mean, const Tensor& rstd, float eps, const Tensor& amax = {}) override;
  void layernorm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                          const Tensor& dy, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                          bool accumulate) override;
  void rope(const Tensor& x, float theta, bool inverse, AttnLayout layout) override;
  void gelu_forward(const Tensor& x, const Tensor& y, const Tensor& amax = {}) override;
  void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, const Tensor& amax = {}) override;
  void swiglu_forward(const Tensor& h, const Tensor& y) override;
  void swiglu_backward(const Tensor& h, const Tensor& dy, const Tensor& dh) override;
  void split_qkv(const Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v,
                 AttnLayout layout) override;
  void merge_qkv(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qkv,
                 AttnLayout layout) override;
  void heads_to_tokens(const Tensor& x, const Tensor& y) override;
  void tokens_to_heads(const Tensor& x, const Tensor& y) override;
  std::unique_ptr<Linear> make_linear(const LinearSpec& spec) override;
  std::unique_ptr<Attention> make_attention(const AttentionShape& shape,
                                            const AttentionConfig& config) override;
  void gated_delta_forward(const GatedDeltaArgs& in, const Tensor& o) override;
  void gated_delta_backward(const GatedDeltaArgs& in, const Tensor& d_o, const Tensor& dq, const Tensor& dk,
                            const Tensor& dv, const Tensor& dgates) override;

  void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& dlogits, float grad_scale,
                     const Tensor& loss_sum) override;
  void sum_squares(const Tensor& x, const Tensor& out) override;
  Moments moments(const Tensor& x) override;
  void adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, float lr, float beta1,
             float beta2, float eps, float weight_decay, int64_t step) override;
  void adamw_prepare(const Tensor& norm_sq, const Tensor& loss_sum, const Tensor& bias_corr,
                     const Tensor& state, float grad_clip) override;
  void adamw_apply(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                   const Tensor& segments, const Tensor& state, float lr, float beta1, float beta2, float eps,
                   float weight_decay) override;

 private:
  Backend& inner_;
  std::map<std::string, Stat> stats_;
};

template <typename Fn>
auto ProfilingBackend::timed(const std::string& op, Fn&& fn) {
  struct Clock {
    ProfilingBackend& self;
    const std::string& op;
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
    ~Clock() {
      self.inner_.synchronize();
      Stat& s = self.stats_[op];
      s.calls += 1;
      s.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  } clock{*this, op};
  return fn();
}

}  // namespace octet
