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
  float* alloc(size_t n) override;
  int32_t* alloc_i32(size_t n) override;
  void release(void* p) override;
  void upload(float* dst, const float* host_src, size_t n) override;
  void upload_i32(int32_t* dst, const int32_t* host_src, size_t n) override;
  void download(float* host_dst, const float* src, size_t n) override;
  void fill(float* x, float value, size_t n) override;
  void copy(float* dst, const float* src, size_t n) override;
  void synchronize() override;
  void axpy(float a, const float* x, float* y, size_t n) override;
  void scale(float a, float* x, size_t n) override;
  void embedding_forward(const int32_t* ids, const float* table, float* out, int64_t n, int64_t dim) override;
  void embedding_backward(const int32_t* ids, const float* dout, float* dtable, int64_t n, int64_t dim) override;
  void rmsnorm_forward(const float* x, const float* weight, float* y, float* rstd, int64_t rows, int64_t dim,
                       float eps) override;
  void rmsnorm_backward(const float* x, const float* weight, const float* rstd, const float* dy, float* dx,
                        float* dweight, int64_t rows, int64_t dim) override;
  void layernorm_forward(const float* x, const float* weight, const float* bias, float* y, float* mean,
                         float* rstd, int64_t rows, int64_t dim, float eps) override;
  void layernorm_backward(const float* x, const float* weight, const float* mean, const float* rstd,
                          const float* dy, float* dx, float* dweight, float* dbias, int64_t rows,
                          int64_t dim) override;
  void rope(float* x, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, float theta,
            bool inverse) override;
  void gelu_forward(const float* x, float* y, size_t n) override;
  void gelu_backward(const float* x, const float* dy, float* dx, size_t n) override;
  void swiglu_forward(const float* h, float* y, int64_t rows, int64_t f) override;
  void swiglu_backward(const float* h, const float* dy, float* dh, int64_t rows, int64_t f) override;
  void split_qkv(const float* qkv, float* q, float* k, float* v, int64_t batch, int64_t seq, int64_t heads,
                 int64_t kv_heads, int64_t head_dim) override;
  void merge_qkv(const float* q, const float* k, const float* v, float* qkv, int64_t batch, int64_t seq,
                 int64_t heads, int64_t kv_heads, int64_t head_dim) override;
  void heads_to_tokens(const float* x, float* y, int64_t batch, int64_t heads, int64_t seq,
                       int64_t head_dim) override;
  void tokens_to_heads(const float* x, float* y, int64_t batch, int64_t heads, int64_t seq,
                       int64_t head_dim) override;
  std::unique_ptr<Linear> make_linear(const LinearSpec& spec) override;
  std::unique_ptr<Attention> make_attention(const AttentionShape& shape, const AttentionConfig& config) override;
  double cross_entropy(const float* logits, const int32_t* targets, float* dlogits, int64_t n, int64_t vocab,
                       float grad_scale) override;
  double sum_squares(const float* x, size_t n) override;
  Moments moments(const float* x, size_t n) override;
  void adamw(float* param, const float* grad, float* m, float* v, size_t n, float lr, float beta1, float beta2,
             float eps, float weight_decay, int64_t step) override;

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
