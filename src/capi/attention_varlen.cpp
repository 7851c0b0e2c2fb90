// src/capi/attention_varlen.cpp — packed sequences through the C ABI (c_api.h
// octet_attention_params n_seqs / cu_seqlens_q / cu_seqlens_k; FlashAttention's varlen form:
// sequences back to back in [total, heads, head_dim] tensors, each attending to its own keys).
//
// No kernel takes sequence offsets yet, so a packed call runs as dense calls (attention.cpp), one
// per group of sequences:
//  - causal sequences with as many queries as keys (packed documents in causal LM training) are
//    bucketed by their length rounded up to 128 (the kernels' query tile; below 65 tokens to a
//    power of two from 16, bucket_len): each bucket is one
//    dense call of batch n over copies of its sequences padded with zero rows to that length
//    (Backend::copy_spans gathers them and scatters the results back). Causality keeps a real query
//    off the pad keys, pad queries get a zero dO, so every real row and gradient is the one its own
//    dense call gives in exact arithmetic; in FP8 the bucket's per-tensor scales (amax over its
//    sequences) replace each sequence's own (QkvScaling::HeadBlock's blocks stay each sequence's
//    own);
//  - any other sequence (non-causal, or len_q != len_k), and a bucket of one, is a dense call on a
//    batch-1 view of its rows (no copy).
// Sequences with queries and no keys, or keys and no queries, get the values the math gives an
// empty sum (0 rows, −inf LSE) and their gradients 0, written by the backend's fill. The groups
// are a function of the offsets (and causal), so the forward and the backward agree on them and on
// where each group's saved state lies. The loop sits behind the ABI so that callers (the PyTorch
// op attention_varlen) make one call per layer and keep working when a fused varlen kernel
// replaces it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "capi/capi_impl.h"

namespace octet::capi {
namespace {

// One dense call of a packed call (the header's groups).
struct Group {
  std::vector<int64_t> seqs;  // the sequences, in order
  int64_t len = 0;            // > 0: batch seqs.size() padded to len rows each; 0: one sequence's rows
};

struct Packing {
  std::vector<int64_t> q, k;       // the offsets, [n_seqs + 1]
  std::vector<Group> groups;       // in the order of their first sequence
  std::vector<int64_t> saved_at;   // each group's byte offset in `saved`, [groups + 1]; empty: not asked
  std::vector<int64_t> saved_end;  // where each group's dense state ends, [groups]; padding to the next
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

// The groups of the header: buckets of causal len_q == len_k sequences by bucket_len, every other
// sequence with queries and keys alone; a bucket of one runs alone.
//
// A bucket's padded length: a multiple of 128 (the kernels' query tile: no tile beyond the
// sequence's own call), and below 65 tokens the power of two from 16 up that holds it, so that a
// short document pads to at most twice its rows rather than to 128 (a dense call pads to 16
// anyway).
int64_t bucket_len(int64_t len) {
  if (len > 64) return (len + 127) / 128 * 128;
  int64_t t = 16;
  while (t < len) t *= 2;
  return t;
}

std::vector<Group> groups_of(const octet_attention_params& p, const Packing& pk) {
  std::vector<Group> groups;
  std::vector<std::pair<int64_t, size_t>> bucket;  // padded length -> its group
  for (int64_t s = 0; s < p.n_seqs; ++s) {
    const int64_t lq = len_q(pk, s), lk = len_k(pk, s);
    if (lq == 0 || lk == 0) continue;
    if (!p.causal || lq != lk) {
      groups.push_back({{s}, 0});
      continue;
    }
    const int64_t len = bucket_len(lq);
    auto it = std::find_if(bucket.begin(), bucket.end(), [&](const auto& e) { return e.first == len; });
    if (it == bucket.end()) {
      bucket.emplace_back(len, groups.size());
      groups.push_back({{}, len});
      it = bucket.end() - 1;
    }
    groups[it->second].seqs.push_back(s);
  }
  for (Group& g : groups)
    if (g.seqs.size() == 1) g.len = 0;
  return groups;
}

// Group g's dense call without its saved state: batch-1 views of one sequence's rows, or a padded
// batch whose tensors the caller places (null here).
octet_attention_params group_params(const octet_attention_params& p, const Packing& pk, const Group& g) {
  octet_attention_params d = p;
  d.n_seqs = 0;
  d.cu_seqlens_q = d.cu_seqlens_k = nullptr;
  d.saved = nullptr, d.saved_size = 0;
  if (g.len > 0) {
    d.batch = int64_t(g.seqs.size());
    d.seq_q = d.seq_k = g.len;
    d.q = d.k = d.v = d.d_o = nullptr;
    d.o = d.lse = d.dq = d.dk = d.dv = nullptr;
    return d;
  }
  const int64_t s = g.seqs[0];
  d.seq_q = len_q(pk, s), d.seq_k = len_k(pk, s);
  const int64_t e = int64_t(dtype_size(dtype_of(p.dtype, "attention params")));
  const int64_t lse_e = p.dtype == OCTET_C_F64 ? 8 : 4;
  const int64_t at_q = pk.q[size_t(s)] * p.n_heads * p.head_dim * e;
  const int64_t at_k = pk.k[size_t(s)] * p.n_kv_heads * p.head_dim * e;
  d.q = at(p.q, at_q), d.o = at(p.o, at_q), d.d_o = at(p.d_o, at_q), d.dq = at(p.dq, at_q);
  d.k = at(p.k, at_k), d.v = at(p.v, at_k), d.dk = at(p.dk, at_k), d.dv = at(p.dv, at_k);
  d.lse = at(p.lse, pk.q[size_t(s)] * p.n_heads * lse_e);
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
  pk.groups = groups_of(*p, pk);
  if (!with_saved) return pk;
  pk.saved_at.assign(pk.groups.size() + 1, 0);
  pk.saved_end.assign(pk.groups.size(), 0);
  for (size_t i = 0; i < pk.groups.size(); ++i) {
    const octet_attention_params d = group_params(*p, pk, pk.groups[i]);
    const int64_t bytes = dense_attention_saved_bytes(be, &d);
    pk.saved_end[i] = pk.saved_at[i] + bytes;
    pk.saved_at[i + 1] = pk.saved_at[i] + (bytes + kSavedAlign - 1) / kSavedAlign * kSavedAlign;
  }
  return pk;
}

// Zeroes the alignment padding after group i's part of `saved` (c_api.h: every byte of the saved
// state is then a function of the inputs). It runs before the group's forward, in stream order, as
// 4-byte words from the word holding the part's last byte: the forward then writes every byte of its
// part, the shared word's first bytes included.
void zero_padding(Backend& b, const octet_attention_params& p, const Packing& pk, size_t i) {
  const int64_t from = pk.saved_end[i] / 4 * 4, to = pk.saved_at[i + 1];
  if (to > from) b.fill(view(at(p.saved, from), DType::I32, {(to - from) / 4}), 0.0);
}

// Group i's dense call with its part of `saved`, if asked (in a forward, that part's padding zeroed
// first: zero_padding). A padded group's tensors are the caller's to place.
octet_attention_params group_call(Backend& b, const octet_attention_params& p, const Packing& pk, size_t i,
                                  bool backward) {
  octet_attention_params d = group_params(p, pk, pk.groups[i]);
  if (p.saved && !pk.saved_at.empty() && pk.saved_at[i + 1] > pk.saved_at[i]) {
    if (!backward) zero_padding(b, p, pk, i);
    d.saved = at(p.saved, pk.saved_at[i]);
    d.saved_size = pk.saved_at[i + 1] - pk.saved_at[i];
  }
  return d;
}

// Where the padded groups' copies lie: one buffer per tensor holds every padded group's batch, group
// i's [n, len, heads, head_dim] from row base[i] (its LSE [n, heads, len] from element heads ·
// base[i]), so that each tensor is gathered or scattered by one copy_spans call.
struct PaddedRows {
  std::vector<int64_t> base;  // [groups]; −1 for a group on views of its rows
  int64_t rows = 0;           // Σ n · len over the padded groups
};

PaddedRows padded_rows(const Packing& pk) {
  PaddedRows r;
  for (const Group& g : pk.groups) {
    r.base.push_back(g.len > 0 ? r.rows : -1);
    if (g.len > 0) r.rows += int64_t(g.seqs.size()) * g.len;
  }
  return r;
}

// f(group i, slot b, sequence s) for every sequence of every padded group, in order.
template <class F>
void each_padded_slot(const Packing& pk, F f) {
  for (size_t i = 0; i < pk.groups.size(); ++i)
    if (pk.groups[i].len > 0)
      for (size_t b = 0; b < pk.groups[i].seqs.size(); ++b) f(i, int64_t(b), size_t(pk.groups[i].seqs[b]));
}

// The runs between a packed tensor (each sequence's rows from off[s], `width` elements a row) and
// the padded copies (slot b of group i from row base[i] + b · len). gather: packed -> padded.
std::vector<CopySpan> row_spans(const Packing& pk, const PaddedRows& r, const std::vector<int64_t>& off,
                                int64_t width, bool gather) {
  std::vector<CopySpan> spans;
  each_padded_slot(pk, [&](size_t i, int64_t b, size_t s) {
    const int64_t packed = off[s] * width, padded = (r.base[i] + b * pk.groups[i].len) * width;
    const int64_t count = (off[s + 1] - off[s]) * width;
    spans.push_back(gather ? CopySpan{packed, padded, count} : CopySpan{padded, packed, count});
  });
  return spans;
}

// The same for the LSE: sequence s's [heads, len_q] block at element heads · off[s] (c_api.h), slot
// b's rows of group i's [n, heads, len].
std::vector<CopySpan> lse_spans(const Packing& pk, const PaddedRows& r, int64_t heads, bool gather) {
  std::vector<CopySpan> spans;
  each_padded_slot(pk, [&](size_t i, int64_t b, size_t s) {
    const int64_t len = pk.q[s + 1] - pk.q[s];
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t packed = heads * pk.q[s] + h * len;
      const int64_t padded = heads * r.base[i] + (b * heads + h) * pk.groups[i].len;
      spans.push_back(gather ? CopySpan{packed, padded, len} : CopySpan{padded, packed, len});
    }
  });
  return spans;
}

// Every padded group's dense call (group_call), on one copy per tensor: the inputs the calls read gathered
// (forward: q, k, v; backward: d_o with the saved state's o and lse, or q, k, v when the backward re-runs the
// forward) and their outputs scattered (o, lse; dq, dk, dv). Pad rows are zeros (alloc).
void run_padded(octet_c_backend* be, const octet_attention_params& p, const Packing& pk, bool backward) {
  const PaddedRows r = padded_rows(pk);
  if (r.rows == 0) return;
  Backend& b = *be->backend;
  const DType t = dtype_of(p.dtype, "attention params");
  const DType lse_t = t == DType::F64 ? DType::F64 : DType::F32;
  const int64_t H = p.n_heads, G = p.n_kv_heads, D = p.head_dim;
  const auto packed = [&](const void* ptr, const char* name, bool q_side) {
    require(ptr, (std::string("attention params: ") + name).c_str());
    return view(ptr, t, {(q_side ? p.seq_q * H : p.seq_k * G) * D});
  };
  const auto rows = [&](bool q_side, bool gather) {
    return row_spans(pk, r, q_side ? pk.q : pk.k, (q_side ? H : G) * D, gather);
  };
  const auto lse_packed = [&] {
    require(p.lse, "attention params: lse");
    return view(p.lse, lse_t, {p.seq_q * H});
  };
  const bool reads_qkv = !backward || !p.saved;
  Buffer q, k, v;
  if (reads_qkv) {
    q = b.alloc(t, {r.rows, H, D}), k = b.alloc(t, {r.rows, G, D}), v = b.alloc(t, {r.rows, G, D});
    b.copy_spans(q, packed(p.q, "q", true), rows(true, true));
    b.copy_spans(k, packed(p.k, "k", false), rows(false, true));
    b.copy_spans(v, packed(p.v, "v", false), rows(false, true));
  }
  Buffer o, lse, d_o, dq, dk, dv;  // o and lse: what a forward writes and a backward's saved state reads
  if (!backward || p.saved) o = b.alloc(t, {r.rows, H, D}), lse = b.alloc(lse_t, {r.rows * H});
  if (backward) {
    if (p.saved) {
      b.copy_spans(o, packed(p.o, "o", true), rows(true, true));
      b.copy_spans(lse, lse_packed(), lse_spans(pk, r, H, true));
    }
    d_o = b.alloc(t, {r.rows, H, D}), dq = b.alloc(t, {r.rows, H, D});
    dk = b.alloc(t, {r.rows, G, D}), dv = b.alloc(t, {r.rows, G, D});
    b.copy_spans(d_o, packed(p.d_o, "d_o", true), rows(true, true));
  }
  const auto at_row = [&](const Buffer& x, int64_t row, int64_t width) {
    return x.empty()
               ? nullptr
               : static_cast<char*>(x.tensor().data) + row * width * int64_t(dtype_size(x.tensor().dtype));
  };
  for (size_t i = 0; i < pk.groups.size(); ++i) {
    if (pk.groups[i].len == 0) continue;
    octet_attention_params d = group_call(b, p, pk, i, backward);
    const int64_t row = r.base[i];
    d.q = at_row(q, row, H * D), d.k = at_row(k, row, G * D), d.v = at_row(v, row, G * D);
    d.o = at_row(o, row, H * D), d.lse = at_row(lse, row, H);
    d.d_o = at_row(d_o, row, H * D), d.dq = at_row(dq, row, H * D);
    d.dk = at_row(dk, row, G * D), d.dv = at_row(dv, row, G * D);
    dense_attention_run(be, &d, backward);
  }
  if (!backward) {
    b.copy_spans(packed(p.o, "o", true), o, rows(true, false));
    b.copy_spans(lse_packed(), lse, lse_spans(pk, r, H, false));
    return;
  }
  b.copy_spans(packed(p.dq, "dq", true), dq, rows(true, false));
  b.copy_spans(packed(p.dk, "dk", false), dk, rows(false, false));
  b.copy_spans(packed(p.dv, "dv", false), dv, rows(false, false));
}

// A sequence without queries or without keys: the empty sums' values (forward: o 0, lse −inf;
// backward: its dq, or its dk and dv, 0).
void run_empty(Backend& b, const octet_attention_params& p, const Packing& pk, int64_t s, bool backward) {
  const DType t = dtype_of(p.dtype, "attention params");
  const DType lse_t = t == DType::F64 ? DType::F64 : DType::F32;
  const int64_t lq = len_q(pk, s), lk = len_k(pk, s);
  const octet_attention_params d = group_params(p, pk, Group{{s}, 0});
  if (lq > 0 && !backward) {  // queries and no keys: an empty softmax sum
    require(d.o, "attention params: o");
    require(d.lse, "attention params: lse");
    b.fill(view(d.o, t, {lq, p.n_heads, p.head_dim}), 0.0);
    b.fill(view(d.lse, lse_t, {p.n_heads, lq}), -std::numeric_limits<double>::infinity());
  } else if (lq > 0) {
    require(d.dq, "attention params: dq");
    b.fill(view(d.dq, t, {lq, p.n_heads, p.head_dim}), 0.0);
  } else if (lk > 0 && backward) {  // keys no query reads
    require(d.dk, "attention params: dk");
    require(d.dv, "attention params: dv");
    b.fill(view(d.dk, t, {lk, p.n_kv_heads, p.head_dim}), 0.0);
    b.fill(view(d.dv, t, {lk, p.n_kv_heads, p.head_dim}), 0.0);
  }
}

}  // namespace

int64_t varlen_attention_saved_bytes(octet_c_backend* be, const octet_attention_params* p) {
  return packing_of(be, p, true).saved_at.back();
}

void varlen_attention_run(octet_c_backend* be, const octet_attention_params* p, bool backward) {
  // Without `saved` the backward re-runs each group's forward (attention.cpp).
  const Packing pk = packing_of(be, p, p && p->saved);
  if (p->saved)
    OCTET_CHECK(p->saved_size >= pk.saved_at.back(),
                "attention params: saved_size " + str(p->saved_size) + " is below the " +
                    str(pk.saved_at.back()) +
                    " bytes these packed sequences save (octet_attention_saved_bytes)");
  Backend& b = *be->backend;
  for (int64_t s = 0; s < p->n_seqs; ++s)
    if (len_q(pk, s) == 0 || len_k(pk, s) == 0) run_empty(b, *p, pk, s, backward);
  run_padded(be, *p, pk, backward);
  for (size_t i = 0; i < pk.groups.size(); ++i) {
    if (pk.groups[i].len > 0) continue;
    const octet_attention_params d = group_call(b, *p, pk, i, backward);
    dense_attention_run(be, &d, backward);
  }
}

}  // namespace octet::capi
