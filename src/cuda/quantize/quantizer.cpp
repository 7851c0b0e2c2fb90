// src/cuda/quantize/quantizer.cpp — CudaQuantizer (quantizer.h): recipe -> scale source, the tensor-delayed
// quantize-then-update state on the device, statistics and the host views used by tests and
// checkpoints.
#include "cuda/quantize/quantizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cuda/runtime/check.h"
#include "cuda/runtime/cuda_backend.h"
#include "cuda/runtime/saved_placement.h"
#include "cuda/ops/ops.h"
#include "cuda/quantize/quantize.h"
#include "octet/error.h"

namespace octet::cuda {

void DevQ::ensure(int64_t rows, int64_t cols, Format format, ScaleLayout layout, CudaBackend& backend) {
  view.format = format;
  view.layout = layout;
  view.set_shape(rows, cols);
  const DType code_type = format == Format::E4M3 ? DType::E4M3 : DType::E5M2;
  if (codes.empty() || codes.tensor().numel() < view.code_count() || codes.tensor().dtype != code_type)
    codes = backend.alloc_uninitialized(code_type, Shape{view.code_count()});
  if (scales.empty() || scales.tensor().numel() < view.scale_count())
    scales = backend.alloc_uninitialized(DType::F32, Shape{view.scale_count()});
  view.codes = codes.tensor().fp8();
  view.scale_inv = scales.tensor().f32();
}

void DevQ::place(int64_t rows, int64_t cols, Format format, ScaleLayout layout, SavedPlacement& at) {
  view.format = format;
  view.layout = layout;
  view.set_shape(rows, cols);
  codes = at.take(format == Format::E4M3 ? DType::E4M3 : DType::E5M2, Shape{view.code_count()});
  scales = at.take(DType::F32, Shape{view.scale_count()});
  view.codes = codes.empty() ? nullptr : codes.tensor().fp8();  // empty: counting
  view.scale_inv = scales.empty() ? nullptr : scales.tensor().f32();
}

namespace {
constexpr int kStateInts = 5;  // quantize.h: count, next position, overflow flag, count, recorded
float from_bits(unsigned b) {
  if (b > 0x7F800000u) return NAN;
  float a;
  std::memcpy(&a, &b, sizeof(a));
  return a;
}
}  // namespace

CudaQuantizer::CudaQuantizer(const QuantConfig& config, Role role, CudaBackend& backend, cudaStream_t stream)
    : config_(config), role_(role), backend_(backend), stream_(stream) {
  config.validate("quantizer: ");  // the CPU Quantizer's rules (src/core/quant_rules.cpp)
  counters_.reserve(1, stream_);
  scale_.reserve(2, stream_);
  fill_launch(Tensor(scale_.get(), DType::F32, {2}), config.recipe == Recipe::Unit ? config.unit_scale : 1.0f,
              stream_);
  OCTET_CUDA_CHECK(cudaMemsetAsync(counters_.get(), 0, sizeof(QuantCounters), stream_));
  if (config.recipe == Recipe::TensorDelayed) {
    history_.reserve(size_t(config.amax_history_len), stream_);
    state_.reserve(kStateInts, stream_);
    pending_.reserve(1, stream_);
    OCTET_CUDA_CHECK(cudaMemsetAsync(history_.get(), 0, config.amax_history_len * sizeof(float), stream_));
    OCTET_CUDA_CHECK(cudaMemsetAsync(state_.get(), 0, kStateInts * sizeof(int), stream_));
    OCTET_CUDA_CHECK(cudaMemsetAsync(pending_.get(), 0, sizeof(unsigned), stream_));
  }
}

void CudaQuantizer::quantize(const Tensor& x, DevQ* rowwise, DevQ* colwise, const unsigned* amax) {
  check_activation(x, "quantize: x");
  const int64_t rows = x.rows(), cols = x.cols();
  OCTET_CHECK(rows >= 1 && cols >= 1, "quantize: rows and cols must be >= 1, got " + x.str());
  const Format f = format();
  const ScaleLayout l = layout();
  if (rowwise) rowwise->ensure(rows, cols, f, l, backend_);
  if (colwise) colwise->ensure(cols, rows, f, l, backend_);
  QuantizeArgs a;
  a.x = x.data;
  a.x_bf16 = x.dtype == DType::BF16;
  a.rows = rows;
  a.cols = cols;
  a.margin = config_.margin;
  a.pow2 = config_.pow2_scales;
  a.mx = config_.recipe == Recipe::MX;
  a.saturate = config_.saturate;
  a.rowwise = rowwise ? &rowwise->view : nullptr;
  a.colwise = colwise ? &colwise->view : nullptr;
  a.accum.counters = counters_.get();
  struct SelectCtx {
    const unsigned* amax;
    const int* state;
    float* scale;
    Format format;
    int margin;
    bool pow2;
  } ctx{amax_bits(), state_.get(), scale_.get(), f, config_.margin, config_.pow2_scales};
  switch (config_.recipe) {
    case Recipe::TensorDelayed:
      a.source = ScaleSource::Pointer;
      if (history_nonempty_) {  // known on the host: the delayed scale, no pre-pass
        a.scale_ptr = scale_.get();
        break;
      }
      // The history may be empty: the pre-pass (skipped on the device once it is not) reduces
      // this tensor's amax, the select kernel picks the scale into scale[1].
      a.amax_prepass = true;
      a.skip_prepass_if = state_.get();
      a.after_prepass = [](void* c, cudaStream_t s) {
        auto* p = static_cast<SelectCtx*>(c);
        delayed_select_launch(p->amax, p->state, p->scale, p->format, p->margin, p->pow2, s);
      };
      a.after_prepass_ctx = &ctx;
      a.scale_ptr = scale_.get() + 1;
      break;
    case Recipe::Unit:
      a.source = ScaleSource::Pointer;
      a.scale_ptr = scale_.get();
      break;
    case Recipe::TensorCurrent:
      a.source = ScaleSource::TensorAmax;
      a.amax_given = amax;
      break;
    case Recipe::Row:
      a.source = ScaleSource::RowCol;
      a.accum.row_amax = row_amax_.reserve(size_t(round_up(rows, 16)), stream_);
      a.accum.col_amax = col_amax_.reserve(size_t(round_up(cols, 16)), stream_);
      break;
    case Recipe::Block:
    case Recipe::MX:
      a.source = ScaleSource::Tile;
      break;
  }
  quantize_launch(a, stream_);
  if (config_.recipe == Recipe::TensorDelayed)
    delayed_record_launch(amax_bits(), pending_.get(), state_.get(), stream_);
  last_copy_ = rowwise ? 0 : 1;
  last_rows_ = rowwise ? rows : cols;
  last_cols_ = rowwise ? cols : rows;
}

void CudaQuantizer::update() {
  if (config_.recipe != Recipe::TensorDelayed) return;
  delayed_update_launch(pending_.get(), history_.get(), config_.amax_history_len, state_.get(), scale_.get(),
                        format(), config_.margin, config_.pow2_scales,
                        config_.amax_algo == AmaxAlgo::MostRecent, stream_);
}

float CudaQuantizer::pending_amax() const {
  if (config_.recipe != Recipe::TensorDelayed) return -1.0f;
  int st[kStateInts];
  unsigned bits = 0;
  OCTET_CUDA_CHECK(cudaMemcpyAsync(&bits, pending_.get(), sizeof(bits), cudaMemcpyDeviceToHost, stream_));
  read_state(st);
  return st[4] ? from_bits(bits) : -1.0f;
}

void CudaQuantizer::set_pending_amax(float amax) {
  if (config_.recipe != Recipe::TensorDelayed) return;
  delayed_set_pending_launch(pending_.get(), state_.get(), amax, stream_);
}

void CudaQuantizer::pending_exchange(int32_t* out) const {
  OCTET_CHECK(config_.recipe == Recipe::TensorDelayed, "pending_exchange: not a tensor-delayed quantizer");
  delayed_get_exchange_launch(pending_.get(), state_.get(), out, stream_);
}

void CudaQuantizer::set_pending_exchange(const int32_t* in) {
  OCTET_CHECK(config_.recipe == Recipe::TensorDelayed,
              "set_pending_exchange: not a tensor-delayed quantizer");
  delayed_set_exchange_launch(pending_.get(), state_.get(), in, stream_);
}

void CudaQuantizer::read_state(int st[5]) const {
  OCTET_CUDA_CHECK(
      cudaMemcpyAsync(st, state_.get(), kStateInts * sizeof(int), cudaMemcpyDeviceToHost, stream_));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

QuantCounters CudaQuantizer::read_counters() const {
  QuantCounters c{};
  OCTET_CUDA_CHECK(cudaMemcpyAsync(&c, counters_.get(), sizeof(c), cudaMemcpyDeviceToHost, stream_));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return c;
}

float CudaQuantizer::last_amax() const { return from_bits(read_counters().amax_bits); }

void CudaQuantizer::last_counts(int copy, int64_t* underflow, int64_t* saturated) const {
  const QuantCounters c = read_counters();
  *underflow = int64_t(c.counts[2 * copy]);
  *saturated = int64_t(c.counts[2 * copy + 1]);
}

QuantStats CudaQuantizer::stats() const {
  QuantStats s;
  if (last_rows_ == 0) return s;
  const QuantCounters c = read_counters();  // synchronizes
  const double n = double(last_rows_) * double(last_cols_);
  s.amax = from_bits(c.amax_bits);
  s.underflow_frac = double(c.counts[2 * last_copy_]) / n;
  s.saturated_frac = double(c.counts[2 * last_copy_ + 1]) / n;
  s.scale_min = from_bits(c.scale_min());
  s.scale_max = from_bits(c.scale_max);
  return s;
}

float CudaQuantizer::delayed_scale() const {
  float s[2];
  OCTET_CUDA_CHECK(cudaMemcpyAsync(s, scale_.get(), sizeof(s), cudaMemcpyDeviceToHost, stream_));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return s[0];
}

bool CudaQuantizer::last_overflow() const {
  if (config_.recipe != Recipe::TensorDelayed) return false;
  int st[kStateInts];
  read_state(st);
  return st[2] != 0;
}

int64_t CudaQuantizer::overflow_count() const {
  if (config_.recipe != Recipe::TensorDelayed) return 0;
  int st[kStateInts];
  read_state(st);
  return st[3];
}

DelayedState CudaQuantizer::delayed_state() const {
  OCTET_CHECK(config_.recipe == Recipe::TensorDelayed,
              "quantizer: the " + to_string(config_.recipe) + " recipe keeps no delayed state");
  const int H = config_.amax_history_len;
  int st[kStateInts];
  float s[2];
  std::vector<float> ring(size_t(H), 0.0f);
  OCTET_CUDA_CHECK(cudaMemcpyAsync(s, scale_.get(), sizeof(s), cudaMemcpyDeviceToHost, stream_));
  OCTET_CUDA_CHECK(cudaMemcpyAsync(ring.data(), history_.get(), size_t(H) * sizeof(float),
                                   cudaMemcpyDeviceToHost, stream_));
  read_state(st);  // synchronizes
  // st = {count, next position, ...}: the count entries before the next position (circularly)
  // are the history, oldest first.
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
  const int st[kStateInts] = {n, n % H, 0, int(state.overflow_count), 0};
  const float s[2] = {state.scale, state.scale};
  const unsigned zero = 0;
  OCTET_CUDA_CHECK(cudaMemcpyAsync(history_.get(), ring.data(), size_t(H) * sizeof(float),
                                   cudaMemcpyHostToDevice, stream_));
  OCTET_CUDA_CHECK(cudaMemcpyAsync(state_.get(), st, sizeof(st), cudaMemcpyHostToDevice, stream_));
  OCTET_CUDA_CHECK(cudaMemcpyAsync(scale_.get(), s, sizeof(s), cudaMemcpyHostToDevice, stream_));
  OCTET_CUDA_CHECK(cudaMemcpyAsync(pending_.get(), &zero, sizeof(zero), cudaMemcpyHostToDevice, stream_));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host copies must outlive the transfers
  history_nonempty_ = n > 0;
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

}  // namespace octet::cuda
