// src/cuda/attention/attention_base.h — what the CUDA backend's two own attention forms share
// (unfused/unfused.cpp: the cuBLASLt form that materializes S, P, dS; flash/flash_attention.cpp:
// the flash FP8 kernels): the boundary checks, the saved state of a forward, and the operand glue
// that quantizes and packs Q, K, V, dO (glue/glue.h). cuDNN's BF16 SDPA (cudnn/) has its own.
// The CPU twin of both is src/cpu/attention*.cpp; docs/attention.md.
//
// Saved state (docs/design.md §"Saved state"): the forward returns Q̂, K̂, V̂ (row copies and group
// transposes), their scales and the softmax statistics (m_i, l_i) per row in a SavedAttention, in
// memory of the backend or in one block of the caller's (forward_to); O and the LSE are the
// caller's tensors. The backward reads only those and its own scratch, so any
// number of forwards may be outstanding. q, k, v, o, dO, dQ, dK, dV are F32 or BF16 each, read
// and written as they are, in the shape's layout (heads- or tokens-major, act_layout.h: the glue
// reads either, the kernels write either; no transposing copy).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "cuda/attention/glue/glue.h"
#include "cuda/runtime/buffer.h"
#include "cuda/runtime/cuda_backend.h"
#include "cuda/runtime/saved_placement.h"
#include "octet/attention.h"
#include "octet/backend.h"

namespace octet::cuda {

// cuBLASLt refuses (NOT_SUPPORTED) scale pointers that are not 16-byte aligned: one per 128 B.
inline constexpr int64_t kScaleStride = 32;

/// What a forward keeps for its backward: the quantized (FP8) or rounded (BF16) Q, K, V and the
/// softmax statistics of every query row.
struct AttnState final : SavedState {
  const void* owner = nullptr;    ///< the attention that made it (validation only)
  Buffer q_rows, k_rows, v_rows;  ///< [B, heads, T_p, D]: FP8 codes or BF16
  /// group transposes: BF16 of code (FP8) or of value (BF16); FP8 codes for the flash backward
  Buffer q_t, k_t;
  /// F32 1/scale of Q̂, K̂, V̂: one each, or one per (b, head, 128-token block)
  Buffer q_scale_inv, k_scale_inv, v_scale_inv;
  Buffer softmax;    ///< F32 [2, B·H·Tq]: m_i = max_j S_ij, then l_i = Σ_j exp(S_ij − m_i)
  int64_t rows = 0;  ///< B·H·Tq
  float* sq() const { return q_scale_inv.tensor().f32(); }
  float* sk() const { return k_scale_inv.tensor().f32(); }
  float* sv() const { return v_scale_inv.tensor().f32(); }
  float* row_max() const { return softmax.tensor().f32(); }
  float* row_sum() const { return softmax.tensor().f32() + rows; }
};

/// The shared part of the unfused and flash attentions. forward() checks the tensors, packs Q, K,
/// V into a new AttnState and calls forward_impl; backward() checks and calls backward_impl, which
/// packs dO (the flash form with dV's operand, glue.h pack_d_o_launch). Every error is an
/// octet::Error naming the argument.
class AttentionBase : public Attention {
 public:
  SavedAttention forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                         const Tensor& lse) final;
  /// The AttnState's buffers, one after another (saved_placement.h), each rounded up to 256 bytes.
  int64_t saved_bytes() const final { return saved_bytes_; }
  /// One term per buffer, in place_state's order: the codes of Q̂, K̂, V̂ [B, heads, T_p, D], the
  /// group transposes of Q̂ and K̂, the 1/scales of Q̂, K̂, V̂ (one or one per block), the softmax
  /// statistics [2, B·H·Tq]. place_state checks every placement against them.
  std::vector<AttnSizeTerm> saved_size_terms() const final { return terms_; }
  SavedAttention forward_to(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                            const Tensor& lse, const Tensor& memory) final;
  SavedAttention saved_from(const Tensor& o, const Tensor& lse, const Tensor& memory) const final;
  void backward(const SavedAttention& saved, const Tensor& d_o, const Tensor& dq, const Tensor& dk,
                const Tensor& dv, const Tensor& residual) final;

 protected:
  /// trans_fp8: the group transposes of Q̂ and K̂ hold FP8 codes (the flash kernels) rather than
  /// BF16 (the unfused BF16 GEMMs of dQ and dK).
  AttentionBase(const AttentionShape& shape, const AttentionConfig& cfg, CudaBackend& backend,
                bool trans_fp8);

  virtual void forward_impl(AttnState& st, const Tensor& o, const Tensor& lse) = 0;
  virtual void backward_impl(const AttnState& st, const SavedAttention& saved, const Tensor& d_o,
                             const Tensor& dq, const Tensor& dk, const Tensor& dv,
                             const Tensor& residual) = 0;

  /// x (F32 or BF16, as given) -> its amax (FP8; per tensor, or per (b, head, block of
  /// scale_block tokens)) and its packed row / transposed copies (glue.h pack_launch).
  void pack(const Tensor& x, int64_t heads, int64_t T, int64_t T_p, int64_t rep, Format f, float* scale_inv,
            PackKind row_kind, void* row, PackKind trans_kind, void* trans, const float* row_factor = nullptr,
            int64_t scale_block = 0);
  /// The PackArgs of that call, for pack_quantized_many_launch (amax_bits left null).
  PackArgs pack_args(const Tensor& x, int64_t heads, int64_t T, int64_t T_p, int64_t rep, Format f,
                     float* scale_inv, PackKind row_kind, void* row, PackKind trans_kind, void* trans,
                     const float* row_factor, int64_t scale_block) const;

  float* sdo() { return scales_.get() + 0 * kScaleStride; }    ///< dÔ's 1/scale
  float* p_inv() { return scales_.get() + 1 * kScaleStride; }  ///< 1/p_scale
  float* sdv() { return scales_.get() + 2 * kScaleStride; }    ///< (dO/l)~'s 1/scale
  PackKind row_kind() const { return fp8_ ? PackKind::Fp8Code : PackKind::Bf16OfValue; }
  /// Elements of the padded Q-side [B, H, Tq_p, D] and K-side [B, G, Tk_p, D] copies.
  int64_t nq() const { return d_.B * d_.H * d_.Tq_p * d_.D; }
  int64_t nk() const { return d_.B * d_.G * d_.Tk_p * d_.D; }

  AttentionShape shape_;
  AttentionConfig cfg_;
  CudaBackend& be_;
  cudaStream_t s_;
  AttnDims d_{};
  bool fp8_ = true;
  bool trans_fp8_ = false;
  bool head_block_ = false;  ///< QkvScaling::HeadBlock: Q, K, V scales per (b, head, 128 tokens)
  int64_t eb_ = 1;           ///< bytes per packed element: 1 (FP8) or 2 (BF16)
  // Scratch, reused in stream order by every call (nothing here outlives one call's use).
  DeviceBuffer<float> scales_;
  DeviceBuffer<unsigned> amax_;
  DeviceBuffer<uint8_t> v_t_, do_rows_;
  std::vector<AttnSizeTerm> terms_;  ///< saved_size_terms(), made once by the constructor
  int64_t saved_bytes_ = 0;          ///< attention_saved_bytes(terms_, shape_)

 private:
  /// saved_size_terms() from the config (the constructor's).
  std::vector<AttnSizeTerm> make_saved_terms() const;
  /// A new AttnState (owner: this) whose buffers `at` places (checked against saved_size_terms());
  /// nothing written.
  std::unique_ptr<AttnState> place_state(SavedPlacement& at) const;
  SavedAttention run_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                             const Tensor& lse, SavedPlacement at);
  // Per-block scale counts: B·H·⌈Tq/128⌉ of Q, B·G·⌈Tk/128⌉ of K and V.
  int64_t q_scales() const;
  int64_t k_scales() const;
};

/// The unfused form (unfused/unfused.cpp): precision fp8 or bf16, QkvScaling::Tensor, head_dim a
/// multiple of 16. Throws octet::Error on a config it cannot run.
std::unique_ptr<Attention> make_unfused_attention(const AttentionShape& shape, const AttentionConfig& cfg,
                                                  CudaBackend& backend);
/// The flash form (flash/flash_attention.cpp): precision fp8, head_dim and tiles 64 or 128.
/// Throws octet::Error on a config it cannot run.
std::unique_ptr<Attention> make_flash_attention(const AttentionShape& shape, const AttentionConfig& cfg,
                                                CudaBackend& backend);

}  // namespace octet::cuda
