// src/capi/capi_impl.h — what the C ABI's files share (include/octet/c_api.h): the handle types
// behind the opaque pointers, the per-thread last error, and `guarded`, which turns every C++
// exception into a -1 return and a message for octet_last_error() (no exception crosses the ABI).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "octet/backend.h"
#include "octet/c_api.h"
#include "octet/error.h"
#include "octet/tensor.h"

struct octet_c_backend {
  std::unique_ptr<octet::Backend> backend;
  /// The attention calls' layers, one per (shape, config) (src/capi/attention.cpp), built on first
  /// use and kept: building one costs more host time than a small call's kernels, and its scratch
  /// is reused in stream order. At most kMaxAttentions; the least recently used goes first (so a
  /// packed call over more distinct sequence lengths than that rebuilds layers on every call).
  static constexpr size_t kMaxAttentions = 16;
  std::deque<std::pair<std::string, std::unique_ptr<octet::Attention>>> attentions;
  /// Held by every call that uses `attentions` (PyTorch runs backwards on its own threads).
  std::mutex mutex;
};

struct octet_c_linear {
  octet::Backend* backend = nullptr;  // not owned: the caller keeps the octet_c_backend alive
  octet::LinearSpec spec;
  std::unique_ptr<octet::Linear> linear;
};

namespace octet::capi {

/// Records `message` as this thread's last error.
void set_last_error(const std::string& message);

/// Runs f(); 0 on success, -1 (and the message recorded) if it throws.
template <class F>
int guarded(F&& f) noexcept {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    set_last_error(e.what());
  } catch (...) {
    set_last_error("unknown C++ exception");
  }
  return -1;
}

/// Checks a handle or pointer argument the caller must pass: throws "<what> is NULL".
inline void require(const void* p, const char* what) {
  OCTET_CHECK(p != nullptr, std::string(what) + " is NULL");
}

/// The (terms, capacity) of a c_api.h *_saved_size_terms call: throws, naming `who`, unless
/// capacity >= 0 and terms is non-NULL where capacity > 0.
inline void check_terms_room(const char* who, const int64_t* terms, int64_t capacity) {
  OCTET_CHECK(capacity >= 0 && (terms || capacity == 0),
              std::string(who) + ": terms must hold capacity >= 0 terms, got capacity " +
                  std::to_string(capacity) + (terms ? "" : " and NULL"));
}

/// Writes the first min(all.size(), capacity) terms as four int64 each, fields(term) giving them
/// in c_api.h's order; returns all.size() (the count the caller needs room for).
template <typename Term, typename Fields>
int64_t write_terms(const std::vector<Term>& all, int64_t* terms, int64_t capacity, Fields fields) {
  for (size_t t = 0; t < all.size() && int64_t(t) < capacity; ++t) {
    const std::array<int64_t, 4> f = fields(all[t]);
    std::copy(f.begin(), f.end(), terms + 4 * t);
  }
  return int64_t(all.size());
}

/// The octet dtype of an enum octet_c_dtype value; throws naming an unknown value.
DType dtype_of(int32_t c_dtype, const char* what);

/// A view of caller memory (the C ABI passes const pointers for inputs; octet's Tensor is a
/// non-owning view whose constness is the operation's contract).
inline Tensor view(const void* p, DType t, Shape s) { return Tensor(const_cast<void*>(p), t, s); }

/// Attention calls (c_api.h octet_attention_*). A dense call (attention.cpp): the shape, config and
/// dtype checked without building a layer; the saved bytes and their size terms; one forward or
/// backward.
void validate_attention_params(const octet_c_backend& be, const octet_attention_params& p);
int64_t dense_attention_saved_bytes(octet_c_backend* be, const octet_attention_params* p);
std::vector<AttnSizeTerm> dense_attention_saved_size_terms(octet_c_backend* be,
                                                           const octet_attention_params* p);
void dense_attention_run(octet_c_backend* be, const octet_attention_params* p, bool backward);
/// Packed sequences (attention_varlen.cpp, FlashAttention's varlen form): checked, then one dense
/// call per sequence.
int64_t varlen_attention_saved_bytes(octet_c_backend* be, const octet_attention_params* p);
void varlen_attention_run(octet_c_backend* be, const octet_attention_params* p, bool backward);

}  // namespace octet::capi
