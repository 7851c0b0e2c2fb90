// heads.cpp — head layout changes between token-major and head-major tensors, CPU backend.
//
// Token-major rows hold all heads of one token side by side: [B, T, W] with W = (number of heads
// in the row)·D. Head-major tensors are [B, n, T, D] (the attention layout of octet/attention.h).
// One gather/scatter between them serves all four operations:
//   split_qkv:  qkv [B, T, (H + 2G)·D] -> q [B, H, T, D] (heads 0..H), k (H..H+G), v (H+G..H+2G)
//   merge_qkv:  the inverse (used for dq, dk, dv -> dqkv)
//   tokens_to_heads / heads_to_tokens: [B, T, H·D] <-> [B, H, T, D].
// Pure data movement: exact.
#include <string>

#include "cpu/backend/cpu_backend.h"
#include "octet/error.h"

namespace octet::cpu {
namespace {

// Copies heads [first, first + n) of a token-major tensor [B, T, width·D] to/from a head-major
// tensor [B, n, T, D]. to_heads=true reads `tokens` and writes `heads`; false the reverse.
void move_heads(const float* tokens_in, float* tokens_out, const float* heads_in, float* heads_out,
                int64_t batch, int64_t seq, int64_t width, int64_t first, int64_t n,
                int64_t head_dim, bool to_heads) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < n; ++h)
      for (int64_t t = 0; t < seq; ++t) {
        const int64_t tok = ((b * seq + t) * width + first + h) * head_dim;
        const int64_t hm = ((b * n + h) * seq + t) * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) {
          if (to_heads)
            heads_out[hm + d] = tokens_in[tok + d];
          else
            tokens_out[tok + d] = heads_in[hm + d];
        }
      }
}

void check_layout(const char* op, int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads,
                  int64_t head_dim) {
  OCTET_CHECK(batch >= 0 && seq >= 0 && heads >= 1 && kv_heads >= 1 && head_dim >= 1,
              std::string(op) + ": invalid shape batch=" + std::to_string(batch) +
                  " seq=" + std::to_string(seq) + " heads=" + std::to_string(heads) +
                  " kv_heads=" + std::to_string(kv_heads) +
                  " head_dim=" + std::to_string(head_dim));
}

}  // namespace

void CpuBackend::split_qkv(const float* qkv, float* q, float* k, float* v, int64_t batch,
                           int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim) {
  check_layout("split_qkv", batch, seq, heads, kv_heads, head_dim);
  const int64_t width = heads + 2 * kv_heads;
  move_heads(qkv, nullptr, nullptr, q, batch, seq, width, 0, heads, head_dim, true);
  move_heads(qkv, nullptr, nullptr, k, batch, seq, width, heads, kv_heads, head_dim, true);
  move_heads(qkv, nullptr, nullptr, v, batch, seq, width, heads + kv_heads, kv_heads, head_dim,
             true);
}

void CpuBackend::merge_qkv(const float* q, const float* k, const float* v, float* qkv,
                           int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads,
                           int64_t head_dim) {
  check_layout("merge_qkv", batch, seq, heads, kv_heads, head_dim);
  const int64_t width = heads + 2 * kv_heads;
  move_heads(nullptr, qkv, q, nullptr, batch, seq, width, 0, heads, head_dim, false);
  move_heads(nullptr, qkv, k, nullptr, batch, seq, width, heads, kv_heads, head_dim, false);
  move_heads(nullptr, qkv, v, nullptr, batch, seq, width, heads + kv_heads, kv_heads, head_dim,
             false);
}

void CpuBackend::heads_to_tokens(const float* x, float* y, int64_t batch, int64_t heads,
                                 int64_t seq, int64_t head_dim) {
  check_layout("heads_to_tokens", batch, seq, heads, 1, head_dim);
  move_heads(nullptr, y, x, nullptr, batch, seq, heads, 0, heads, head_dim, false);
}

void CpuBackend::tokens_to_heads(const float* x, float* y, int64_t batch, int64_t heads,
                                 int64_t seq, int64_t head_dim) {
  check_layout("tokens_to_heads", batch, seq, heads, 1, head_dim);
  move_heads(x, nullptr, nullptr, y, batch, seq, heads, 0, heads, head_dim, true);
}

}  // namespace octet::cpu
