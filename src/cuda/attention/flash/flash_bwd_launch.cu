// src/cuda/attention/flash/flash_bwd_launch.cu — the flash attention backward's launch (flash.h):
// the argument checks, the kernel choice (BackwardKernel, OCTET_FLASH_BACKWARD; the one place a
// backward kernel is selected) and the whole sequence after the forward:
//   dO's glue: dÔ and (dO/l)~ packed, each with its own scale (glue.h pack_d_o_launch)
//   → delta pass (matched: the sm89/sm90 pre-pass that recomputes P and dP; stale: dO·O rows)
//   → main kernel (+ the deterministic dQ kernel)
//   → dQ row-sum projection (when asked)
//   → dQ, dK, dV unpadded and scaled into the caller's tensors (glue.h)
//   → row residual finish and accumulate.
// Semantics and CPU twin: flash.h. docs/attention.md §"Backward".
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "cuda/attention/flash/flash.h"
#include "cuda/attention/flash/flash_env.h"
#include "cuda/attention/flash/flash_persistent.h"
#include "cuda/attention/flash/flash_kernels.h"
#include "cuda/attention/glue/glue.h"
#include "cuda/ops/ops.h"
#include "cuda/runtime/check.h"
#include "octet/attention.h"
#include "octet/error.h"

namespace octet::cuda::flash {
namespace {

bool aligned(const void* x, unsigned bytes) { return (reinterpret_cast<uintptr_t>(x) & (bytes - 1)) == 0; }

void check_dims(const BackwardParams& p) {
  check_backward_supported(p.D, p.block_q, p.block_k);
  OCTET_CHECK(p.B >= 1 && p.H >= 1 && p.G >= 1 && p.H % p.G == 0 && p.Tq >= 1 && p.Tk >= 1,
              "flash attention backward: need B, H, G, Tq, Tk >= 1 and H a multiple of G");
}

void check_padded(const BackwardParams& p) {
  OCTET_CHECK(p.Tq_p == (p.Tq + 15) / 16 * 16 && p.Tk_p == (p.Tk + 15) / 16 * 16,
              "flash attention backward: Tq_p, Tk_p must be Tq, Tk rounded up to 16");
}

}  // namespace

void check_backward_supported(int64_t head_dim, int64_t block_q, int64_t block_k) {
  OCTET_CHECK(flash_attention_size_supported(head_dim),
              "flash FP8 attention backward: head_dim must be 64 or 128, got " + std::to_string(head_dim));
  OCTET_CHECK(flash_attention_size_supported(block_q) && flash_attention_size_supported(block_k),
              "flash FP8 attention backward: block_q and block_k (the dS scale tile) must be 64 or "
              "128, got " +
                  std::to_string(block_q) + " x " + std::to_string(block_k));
}

const char* backward_kernel_name(BackwardKernel k) {
  switch (k) {
    case BackwardKernel::MmaSync:
      return "mma_sync";
    case BackwardKernel::Wgmma:
      return "wgmma";
    default:
      return "auto";
  }
}

int backward_key_head_group(int64_t kv_heads, int64_t key_blocks, BackwardKernel kernel) {
  constexpr int kAuto = -1;
  const int v = env_count("OCTET_FLASH_BWD_HEAD_GROUP",
                          "KV heads per group of the key-block-major backward, 0: all in one group; unset: "
                          "chosen from the grid and the SM count",
                          kAuto);
  if (v != kAuto) return v;
  if (kernel != BackwardKernel::Wgmma) return 0;
  int dev = 0, sms = 0;
  OCTET_CUDA_CHECK(cudaGetDevice(&dev));
  OCTET_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return int(auto_key_head_group(kv_heads, key_blocks, sms));
}

int resolved_key_head_group(const BackwardParams& p, BackwardKernel kernel) {
  OCTET_CHECK(
      p.key_head_group >= -1,
      "flash attention backward: key_head_group must be -1 (OCTET_FLASH_BWD_HEAD_GROUP) or >= 0, got " +
          std::to_string(p.key_head_group));
  if (p.key_head_group >= 0) return p.key_head_group;
  // A CTA's keys: 128 in both wgmma kernels (two 64-key consumers with 64 x 64 tiles), block_k in mma.sync's.
  const int64_t cta_keys = kernel == BackwardKernel::Wgmma ? 128 : p.block_k;
  return backward_key_head_group(p.B * p.G, (p.Tk + cta_keys - 1) / cta_keys, kernel);
}

bool backward_dq_tma() {
  return env_switch("OCTET_FLASH_BWD_DQ_TMA",
                    "1: the wgmma backward adds dQ by TMA bulk reduces from shared memory, 0: by atomics",
                    true);
}

bool backward_sdp_overlap() {
  return env_switch(
      "OCTET_FLASH_BWD_SDP_OVERLAP",
      "1: the wgmma backward issues each half's S and dP products together, 0: one after the other", true);
}

bool backward_dkv_direct() {
  return env_switch("OCTET_FLASH_BWD_DKV_DIRECT",
                    "1: the wgmma backward writes dK and dV into the caller's tensors, 0: through FP32 "
                    "accumulators and an unpad pass",
                    true);
}

bool resolved_dkv_direct(const BackwardParams& p) {
  // The 64 x 64 kernel adds dQ by TMA whatever dq_tma says; the 128 x 128 one has the epilogue in
  // its TMA kernels only.
  const bool tma = (p.block_q == 64 && p.block_k == 64) || resolved_dq_tma(p) == 1;
  return p.D == 64 && backward_dkv_direct() && select_backward_kernel(p) == BackwardKernel::Wgmma && tma &&
         !p.res_sums;
}

int resolved_dq_tma(const BackwardParams& p) {
  OCTET_CHECK(p.dq_tma >= -1 && p.dq_tma <= 1,
              "flash attention backward: dq_tma must be -1 (OCTET_FLASH_BWD_DQ_TMA), 0 or 1, got " +
                  std::to_string(p.dq_tma));
  return p.dq_tma >= 0 ? p.dq_tma : int(backward_dq_tma());
}

int resolved_sdp_overlap(const BackwardParams& p) {
  OCTET_CHECK(p.sdp_overlap >= -1 && p.sdp_overlap <= 1,
              "flash attention backward: sdp_overlap must be -1 (OCTET_FLASH_BWD_SDP_OVERLAP), 0 or 1, got " +
                  std::to_string(p.sdp_overlap));
  const int v = p.sdp_overlap >= 0 ? p.sdp_overlap : int(backward_sdp_overlap());
  return p.D == 64 ? v : 0;  // the overlap exists at head_dim 64 only (flash_bwd_sm90.cu)
}

BackwardKernel select_backward_kernel(const BackwardParams& p) {
  int dev = 0, major = 0, minor = 0;
  OCTET_CUDA_CHECK(cudaGetDevice(&dev));
  OCTET_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  OCTET_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  const bool sm90 = major == 9 && minor == 0;
  BackwardKernel k = p.bwd_kernel;
  if (k == BackwardKernel::Auto) {
    const char* env = std::getenv("OCTET_FLASH_BACKWARD");
    const std::string v = env ? env : "";
    if (v == backward_kernel_name(BackwardKernel::MmaSync))
      k = BackwardKernel::MmaSync;
    else if (v == backward_kernel_name(BackwardKernel::Wgmma))
      k = BackwardKernel::Wgmma;
    else
      OCTET_CHECK(v.empty(), "OCTET_FLASH_BACKWARD must be mma_sync or wgmma (or unset), got '" + v + "'");
  }
  if (k == BackwardKernel::Auto) k = sm90 ? BackwardKernel::Wgmma : BackwardKernel::MmaSync;
  OCTET_CHECK(k != BackwardKernel::Wgmma || sm90,
              "flash attention backward: the wgmma kernels need an sm_90 GPU (Hopper), this is sm_" +
                  std::to_string(10 * major + minor) + " (use OCTET_FLASH_BACKWARD=mma_sync)");
  return k == BackwardKernel::Wgmma && bwd_sm90_supported(p) ? BackwardKernel::Wgmma
                                                             : BackwardKernel::MmaSync;
}

void run_delta(const BackwardParams& p, cudaStream_t stream) {
  check_dims(p);
  OCTET_CHECK(p.delta && p.row_factor && p.row_sum,
              "flash attention backward: a null delta, row_factor or row_sum pointer");
  if (!p.matched) {
    OCTET_CHECK(
        (p.o != nullptr) != (p.o_bf16 != nullptr) && (p.d_o_f32 != nullptr) != (p.d_o_bf16 != nullptr),
        "flash attention backward: the stale delta needs one of o / o_bf16 and one of "
        "d_o_f32 / d_o_bf16");
    bwd_stale_delta_launch(p, stream);
    return;
  }
  check_padded(p);
  OCTET_CHECK(p.q && p.k && p.v && p.d_o && p.q_scale_inv && p.k_scale_inv && p.v_scale_inv &&
                  p.do_scale_inv && p.row_max,
              "flash attention backward: a null operand, scale or row_max pointer");
  OCTET_CHECK(aligned(p.q, 16) && aligned(p.k, 16) && aligned(p.v, 16) && aligned(p.d_o, 16),
              "flash attention backward: the Q, K, V, dO code buffers must be 16-byte aligned");
  BackwardParams q = p;  // the kernels read the head group resolved
  q.head_group = resolved_head_group(p.head_group);
  // The matched pre-pass runs the main kernel's flavor: its P and dP have the main kernel's bits.
  if (select_backward_kernel(p) == BackwardKernel::Wgmma) {
    bwd_delta_sm90_launch(q, stream);
  } else
    bwd_delta_sm89_launch(q, stream);
}

void run_backward_main(const BackwardParams& p, cudaStream_t stream) {
  check_dims(p);
  check_padded(p);
  OCTET_CHECK(p.q && p.q_t && p.k && p.k_t && p.v && p.d_o && p.dv_o_t && p.q_scale_inv && p.k_scale_inv &&
                  p.v_scale_inv && p.do_scale_inv && p.dvo_scale_inv && p.row_max && p.row_sum && p.delta,
              "flash attention backward: a null operand, scale or row statistics pointer");
  const bool direct = p.dk_out || p.dv_out;  // dK, dV into the caller's tensors (the wgmma epilogue)
  OCTET_CHECK(p.dq_acc && (direct ? p.dk_out && p.dv_out : p.dk_acc && p.dv_acc),
              "flash attention backward: a null output pointer (dq_acc, and dk_acc, dv_acc or both of "
              "dk_out, dv_out)");
  OCTET_CHECK(aligned(p.dq_acc, 16) && (direct || aligned(p.dv_acc, 8)),
              "flash attention backward: dv_acc must be 8-byte aligned (float2 stores) and dq_acc "
              "16-byte aligned (float4 atomics)");
  OCTET_CHECK(!direct || (aligned(p.dk_out, p.dkv_bf16 ? 4 : 8) && aligned(p.dv_out, p.dkv_bf16 ? 4 : 8)),
              "flash attention backward: dk_out, dv_out must be 4-byte (BF16) or 8-byte (F32) aligned");
  OCTET_CHECK(aligned(p.q, 16) && aligned(p.q_t, 16) && aligned(p.k, 16) && aligned(p.k_t, 16) &&
                  aligned(p.v, 16) && aligned(p.d_o, 16) && aligned(p.dv_o_t, 16),
              "flash attention backward: the code buffers must be 16-byte aligned");
  const BackwardKernel kernel = select_backward_kernel(p);
  const bool wgmma = kernel == BackwardKernel::Wgmma;
  BackwardParams q = p;  // the kernels read the work order resolved (before anything is queued)
  q.head_group = resolved_head_group(p.head_group);
  q.key_head_group = resolved_key_head_group(p, kernel);
  q.dq_tma = resolved_dq_tma(p);
  q.sdp_overlap = resolved_sdp_overlap(p);
  OCTET_CHECK(!direct || wgmma,  // which wgmma kernels take them: bwd_sm90_launch
              "flash attention backward: dk_out, dv_out need the wgmma kernel (sm_90, block_q = block_k = "
              "128 or 64, not deterministic)");
  OCTET_CHECK(!p.ds_row_sum || wgmma,
              "flash attention backward: the dQ row-sum projection needs the wgmma kernel (sm_90, "
              "head_dim 64 or 128, block_q = block_k = 128 or 64, not deterministic)");
  OCTET_CUDA_CHECK(cudaMemsetAsync(p.dq_acc, 0, size_t(p.B * p.H * p.Tq_p * p.D) * sizeof(float), stream));
  if (p.res_sums)
    OCTET_CUDA_CHECK(cudaMemsetAsync(p.res_sums, 0, size_t(2 * p.B * p.H * p.Tq) * sizeof(double), stream));
  if (p.ds_row_sum)
    OCTET_CUDA_CHECK(cudaMemsetAsync(p.ds_row_sum, 0, size_t(p.B * p.H * p.Tq) * sizeof(float), stream));
  if (wgmma) {
    bwd_sm90_launch(q, stream);
    return;
  }
  bwd_sm89_launch(q, stream);
  if (p.deterministic) bwd_dq_sm89_launch(q, stream);  // after the main kernel (stream order)
}

void run_backward(BackwardParams p, const BackwardIo& io, cudaStream_t stream) {
  OCTET_CHECK(io.d_o && io.dq && io.dk && io.dv && io.amax && io.d_o_rows && io.do_scale_inv && io.dv_o_t &&
                  io.dvo_scale_inv && p.row_sum && p.row_factor,
              "flash attention backward: a null dO, gradient, statistics or scratch pointer");
  OCTET_CHECK(!io.residual || (p.res_sums && io.residual_rows),
              "flash attention backward: the row residual needs res_sums and residual_rows");
  // dO's glue (two launches, two reads of dO): dÔ's rows (the products dP = dÔV̂ᵀ) and dV's operand
  // dO_i / l_i as a group transpose with its own per-tensor scale (P without underflow: P̃ is
  // exp(S − m)); the row factor 1/l_i comes from the forward's l (run_delta writes the same bits).
  PackArgs rows;
  rows.x = io.d_o;
  rows.x_dtype = io.d_o_dtype;
  rows.tokens_major = p.tokens_major;
  rows.B = p.B, rows.heads = p.H, rows.T = p.Tq, rows.T_p = p.Tq_p, rows.D = p.D, rows.rep = p.H / p.G;
  rows.format = p.do_format;
  rows.fp8 = true;
  PackArgs trans = rows;
  rows.scale_inv = io.do_scale_inv;
  rows.row_kind = PackKind::Fp8Code;
  rows.row = io.d_o_rows;
  trans.row_factor = p.row_factor;
  trans.scale_inv = io.dvo_scale_inv;
  trans.trans_kind = PackKind::Fp8Code;
  trans.trans = io.dv_o_t;
  pack_d_o_launch(rows, trans, p.row_sum, p.row_factor, io.amax, stream);
  p.d_o = io.d_o_rows;
  p.do_scale_inv = io.do_scale_inv;
  p.dv_o_t = io.dv_o_t;
  p.dvo_scale_inv = io.dvo_scale_inv;
  run_delta(p, stream);
  // dK, dV from the wgmma kernel's epilogue (the same bits as the unpad passes below) when asked.
  const bool kv_bf16 = io.dk_dtype == DType::BF16;
  const bool direct = resolved_dkv_direct(p) && io.dk_dtype == io.dv_dtype &&
                      (kv_bf16 || io.dk_dtype == DType::F32) && aligned(io.dk, kv_bf16 ? 4 : 8) &&
                      aligned(io.dv, kv_bf16 ? 4 : 8);
  if (direct) {
    p.dk_out = io.dk;
    p.dv_out = io.dv;
    p.dkv_bf16 = kv_bf16;
  }
  run_backward_main(p, stream);
  if (p.ds_row_sum) bwd_dq_projection_launch(p, stream);
  // Unpadded into the caller's F32 or BF16 gradients, rounded once: dQ × sk and dK × sq with one
  // scale per tensor (the kernels summed codes); per-block scales were applied per tile.
  const float* sk = p.qkv_head_block ? nullptr : p.k_scale_inv;
  const float* sq = p.qkv_head_block ? nullptr : p.q_scale_inv;
  const bool tm = p.tokens_major;
  unpad_scale_launch(p.dq_acc, io.dq, io.dq_dtype, p.B * p.H, p.Tq, p.Tq_p, p.D, 1.0f, sk, nullptr, stream,
                     tm, p.H);
  if (!direct) {
    unpad_scale_launch(p.dk_acc, io.dk, io.dk_dtype, p.B * p.G, p.Tk, p.Tk_p, p.D, 1.0f, sq, nullptr, stream,
                       tm, p.G);
    unpad_scale_launch(p.dv_acc, io.dv, io.dv_dtype, p.B * p.G, p.Tk, p.Tk_p, p.D, 1.0f, nullptr, nullptr,
                       stream, tm, p.G);
  }
  if (!io.residual) return;
  const int64_t n_rows = p.B * p.H * p.Tq;
  bwd_residual_finish_launch(p.res_sums, n_rows, io.residual_rows, stream);
  residual_accumulate_launch(io.residual_rows, n_rows, io.residual, stream);
}

}  // namespace octet::cuda::flash
