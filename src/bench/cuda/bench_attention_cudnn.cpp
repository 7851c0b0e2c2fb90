// src/bench/cuda/bench_attention_cudnn.cpp — the cuDNN SDPA peer rows (bench_attention_cudnn.h).
#include "bench/cuda/bench_attention_cudnn.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "cuda/attention/cudnn/cudnn_sdpa.h"
#include "cuda/attention/glue/glue.h"
#include "cuda/ops/ops.h"
#include "cuda/quantize/qtensor.h"
#include "cuda/runtime/check.h"
#include "octet/error.h"

namespace octet::cuda {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Median ms of fn under the timer, or NaN (note on stderr) if cuDNN refuses the graph.
template <typename Fn>
double time_or_nan(EventTimer& timer, const AttnBenchOptions& opt, const char* what, Fn&& fn) {
  try {
    fn(0);  // builds the graph and its plan
    return timer.median_ms(opt.warmup, opt.reps, fn);
  } catch (const Error& e) {
    std::fprintf(stderr, "octet bench attention: %s skipped: %s\n", what, e.what());
    return kNaN;
  }
}

float read_scalar(const float* p, cudaStream_t s) {
  float x = 0;
  OCTET_CUDA_CHECK(cudaMemcpyAsync(&x, p, sizeof(float), cudaMemcpyDeviceToHost, s));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(s));
  return x;
}

// The power-of-two scale that maps amax to at most E4M3's 448 (1 for a zero or non-finite amax).
float pow2_scale(float amax) {
  if (!(amax > 0) || !std::isfinite(amax)) return 1.0f;
  return std::ldexp(1.0f, int(std::floor(std::log2(448.0 / double(amax)))));
}

}  // namespace

std::vector<AttnBenchRow> bench_cudnn_sdpa(CudaBackend& backend, EventTimer& timer,
                                           const AttnBenchOptions& opt, const AttentionCase& c,
                                           const AttnBenchInputs& in, const AttentionRowsCheck& check) {
  if (!attention_bench_row_wanted(opt.rows, "cudnn-bf16") &&
      !attention_bench_row_wanted(opt.rows, "cudnn-fp8-stale"))
    return {};  // neither peer asked for: cuDNN is not even loaded
  SdpaEngine& engine = backend.sdpa();
  const cudaStream_t st = backend.stream();
  const AttentionShape& s = c.shape;
  SdpaDims d;
  d.B = s.batch, d.H = s.n_heads, d.G = s.n_kv_heads, d.Tq = s.seq_q, d.Tk = s.seq_k;
  d.D = s.head_dim, d.causal = s.causal, d.tau = s.tau();
  const Shape qs{s.batch, s.n_heads, s.seq_q, s.head_dim}, ks{s.batch, s.n_kv_heads, s.seq_k, s.head_dim};
  std::vector<AttnBenchRow> rows;
  auto row_of = [&](const char* impl, double fwd_ms, double bwd_ms, RowsError err) {
    AttnBenchRow row = attn_bench_row(c, opt, impl, fwd_ms, bwd_ms);
    row.err_o = err.o, row.err_dq = err.dq;
    rows.push_back(row);
  };
  Buffer lse = backend.alloc(DType::F32, {s.batch, s.n_heads, s.seq_q});
  const std::string why = sdpa_unsupported(d, false);
  if (!why.empty()) {
    std::fprintf(stderr, "octet bench attention: cudnn rows of %s skipped: %s\n", c.name.c_str(),
                 why.c_str());
    return rows;
  }
  if (attention_bench_row_wanted(opt.rows, "cudnn-bf16")) {  // BF16, from the case's inputs
                                                             // rounded to BF16 (a copy when F32)
    Buffer t[8];                                             // q k v o dO dq dk dv
    const Tensor* src[8] = {&in.q, &in.k, &in.v, nullptr, &in.d_o, nullptr, nullptr, nullptr};
    for (int i = 0; i < 8; ++i) {
      t[i] = backend.alloc_uninitialized(DType::BF16, i == 1 || i == 2 || i == 6 || i == 7 ? ks : qs);
      if (src[i]) convert_launch(t[i].tensor(), *src[i], st);
    }
    auto p = [&](int i) { return t[i].tensor().data; };
    SdpaBf16Forward fa{p(0), p(1), p(2), p(3), lse.tensor().f32()};
    SdpaBf16Backward ba{p(0), p(1), p(2), p(3), p(4), lse.tensor().f32(), p(5), p(6), p(7)};
    const double fwd =
        time_or_nan(timer, opt, "cudnn-bf16 forward", [&](int) { engine.bf16_forward(d, fa); });
    const double bwd =
        time_or_nan(timer, opt, "cudnn-bf16 backward", [&](int) { engine.bf16_backward(d, ba, false); });
    RowsError err{kNaN, kNaN};
    if (!std::isnan(fwd) && !std::isnan(bwd)) err = check.error(t[3].tensor(), t[5].tensor(), st);
    row_of("cudnn-bf16", fwd, bwd, err);
  }
  if (attention_bench_row_wanted(opt.rows, "cudnn-fp8-stale")) {  // FP8 (E4M3), scales per tensor
    const int64_t Tq_p = round_up(s.seq_q, 16), Tk_p = round_up(s.seq_k, 16);
    if (Tq_p != s.seq_q || Tk_p != s.seq_k) {
      std::fprintf(stderr,
                   "octet bench attention: cudnn-fp8-stale of %s not measured: the peer quantizes "
                   "with octet's pack, which pads lengths to 16\n",
                   c.name.c_str());
      row_of("cudnn-fp8-stale", kNaN, kNaN, {kNaN, kNaN});
      return rows;
    }
    Buffer t[8];  // q k v o dO dq dk dv
    for (int i = 0; i < 8; ++i)
      t[i] = backend.alloc_uninitialized(DType::E4M3, i == 1 || i == 2 || i == 6 || i == 7 ? ks : qs);
    // One device scalar each: 0-3 descale q, k, v, dO (pack's 1/s); 4.. the scales below.
    Buffer sc = backend.alloc(DType::F32, {32 * 16}), amax = backend.alloc(DType::F32, {16});
    Buffer bits = backend.alloc(DType::F32, {1});
    float* f = sc.tensor().f32();
    auto at = [&](int i) { return f + 32 * i; };  // 128-byte apart (cuDNN aligns nothing itself)
    const Tensor* src[4] = {&in.q, &in.k, &in.v, &in.d_o};
    const int tdst[4] = {0, 1, 2, 4};
    for (int i = 0; i < 4; ++i) {
      const bool q_like = i == 0 || i == 3;
      PackArgs a;
      a.x = src[i]->data, a.x_dtype = src[i]->dtype;
      a.B = s.batch, a.heads = q_like ? s.n_heads : s.n_kv_heads, a.T = q_like ? s.seq_q : s.seq_k;
      a.T_p = a.T, a.D = s.head_dim, a.format = Format::E4M3, a.fp8 = true;
      a.scale_inv = at(i), a.row_kind = PackKind::Fp8Code;
      a.row = t[tdst[i]].tensor().data;
      pack_quantized_launch(a, reinterpret_cast<unsigned*>(bits.tensor().data), st);
    }
    // Scales (4..): s, o, dq, dk, dv, dp; descales (10..): s, o, dp. Calibrate from unit scales.
    float* am = amax.tensor().f32();
    auto set_scales = [&](float ss, float so, float sdq, float sdk, float sdv, float sdp) {
      const float v[9] = {ss, so, sdq, sdk, sdv, sdp, 1 / ss, 1 / so, 1 / sdp};
      for (int i = 0; i < 9; ++i) fill_launch(Tensor(at(4 + i), DType::F32, {1}), v[i], st);
    };
    auto p = [&](int i) { return t[i].tensor().data; };
    SdpaFp8Forward fa;
    fa.q = p(0), fa.k = p(1), fa.v = p(2), fa.o = p(3), fa.lse = lse.tensor().f32();
    fa.descale_q = at(0), fa.descale_k = at(1), fa.descale_v = at(2), fa.descale_s = at(10);
    fa.scale_s = at(4), fa.scale_o = at(5), fa.amax_s = am, fa.amax_o = am + 1;
    SdpaFp8Backward ba;
    ba.q = p(0), ba.k = p(1), ba.v = p(2), ba.o = p(3), ba.d_o = p(4), ba.lse = lse.tensor().f32();
    ba.descale_q = at(0), ba.descale_k = at(1), ba.descale_v = at(2), ba.descale_do = at(3);
    ba.descale_o = at(11), ba.descale_s = at(10), ba.descale_dp = at(12);
    ba.scale_s = at(4), ba.scale_dq = at(6), ba.scale_dk = at(7), ba.scale_dv = at(8);
    ba.scale_dp = at(9);
    ba.dq = p(5), ba.dk = p(6), ba.dv = p(7);
    ba.amax_dq = am + 2, ba.amax_dk = am + 3, ba.amax_dv = am + 4, ba.amax_dp = am + 5;
    const std::string why_bwd = sdpa_unsupported(d, true, true);
    double fwd = kNaN, bwd = kNaN;
    try {  // calibration: scales from the amaxes of earlier calls (dS is quantized on dP's scale,
           // so dQ, dK, dV have an amax only once dP's scale keeps dS above E4M3's subnormals)
      float so = 1.0f, sdq = 1.0f, sdk = 1.0f, sdv = 1.0f, sdp = 1.0f;
      auto keep = [](float amax, float old) { return amax > 0 ? pow2_scale(amax) : old; };
      set_scales(256.0f, so, sdq, sdk, sdv, sdp);
      engine.fp8_forward(d, fa);
      so = keep(read_scalar(am + 1, st), so);
      for (int pass = 0; pass < 2 && why_bwd.empty(); ++pass) {
        set_scales(256.0f, so, sdq, sdk, sdv, sdp);
        engine.fp8_forward(d, fa);
        engine.fp8_backward(d, ba);
        sdp = keep(read_scalar(am + 5, st), sdp);
        sdq = keep(read_scalar(am + 2, st), sdq);
        sdk = keep(read_scalar(am + 3, st), sdk);
        sdv = keep(read_scalar(am + 4, st), sdv);
      }
      set_scales(256.0f, so, sdq, sdk, sdv, sdp);
    } catch (const Error& e) {
      std::fprintf(stderr, "octet bench attention: cudnn-fp8-stale calibration skipped: %s\n", e.what());
    }
    fwd = time_or_nan(timer, opt, "cudnn-fp8-stale forward", [&](int) { engine.fp8_forward(d, fa); });
    if (why_bwd.empty())
      bwd = time_or_nan(timer, opt, "cudnn-fp8-stale backward", [&](int) { engine.fp8_backward(d, ba); });
    else
      std::fprintf(stderr, "octet bench attention: cudnn-fp8-stale backward of %s skipped: %s\n",
                   c.name.c_str(), why_bwd.c_str());
    RowsError err{kNaN, kNaN};
    if (!std::isnan(fwd) && !std::isnan(bwd)) {
      const float so = read_scalar(at(5), st), sdq = read_scalar(at(6), st);
      const RowsError eo = check.error(t[3].tensor(), t[5].tensor(), st, 1.0f / so);
      const RowsError edq = check.error(t[3].tensor(), t[5].tensor(), st, 1.0f / sdq);
      err = {eo.o, edq.dq};
    }
    row_of("cudnn-fp8-stale", fwd, bwd, err);
  }
  return rows;
}

}  // namespace octet::cuda
