// embedding.cpp — token embedding lookup and its gradient (scatter-add) on the CPU backend.
//
// Forward: out[i, :] = table[ids[i], :]. Backward: dtable[ids[i], :] += dout[i, :] for every i,
// in order (a token that appears twice receives both rows). The table and its gradient are F32
// master weights (DeepSeek-V3 §3.3 keeps the embedding in higher precision); out/dout are act
// tensors (F32 or BF16, act_io.h). ids are I32 [n], each in [0, vocab) of table [vocab, dim].
#include <string>

#include "cpu/backend/act_io.h"
#include "cpu/backend/cpu_backend.h"
#include "octet/error.h"

namespace octet::cpu {
namespace {

// Validates ids [n] against table [vocab, dim] and rows [n, dim]; returns dim.
int64_t check_ids(const char* op, const Tensor& ids, const Tensor& table, const Tensor& rows) {
  check_dtype(ids, DType::I32, op);
  check_dtype(table, DType::F32, op);
  OCTET_CHECK(table.shape.rank == 2, std::string(op) + ": table must be [vocab, dim], got " + table.str());
  const int64_t vocab = table.shape[0], dim = table.shape[1], n = ids.numel();
  OCTET_CHECK(rows.numel() == n * dim && rows.cols() == dim,
              std::string(op) + ": expected rows [" + std::to_string(n) + ", " + std::to_string(dim) +
                  "], got " + rows.str());
  const int32_t* id = ids.i32();
  for (int64_t i = 0; i < n; ++i)
    OCTET_CHECK(id[i] >= 0 && id[i] < vocab, std::string(op) + ": token id " + std::to_string(id[i]) +
                                                 " at position " + std::to_string(i) + " is outside [0, " +
                                                 std::to_string(vocab) + ")");
  return dim;
}

}  // namespace

void CpuBackend::embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) {
  const int64_t dim = check_ids("embedding_forward", ids, table, out);
  ActOut o(out, "embedding_forward out");
  const float* t = table.f32();
  const int32_t* id = ids.i32();
  for (int64_t i = 0; i < ids.numel(); ++i) {
    const float* row = t + int64_t(id[i]) * dim;
    for (int64_t d = 0; d < dim; ++d) o[i * dim + d] = row[d];
  }
  o.store();
}

void CpuBackend::embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  const int64_t dim = check_ids("embedding_backward", ids, dtable, dout);
  ActIn g(dout, "embedding_backward dout");
  float* t = dtable.f32();
  const int32_t* id = ids.i32();
  for (int64_t i = 0; i < ids.numel(); ++i) {
    float* row = t + int64_t(id[i]) * dim;
    for (int64_t d = 0; d < dim; ++d) row[d] += g[i * dim + d];
  }
}

}  // namespace octet::cpu
