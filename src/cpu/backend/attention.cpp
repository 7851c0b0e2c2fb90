// attention.cpp — CpuAttention: one attention layer on the CPU backend, a thin wrapper around the
// reference attention of octet/attention.h (FP64, BF16 or FP8; stale or matched delta; whole or
// tiled form). The forward keeps the AttentionSaved (quantized-dequantized Q̂, K̂, V̂, O, LSE) that
// the backward needs, as a fused kernel would keep them in its workspace; the backward returns the
// softmax-gradient residual statistics of Delta-Matching (arXiv 2609.37852; ../DESIGN.md §3).
#include <memory>

#include "cpu/backend/cpu_backend.h"
#include "octet/attention.h"
#include "octet/error.h"

namespace octet::cpu {
namespace {

class CpuAttention final : public Attention {
 public:
  CpuAttention(const AttentionShape& shape, const AttentionConfig& config)
      : shape_(shape), config_(config) {
    shape_.validate();
  }

  void forward(const float* q, const float* k, const float* v, float* o, float* lse) override {
    attention_forward(shape_, config_, q, k, v, o, lse, &saved_);
    has_saved_ = true;
  }

  AttentionStats backward(const float* d_o, float* dq, float* dk, float* dv) override {
    OCTET_CHECK(has_saved_, "attention: backward called before any forward");
    AttentionStats stats;
    attention_backward(saved_, d_o, dq, dk, dv, &stats);
    return stats;
  }

 private:
  AttentionShape shape_;
  AttentionConfig config_;
  AttentionSaved saved_;  // reused between steps (its vectors keep their capacity)
  bool has_saved_ = false;
};

}  // namespace

std::unique_ptr<Attention> CpuBackend::make_attention(const AttentionShape& shape,
                                                      const AttentionConfig& config) {
  return std::make_unique<CpuAttention>(shape, config);
}

}  // namespace octet::cpu
