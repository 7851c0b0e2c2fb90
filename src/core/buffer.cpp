// src/core/buffer.cpp — the owning Buffer of tensor.h and the Backend helpers that every backend
// shares (host FP32 copies of F32/BF16 tensors, reading an F64 accumulator, copy_spans' checks), and the
// defaults of Linear's cross-rank amax methods and of Attention's caller-memory saved state for the layers
// that lack them.
#include <cstring>
#include <string>
#include <vector>

#include "octet/backend.h"
#include "octet/error.h"
#include "octet/fp8.h"

namespace octet {

Buffer::~Buffer() {
  if (owner_ && t_.data) owner_->release(t_.data);
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    if (owner_ && t_.data) owner_->release(t_.data);
    owner_ = o.owner_;
    t_ = o.t_;
    o.owner_ = nullptr;
    o.t_ = {};
  }
  return *this;
}

void check_copy_spans(const Tensor& dst, const Tensor& src, const std::vector<CopySpan>& spans) {
  OCTET_CHECK(dst.dtype == src.dtype, "copy_spans: dst is " + to_string(dst.dtype) + " but src is " +
                                          to_string(src.dtype) + " (no conversion)");
  for (size_t i = 0; i < spans.size(); ++i) {
    const CopySpan& c = spans[i];
    const std::string at = "copy_spans: span " + std::to_string(i) + " (src_at " + std::to_string(c.src_at) +
                           ", dst_at " + std::to_string(c.dst_at) + ", count " + std::to_string(c.count) +
                           ")";
    OCTET_CHECK(c.src_at >= 0 && c.dst_at >= 0 && c.count >= 0, at + " has a negative value");
    if (c.count == 0) continue;
    OCTET_CHECK(!dst.empty() && !src.empty(), at + ": missing tensor");
    OCTET_CHECK(c.src_at <= src.numel() - c.count,
                at + " runs past src's " + std::to_string(src.numel()) + " elements");
    OCTET_CHECK(c.dst_at <= dst.numel() - c.count,
                at + " runs past dst's " + std::to_string(dst.numel()) + " elements");
  }
}

std::vector<float> Backend::download_f32(const Tensor& src) {
  check_activation(src, "download_f32");
  std::vector<float> out(size_t(src.numel()));
  if (src.dtype == DType::F32) {
    download(out.data(), src);
    return out;
  }
  std::vector<uint16_t> bits(out.size());
  download(bits.data(), src);
  for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_float(bits[i]);
  return out;
}

double Backend::read_f64(const Tensor& acc) {
  check_dtype(acc, DType::F64, "read_f64");
  check_numel(acc, 1, "read_f64");
  double v = 0;
  download(&v, acc);
  return v;
}

void Linear::pending_amaxes(const Tensor&) const {
  OCTET_FAIL("this backend's linear does not expose its recorded amaxes (cross-rank amax reduction)");
}

void Linear::set_pending_amaxes(const Tensor&) {
  OCTET_FAIL("this backend's linear does not accept recorded amaxes (cross-rank amax reduction)");
}

// The FP8 weight all-gather (backend.h): only FP8 tensor-current linears with a weight cache.
namespace {
[[noreturn]] void no_weight_codes(const char* what) {
  OCTET_FAIL(
      std::string("linear ") + what +
      ": this linear takes no gathered FP8 weight codes (dist.allgather_fp8 needs FP8 linears with the "
      "tensor-current recipe)");
}
}  // namespace
void Linear::weight_piece_amax(const Tensor&, const Tensor&) const { no_weight_codes("weight_piece_amax"); }
void Linear::encode_weight_piece(const Tensor&, const Tensor&, const Tensor&) const {
  no_weight_codes("encode_weight_piece");
}
void Linear::install_weight_codes(const Tensor&, const Tensor&) { no_weight_codes("install_weight_codes"); }

int64_t Linear::saved_bytes(int64_t rows) const {
  const std::vector<SavedSizeTerm> terms = saved_size_terms();
  if (terms.empty()) return 0;
  OCTET_CHECK(rows >= 1, "linear saved_bytes: rows must be >= 1, got " + std::to_string(rows));
  const int64_t n = saved_size(terms, rows);
  OCTET_CHECK(n >= 0, "linear saved_bytes: the saved state of " + std::to_string(rows) +
                          " rows does not fit in int64 bytes");
  return n;
}

int64_t attention_saved_bytes(const std::vector<AttnSizeTerm>& terms, const AttentionShape& shape) {
  const int64_t n = attention_saved_size(terms, attn_sizes(shape));
  OCTET_CHECK(n >= 0, "attention saved_bytes: the saved state of batch " + std::to_string(shape.batch) +
                          ", heads " + std::to_string(shape.n_heads) + ", kv heads " +
                          std::to_string(shape.n_kv_heads) + ", seq_q " + std::to_string(shape.seq_q) +
                          ", seq_k " + std::to_string(shape.seq_k) + ", head_dim " +
                          std::to_string(shape.head_dim) + " does not fit in int64 bytes");
  return n;
}

// Saved state in caller memory (backend.h): a linear or an attention that keeps it only in its own
// memory.
SavedLinear Linear::forward_to(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                               const Tensor&) {
  OCTET_FAIL("linear forward_to: this linear keeps no saved state of its own (saved_bytes() is 0: not FP8)");
}
SavedLinear Linear::saved_from(int64_t, const Tensor&) const {
  OCTET_FAIL("linear saved_from: this linear keeps no saved state of its own (saved_bytes() is 0: not FP8)");
}
SavedAttention Attention::forward_to(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                     const Tensor&, const Tensor&) {
  OCTET_FAIL(
      "attention forward_to: this attention keeps its saved state in its own memory (saved_bytes() is 0)");
}
SavedAttention Attention::saved_from(const Tensor&, const Tensor&, const Tensor&) const {
  OCTET_FAIL(
      "attention saved_from: this attention keeps its saved state in its own memory (saved_bytes() is 0)");
}

}  // namespace octet
