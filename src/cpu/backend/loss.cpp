// loss.cpp — softmax cross-entropy over the vocabulary, forward and backward fused, CPU backend.
//
// Per token with target y >= 0 (the log-sum-exp form, stable for any logit magnitude):
//   m = max_j z_j,  lse = m + log Σ_j exp(z_j − m)  (sum in double),  loss = lse − z_y,
//   dz_j = (exp(z_j − lse) − [j = y]) · grad_scale.
// Tokens with y < 0 are ignored: no loss, dz = 0. Returns the summed loss in nats (double).
// Each row's statistics are read before its gradient is written, and every element is read
// before it is overwritten, so dlogits may alias logits. dlogits may also be null (loss only).
// Kept in FP32/FP64 as DeepSeek-V3 §3.3 keeps the loss in higher precision.
#include <cmath>
#include <string>

#include "cpu/backend/cpu_backend.h"
#include "octet/error.h"

namespace octet::cpu {

double CpuBackend::cross_entropy(const float* logits, const int32_t* targets, float* dlogits,
                                 int64_t n, int64_t vocab, float grad_scale) {
  OCTET_CHECK(n >= 0 && vocab >= 1, "cross_entropy: need n >= 0 and vocab >= 1, got n=" +
                                        std::to_string(n) + " vocab=" + std::to_string(vocab));
  for (int64_t i = 0; i < n; ++i)
    OCTET_CHECK(targets[i] < vocab, "cross_entropy: target " + std::to_string(targets[i]) +
                                        " at token " + std::to_string(i) + " is >= vocab " +
                                        std::to_string(vocab));
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float* z = logits + i * vocab;
    const int32_t y = targets[i];
    if (y < 0) {
      if (dlogits)
        for (int64_t j = 0; j < vocab; ++j) dlogits[i * vocab + j] = 0.0f;
      continue;
    }
    double m = z[0];
    for (int64_t j = 1; j < vocab; ++j) m = std::fmax(m, double(z[j]));
    double sum = 0.0;
    for (int64_t j = 0; j < vocab; ++j) sum += std::exp(double(z[j]) - m);
    const double lse = m + std::log(sum);
    total += lse - double(z[y]);
    if (dlogits) {
      float* dz = dlogits + i * vocab;
      for (int64_t j = 0; j < vocab; ++j) {
        const double p = std::exp(double(z[j]) - lse);  // z[j] read before dz[j] is written
        dz[j] = float((p - (j == y ? 1.0 : 0.0)) * double(grad_scale));
      }
    }
  }
  return total;
}

}  // namespace octet::cpu
