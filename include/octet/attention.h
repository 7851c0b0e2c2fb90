// octet/attention.h — the CPU reference of multi-head attention, forward and backward, in FP64,
// BF16 and FP8, with the stale or the matched softmax delta (Delta-Matching).
//
// Math (../DESIGN.md §3): S = τ Q̂K̂ᵀ + mask, L = logsumexp_j S, P = exp(S − L), O = P̃V̂.
// Backward: dV = P̃ᵀdÔ, dP = dÔV̂ᵀ, dS = P ∘ (dP − D), dQ = τ dŜK̂, dK = τ dŜᵀQ̂, with
//   stale   D_i = Σ_c dO_ic O_ic from the forward's stored O (FlashAttention-2/3, cuDNN), or
//   matched D_i = Σ_j P_ij dP_ij from this backward's own P and dP ("Delta-Matching: Closing the
//           Final Gap of Native 8-bit Training for LLMs", Tang et al., arXiv 2609.37852).
// Backward structure after FlashAttention-2 (Dao, arXiv 2307.08691).
//
// Layouts (row-major, contiguous FP32 unless noted):
//   q, o, dq, do  [batch, n_heads,    seq_q, head_dim]
//   k, v, dk, dv  [batch, n_kv_heads, seq_k, head_dim]   (GQA: query head h uses KV head
//                                                         h / (n_heads / n_kv_heads))
//   lse           [batch, n_heads, seq_q], natural log
// Causal masking is aligned to the bottom-right: query i sees keys j <= i + seq_k − seq_q.
// A query row that sees no key gets O = 0, LSE = −inf, dQ = 0 (never NaN).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "octet/fp8.h"

namespace octet {

enum class AttnPrecision { FP64, BF16, FP8 };
enum class DeltaMode { Stale, Matched };
/// whole: S materialized per row; tiled: online softmax over key blocks of block_k (what a fused
/// kernel does, P quantized per tile from exp(S − running max)).
enum class AttnForm { Whole, Tiled };
/// FP8 scaling of Q, K, V: one scale per tensor, or one per (batch, head, 128-token block).
enum class QkvScaling { Tensor, HeadBlock };

AttnPrecision parse_attn_precision(const std::string& s);  ///< "fp64" | "bf16" | "fp8"
DeltaMode parse_delta_mode(const std::string& s);          ///< "stale" | "matched"
AttnForm parse_attn_form(const std::string& s);            ///< "whole" | "tiled"
std::string to_string(AttnPrecision p);
std::string to_string(DeltaMode d);
std::string to_string(AttnForm f);

struct AttentionShape {
  int64_t batch = 1, n_heads = 1, n_kv_heads = 1, seq_q = 1, seq_k = 1, head_dim = 64;
  bool causal = false;
  float softmax_scale = 0.0f;  ///< τ; 0 means 1/sqrt(head_dim)
  float tau() const;
  /// Throws octet::Error naming the problem: a size < 1, or n_kv_heads not dividing n_heads.
  void validate() const;
};

struct AttentionConfig {
  AttnPrecision precision = AttnPrecision::FP8;
  DeltaMode delta = DeltaMode::Matched;
  AttnForm form = AttnForm::Whole;
  QkvScaling qkv_scaling = QkvScaling::Tensor;
  Format do_format = Format::E5M2;  ///< dO: E5M2 (hybrid) or E4M3
  Format ds_format = Format::E5M2;  ///< dS
  int64_t block_k = 128;            ///< tiled form: key block size Bc
  float p_scale = 256.0f;           ///< static power-of-two scale of P before the E4M3 cast
};

/// What the forward saves for the backward (the quantized-dequantized operands, O and LSE).
struct AttentionSaved {
  AttentionShape shape;
  AttentionConfig config;
  std::vector<float> q_hat, k_hat, v_hat;  ///< values the tensor cores multiply
  std::vector<float> o;                    ///< the stored forward output (BF16-rounded in fp8/bf16)
  std::vector<float> lse;
};

/// Softmax-gradient diagnostics of one backward: r_i = Σ_j dS_ij (before dS is quantized) relative
/// to Σ_j |dS_ij|; rows with Σ|dS| = 0 count as 0.
struct AttentionStats {
  double row_residual_max = 0.0;
  double row_residual_mean = 0.0;
  std::vector<double> row_residual;  ///< per (batch, head, query) row, filled if requested
};

/// Forward. o and lse as laid out above; `saved` (may be null) receives what backward needs.
/// Throws octet::Error on an invalid shape.
void attention_forward(const AttentionShape& shape, const AttentionConfig& config, const float* q,
                       const float* k, const float* v, float* o, float* lse,
                       AttentionSaved* saved);

/// Backward from dO. dq, dk, dv are written (not accumulated). stats may be null; if
/// want_rows, stats->row_residual is filled.
void attention_backward(const AttentionSaved& saved, const float* d_o, float* dq, float* dk,
                        float* dv, AttentionStats* stats, bool want_rows = false);

/// The FP64 oracle: whole-row attention in double, same layouts.
void attention_forward_fp64(const AttentionShape& shape, const double* q, const double* k,
                            const double* v, double* o, double* lse);
void attention_backward_fp64(const AttentionShape& shape, const double* q, const double* k,
                             const double* v, const double* o, const double* lse,
                             const double* d_o, double* dq, double* dk, double* dv);

}  // namespace octet
