// src/cuda/attention/flash/flash_fwd_launch.cu — the flash attention forward's launch (flash.h):
// the argument checks, the kernel choice (ForwardKernel, OCTET_FLASH_FORWARD; the one place a
// forward kernel is selected) and the launch of the chosen kernel (flash_kernels.h). Semantics and
// CPU twin: flash.h. docs/attention.md §"Forward".
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "cuda/attention/flash/flash.h"
#include "cuda/attention/flash/flash_env.h"
#include "cuda/attention/flash/flash_kernels.h"
#include "cuda/runtime/check.h"
#include "octet/attention.h"
#include "octet/error.h"

namespace octet::cuda::flash {
namespace {

bool aligned(const void* x, unsigned bytes) { return (reinterpret_cast<uintptr_t>(x) & (bytes - 1)) == 0; }

// The checks both entry points share (the logits read no V̂ᵀ).
void check_inputs(const ForwardParams& p, bool needs_v) {
  check_forward_supported(p.D, p.block_k);
  // The softmax reads log2(p_scale) from its exponent bits and divides l by it exactly.
  validate_p_scale(p.p_scale, "flash attention forward: p_scale");
  OCTET_CHECK(p.B >= 1 && p.H >= 1 && p.G >= 1 && p.H % p.G == 0 && p.Tq >= 1 && p.Tk >= 1,
              "flash attention forward: need B, H, G, Tq, Tk >= 1 and H a multiple of G");
  OCTET_CHECK(p.Tq_p == (p.Tq + 15) / 16 * 16 && p.Tk_p == (p.Tk + 15) / 16 * 16,
              "flash attention forward: Tq_p, Tk_p must be Tq, Tk rounded up to 16");
  OCTET_CHECK(p.Tk < (int64_t(1) << 31), "flash attention forward: Tk must be below 2^31");
  OCTET_CHECK(p.persistent_ctas >= 0, "flash attention forward: persistent_ctas must be >= 0, got " +
                                          std::to_string(p.persistent_ctas));
  OCTET_CHECK(p.persistent >= -1 && p.persistent <= 1,
              "flash attention forward: persistent must be -1 (OCTET_FLASH_PERSISTENT), 0 or 1, got " +
                  std::to_string(p.persistent));
  OCTET_CHECK(p.pingpong >= -1 && p.pingpong <= 1,
              "flash attention forward: pingpong must be -1 (OCTET_FLASH_PINGPONG), 0 or 1, got " +
                  std::to_string(p.pingpong));
  OCTET_CHECK(p.exp2_poly >= -1 && p.exp2_poly <= 3,
              "flash attention forward: exp2_poly must be -1 (OCTET_FLASH_EXP2_POLY) or 0..3, got " +
                  std::to_string(p.exp2_poly));
  OCTET_CHECK(p.q && p.k && p.q_scale_inv && p.k_scale_inv && (!needs_v || (p.v_t && p.v_scale_inv)),
              "flash attention forward: a null operand or scale pointer");
  OCTET_CHECK(aligned(p.q, 16) && aligned(p.k, 16) && (!needs_v || aligned(p.v_t, 16)),
              "flash attention forward: the Q, K, V^T code buffers must be 16-byte aligned");
}

void launch(const ForwardParams& p, float* s_out, cudaStream_t stream) {
  ForwardParams q = p;  // the kernels read the head group resolved
  q.head_group = resolved_head_group(p.head_group);
  if (select_forward_kernel(p.kernel) == ForwardKernel::Wgmma)
    fwd_sm90_launch(q, s_out, stream);
  else
    fwd_sm89_launch(q, s_out, stream);
}

}  // namespace

void check_forward_supported(int64_t head_dim, int64_t block_k) {
  OCTET_CHECK(flash_attention_size_supported(head_dim),
              "flash FP8 attention forward: head_dim must be 64 or 128, got " + std::to_string(head_dim));
  OCTET_CHECK(flash_attention_size_supported(block_k),
              "flash FP8 attention forward: block_k (the key tile) must be 64 or 128, got " +
                  std::to_string(block_k));
}

const char* forward_kernel_name(ForwardKernel k) {
  switch (k) {
    case ForwardKernel::MmaSync:
      return "mma_sync";
    case ForwardKernel::Wgmma:
      return "wgmma";
    default:
      return "auto";
  }
}

int forward_exp2_poly() {
  const char* env = std::getenv("OCTET_FLASH_EXP2_POLY");
  const std::string v = env ? env : "";
  if (v.empty()) return 0;
  OCTET_CHECK(v.size() == 1 && v[0] >= '0' && v[0] <= '3',
              "OCTET_FLASH_EXP2_POLY must be 0, 1, 2 or 3 (n-tiles of every 8 exponentiated on the FMA "
              "units; unset: 0), got '" +
                  v + "'");
  return v[0] - '0';
}

bool forward_persistent() {
  // on by default: +3-19 % forward TFLOP/s on the H200
  // (bench/results/2026-12-05-h200-attention-fwd-options.jsonl)
  return env_switch("OCTET_FLASH_PERSISTENT", "1: one CTA per SM walking the work items", true);
}

int flash_head_group() {  // read at every forward call: a literal message, no string built
  static_assert(kDefaultHeadGroup == 0, "the message below names the default");
  return env_count("OCTET_FLASH_HEAD_GROUP", "heads per group, 0: all heads in one group; unset: 0",
                   kDefaultHeadGroup);
}

int resolved_head_group(int head_group) {
  OCTET_CHECK(head_group >= -1,
              "flash attention: head_group must be -1 (OCTET_FLASH_HEAD_GROUP) or >= 0, got " +
                  std::to_string(head_group));
  return head_group < 0 ? flash_head_group() : head_group;
}

bool forward_pingpong() {
  return env_switch("OCTET_FLASH_PINGPONG", "1: the consumer warpgroups issue their GEMMs in turn", false);
}

ForwardKernel select_forward_kernel(ForwardKernel requested) {
  int dev = 0, major = 0, minor = 0;
  OCTET_CUDA_CHECK(cudaGetDevice(&dev));
  OCTET_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  OCTET_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  const bool sm90 = major == 9 && minor == 0;
  ForwardKernel k = requested;
  if (k == ForwardKernel::Auto) {
    const char* env = std::getenv("OCTET_FLASH_FORWARD");
    const std::string v = env ? env : "";
    if (v == forward_kernel_name(ForwardKernel::MmaSync))
      k = ForwardKernel::MmaSync;
    else if (v == forward_kernel_name(ForwardKernel::Wgmma))
      k = ForwardKernel::Wgmma;
    else
      OCTET_CHECK(v.empty(), "OCTET_FLASH_FORWARD must be mma_sync or wgmma (or unset), got '" + v + "'");
  }
  // Auto: wgmma on sm_90 (faster at every shape measured, within the FP64 oracle's rule; its FP8
  // S and P̃V̂ accumulators move O by up to ~5e-3 relative L2, which the stale delta reads — as
  // after cuDNN's FP8 forward, whose products run on the same instructions); mma.sync elsewhere.
  if (k == ForwardKernel::Auto) k = sm90 ? ForwardKernel::Wgmma : ForwardKernel::MmaSync;
  OCTET_CHECK(k != ForwardKernel::Wgmma || sm90,
              "flash attention forward: the wgmma kernel needs an sm_90 GPU (Hopper), this is sm_" +
                  std::to_string(10 * major + minor) + " (use OCTET_FLASH_FORWARD=mma_sync)");
  return k;
}

void run_forward(const ForwardParams& p, cudaStream_t stream) {
  check_inputs(p, true);
  OCTET_CHECK((p.o != nullptr) != (p.o_bf16 != nullptr),
              "flash attention forward: give exactly one of o (F32) and o_bf16 (BF16)");
  OCTET_CHECK(p.lse && p.row_max && p.row_sum,
              "flash attention forward: a null output pointer (lse, row_max, row_sum)");
  OCTET_CHECK(p.o ? aligned(p.o, 8) : aligned(p.o_bf16, 4),
              "flash attention forward: o must be 8-byte aligned (float2 stores), o_bf16 4-byte "
              "aligned (BF16 pairs)");
  launch(p, nullptr, stream);
}

void run_logits(const ForwardParams& p, float* s, cudaStream_t stream) {
  check_inputs(p, false);
  OCTET_CHECK(s && aligned(s, 8), "flash attention logits: s must be a non-null, 8-byte aligned pointer");
  launch(p, s, stream);
}

}  // namespace octet::cuda::flash
