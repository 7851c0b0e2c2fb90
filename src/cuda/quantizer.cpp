// src/cuda/quantizer.cpp — CudaQuantizer (quantizer.h): recipe -> scale source, delayed-scaling state
// on the device, and the host views used by statistics and tests.
#include "cuda/quantizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cuda/check.h"
#include "cuda/quantize.h"
#include "octet/error.h"

namespace octet::cuda {

void DevQ::ensure(int64_t rows, int64_t cols, Format format, ScaleLayout layout) {
  view.format = format;
  view.layout = layout;
  view.set_shape(rows, cols);
  view.codes = codes.reserve(size_t(view.code_count()));
  view.scale_inv = scales.reserve(size_t(view.scale_count()));
}

CudaQuantizer::CudaQuantizer(const QuantConfig& config, Role role, cudaStream_t stream)
    : config_(config), role_(role), stream_(stream) {
  config.validate("quantizer: ");  // the CPU Quantizer's rules (src/core/quant_rules.cpp)
  amax_.reserve(1);
  counts_.reserve(4);
  scale_.reserve(2);
  const float init = config.recipe == Recipe::Unit ? config.unit_scale : 1.0f;
  const float s2[2] = {init, init};
  OCTET_CUDA_CHECK(cudaMemcpyAsync(scale_.get(), s2, sizeof(s2), cudaMemcpyHostToDevice, stream_));
  OCTET_CUDA_CHECK(cudaMemsetAsync(counts_.get(), 0, 4 * sizeof(unsigned long long), stream_));
  OCTET_CUDA_CHECK(cudaMemsetAsync(amax_.get(), 0, sizeof(unsigned), stream_));
  if (config.recipe == Recipe::TensorDelayed) {
    history_.reserve(size_t(config.amax_history_len));
    state_.reserve(4);
    OCTET_CUDA_CHECK(cudaMemsetAsync(history_.get(), 0, config.amax_history_len * sizeof(float), stream_));
    OCTET_CUDA_CHECK(cudaMemsetAsync(state_.get(), 0, 4 * sizeof(int), stream_));
  }
  // The host-side config copies are stack values: make them reach the device before returning.
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

namespace {
struct SelectCtx {
  const unsigned* amax;
  const int* state;
  float* scale;
  Format format;
  int margin;
  bool pow2;
};
void select_after_prepass(void* ctx, cudaStream_t stream) {
  auto* c = static_cast<SelectCtx*>(ctx);
  delayed_select_launch(c->amax, c->state, c->scale, c->format, c->margin, c->pow2, stream);
}
}  // namespace

void CudaQuantizer::quantize(const float* x, int64_t rows, int64_t cols, DevQ* rowwise,
                             DevQ* colwise, bool advance) {
  OCTET_CHECK(rows >= 1 && cols >= 1, "quantize: rows and cols must be >= 1, got [" +
                                          std::to_string(rows) + ", " + std::to_string(cols) + "]");
  OCTET_CHECK(x != nullptr, "quantize: null input");
  const Format f = format();
  const ScaleLayout l = layout();
  if (rowwise) rowwise->ensure(rows, cols, f, l);
  if (colwise) colwise->ensure(cols, rows, f, l);
  QuantizeArgs a;
  a.x = x;
  a.rows = rows;
  a.cols = cols;
  a.margin = config_.margin;
  a.pow2 = config_.pow2_scales;
  a.mx = config_.recipe == Recipe::MX;
  a.saturate = config_.saturate;
  a.rowwise = rowwise ? &rowwise->view : nullptr;
  a.colwise = colwise ? &colwise->view : nullptr;
  a.accum.amax_bits = amax_.get();
  a.accum.counts = counts_.get();
  const bool delayed = config_.recipe == Recipe::TensorDelayed;
  bool update = false, copy_used = false;
  SelectCtx ctx{amax_.get(), state_.get(), scale_.get(), f, config_.margin, config_.pow2_scales};
  switch (config_.recipe) {
    case Recipe::TensorDelayed:
      a.source = ScaleSource::Pointer;
      if (!advance && quantized_once_) {  // the other orientation: the last quantization's scale
        a.scale_ptr = scale_.get() + 1;
        break;
      }
      update = true;
      if (!history_nonempty_) {  // learn (one sync) whether the history may still be empty
        int st[4];
        OCTET_CUDA_CHECK(cudaMemcpyAsync(st, state_.get(), sizeof(st), cudaMemcpyDeviceToHost, stream_));
        OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
        history_nonempty_ = st[0] > 0;
      }
      if (history_nonempty_) {
        a.scale_ptr = scale_.get();
        copy_used = true;
      } else {  // first use: the scale may come from this tensor's own amax
        a.amax_prepass = true;
        a.after_prepass = select_after_prepass;
        a.after_prepass_ctx = &ctx;
        a.scale_ptr = scale_.get() + 1;
      }
      break;
    case Recipe::Unit:
      a.source = ScaleSource::Pointer;
      a.scale_ptr = scale_.get();
      break;
    case Recipe::TensorCurrent: a.source = ScaleSource::TensorAmax; break;
    case Recipe::Row:
      a.source = ScaleSource::RowCol;
      a.accum.row_amax = row_amax_.reserve(size_t(round_up(rows, 16)));
      a.accum.col_amax = col_amax_.reserve(size_t(round_up(cols, 16)));
      break;
    case Recipe::Block:
    case Recipe::MX: a.source = ScaleSource::Tile; break;
  }
  quantize_launch(a, stream_);
  if (delayed && update)
    delayed_update_launch(amax_.get(), history_.get(), config_.amax_history_len, state_.get(),
                          scale_.get(), f, config_.margin, config_.pow2_scales,
                          config_.amax_algo == AmaxAlgo::MostRecent, copy_used, stream_);
  quantized_once_ = true;
}

float CudaQuantizer::last_amax() const {
  unsigned bits = 0;
  OCTET_CUDA_CHECK(cudaMemcpyAsync(&bits, amax_.get(), sizeof(bits), cudaMemcpyDeviceToHost, stream_));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (bits > 0x7F800000u) return NAN;
  float a;
  std::memcpy(&a, &bits, sizeof(a));
  return a;
}

void CudaQuantizer::last_counts(int copy, int64_t* underflow, int64_t* saturated) const {
  unsigned long long c[4];
  OCTET_CUDA_CHECK(cudaMemcpyAsync(c, counts_.get(), sizeof(c), cudaMemcpyDeviceToHost, stream_));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
  *underflow = int64_t(c[2 * copy]);
  *saturated = int64_t(c[2 * copy + 1]);
}

float CudaQuantizer::delayed_scale() const {
  float s[2];
  OCTET_CUDA_CHECK(cudaMemcpyAsync(s, scale_.get(), sizeof(s), cudaMemcpyDeviceToHost, stream_));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return s[0];
}

bool CudaQuantizer::last_overflow() const {
  if (config_.recipe != Recipe::TensorDelayed) return false;
  int st[4];
  OCTET_CUDA_CHECK(cudaMemcpyAsync(st, state_.get(), sizeof(st), cudaMemcpyDeviceToHost, stream_));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return st[2] != 0;
}

int64_t CudaQuantizer::overflow_count() const {
  if (config_.recipe != Recipe::TensorDelayed) return 0;
  int st[4];
  OCTET_CUDA_CHECK(cudaMemcpyAsync(st, state_.get(), sizeof(st), cudaMemcpyDeviceToHost, stream_));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return st[3];
}

DelayedState CudaQuantizer::delayed_state() const {
  OCTET_CHECK(config_.recipe == Recipe::TensorDelayed,
              "quantizer: the " + to_string(config_.recipe) + " recipe keeps no delayed state");
  const int H = config_.amax_history_len;
  int st[4];
  float s[2];
  std::vector<float> ring(size_t(H), 0.0f);
  OCTET_CUDA_CHECK(cudaMemcpyAsync(st, state_.get(), sizeof(st), cudaMemcpyDeviceToHost, stream_));
  OCTET_CUDA_CHECK(cudaMemcpyAsync(s, scale_.get(), sizeof(s), cudaMemcpyDeviceToHost, stream_));
  OCTET_CUDA_CHECK(cudaMemcpyAsync(ring.data(), history_.get(), size_t(H) * sizeof(float),
                                   cudaMemcpyDeviceToHost, stream_));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
  // st = {count, next position, overflow flag, overflow count}: the count entries before the next
  // position (circularly) are the history, oldest first.
  DelayedState out;
  out.history.resize(size_t(st[0]));
  for (int i = 0; i < st[0]; ++i) out.history[size_t(i)] = ring[size_t((st[1] - st[0] + i + H) % H)];
  out.scale = s[0];
  out.overflow_count = st[3];
  return out;
}

void CudaQuantizer::load_delayed_state(const DelayedState& state) {
  OCTET_CHECK(config_.recipe == Recipe::TensorDelayed,
              "quantizer: the " + to_string(config_.recipe) + " recipe keeps no delayed state");
  check_delayed_state(state, config_.amax_history_len, "quantizer");
  OCTET_CHECK(state.overflow_count <= 0x7fffffff, "quantizer: overflow count out of range");
  const int H = config_.amax_history_len, n = int(state.history.size());
  std::vector<float> ring(size_t(H), 0.0f);
  std::copy(state.history.begin(), state.history.end(), ring.begin());
  const int st[4] = {n, n % H, 0, int(state.overflow_count)};
  const float s[2] = {state.scale, state.scale};
  OCTET_CUDA_CHECK(cudaMemcpyAsync(history_.get(), ring.data(), size_t(H) * sizeof(float),
                                   cudaMemcpyHostToDevice, stream_));
  OCTET_CUDA_CHECK(cudaMemcpyAsync(state_.get(), st, sizeof(st), cudaMemcpyHostToDevice, stream_));
  OCTET_CUDA_CHECK(cudaMemcpyAsync(scale_.get(), s, sizeof(s), cudaMemcpyHostToDevice, stream_));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host copies must outlive the transfers
  history_nonempty_ = n > 0;
  quantized_once_ = false;
}

QTensor to_host(const DevQTensor& q, cudaStream_t stream) {
  std::vector<uint8_t> codes(size_t(q.code_count()));
  std::vector<float> scales(size_t(q.scale_count()));
  OCTET_CUDA_CHECK(cudaMemcpyAsync(codes.data(), q.codes, codes.size(), cudaMemcpyDeviceToHost, stream));
  OCTET_CUDA_CHECK(cudaMemcpyAsync(scales.data(), q.scale_inv, scales.size() * sizeof(float),
                                   cudaMemcpyDeviceToHost, stream));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream));
  QTensor out;
  out.rows = q.rows;
  out.cols = q.cols;
  out.format = q.format;
  out.block = q.block();
  out.codes.resize(size_t(q.rows * q.cols));
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t c = 0; c < q.cols; ++c) out.codes[r * q.cols + c] = codes[r * q.ld + c];
  const int64_t gr = out.grid_rows(), gc = out.grid_cols();
  out.scale_inv.resize(size_t(gr * gc));
  for (int64_t i = 0; i < gr; ++i)
    for (int64_t j = 0; j < gc; ++j)
      out.scale_inv[i * gc + j] = scales[q.scale_index(i * out.block.rows, j * out.block.cols)];
  return out;
}

QuantStats quant_stats(const CudaQuantizer& qz, const DevQTensor& q, int copy) {
  QuantStats s;
  if (q.rows == 0) return s;
  s.amax = qz.last_amax();
  int64_t under = 0, sat = 0;
  qz.last_counts(copy, &under, &sat);
  const double n = double(q.rows) * double(q.cols);
  s.underflow_frac = double(under) / n;
  s.saturated_frac = double(sat) / n;
  const QTensor h = to_host(q, qz.stream());
  bool first = true;
  for (float si : h.scale_inv) {
    const float sc = 1.0f / si;
    if (first || sc < s.scale_min) s.scale_min = sc;
    if (first || sc > s.scale_max) s.scale_max = sc;
    first = false;
  }
  return s;
}

}  // namespace octet::cuda
