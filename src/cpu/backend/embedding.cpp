// embedding.cpp — token embedding lookup and its gradient (scatter-add) on the CPU backend.
//
// Forward: out[i, :] = table[ids[i], :]. Backward: dtable[ids[i], :] += dout[i, :] for every i,
// in order (a token that appears twice receives both rows). Kept in FP32 as DeepSeek-V3 §3.3
// keeps the embedding in higher precision. The interface carries no vocabulary size, so only
// negative ids can be rejected here; the caller owns the upper bound.
#include <string>

#include "cpu/backend/cpu_backend.h"
#include "octet/error.h"

namespace octet::cpu {
namespace {

void check_ids(const int32_t* ids, int64_t n, int64_t dim) {
  OCTET_CHECK(n >= 0 && dim >= 1, "embedding: need n >= 0 and dim >= 1, got n=" +
                                      std::to_string(n) + " dim=" + std::to_string(dim));
  for (int64_t i = 0; i < n; ++i)
    OCTET_CHECK(ids[i] >= 0, "embedding: negative token id " + std::to_string(ids[i]) +
                                 " at position " + std::to_string(i));
}

}  // namespace

void CpuBackend::embedding_forward(const int32_t* ids, const float* table, float* out, int64_t n,
                                   int64_t dim) {
  check_ids(ids, n, dim);
  for (int64_t i = 0; i < n; ++i) {
    const float* row = table + int64_t(ids[i]) * dim;
    for (int64_t d = 0; d < dim; ++d) out[i * dim + d] = row[d];
  }
}

void CpuBackend::embedding_backward(const int32_t* ids, const float* dout, float* dtable,
                                    int64_t n, int64_t dim) {
  check_ids(ids, n, dim);
  for (int64_t i = 0; i < n; ++i) {
    float* row = dtable + int64_t(ids[i]) * dim;
    for (int64_t d = 0; d < dim; ++d) row[d] += dout[i * dim + d];
  }
}

}  // namespace octet::cpu
