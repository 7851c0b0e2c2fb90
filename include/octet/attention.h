// octet/attention.h — the CPU reference of multi-head attention, forward and backward, in FP64,
// BF16 and FP8, with the stale or the matched softmax delta (Delta-Matching).
//
// Math (docs/design.md; docs/delta-matching.md): S = τ Q̂K̂ᵀ + mask, m_i = max_j S_ij,
// L = logsumexp_j S, P = exp(S − L). "P without underflow": the rounded P̃ = round(exp(S − m)) is
// the row-max-relative value (<= 1, its largest entry exactly 1), never exp(S − L), which in a
// long flat row falls below E4M3's smallest subnormal (a uniform row over 2^18 keys would round
// to all zeros); the row factor 1/l_i is moved elsewhere. Forward:
// O = (Σ_j P̃_ij V̂_j) / Σ_j P̃_ij, normalized by the row sum of the same rounded P̃ that
// multiplies V (so V = 1 gives O = 1 exactly, at any length). The forward saves the softmax
// statistics as the pair (m_i, l_i), l_i = Σ_j exp(S_ij − m_i) the unrounded sum in T; L = m + log l
// is an output only. Backward: P = exp(S − m) / l, which sums to 1 to the rounding of a sum at any
// logit size (exp(S − L) only to one ulp of L, ~8e-6 in FP32 when |L| ~ 100, which the matched
// row residual shows), dP = dÔV̂ᵀ, dS = P ∘ (dP − D), dQ = τ dŜK̂, dK = τ dŜᵀQ̂, and
// dV_j = Σ_i P̃_ij (dO_i / l_i)~ with (dO_i / l_i)~ quantized after the row factor is applied (its
// own per-tensor scale), the delta D (octet/delta_rule.h, the one rule of CPU and GPU):
//   stale   D_i = Σ_c dO_ic O_ic from the forward's stored O (FlashAttention-2/3, cuDNN), or
//   matched D_i = Σ_j P_ij dP_ij from this backward's own P and dP ("Delta-Matching: Closing the
//           Final Gap of Native 8-bit Training for LLMs", Tang et al., arXiv 2609.37852).
// Backward structure after FlashAttention-2 (Dao, arXiv 2307.08691).
// Operand rounding per precision and the measured stale/matched gap: docs/delta-matching.md.
//
// Layouts (row-major, contiguous FP32 unless noted; the reference functions of this header take
// heads-major arrays, the backends' Attention objects either layout: AttnLayout):
//   q, o, dq, do  [batch, n_heads,    seq_q, head_dim]
//   k, v, dk, dv  [batch, n_kv_heads, seq_k, head_dim]   (GQA: query head h uses KV head
//                                                         h / (n_heads / n_kv_heads))
//   lse           [batch, n_heads, seq_q], natural log (in either layout)
// Causal masking is aligned to the bottom-right: query i sees keys j <= i + seq_k − seq_q.
// A query row that sees no key gets O = 0, LSE = −inf, dQ = 0 (never NaN).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "octet/delta_rule.h"
#include "octet/fp8.h"
#include "octet/tensor.h"

namespace octet {

enum class AttnPrecision { FP64, BF16, FP8 };
enum class DeltaMode { Stale, Matched };
/// whole: S materialized per row; flash: online softmax over key blocks of block_k (what a flash
/// kernel does, P quantized per tile from exp(S − running max)).
enum class AttnForm { Whole, Flash };
/// FP8 scaling of Q, K, V: one scale per tensor, or one per (batch, head, 128-token block).
enum class QkvScaling { Tensor, HeadBlock };
/// Tokens per scale block of QkvScaling::HeadBlock (blocks start at token 0 of each head).
inline constexpr int64_t kQkvScaleBlock = 128;

/// How q, k, v, o and their gradients lie in memory (the LSE and the softmax statistics are
/// [batch, heads, seq] in both). HeadsMajor: [batch, heads, seq, head_dim], each head's rows
/// contiguous. TokensMajor: [batch, seq, heads, head_dim], a projection's output [batch, seq,
/// heads·head_dim] as it is (FlashAttention's and PyTorch's "bshd"): an Attention of this layout
/// reads and writes it with no transposing copy.
enum class AttnLayout { HeadsMajor, TokensMajor };
/// The axes of a rank-4 per-head activation in `layout`: heads at 1 and seq at 2 heads-major, the
/// reverse tokens-major; layout_dims names them for errors ("[B, H, T, D]" | "[B, T, H, D]").
inline int heads_axis(AttnLayout l) { return l == AttnLayout::TokensMajor ? 2 : 1; }
inline int seq_axis(AttnLayout l) { return l == AttnLayout::TokensMajor ? 1 : 2; }
inline const char* layout_dims(AttnLayout l) {
  return l == AttnLayout::TokensMajor ? "[B, T, H, D]" : "[B, H, T, D]";
}

AttnPrecision parse_attn_precision(const std::string& s);  ///< "fp64" | "bf16" | "fp8"
DeltaMode parse_delta_mode(const std::string& s);          ///< "stale" | "matched"
AttnForm parse_attn_form(const std::string& s);            ///< "whole" | "flash"
std::string to_string(AttnPrecision p);
std::string to_string(DeltaMode d);
std::string to_string(AttnForm f);

struct AttentionShape {
  int64_t batch = 1, n_heads = 1, n_kv_heads = 1, seq_q = 1, seq_k = 1, head_dim = 64;
  bool causal = false;
  float softmax_scale = 0.0f;                  ///< τ; 0 means 1/sqrt(head_dim)
  AttnLayout layout = AttnLayout::HeadsMajor;  ///< the backends' Attention: q, k, v, o, dq, dk, dv, dO
  float tau() const;
  /// The shapes of q (o, dq, dO) and of k (v, dk, dv) in `layout`: [batch, n_heads, seq_q,
  /// head_dim] heads-major, [batch, seq_q, n_heads, head_dim] tokens-major (k: n_kv_heads, seq_k).
  Shape q_shape() const;
  Shape kv_shape() const;
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
  int64_t block_k = 128;            ///< flash form: key block size Bc
  /// Query block Bq: the flash form's query tile. In both forms dS is quantized with one
  /// power-of-two scale per (block_q x block_k) tile of one (batch, head), the granularity a fused
  /// backward can apply to both dQ = dŜK̂ and dK = dŜᵀQ̂ (the scale is constant over each MMA).
  int64_t block_q = 128;
  float p_scale = 256.0f;  ///< static power-of-two scale of P before the E4M3 cast
  /// dQ row-sum projection (docs/delta-matching.md §"The dQ row-sum projection"; beyond the
  /// paper): dQ_i −= τ r̂_i k̄ with r̂_i = Σ_j dŜ_ij the row sum of the rounded dS and k̄ the mean
  /// of K̂ over the Tk keys of the query head's (batch, KV head). Exact math leaves dQ unchanged
  /// (dQ_i = τ Σ_j dŜ_ij (K̂_j − k̄) once Σ_j dS_ij = 0, the matched delta); it removes the error
  /// that rounding dS multiplies by the keys' common component. Off by default. Where it runs:
  /// the CPU backend (both forms, every precision); the CUDA backend only in the fused FP8 kernels
  /// (form 'flash', precision fp8) with the wgmma backward (an sm_90 GPU, head_dim 64 or 128,
  /// block_q = block_k = 128 or 64, OCTET_FLASH_BACKWARD unset or wgmma); any other CUDA config is refused
  /// by make_attention with an octet::Error.
  bool dq_projection = false;
  /// Throws octet::Error naming the problem: a block size < 1, or a p_scale that breaks
  /// validate_p_scale's rule.
  void validate() const;
};

/// The one p_scale rule (docs/design.md §"Where every GEMM operand is quantized"): P ∈ [0, 1] is cast to E4M3
/// as P·p_scale with a static power-of-two p_scale (exact to undo), so p_scale must be a power of two with
/// 1·p_scale ≤ 448 (E4M3's largest finite value): 1 ≤ p_scale ≤ 256. (Below 1 the scale only moves
/// P toward E4M3's subnormals.) Throws octet::Error "<name> must be a power of two in [1, 256] ...
/// (got x)"; `name` is how the caller's user spells it (e.g. "precision.p_scale", "--p-scale").
void validate_p_scale(float p_scale, const std::string& name = "attention p_scale");

/// A softmax scale τ given in double precision (a command line's, a caller's) as the FP32
/// AttentionShape::softmax_scale holds: 0 (the default 1/sqrt(head_dim)) or a number in FP32's
/// normal range [2^-126, FLT_MAX]. Anything else — negative, NaN, infinite, or a value that FP32
/// would round to 0 (the default!), a subnormal or infinity — throws octet::Error "<name> must be
/// 0 ... (got x)".
float softmax_scale_fp32(double scale, const std::string& name = "softmax scale");

/// The sizes the flash FP8 attention kernels of the CUDA backend (src/cuda/attention/flash/, the twin of the
/// flash form) implement: head_dim, and each tile (block_q, block_k), 64 or 128.
inline bool flash_attention_size_supported(int64_t n) { return n == 64 || n == 128; }

/// What the forward saves for the backward (the quantized-dequantized operands, O, the softmax
/// statistics (m, l) and the LSE).
struct AttentionSaved {
  AttentionShape shape;
  AttentionConfig config;
  std::vector<float> q_hat, k_hat, v_hat;  ///< values the tensor cores multiply
  std::vector<float> o;                    ///< the stored forward output (BF16-rounded in fp8/bf16)
  std::vector<float> lse;                  ///< [B, H, Tq], the forward's output (not read by backward)
  /// The softmax statistics [B, H, Tq] the backward normalizes with, P = exp(S − m) / l, each
  /// exactly as the forward computed it (FP32 values in fp8/bf16, FP64 in fp64):
  /// row_max m_i = max_j S_ij (−inf in a row that sees no key): dV's P̃ is rounded from exp(S − m);
  /// row_sum l_i = Σ_j exp(S_ij − m_i) as the forward summed it (the flash form: its online
  /// running sum; 0 in a row that sees no key), >= 1; dO_i is scaled by the row factor 1/l_i.
  std::vector<double> row_max, row_sum;
  /// FP64 precision only: O unrounded, so that the stale delta dO·O is exact to FP64 rounding (an
  /// FP32 copy would limit it to ~1e-7). Empty otherwise; if empty, the backward uses `o`.
  std::vector<double> o_fp64;
};

/// Softmax-gradient diagnostics of one backward, per query row (dS before it is quantized):
///   r_i = |Σ_j dS_ij| / (Σ_j P_ij (|dP_ij| + |D_i|) + n_i·min_normal)   (0 in a row without keys),
/// with the FP32 P, the dP and the D (stale or matched) that produce dS = P ∘ (dP − D); n_i is the
/// number of keys row i sees and min_normal the working type's smallest normal number (FP32: 2^-126;
/// FP64 precision: 2^-1022). The floor matters only in rows whose every term has underflowed (a
/// whole row gradient ~1e-45): below min_normal FP32 keeps absolute, not relative, precision, and
/// no delta rule can cancel what it cannot represent (docs/delta-matching.md). The
/// denominator is the magnitude of the terms P_ij dP_ij and P_ij D_i that the row sum cancels, so
/// r_i is FP32 rounding (~1e-7) with the matched delta in every row, and ≈ |ε_i| / (Σ_j P_ij |dP_ij|
/// + |D_i|), the relative error of the delta, with the stale one. (Dividing by Σ_j |dS_ij| instead
/// is degenerate: in rows whose exact dS is 0 — a causal row that sees one key, one-hot or sink
/// rows — Σ_j |dS_ij| is itself rounding noise and the ratio is ~1 whatever the delta.)
/// With want_rows the backward also returns the two factors of the bias that a non-zero row sum puts
/// into dQ (dQ_i gains τ r_i k̄_i, along the attention-weighted mean key;
/// docs/delta-matching.md §"The dQ bias along the mean key"): the signed row sum r_i = Σ_j dS_ij
/// (before dS is quantized, as the residual's numerator) and k̄_i = Σ_j P_ij K̂_j (the backward's
/// FP32 P). Computing k̄ costs one more P·K̂ product, so only on request.
struct AttentionStats {
  double row_residual_max = 0.0;
  double row_residual_mean = 0.0;
  std::vector<double> row_residual;  ///< per (batch, head, query) row, filled if requested
  std::vector<double> row_sum;       ///< r_i per (batch, head, query) row [B,H,Tq], if requested
  std::vector<double> mean_key;      ///< k̄_i [B,H,Tq,D] (0 in a row without keys), if requested
};

/// Forward. o and lse as laid out above; `saved` (may be null) receives what backward needs.
/// Throws octet::Error on an invalid shape or config (block sizes < 1, p_scale not a power of two
/// in (0, 448]). The double overload returns the same results unrounded to FP32: in the FP64
/// precision, the FP64 values (what the oracle is compared with to ~1e-15); otherwise the FP32
/// values exactly.
void attention_forward(const AttentionShape& shape, const AttentionConfig& config, const float* q,
                       const float* k, const float* v, float* o, float* lse, AttentionSaved* saved);
void attention_forward(const AttentionShape& shape, const AttentionConfig& config, const float* q,
                       const float* k, const float* v, double* o, double* lse, AttentionSaved* saved);

/// Backward from dO. dq, dk, dv are written (not accumulated). stats may be null; if want_rows,
/// stats->row_residual, row_sum and mean_key are filled. Throws octet::Error if `saved` does not
/// hold the tensors of its shape. The double overload as attention_forward's.
void attention_backward(const AttentionSaved& saved, const float* d_o, float* dq, float* dk, float* dv,
                        AttentionStats* stats, bool want_rows = false);
void attention_backward(const AttentionSaved& saved, const float* d_o, double* dq, double* dk, double* dv,
                        AttentionStats* stats, bool want_rows = false);

/// Throws octet::Error unless shape.layout is HeadsMajor (the reference functions above and below
/// read heads-major arrays; a backend's Attention moves a tokens-major call's tensors itself),
/// naming `what`.
void check_heads_major(const AttentionShape& shape, const char* what);

/// dst = src moved between the two layouts of one activation of `heads` heads (AttnLayout):
/// heads-major [batch, heads, seq, head_dim] into tokens-major [batch, seq, heads, head_dim] when
/// to_tokens_major, else the reverse. src and dst must not overlap.
template <class T>
void transpose_heads_tokens(const T* src, T* dst, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim,
                            bool to_tokens_major) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t = 0; t < seq; ++t) {
        const int64_t hm = ((b * heads + h) * seq + t) * head_dim,
                      tm = ((b * seq + t) * heads + h) * head_dim;
        const T* from = src + (to_tokens_major ? hm : tm);
        T* to = dst + (to_tokens_major ? tm : hm);
        for (int64_t d = 0; d < head_dim; ++d) to[d] = from[d];
      }
}

/// The FP64 oracle: whole-row attention in double, same layouts.
void attention_forward_fp64(const AttentionShape& shape, const double* q, const double* k, const double* v,
                            double* o, double* lse);
void attention_backward_fp64(const AttentionShape& shape, const double* q, const double* k, const double* v,
                             const double* o, const double* lse, const double* d_o, double* dq, double* dk,
                             double* dv);

// ---- checks: inputs, the FP64 oracle run, errors (attention_inputs.cpp, attention_diagnostics.cpp)

/// Input distributions of the checks. Every one gives the keys a non-zero mean (as trained models'
/// keys have), so that a stale delta's bias along the mean key shows.
///   normal: N(0,1) entries; heavy: Student-t (3 degrees of freedom) entries, outliers included;
///   sink:   normal, queries share a mean direction and key 0 of every sequence points along it,
///           so key 0 gets logits ~8 above the rest (an attention sink).
enum class AttnInputDist { Normal, Heavy, Sink };
AttnInputDist parse_attn_input_dist(const std::string& s);  ///< "normal" | "heavy" | "sink"
std::string to_string(AttnInputDist d);

/// Inputs of one check, FP32, in the layouts above: q, d_o [B,H,Tq,D]; k, v [B,G,Tk,D].
struct AttentionInputs {
  std::vector<float> q, k, v, d_o;
};
/// Deterministic for a (shape, dist, seed). Throws octet::Error on an invalid shape.
AttentionInputs make_attention_inputs(const AttentionShape& shape, AttnInputDist dist, uint64_t seed);

/// FP64 oracle results for given FP32 inputs (converted exactly to double).
struct AttentionOracle {
  std::vector<double> o, lse, dq, dk, dv;
};
AttentionOracle run_attention_oracle(const AttentionShape& shape, const AttentionInputs& in);

/// Errors of one implementation's results against the oracle.
///   *_rel_err: ||x − x_ref||₂ / ||x_ref||₂ over the whole tensor (||x||₂ if x_ref is 0);
///   dq_cos: cosine of dQ and dQ_ref as flat vectors (1 if both are 0);
///   dq_bias_mean_key: sqrt(Σ_i ((dQ_i − dQref_i)·k̄_i)²) / ||dQ_ref||₂, where k̄_i is the unit
///     vector along the attention-weighted mean key Σ_j P_ij K_j of row i (oracle P and K): the
///     part of the dQ error that a stale delta puts there (−τ ε_i Σ_j P_ij K̂_j, docs/delta-matching.md).
struct AttentionErrors {
  double o_rel_err = 0, lse_max_abs_err = 0, dq_rel_err = 0, dk_rel_err = 0, dv_rel_err = 0;
  double dq_cos = 1, dq_bias_mean_key = 0;
};
/// o, dq [B,H,Tq,D]; dk, dv [B,G,Tk,D]; lse [B,H,Tq] (rows that see no key must hold −inf in
/// both, and count as no error).
AttentionErrors attention_errors(const AttentionShape& shape, const AttentionInputs& in,
                                 const AttentionOracle& ref, const float* o, const float* lse,
                                 const float* dq, const float* dk, const float* dv);
AttentionErrors attention_errors(const AttentionShape& shape, const AttentionInputs& in,
                                 const AttentionOracle& ref, const double* o, const double* lse,
                                 const double* dq, const double* dk, const double* dv);

}  // namespace octet
