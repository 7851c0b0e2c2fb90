// heads.cpp — head layout changes between token-major and head-major tensors, CPU backend.
//
// Token-major rows hold all heads of one token side by side: [B, T, W] with W = (number of heads
// in the row)·D. Head-major tensors are [B, n, T, D] (the attention layout of octet/attention.h).
// One gather/scatter between them serves all four operations:
//   split_qkv:  qkv [B, T, (H + 2G)·D] -> q [B, H, T, D] (heads 0..H), k (H..H+G), v (H+G..H+2G),
//               or q [B, T, H, D], k, v [B, T, G, D] in AttnLayout::TokensMajor (a strided copy)
//   merge_qkv:  the inverse (used for dq, dk, dv -> dqkv)
//   tokens_to_heads / heads_to_tokens: [B, T, H·D] <-> [B, H, T, D].
// Pure data movement: exact for equal dtypes; F32 -> BF16 rounds once (act_io.h).
#include <string>

#include "cpu/backend/act_io.h"
#include "cpu/backend/cpu_backend.h"
#include "octet/error.h"

namespace octet::cpu {
namespace {

struct HeadDims {
  int64_t batch, n, seq, head_dim;
};

// A per-head tensor's dims in `layout` (attention.h heads_axis, seq_axis).
HeadDims head_dims(const char* op, const Tensor& t, AttnLayout layout = AttnLayout::HeadsMajor) {
  OCTET_CHECK(t.shape.rank == 4,
              std::string(op) + ": expected a per-head tensor " + layout_dims(layout) + ", got " + t.str());
  return {t.shape[0], t.shape[heads_axis(layout)], t.shape[seq_axis(layout)], t.shape[3]};
}

// Checks the token-major tensor is [B, T, width·D] (rank 3, or any shape with that numel and
// last dimension width·D).
void check_tokens(const char* op, const Tensor& tok, const HeadDims& h, int64_t width) {
  OCTET_CHECK(tok.numel() == h.batch * h.seq * width * h.head_dim && tok.cols() == width * h.head_dim,
              std::string(op) + ": expected token-major [" + std::to_string(h.batch) + ", " +
                  std::to_string(h.seq) + ", " + std::to_string(width * h.head_dim) + "], got " + tok.str());
}

// Copies heads [first, first + n) of a token-major tensor [B, T, width·D] to/from a per-head
// tensor [B, n, T, D] (or [B, T, n, D] when heads_tokens_major). to_heads=true reads `tokens` and
// writes `heads`; false the reverse.
void move_heads(const float* tokens_in, float* tokens_out, const float* heads_in, float* heads_out,
                const HeadDims& h, int64_t width, int64_t first, bool to_heads,
                bool heads_tokens_major = false) {
  for (int64_t b = 0; b < h.batch; ++b)
    for (int64_t hh = 0; hh < h.n; ++hh)
      for (int64_t t = 0; t < h.seq; ++t) {
        const int64_t tok = ((b * h.seq + t) * width + first + hh) * h.head_dim;
        const int64_t hm = heads_tokens_major ? ((b * h.seq + t) * h.n + hh) * h.head_dim
                                              : ((b * h.n + hh) * h.seq + t) * h.head_dim;
        for (int64_t d = 0; d < h.head_dim; ++d) {
          if (to_heads)
            heads_out[hm + d] = tokens_in[tok + d];
          else
            tokens_out[tok + d] = heads_in[hm + d];
        }
      }
}

// q [B,H,T,D], k and v [B,G,T,D] (tokens-major: [B,T,H,D], [B,T,G,D]) with equal B, T, D;
// returns {H, G}.
std::pair<int64_t, int64_t> check_qkv(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                                      AttnLayout layout) {
  const HeadDims hq = head_dims(op, q, layout), hk = head_dims(op, k, layout);
  OCTET_CHECK(k.shape == v.shape, std::string(op) + ": k and v shapes differ: " + k.str() + " vs " + v.str());
  OCTET_CHECK(hq.batch == hk.batch && hq.seq == hk.seq && hq.head_dim == hk.head_dim,
              std::string(op) + ": q " + q.str() + " and k " + k.str() + " must agree in B, T and D");
  return {hq.n, hk.n};
}

}  // namespace

void CpuBackend::split_qkv(const Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v,
                           AttnLayout layout) {
  const auto [H, G] = check_qkv("split_qkv", q, k, v, layout);
  const HeadDims hq = head_dims("split_qkv", q, layout), hk = head_dims("split_qkv", k, layout);
  const int64_t width = H + 2 * G;
  const bool tm = layout == AttnLayout::TokensMajor;
  check_tokens("split_qkv", qkv, hq, width);
  ActIn in(qkv, "split_qkv qkv");
  ActOut oq(q, "split_qkv q"), ok(k, "split_qkv k"), ov(v, "split_qkv v");
  move_heads(in.data, nullptr, nullptr, oq.data, hq, width, 0, true, tm);
  move_heads(in.data, nullptr, nullptr, ok.data, hk, width, H, true, tm);
  move_heads(in.data, nullptr, nullptr, ov.data, hk, width, H + G, true, tm);
  oq.store(), ok.store(), ov.store();
}

void CpuBackend::merge_qkv(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qkv,
                           AttnLayout layout) {
  const auto [H, G] = check_qkv("merge_qkv", q, k, v, layout);
  const HeadDims hq = head_dims("merge_qkv", q, layout), hk = head_dims("merge_qkv", k, layout);
  const int64_t width = H + 2 * G;
  const bool tm = layout == AttnLayout::TokensMajor;
  check_tokens("merge_qkv", qkv, hq, width);
  ActIn iq(q, "merge_qkv q"), ik(k, "merge_qkv k"), iv(v, "merge_qkv v");
  ActOut out(qkv, "merge_qkv qkv");
  move_heads(nullptr, out.data, iq.data, nullptr, hq, width, 0, false, tm);
  move_heads(nullptr, out.data, ik.data, nullptr, hk, width, H, false, tm);
  move_heads(nullptr, out.data, iv.data, nullptr, hk, width, H + G, false, tm);
  out.store();
}

void CpuBackend::heads_to_tokens(const Tensor& x, const Tensor& y) {
  const HeadDims h = head_dims("heads_to_tokens", x);
  check_tokens("heads_to_tokens", y, h, h.n);
  ActIn in(x, "heads_to_tokens x");
  ActOut out(y, "heads_to_tokens y");
  move_heads(nullptr, out.data, in.data, nullptr, h, h.n, 0, false);
  out.store();
}

void CpuBackend::tokens_to_heads(const Tensor& x, const Tensor& y) {
  const HeadDims h = head_dims("tokens_to_heads", y);
  check_tokens("tokens_to_heads", x, h, h.n);
  ActIn in(x, "tokens_to_heads x");
  ActOut out(y, "tokens_to_heads y");
  move_heads(in.data, nullptr, nullptr, out.data, h, h.n, 0, true);
  out.store();
}

}  // namespace octet::cpu
