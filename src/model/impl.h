// src/model/impl.h — Model::Impl: the transformer's backend tensors (activations, statistics,
// gradient scratch, accumulators), its layers (LinearOp, NormOp, Attention) and the saved state of
// the current micro-batch, shared by model.cpp (construction, parameters, diagnostics, quantizer
// state), transformer.cpp (forward and backward) and gated_delta_layer.cpp (the hybrid's
// recurrent layers). Shapes use N = B·T tokens, d = d_model,
// H / G query / KV heads of Dh, F = d_ff, V = vocab; "act" tensors have precision.activations.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "model/ops.h"
#include "octet/backend.h"
#include "octet/model.h"

namespace octet {

/// Owns backend buffers; returns them at destruction.
class Arena {
 public:
  explicit Arena(Backend& be) : be_(be) {}
  Tensor make(DType t, Shape s) {
    owned_.push_back(be_.alloc(t, s));
    return owned_.back().tensor();
  }

 private:
  Backend& be_;
  std::vector<Buffer> owned_;
};

// One residual unit's saved tensors (the sublayer's own live in AttnLayer / MlpLayer).
struct UnitBuffers {
  model_detail::NormOp norm;
  Tensor u;           // pre-norm output (pre placement) act [N, d]
  Tensor f;           // sublayer output act [N, d]
  Tensor s;           // residual sum before the post-norm (post placement) act [N, d]
  Tensor mean, rstd;  // norm statistics F32 [N]
};

struct AttnLayer {
  model_detail::LinearOp qkv, proj;
  model_detail::NormOp q_norm, k_norm;
  std::unique_ptr<Attention> attn;
  Tensor qkv_out;  // act [N, (H + 2G)·Dh]
  // q, k, v, o and their gradients are tokens-major (AttnLayout::TokensMajor): the attention reads
  // and writes them where the projections' rows lie, with no transposing copy.
  Tensor q_raw, k_raw, q, k, v;  // act [B, T, H|G, Dh] (raw: before QK-norm; qk_norm only)
  Tensor q_rstd, k_rstd;         // F32 [B·T·H], [B·T·G] (qk_norm only; one per row)
  Tensor o;                      // act [B, T, H, Dh]: the same buffer as ot
  Tensor lse;                    // F32 [B, H, T]
  Tensor ot;                     // act [N, H·Dh]: o as the projection's input
  Tensor residual;               // F64 [2]: row residual max, Σ of means (since zero_grad)
  Tensor d_o_sample;             // act [1, T, H, Dh]: batch element 0's dO (attention capture only)
  SavedAttention saved;          // of the current micro-batch
};

// A Gated DeltaNet layer (model.mixer = hybrid; gated_delta_layer.cpp). n = H heads of Dh.
struct GdnScratch;
struct GdnLayer {
  model_detail::LinearOp qkv, gates, proj;
  model_detail::NormOp q_norm, k_norm;  // RMSNorm, fixed gain 1
  float scale = 1.0f;                   // 1/√Dh: k_norm's output to unit rows; q's read-out scale
  int64_t chunk = 64;
  Tensor qkv_out;                // act [N, 3·H·Dh]
  Tensor gate_out;               // act [N, 2H]
  Tensor q_raw, k_raw, q, k, v;  // act [B, H, T, Dh]
  Tensor q_rstd, k_rstd;         // F32 [B·H·T]
  Tensor o;                      // act [B, H, T, Dh]
  Tensor ot;                     // act [N, H·Dh]

  /// f (act [N, d]) = proj(heads(GatedDeltaNet(q, k, v, gates))) of the unit input u.
  void forward(Backend& be, const Tensor& u, const Tensor& f);
  /// df (act [N, d], clobbered) → du (act [N, d], overwritten); weight gradients accumulate.
  void backward(Backend& be, const Tensor& df, const Tensor& du, const GdnScratch& s);
};
// Gradient scratch shared by the Gated DeltaNet layers (allocated for the hybrid mixer only).
struct GdnScratch {
  Tensor dot;                         // act [N, H·Dh]
  Tensor dout, dq, dk, dv, dq2, dk2;  // act [B, H, T, Dh]
  Tensor dgates;                      // act [N, 2H]
  Tensor dqkv;                        // act [N, 3·H·Dh]
  Tensor dx;                          // act [N, d]: the gate linear's input gradient
};

struct MlpLayer {
  model_detail::LinearOp fc1, fc2;
  Tensor h, a;  // act [N, fc1 width], [N, F]
};

struct Model::Impl {
  Arena arena;
  int64_t N, B, T, d, H, G, Dh, F, V;
  float res_a = 1.0f, res_b = 1.0f;  // R(x, y) = a·x + b·y
  Buffer params, grads;              // F32 [num_params]
  std::vector<Tensor> stream;        // 2L+1 residual-stream tensors act [N, d]
  std::vector<UnitBuffers> units;    // 2L
  std::vector<AttnLayer> attn;       // per layer (empty for a Gated DeltaNet layer)
  std::vector<GdnLayer> gdn;         // per layer (empty for an attention layer)
  GdnScratch gdn_scratch;
  std::vector<MlpLayer> mlp;
  model_detail::NormOp norm_f;
  Tensor xf, mean_f, rstd_f, logits;
  model_detail::LinearOp head;
  Tensor ids, targets;     // I32 [N]
  Tensor loss;             // F64 [1]: summed loss since the last take_loss()
  int64_t n_backward = 0;  // capturing backwards since zero_grad (the residual mean's count)
  bool capture = false;    // set_attention_capture: keep d_o_sample and the row residual in each backward
  bool captured = false;   // d_o_sample belongs to the last forward (its backward ran with capture)
  Tensor wte, dwte, wpe, dwpe;  // F32 views (wpe: learned positions only)
  // gradient scratch (act); the attention's dq, dk, dv, dq2, dk2 tokens-major [B, T, H|G, Dh], dout
  // the same buffer as dot [N, H·Dh]
  Tensor dcur, dt1, dt2, dt3, gtmp, dqkv, dq, dk, dv, dq2, dk2, dout, dot, dh, da;
  // Producers' amaxes (backend.h) for tensor-current FP8 linears, I32 [kProducerAmaxSlots · n_layer], zeroed
  // at the start of each forward_backward; empty for every other arm and recipe. Layer l's slots:
  // its pre-norms' outputs (qkv's and fc1's X), GELU's output (fc2's X), GELU's backward (fc1's dY).
  static constexpr int64_t kProducerAmaxSlots = 4;
  Tensor amax;
  Tensor amax_slot(int64_t l, int64_t k) const {
    return amax.empty() ? Tensor{} : amax.slice(kProducerAmaxSlots * l + k, 1);
  }
  explicit Impl(Backend& be) : arena(be) {}

  // Every linear with its checkpoint key (the parameter name without ".weight"; "head").
  std::vector<std::pair<std::string, model_detail::LinearOp*>> linears();
};

}  // namespace octet
