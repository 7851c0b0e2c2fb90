// src/capi/attention_varlen.cpp — packed sequences through the C ABI (c_api.h
// octet_attention_params n_seqs / cu_seqlens_q / cu_seqlens_k; FlashAttention's varlen form:
// sequences back to back in [total, heads, head_dim] tensors, each attending to its own keys).
//
// No kernel takes sequence offsets yet, so a packed call is one dense call (attention.cpp) per
// sequence on a batch-1 view of its rows: the numbers are exactly those calls'. Sequences with
// queries and no keys, or keys and no queries, get the values the math gives an empty sum (0 rows,
// −inf LSE) and their gradients 0, written by the backend's fill. The loop sits behind the ABI so
// that callers (the PyTorch op attention_varlen) make one call per layer and keep working when a
// fused varlen kernel replaces it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "capi/capi_impl.h"

namespace octet::capi {
namespace {

struct Packing {
  std::vector<int64_t> q, k;      // the offsets, [n_seqs + 1]
  std::vector<int64_t> saved_at;  // each sequence's byte offset in `saved`, [n_seqs + 1]; empty: not asked
  std::vector<int64_t>
      saved_end;  // where each sequence's dense state ends, [n_seqs]; padding to saved_at[s + 1]
};

constexpr int64_t kSavedAlign = 256;  // c_api.h: `saved` is 256-byte aligned, and so is each part
constexpr int64_t kMaxSeqs = int64_t(std::numeric_limits<int32_t>::max()) - 1;  // c_api.h n_seqs

std::string str(int64_t v) { return std::to_string(v); }

std::vector<int64_t> offsets_of(const int64_t* cu, int64_t n, int64_t total, const char* name) {
  require(cu, (std::string("attention params: ") + name).c_str());
  std::vector<int64_t> v(cu, cu + n + 1);
  OCTET_CHECK(v.front() == 0 && v.back() == total, std::string("attention params: ") + name +
                                                       " must run from 0 to " + str(total) + ", got " +
                                                       str(v.front()) + " .. " + str(v.back()));
  for (int64_t s = 0; s < n; ++s)
    OCTET_CHECK(v[size_t(s) + 1] >= v[size_t(s)],
                std::string("attention params: ") + name + " decreases at sequence " + str(s) + " (" +
                    str(v[size_t(s)]) + " then " + str(v[size_t(s) + 1]) + ")");
  return v;
}

int64_t len_q(const Packing& pk, int64_t s) { return pk.q[size_t(s) + 1] - pk.q[size_t(s)]; }
int64_t len_k(const Packing& pk, int64_t s) { return pk.k[size_t(s) + 1] - pk.k[size_t(s)]; }

const void* at(const void* p, int64_t bytes) { return p ? static_cast<const char*>(p) + bytes : nullptr; }
void* at(void* p, int64_t bytes) { return p ? static_cast<char*>(p) + bytes : nullptr; }

// Sequence s's dense call: batch-1 views of its rows (and of its part of `saved`, if asked).
octet_attention_params sequence_params(const octet_attention_params& p, const Packing& pk, int64_t s) {
  octet_attention_params d = p;
  d.n_seqs = 0;
  d.cu_seqlens_q = d.cu_seqlens_k = nullptr;
  d.seq_q = len_q(pk, s), d.seq_k = len_k(pk, s);
  const int64_t e = int64_t(dtype_size(dtype_of(p.dtype, "attention params")));
  const int64_t lse_e = p.dtype == OCTET_C_F64 ? 8 : 4;
  const int64_t at_q = pk.q[size_t(s)] * p.n_heads * p.head_dim * e;
  const int64_t at_k = pk.k[size_t(s)] * p.n_kv_heads * p.head_dim * e;
  d.q = at(p.q, at_q), d.o = at(p.o, at_q), d.d_o = at(p.d_o, at_q), d.dq = at(p.dq, at_q);
  d.k = at(p.k, at_k), d.v = at(p.v, at_k), d.dk = at(p.dk, at_k), d.dv = at(p.dv, at_k);
  d.lse = at(p.lse, pk.q[size_t(s)] * p.n_heads * lse_e);
  d.saved = nullptr, d.saved_size = 0;
  if (p.saved && !pk.saved_at.empty() && pk.saved_at[size_t(s) + 1] > pk.saved_at[size_t(s)]) {
    d.saved = at(p.saved, pk.saved_at[size_t(s)]);
    d.saved_size = pk.saved_at[size_t(s) + 1] - pk.saved_at[size_t(s)];
  }
  return d;
}

// The packing's checks (before any work), and with `with_saved` where each sequence's saved state
// goes. The whole call is checked as one dense [total] call would be (names, heads, head_dim,
// dtype), so that a packing in which no sequence has both queries and keys still fails on them.
Packing packing_of(octet_c_backend* be, const octet_attention_params* p, bool with_saved) {
  require(be, "attention: backend");
  require(p, "attention: params");
  OCTET_CHECK(
      p->n_seqs >= 1,
      "attention params: packed sequences need n_seqs >= 1 with cu_seqlens_q and cu_seqlens_k, got n_seqs " +
          str(p->n_seqs));
  OCTET_CHECK(p->n_seqs <= kMaxSeqs, "attention params: n_seqs " + str(p->n_seqs) + " is above the " +
                                         str(kMaxSeqs) + " packed sequences supported (int32 offsets)");
  OCTET_CHECK(
      p->batch == 1,
      "attention params: packed sequences need batch 1 (the sequences are the batch), got " + str(p->batch));
  OCTET_CHECK(
      p->layout == OCTET_C_TOKENS_MAJOR,
      "attention params: packed sequences need layout OCTET_C_TOKENS_MAJOR ([total, heads, head_dim])");
  OCTET_CHECK(!p->residual, "attention params: packed sequences take no residual (pass NULL)");
  OCTET_CHECK(p->seq_q >= 0 && p->seq_k >= 0, "attention params: packed totals seq_q " + str(p->seq_q) +
                                                  " and seq_k " + str(p->seq_k) + " must be >= 0");
  // A total of 0 tokens (no sequence has queries, or none has keys) is a packing; the rest is
  // checked as a dense call of at least one token.
  octet_attention_params whole = *p;
  whole.seq_q = std::max<int64_t>(p->seq_q, 1), whole.seq_k = std::max<int64_t>(p->seq_k, 1);
  validate_attention_params(*be, whole);
  Packing pk;
  pk.q = offsets_of(p->cu_seqlens_q, p->n_seqs, p->seq_q, "cu_seqlens_q");
  pk.k = offsets_of(p->cu_seqlens_k, p->n_seqs, p->seq_k, "cu_seqlens_k");
  if (!with_saved) return pk;
  pk.saved_at.assign(size_t(p->n_seqs) + 1, 0);
  pk.saved_end.assign(size_t(p->n_seqs), 0);
  for (int64_t s = 0; s < p->n_seqs; ++s) {
    int64_t bytes = 0;
    if (len_q(pk, s) > 0 && len_k(pk, s) > 0) {
      const octet_attention_params d = sequence_params(*p, pk, s);
      bytes = dense_attention_saved_bytes(be, &d);
    }
    pk.saved_end[size_t(s)] = pk.saved_at[size_t(s)] + bytes;
    pk.saved_at[size_t(s) + 1] =
        pk.saved_at[size_t(s)] + (bytes + kSavedAlign - 1) / kSavedAlign * kSavedAlign;
  }
  return pk;
}

// Zeroes the alignment padding after sequence s's part of `saved` (c_api.h: every byte of the saved
// state is then a function of the inputs). It runs before the sequence's forward, in stream order, as
// 4-byte words from the word holding the part's last byte: the forward then writes every byte of its
// part, the shared word's first bytes included.
void zero_padding(Backend& b, const octet_attention_params& p, const Packing& pk, int64_t s) {
  const int64_t from = pk.saved_end[size_t(s)] / 4 * 4, to = pk.saved_at[size_t(s) + 1];
  if (to > from) b.fill(view(at(p.saved, from), DType::I32, {(to - from) / 4}), 0.0);
}

}  // namespace

int64_t varlen_attention_saved_bytes(octet_c_backend* be, const octet_attention_params* p) {
  return packing_of(be, p, true).saved_at.back();
}

void varlen_attention_run(octet_c_backend* be, const octet_attention_params* p, bool backward) {
  // Without `saved` the backward re-runs each sequence's forward (attention.cpp).
  const Packing pk = packing_of(be, p, p && p->saved);
  if (p->saved)
    OCTET_CHECK(p->saved_size >= pk.saved_at.back(),
                "attention params: saved_size " + str(p->saved_size) + " is below the " +
                    str(pk.saved_at.back()) +
                    " bytes these packed sequences save (octet_attention_saved_bytes)");
  Backend& b = *be->backend;
  const DType t = dtype_of(p->dtype, "attention params");
  const DType lse_t = t == DType::F64 ? DType::F64 : DType::F32;
  for (int64_t s = 0; s < p->n_seqs; ++s) {
    const int64_t lq = len_q(pk, s), lk = len_k(pk, s);
    if (lq > 0 && lk > 0) {
      if (!backward && p->saved) zero_padding(b, *p, pk, s);
      const octet_attention_params d = sequence_params(*p, pk, s);
      dense_attention_run(be, &d, backward);
      continue;
    }
    const octet_attention_params d = sequence_params(*p, pk, s);
    if (lq > 0 && !backward) {  // queries and no keys: an empty softmax sum
      require(d.o, "attention params: o");
      require(d.lse, "attention params: lse");
      b.fill(view(d.o, t, {lq, p->n_heads, p->head_dim}), 0.0);
      b.fill(view(d.lse, lse_t, {p->n_heads, lq}), -std::numeric_limits<double>::infinity());
    } else if (lq > 0) {
      require(d.dq, "attention params: dq");
      b.fill(view(d.dq, t, {lq, p->n_heads, p->head_dim}), 0.0);
    } else if (lk > 0 && backward) {  // keys no query reads
      require(d.dk, "attention params: dk");
      require(d.dv, "attention params: dv");
      b.fill(view(d.dk, t, {lk, p->n_kv_heads, p->head_dim}), 0.0);
      b.fill(view(d.dv, t, {lk, p->n_kv_heads, p->head_dim}), 0.0);
    }
  }
}

}  // namespace octet::capi
