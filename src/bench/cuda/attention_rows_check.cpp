// src/bench/cuda/attention_rows_check.cpp — AttentionRowsCheck (attention_rows_check.h).
#include "bench/cuda/attention_rows_check.h"

#include <cmath>
#include <cstring>
#include <string>

#include "cuda/runtime/check.h"
#include "octet/error.h"
#include "octet/fp8.h"

namespace octet::cuda {
namespace {

// n elements at element offset `at` of device tensor t, as float.
std::vector<float> download(const Tensor& t, int64_t at, int64_t n, cudaStream_t s, float code_scale) {
  OCTET_CHECK(t.dtype == DType::F32 || t.dtype == DType::BF16 || t.dtype == DType::E4M3,
              "attention rows check: tensors must be F32, BF16 or E4M3 codes");
  const size_t es = dtype_size(t.dtype);
  std::vector<uint8_t> raw(size_t(n) * es);
  OCTET_CUDA_CHECK(cudaMemcpyAsync(raw.data(), static_cast<const uint8_t*>(t.data) + size_t(at) * es,
                                   raw.size(), cudaMemcpyDeviceToHost, s));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<float> out(static_cast<size_t>(n));
  for (size_t i = 0; i < out.size(); ++i) {
    if (t.dtype == DType::F32)
      std::memcpy(&out[i], &raw[4 * i], 4);
    else if (t.dtype == DType::BF16)
      out[i] = bf16_to_float(uint16_t(raw[2 * i] | raw[2 * i + 1] << 8));
    else
      out[i] = fp8_decode(raw[i], Format::E4M3) * code_scale;
  }
  return out;
}

double rel_l2(const std::vector<std::vector<float>>& x, const std::vector<std::vector<double>>& ref) {
  double num = 0, den = 0;
  for (size_t g = 0; g < x.size(); ++g)
    for (size_t i = 0; i < x[g].size(); ++i) {
      const double d = double(x[g][i]) - ref[g][i];
      num += d * d, den += ref[g][i] * ref[g][i];
    }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace

AttentionRowsCheck::AttentionRowsCheck(const AttentionShape& shape, const Tensor& q, const Tensor& k,
                                       const Tensor& v, const Tensor& d_o, cudaStream_t stream, int64_t rows,
                                       float code_scale)
    : shape_(shape) {
  shape.validate();
  n_ = std::min(rows, shape.seq_q);
  sub_ = shape;
  sub_.batch = 1;
  sub_.n_heads = shape.n_heads / shape.n_kv_heads;
  sub_.n_kv_heads = 1;
  sub_.seq_q = n_;
  const int64_t Tk = shape.seq_k, D = shape.head_dim;
  for (auto [b, g] : {std::pair<int64_t, int64_t>{0, 0}, {shape.batch - 1, shape.n_kv_heads - 1}}) {
    if (!groups_.empty() && groups_[0].b == b && groups_[0].g == g) break;  // one group only
    Group gr{b, g, {}, {}, {}};
    gr.in.q = rows_of(q, b, g, stream, code_scale);
    gr.in.d_o = rows_of(d_o, b, g, stream, code_scale);
    const int64_t kv_at = (b * shape.n_kv_heads + g) * Tk * D;
    gr.in.k = download(k, kv_at, Tk * D, stream, code_scale);
    gr.in.v = download(v, kv_at, Tk * D, stream, code_scale);
    const AttentionOracle ref = run_attention_oracle(sub_, gr.in);
    gr.o = ref.o, gr.dq = ref.dq;
    groups_.push_back(std::move(gr));
  }
}

// The last n rows of the rep query heads of group (b, g), in the sub-problem's layout [rep, n, D].
std::vector<float> AttentionRowsCheck::rows_of(const Tensor& t, int64_t b, int64_t g, cudaStream_t stream,
                                               float code_scale) const {
  const int64_t H = shape_.n_heads, Tq = shape_.seq_q, D = shape_.head_dim, rep = sub_.n_heads;
  std::vector<float> out;
  out.reserve(size_t(rep * n_ * D));
  for (int64_t r = 0; r < rep; ++r) {
    const int64_t h = g * rep + r;
    const std::vector<float> x = download(t, ((b * H + h) * Tq + (Tq - n_)) * D, n_ * D, stream, code_scale);
    out.insert(out.end(), x.begin(), x.end());
  }
  return out;
}

RowsError AttentionRowsCheck::compare(const std::vector<std::vector<float>>& o,
                                      const std::vector<std::vector<float>>& dq) const {
  std::vector<std::vector<double>> ro, rdq;
  for (const Group& g : groups_) ro.push_back(g.o), rdq.push_back(g.dq);
  return {rel_l2(o, ro), rel_l2(dq, rdq)};
}

RowsError AttentionRowsCheck::error(const Tensor& o, const Tensor& dq, cudaStream_t stream,
                                    float code_scale) const {
  std::vector<std::vector<float>> os, dqs;
  for (const Group& g : groups_) {
    os.push_back(rows_of(o, g.b, g.g, stream, code_scale));
    dqs.push_back(rows_of(dq, g.b, g.g, stream, code_scale));
  }
  return compare(os, dqs);
}

RowsError AttentionRowsCheck::twin_error(const AttentionConfig& config) const {
  std::vector<std::vector<float>> os, dqs;
  for (const Group& g : groups_) {
    const size_t nq = g.in.q.size(), nk = g.in.k.size();
    std::vector<float> o(nq), lse(size_t(sub_.n_heads * n_)), dq(nq), dk(nk), dv(nk);
    AttentionSaved saved;
    attention_forward(sub_, config, g.in.q.data(), g.in.k.data(), g.in.v.data(), o.data(), lse.data(),
                      &saved);
    attention_backward(saved, g.in.d_o.data(), dq.data(), dk.data(), dv.data(), nullptr);
    os.push_back(std::move(o)), dqs.push_back(std::move(dq));
  }
  return compare(os, dqs);
}

}  // namespace octet::cuda
