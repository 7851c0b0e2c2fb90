// src/cuda/attention/cudnn/cudnn_sdpa.cpp — the cuDNN frontend graphs of cudnn_sdpa.h: BF16 and FP8 SDPA
// forward (with the LSE "Stats" saved) and backward, built once per shape and cached with their plan.
//
// Every graph names its tensors by fixed UIDs (Uid below) and executes from a UID -> pointer map;
// tensors carry the dimensions [B, heads, T, D] with the strides of the call's layout (heads-major
// contiguous, or tokens-major [B, T, heads, D]: SdpaDims::tokens_major); scalars (descale/scale/amax) are
// [1,1,1,1] FP32 device tensors. Causal: Tq == Tk uses cuDNN's top-left diagonal (identical to the
// bottom-right one then, and supported by every kernel), Tq < Tk the bottom-right alignment
// (octet's rule, attention.h). Plans come from cuDNN's heuristics mode A.
// cuDNN is loaded at run time (the frontend's dynamic loading: libcudnn.so.9 by dlopen at the first
// SdpaEngine; the frontend dlopens NVRTC and the CUDA libraries it needs itself), so octet links
// neither cuDNN nor NVRTC and starts on a machine without them; only this engine then fails, with
// an octet::Error naming the library.
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING 1  // before any frontend header
#include "cuda/attention/cudnn/cudnn_sdpa.h"

#include <cudnn.h>
#include <cudnn_frontend.h>
#include <dlfcn.h>

#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "cuda/runtime/check.h"
#include "cuda/runtime/cuda_backend.h"
#include "octet/error.h"

// The frontend's handle of the loaded cuDNN (declared by cudnn_frontend_shim.h, defined by its user).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}

namespace octet::cuda {
namespace {

namespace fe = cudnn_frontend;

// dlopens cuDNN 9 once per process; throws octet::Error if it is not on the library path.
void load_cudnn() {
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    fe::cudnn_dlhandle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL);
    if (!fe::cudnn_dlhandle) {
      const char* e = dlerror();
      error = e ? e : "unknown error";
    }
  });
  OCTET_CHECK(fe::cudnn_dlhandle != nullptr,
              "cannot load cuDNN 9 (libcudnn.so.9) for the fused SDPA: " + error +
                  " (put cuDNN's lib directory on LD_LIBRARY_PATH, or use precision.attn_form "
                  "= \"whole\" for the unfused BF16 attention)");
}
using Graph = fe::graph::Graph;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

// The tensors of the four graphs, by UID.
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kDO,
  kDQ,
  kDK,
  kDV,
  kDescaleQ,
  kDescaleK,
  kDescaleV,
  kDescaleO,
  kDescaleDO,
  kDescaleS,
  kDescaleDP,
  kScaleS,
  kScaleO,
  kScaleDQ,
  kScaleDK,
  kScaleDV,
  kScaleDP,
  kAmaxS,
  kAmaxO,
  kAmaxDQ,
  kAmaxDK,
  kAmaxDV,
  kAmaxDP,
};

enum class Kind { Bf16Forward, Bf16Backward, Bf16BackwardDeterministic, Fp8Forward, Fp8Backward };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Bf16Forward:
      return "bf16 forward";
    case Kind::Bf16Backward:
      return "bf16 backward";
    case Kind::Bf16BackwardDeterministic:
      return "bf16 backward (deterministic)";
    case Kind::Fp8Forward:
      return "fp8 forward";
    case Kind::Fp8Backward:
      return "fp8 backward";
  }
  return "?";
}

std::string dims_text(const SdpaDims& d) {
  return "B" + std::to_string(d.B) + " H" + std::to_string(d.H) + " G" + std::to_string(d.G) + " Tq" +
         std::to_string(d.Tq) + " Tk" + std::to_string(d.Tk) + " D" + std::to_string(d.D) +
         (d.causal ? " causal" : "");
}

void check_fe(fe::error_t e, Kind k, const SdpaDims& d, const char* step) {
  if (e.is_bad())
    OCTET_FAIL(std::string("cuDNN SDPA ") + kind_name(k) + " (" + dims_text(d) + "): " + step +
               " failed: " + e.get_message());
}

void check_cudnn(cudnnStatus_t s, const char* call) {
  if (s != CUDNN_STATUS_SUCCESS)
    OCTET_FAIL(std::string("cuDNN call failed: ") + call + ": " + fe::detail::get_error_string(s));
}

// A graph tensor's dimensions [B, heads, T, D] and strides (in elements).
struct Dim4 {
  std::vector<int64_t> dim, stride;
  // Contiguous, or with T and heads swapped in memory ([B, T, heads, D]: tokens-major).
  Dim4(int64_t B, int64_t heads, int64_t T, int64_t D, bool tokens_major = false)
      : dim{B, heads, T, D},
        stride{heads * T * D, tokens_major ? D : T * D, tokens_major ? heads * D : D, 1} {}
};

// A graph input.
TensorPtr input(Graph& g, const char* name, int64_t uid, const Dim4& x, fe::DataType_t type) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim(x.dim)
                      .set_stride(x.stride)
                      .set_data_type(type));
}
TensorPtr scalar(Graph& g, const char* name, int64_t uid) {
  return input(g, name, uid, Dim4(1, 1, 1, 1), fe::DataType_t::FLOAT);
}
// Marks a graph output.
void output(const TensorPtr& t, int64_t uid, const Dim4& x, fe::DataType_t type) {
  t->set_output(true).set_uid(uid).set_dim(x.dim).set_stride(x.stride).set_data_type(type);
}
void scalar_output(const TensorPtr& t, int64_t uid) {
  output(t, uid, Dim4(1, 1, 1, 1), fe::DataType_t::FLOAT);
}

// Octet's causal rule (bottom-right) in cuDNN's terms; Tq == Tk is the same mask top-left.
template <typename Attributes>
void set_causal(Attributes& a, const SdpaDims& d) {
  if (!d.causal) return;
  if (d.Tq == d.Tk)
    a.set_causal_mask(true);
  else
    a.set_causal_mask_bottom_right(true);
}

struct Dims4 {
  Dim4 q, kv, stats;
  explicit Dims4(const SdpaDims& d)
      : q(d.B, d.H, d.Tq, d.D, d.tokens_major),
        kv(d.B, d.G, d.Tk, d.D, d.tokens_major),
        stats(d.B, d.H, d.Tq, 1) {}
};

std::shared_ptr<Graph> new_graph(fe::DataType_t io) {
  auto g = std::make_shared<Graph>();
  g->set_io_data_type(io)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

// The inputs of a backward graph: Q, K, V, O, dO of `type`, the forward's FP32 Stats.
struct BackwardInputs {
  TensorPtr q, k, v, o, d_o, stats;
  BackwardInputs(Graph& g, const Dims4& x, fe::DataType_t type)
      : q(input(g, "Q", kQ, x.q, type)),
        k(input(g, "K", kK, x.kv, type)),
        v(input(g, "V", kV, x.kv, type)),
        o(input(g, "O", kO, x.q, type)),
        d_o(input(g, "dO", kDO, x.q, type)),
        stats(input(g, "Stats", kStats, x.stats, fe::DataType_t::FLOAT)) {}
};

std::shared_ptr<Graph> build_bf16_forward(const SdpaDims& d) {
  const Dims4 x(d);
  auto g = new_graph(fe::DataType_t::BFLOAT16);
  auto q = input(*g, "Q", kQ, x.q, fe::DataType_t::BFLOAT16);
  auto k = input(*g, "K", kK, x.kv, fe::DataType_t::BFLOAT16);
  auto v = input(*g, "V", kV, x.kv, fe::DataType_t::BFLOAT16);
  auto a = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_attn_scale(d.tau);
  set_causal(a, d);
  auto [o, stats] = g->sdpa(q, k, v, a);
  output(o, kO, x.q, fe::DataType_t::BFLOAT16);
  output(stats, kStats, x.stats, fe::DataType_t::FLOAT);
  return g;
}

std::shared_ptr<Graph> build_bf16_backward(const SdpaDims& d, bool deterministic) {
  const Dims4 x(d);
  auto g = new_graph(fe::DataType_t::BFLOAT16);
  const BackwardInputs in(*g, x, fe::DataType_t::BFLOAT16);
  auto a = fe::graph::SDPA_backward_attributes().set_name("sdpa_backward").set_attn_scale(d.tau);
  a.set_deterministic_algorithm(deterministic);
  set_causal(a, d);
  auto [dq, dk, dv] = g->sdpa_backward(in.q, in.k, in.v, in.o, in.d_o, in.stats, a);
  output(dq, kDQ, x.q, fe::DataType_t::BFLOAT16);
  output(dk, kDK, x.kv, fe::DataType_t::BFLOAT16);
  output(dv, kDV, x.kv, fe::DataType_t::BFLOAT16);
  return g;
}

std::shared_ptr<Graph> build_fp8_forward(const SdpaDims& d) {
  const Dims4 x(d);
  const auto e4m3 = fe::DataType_t::FP8_E4M3;
  auto g = new_graph(e4m3);
  auto q = input(*g, "Q", kQ, x.q, e4m3);
  auto k = input(*g, "K", kK, x.kv, e4m3);
  auto v = input(*g, "V", kV, x.kv, e4m3);
  auto a =
      fe::graph::SDPA_fp8_attributes().set_name("sdpa_fp8").set_generate_stats(true).set_attn_scale(d.tau);
  set_causal(a, d);
  auto [o, stats, amax_s, amax_o] =
      g->sdpa_fp8(q, k, v, scalar(*g, "descale_q", kDescaleQ), scalar(*g, "descale_k", kDescaleK),
                  scalar(*g, "descale_v", kDescaleV), scalar(*g, "descale_s", kDescaleS),
                  scalar(*g, "scale_s", kScaleS), scalar(*g, "scale_o", kScaleO), a);
  output(o, kO, x.q, e4m3);
  output(stats, kStats, x.stats, fe::DataType_t::FLOAT);
  scalar_output(amax_s, kAmaxS);
  scalar_output(amax_o, kAmaxO);
  return g;
}

std::shared_ptr<Graph> build_fp8_backward(const SdpaDims& d) {
  const Dims4 x(d);
  const auto e4m3 = fe::DataType_t::FP8_E4M3;
  auto g = new_graph(e4m3);
  const BackwardInputs in(*g, x, e4m3);
  auto a = fe::graph::SDPA_fp8_backward_attributes().set_name("sdpa_fp8_backward").set_attn_scale(d.tau);
  set_causal(a, d);
  auto [dq, dk, dv, amax_dq, amax_dk, amax_dv, amax_dp] = g->sdpa_fp8_backward(
      in.q, in.k, in.v, in.o, in.d_o, in.stats, scalar(*g, "descale_q", kDescaleQ),
      scalar(*g, "descale_k", kDescaleK), scalar(*g, "descale_v", kDescaleV),
      scalar(*g, "descale_o", kDescaleO), scalar(*g, "descale_do", kDescaleDO),
      scalar(*g, "descale_s", kDescaleS), scalar(*g, "descale_dp", kDescaleDP),
      scalar(*g, "scale_s", kScaleS), scalar(*g, "scale_dq", kScaleDQ), scalar(*g, "scale_dk", kScaleDK),
      scalar(*g, "scale_dv", kScaleDV), scalar(*g, "scale_dp", kScaleDP), a);
  output(dq, kDQ, x.q, e4m3);
  output(dk, kDK, x.kv, e4m3);
  output(dv, kDV, x.kv, e4m3);
  scalar_output(amax_dq, kAmaxDQ);
  scalar_output(amax_dk, kAmaxDK);
  scalar_output(amax_dv, kAmaxDV);
  scalar_output(amax_dp, kAmaxDP);
  return g;
}

using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, uint32_t, bool>;

Key key_of(Kind k, const SdpaDims& d) {
  uint32_t tau_bits;
  std::memcpy(&tau_bits, &d.tau, sizeof tau_bits);
  return {int(k), d.B, d.H, d.G, d.Tq, d.Tk, d.D, d.causal, tau_bits, d.tokens_major};
}

}  // namespace

std::string sdpa_unsupported(const SdpaDims& d, bool fp8, bool fp8_backward) {
  if (d.B < 1 || d.H < 1 || d.G < 1 || d.Tq < 1 || d.Tk < 1 || d.H % d.G != 0)
    return "an invalid shape (" + dims_text(d) + ")";
  if (fp8 && fp8_backward && d.D != 128)
    return "head_dim " + std::to_string(d.D) + " (cuDNN's FP8 SDPA backward on Hopper: 128 only)";
  if (d.D != 64 && d.D != 128)
    return "head_dim " + std::to_string(d.D) + " (octet sends 64 and 128 to cuDNN)";
  if (d.Tq == 1 && d.Tk == 1)  // measured on the H200 (cuDNN 9.14): the backward graph fails validation
    return "s_q = s_kv = 1 (cuDNN's SDPA backward refuses it)";
  if (d.causal && d.Tq > d.Tk)
    return "causal with Tq " + std::to_string(d.Tq) + " > Tk " + std::to_string(d.Tk) +
           " (cuDNN's bottom-right mask cannot leave rows without keys)";
  return "";
}

struct SdpaEngine::Impl {
  cudaStream_t stream = nullptr;
  cudnnHandle_t handle = nullptr;
  std::map<Key, std::shared_ptr<Graph>> graphs;
  DeviceBuffer<uint8_t> workspace;

  // The cached graph of (kind, d), built with its plan on first use.
  Graph& graph(Kind k, const SdpaDims& d) {
    const Key key = key_of(k, d);
    auto it = graphs.find(key);
    if (it != graphs.end()) return *it->second;
    std::shared_ptr<Graph> g;
    switch (k) {
      case Kind::Bf16Forward:
        g = build_bf16_forward(d);
        break;
      case Kind::Bf16Backward:
        g = build_bf16_backward(d, false);
        break;
      case Kind::Bf16BackwardDeterministic:
        g = build_bf16_backward(d, true);
        break;
      case Kind::Fp8Forward:
        g = build_fp8_forward(d);
        break;
      case Kind::Fp8Backward:
        g = build_fp8_backward(d);
        break;
    }
    check_fe(g->validate(), k, d, "validate");
    check_fe(g->build_operation_graph(handle), k, d, "build_operation_graph");
    check_fe(g->create_execution_plans({fe::HeurMode_t::A}), k, d, "create_execution_plans");
    check_fe(g->check_support(), k, d, "check_support");
    check_fe(g->build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), k, d, "build_plans");
    return *graphs.emplace(key, std::move(g)).first->second;
  }

  void run(Kind k, const SdpaDims& d, std::unordered_map<int64_t, void*>& ptrs) {
    for (const auto& [uid, p] : ptrs)
      OCTET_CHECK(p != nullptr, std::string("cuDNN SDPA ") + kind_name(k) + ": tensor uid " +
                                    std::to_string(uid) + " is null");
    Graph& g = graph(k, d);
    int64_t bytes = 0;
    check_fe(g.get_workspace_size(bytes), k, d, "get_workspace_size");
    void* ws = bytes > 0 ? workspace.reserve(size_t(bytes), stream) : nullptr;
    check_fe(g.execute(handle, ptrs, ws), k, d, "execute");
  }
};

SdpaEngine::SdpaEngine(cudaStream_t stream) : impl_(std::make_unique<Impl>()) {
  impl_->stream = stream;
  load_cudnn();
  check_cudnn(fe::detail::create_handle(&impl_->handle), "cudnnCreate");
  check_cudnn(fe::detail::set_stream(impl_->handle, stream), "cudnnSetStream");
}

SdpaEngine::~SdpaEngine() {
  impl_->graphs.clear();
  impl_->workspace.reset();
  if (impl_->handle) (void)fe::detail::destroy_handle(impl_->handle);  // no throwing at teardown
}

int64_t SdpaEngine::version() {
  load_cudnn();
  return int64_t(fe::detail::get_backend_version());
}

void SdpaEngine::bf16_forward(const SdpaDims& d, const SdpaBf16Forward& a) {
  std::unordered_map<int64_t, void*> p{{kQ, const_cast<void*>(a.q)},
                                       {kK, const_cast<void*>(a.k)},
                                       {kV, const_cast<void*>(a.v)},
                                       {kO, a.o},
                                       {kStats, a.lse}};
  impl_->run(Kind::Bf16Forward, d, p);
}

void SdpaEngine::bf16_backward(const SdpaDims& d, const SdpaBf16Backward& a, bool deterministic) {
  std::unordered_map<int64_t, void*> p{{kQ, const_cast<void*>(a.q)},
                                       {kK, const_cast<void*>(a.k)},
                                       {kV, const_cast<void*>(a.v)},
                                       {kO, const_cast<void*>(a.o)},
                                       {kDO, const_cast<void*>(a.d_o)},
                                       {kStats, const_cast<float*>(a.lse)},
                                       {kDQ, a.dq},
                                       {kDK, a.dk},
                                       {kDV, a.dv}};
  impl_->run(deterministic ? Kind::Bf16BackwardDeterministic : Kind::Bf16Backward, d, p);
}

void SdpaEngine::fp8_forward(const SdpaDims& d, const SdpaFp8Forward& a) {
  auto c = [](const void* x) { return const_cast<void*>(x); };
  std::unordered_map<int64_t, void*> p{{kQ, c(a.q)},
                                       {kK, c(a.k)},
                                       {kV, c(a.v)},
                                       {kDescaleQ, c(a.descale_q)},
                                       {kDescaleK, c(a.descale_k)},
                                       {kDescaleV, c(a.descale_v)},
                                       {kDescaleS, c(a.descale_s)},
                                       {kScaleS, c(a.scale_s)},
                                       {kScaleO, c(a.scale_o)},
                                       {kO, a.o},
                                       {kStats, a.lse},
                                       {kAmaxS, a.amax_s},
                                       {kAmaxO, a.amax_o}};
  impl_->run(Kind::Fp8Forward, d, p);
}

void SdpaEngine::fp8_backward(const SdpaDims& d, const SdpaFp8Backward& a) {
  auto c = [](const void* x) { return const_cast<void*>(x); };
  std::unordered_map<int64_t, void*> p{{kQ, c(a.q)},
                                       {kK, c(a.k)},
                                       {kV, c(a.v)},
                                       {kO, c(a.o)},
                                       {kDO, c(a.d_o)},
                                       {kStats, c(a.lse)},
                                       {kDescaleQ, c(a.descale_q)},
                                       {kDescaleK, c(a.descale_k)},
                                       {kDescaleV, c(a.descale_v)},
                                       {kDescaleO, c(a.descale_o)},
                                       {kDescaleDO, c(a.descale_do)},
                                       {kDescaleS, c(a.descale_s)},
                                       {kDescaleDP, c(a.descale_dp)},
                                       {kScaleS, c(a.scale_s)},
                                       {kScaleDQ, c(a.scale_dq)},
                                       {kScaleDK, c(a.scale_dk)},
                                       {kScaleDV, c(a.scale_dv)},
                                       {kScaleDP, c(a.scale_dp)},
                                       {kDQ, a.dq},
                                       {kDK, a.dk},
                                       {kDV, a.dv},
                                       {kAmaxDQ, a.amax_dq},
                                       {kAmaxDK, a.amax_dk},
                                       {kAmaxDV, a.amax_dv},
                                       {kAmaxDP, a.amax_dp}};
  impl_->run(Kind::Fp8Backward, d, p);
}

SdpaEngine& CudaBackend::sdpa() {
  if (!sdpa_) {
    DeviceGuard g(device_);
    sdpa_ = std::make_unique<SdpaEngine>(stream_);
  }
  return *sdpa_;
}

}  // namespace octet::cuda
