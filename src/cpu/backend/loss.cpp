// loss.cpp — softmax cross-entropy over the vocabulary, forward and backward fused, CPU backend.
//
// Per token with target y >= 0 (the log-sum-exp form, stable for any logit magnitude):
//   m = max_j z_j,  lse = m + log Σ_j exp(z_j − m)  (sum in double),  loss = lse − z_y,
//   dz_j = (exp(z_j − lse) − [j = y]) · grad_scale.
// Tokens with y < 0 are ignored: no loss, dz = 0. The summed loss (nats) is added to the F64 [1]
// accumulator loss_sum, so micro-batches accumulate without a host round trip. logits/dlogits are
// act tensors [n, vocab] (F32 or BF16, act_io.h); all logits are read before any gradient is
// stored, so dlogits may alias logits. Kept in FP32/FP64 as DeepSeek-V3 §3.3 keeps the loss.
#include <cmath>
#include <string>

#include "cpu/backend/act_io.h"
#include "cpu/backend/cpu_backend.h"
#include "octet/error.h"

namespace octet::cpu {

void CpuBackend::cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& dlogits,
                               float grad_scale, const Tensor& loss_sum) {
  check_activation(logits, "cross_entropy logits");
  const int64_t vocab = logits.cols(), n = logits.rows();
  OCTET_CHECK(vocab >= 1, "cross_entropy: logits need a vocabulary dimension >= 1, got " + logits.str());
  check_dtype(targets, DType::I32, "cross_entropy targets");
  check_numel(targets, n, "cross_entropy targets");
  check_shape(dlogits, logits.shape, "cross_entropy dlogits");
  check_dtype(loss_sum, DType::F64, "cross_entropy loss_sum");
  check_numel(loss_sum, 1, "cross_entropy loss_sum");
  const int32_t* tgt = targets.i32();
  for (int64_t i = 0; i < n; ++i)
    OCTET_CHECK(tgt[i] < vocab, "cross_entropy: target " + std::to_string(tgt[i]) + " at token " +
                                    std::to_string(i) + " is >= vocab " + std::to_string(vocab));
  ActIn z_all(logits, "cross_entropy logits");
  ActOut dz_all(dlogits, "cross_entropy dlogits");
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float* z = z_all.data + i * vocab;
    float* dz = dz_all.data + i * vocab;  // F32 alias of z: every z[j] is read before dz[j]
    const int32_t y = tgt[i];
    if (y < 0) {
      for (int64_t j = 0; j < vocab; ++j) dz[j] = 0.0f;
      continue;
    }
    double m = z[0];
    for (int64_t j = 1; j < vocab; ++j) m = std::fmax(m, double(z[j]));
    double sum = 0.0;
    for (int64_t j = 0; j < vocab; ++j) sum += std::exp(double(z[j]) - m);
    const double lse = m + std::log(sum);
    total += lse - double(z[y]);
    for (int64_t j = 0; j < vocab; ++j) {
      const double p = std::exp(double(z[j]) - lse);
      dz[j] = float((p - (j == y ? 1.0 : 0.0)) * double(grad_scale));
    }
  }
  dz_all.store();
  loss_sum.f64()[0] += total;
}

}  // namespace octet::cpu
