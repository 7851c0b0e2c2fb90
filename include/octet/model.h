// octet/model.h — the decoder-only transformer that octet trains, written once against the
// Backend interface (backend.h) so that the CPU reference and the CUDA backend run the same code.
//
// Architecture (GPT-2, Radford et al. 2019, with the modern options named by the field):
//   x0 = wte[ids] (+ wpe[t] for learned positions)
//   per layer, two residual units (attention, MLP), each   x ← R(x, g(f(u(x))))
//     u = norm (pre-norm, default) or identity; f = the sublayer; g = norm (FOG's output norm) or
//     identity; R(x, y) = x + y, or √(1−τ)·x + √τ·y with unit scaling; post-norm applies the norm
//     after R instead (Vaswani et al. 2017).
//   attention: qkv = Linear(u); optional QK RMSNorm per head (trainable or fixed gain 1);
//     RoPE (Su et al., arXiv 2104.09864) | learned | NoPE; causal GQA attention (attention.h);
//     out = Linear(heads). MLP: SwiGLU (Shazeer 2020) or GELU-tanh.
//   mixer (model.mixer): attention — every layer's token mixer is the attention above (GPT-2);
//     hybrid — every 4th layer (l % 4 == 3) attention, the other layers Gated DeltaNet (Yang, Kautz
//     & Hatamizadeh, arXiv 2412.06464; recurrent.h): qkv = Linear(u) split into H heads of Dh,
//     q, k RMS-normalized per head (k scaled to unit norm), gates = Linear(u) [N, 2H] giving the
//     decay α = σ(a)^{1/16} and β = σ(b), o = the chunked recurrence, out = Linear(heads); no short
//     convolution and no output gate. Its three linears are BF16 in every arm but fp32 (FP32), as
//     the Delta-Matching paper keeps its recurrent layers in BF16.
//   logits = LM head(norm_f(x_L)) with the embedding tied or a separate matrix; loss =
//     softmax cross-entropy (nats per token).
// FOG (Hernández-Cano et al., arXiv 2505.20524): norm_placement = output (no pre-norm, a norm on
//   each block's output before the residual add) and qk_norm with qk_norm_trainable = false.
// μnit Scaling (Narayan et al., arXiv 2502.05967): unit_scaling = true — unit-variance init of every
//   matrix, a static 1/√fan_in multiplier after each linear (so activations keep unit variance and
//   FP8 can use fixed scales: the `unit` recipe), variance-preserving residuals with τ.
//
// Precision (docs/design.md §"Precision arms"). Embedding, norms, RoPE, softmax statistics, loss, master
// weights and AdamW states are FP32 in every arm; the LM head is a BF16 GEMM in every arm. Per arm:
//   bf16        linears BF16 (operands rounded to BF16, FP32 accumulate), attention BF16
//   fp8-linear  the 4 linears of every layer (qkv, proj, fc1, fc2) FP8, attention BF16
//   fp8-stale   FP8 linears, FP8 attention with the stale delta (FlashAttention, cuDNN)
//   fp8-matched FP8 linears, FP8 attention with Delta-Matching
//   fp32        (internal reference for gradient checks and the PyTorch twin) FP32 linears and head,
//               FP64 attention (CPU only)
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "octet/attention.h"
#include "octet/backend.h"
#include "octet/quant.h"

namespace octet {

enum class NormKind { RMSNorm, LayerNorm };
/// pre: norm before each sublayer (GPT-2); post: norm after the residual add (Vaswani et al.);
/// output: norm on the sublayer output before the residual add (FOG, arXiv 2505.20524).
enum class NormPlacement { Pre, Post, Output };
enum class PositionKind { RoPE, Learned, NoPE };
enum class MlpKind { SwiGLU, GELU };
/// attention: every layer attention (GPT-2). hybrid: layers l % 4 == 3 attention, the others Gated
/// DeltaNet (3 recurrent : 1 attention, the Delta-Matching paper's hybrid).
enum class MixerKind { Attention, Hybrid };

NormKind parse_norm_kind(const std::string& s);            ///< "rmsnorm" | "layernorm"
NormPlacement parse_norm_placement(const std::string& s);  ///< "pre" | "post" | "output"
PositionKind parse_position_kind(const std::string& s);    ///< "rope" | "learned" | "nope"
MlpKind parse_mlp_kind(const std::string& s);              ///< "swiglu" | "gelu"
MixerKind parse_mixer_kind(const std::string& s);          ///< "attention" | "hybrid"
std::string to_string(NormKind v);
std::string to_string(NormPlacement v);
std::string to_string(PositionKind v);
std::string to_string(MlpKind v);
std::string to_string(MixerKind v);

struct ModelConfig {
  int64_t n_layer = 2;
  int64_t d_model = 128;
  int64_t n_head = 4;
  int64_t n_kv_head = 4;     ///< GQA: key/value heads, divides n_head
  int64_t d_ff = 512;        ///< MLP hidden width F (SwiGLU: fc1 has 2F outputs)
  int64_t vocab_size = 256;  ///< must match the tokenizer
  int64_t seq_len = 128;     ///< tokens per sequence (context length)
  NormKind norm = NormKind::RMSNorm;
  NormPlacement norm_placement = NormPlacement::Pre;
  bool qk_norm = false;
  bool qk_norm_trainable = true;  ///< false: fixed gain 1 (FOG)
  PositionKind positions = PositionKind::RoPE;
  float rope_theta = 10000.0f;
  MlpKind mlp = MlpKind::SwiGLU;
  MixerKind mixer = MixerKind::Attention;
  int64_t gdn_chunk = 64;  ///< hybrid: chunk length of Gated DeltaNet's chunked form (not a config key)
  bool tied_embeddings = true;
  float init_std = 0.02f;  ///< std of matrices and embeddings (residual projections / √(2·n_layer))
  float norm_eps = 1e-5f;
  bool unit_scaling = false;  ///< μnit: unit init, 1/√fan_in multipliers, τ-residuals
  float residual_tau = 0.2f;  ///< unit scaling: R(x, y) = √(1−τ)·x + √τ·y, τ in (0, 1)

  int64_t head_dim() const { return d_model / n_head; }
  /// Whether layer l's token mixer is attention (else Gated DeltaNet): always for mixer attention,
  /// l % 4 == 3 for hybrid.
  bool attention_layer(int64_t l) const { return mixer == MixerKind::Attention || l % 4 == 3; }
  /// Throws octet::Error naming the first invalid field (sizes < 1, n_head not dividing d_model,
  /// n_kv_head not dividing n_head, odd head_dim with RoPE, τ outside (0, 1), init_std <= 0).
  void validate() const;
};

/// The precision arms of docs/design.md §"Precision arms", plus the internal FP32 reference.
enum class Arm { BF16, FP8Linear, FP8Stale, FP8Matched, FP32 };
Arm parse_arm(const std::string& s);  ///< "bf16" | "fp8-linear" | "fp8-stale" | "fp8-matched" | "fp32"
std::string to_string(Arm a);

struct PrecisionConfig {
  Arm arm = Arm::BF16;
  /// The dtype of every activation and activation-gradient tensor between ops: F32 or BF16
  /// (master weights, their gradients, AdamW moments, norm statistics and LSE stay F32). The
  /// config key precision.activations = "auto" resolves it to the backend's
  /// preferred_activation_dtype() when the trainer builds the model.
  DType activations = DType::F32;
  QuantConfig quant;  ///< FP8 linears: recipe, format policy, delayed-scaling history
  AttnForm attn_form = AttnForm::Whole;
  QkvScaling qkv_scaling = QkvScaling::Tensor;
  float p_scale = 256.0f;  ///< FP8 attention: static scale of P
  /// FP8 attention: block_q = block_k (AttentionConfig), the dS scale tile and the flash form's
  /// tiles: 128 or 64.
  int64_t attn_tile = 128;
  /// Throws octet::Error (e.g. non power-of-two p_scale, activations neither f32 nor bf16, an
  /// attn_tile other than 64 or 128).
  void validate() const;
};

/// What the arm makes of a transformer-layer linear (qkv, proj, fc1, fc2).
LinearPrecision linear_precision(Arm arm);
/// The LM head: BF16, or FP32 in the reference arm.
LinearPrecision head_precision(Arm arm);
/// The linears of a Gated DeltaNet layer (hybrid): never FP8 — BF16, or FP32 in the reference arm.
LinearPrecision recurrent_precision(Arm arm);
/// The attention config of an arm (dO/dS formats follow the format policy: hybrid → E5M2).
AttentionConfig attention_config(const PrecisionConfig& p);
/// The attention form an arm of model `m` runs by default on `backend_name` ("cpu" | "cuda"):
/// flash — the flash FP8 attention kernels (src/cuda/attention/flash/) for the FP8-attention arms, cuDNN's
/// fused BF16 SDPA for the bf16 and fp8-linear arms (docs/attention.md §"cuDNN SDPA") — on cuda when
/// the head_dim (and the FP8 tiles) are 64 or 128 (flash_attention_size_supported); whole (the
/// CPU reference's whole-row form, the unfused CUDA path) otherwise.
AttnForm default_attn_form(const ModelConfig& m, const PrecisionConfig& p, const std::string& backend_name);
/// The attention shape of the model's layers for micro-batches of `batch` sequences: causal,
/// n_head query heads, n_kv_head KV heads, seq_len queries and keys, head_dim, AttnLayout::TokensMajor
/// (q, k, v and o [batch, seq, heads, head_dim]: the QKV projection's and the output projection's rows
/// as they lie, no transposing copy between them and the attention).
AttentionShape attention_shape(const ModelConfig& m, int64_t batch);
/// Everything a Model built from (m, p, batch) would reject, checked before anything is built or
/// written: m.validate(), p.validate(), batch >= 1, and the attention's own shape and config rules
/// on attention_shape(m, batch) and attention_config(p). Throws octet::Error naming the problem.
void validate_model_precision(const ModelConfig& m, const PrecisionConfig& p, int64_t batch);

/// One named parameter tensor inside the flat FP32 parameter buffer.
struct ParamInfo {
  std::string name;            ///< e.g. "h.0.attn.qkv.weight" (the PyTorch twin uses the same names)
  std::vector<int64_t> shape;  ///< row-major
  size_t offset = 0, numel = 0;
  bool decay = false;  ///< AdamW weight decay applies (matrices and embeddings, not norms)
};

/// Diagnostics of one quantized linear operand set at its last quantization.
struct LinearDiag {
  std::string name;  ///< "qkv" | "proj" | "fc1" | "fc2"
  QuantStats x, w, dy;
};
/// Per-layer diagnostics after a training step (FOG's kurtosis early warning; Delta-Matching's row
/// residual, max over the micro-batches of the step and mean of their means: measured only by the
/// backwards run with Model::set_attention_capture(true); NaN for an attention layer when none
/// ran since zero_grad() or when its attention does not measure it (Attention::
/// measures_row_residual: cuDNN's SDPA); 0 for a Gated DeltaNet layer, which has no softmax).
struct LayerDiag {
  double kurtosis_attn_in = 0, kurtosis_mlp_in = 0, kurtosis_mlp_hidden = 0, kurtosis_out = 0;
  double row_residual_max = 0, row_residual_mean = 0;
  std::vector<LinearDiag> linears;  ///< empty unless the linears are FP8
  double kurtosis_max() const;
};

/// One attention layer's inputs for batch element 0 of the last forward_backward, as host FP32
/// copies: q [1,H,T,Dh], k, v [1,G,T,Dh] (after QK-norm and RoPE: what Attention::forward got) and
/// d_o [1,H,T,Dh], the gradient of the layer's attention output in that forward's backward if the
/// backward ran with Model::set_attention_capture(true), else empty — heads-major, whatever the
/// layer's layout. shape: the layer's attention shape with batch 1 and layout HeadsMajor; config:
/// its attention config. The input of the per-layer dQ-bias replay
/// (octet/eval.h attention_dq_bias; docs/training.md §Output).
struct AttentionSample {
  AttentionShape shape;
  AttentionConfig config;
  std::vector<float> q, k, v, d_o;
};

/// How a Model trades memory for compute (docs/training.md §"Activation checkpointing").
struct ModelMemory {
  /// Activation checkpointing with full recompute per layer (Chen et al., arXiv 1604.06174;
  /// Megatron-LM's "full" granularity, arXiv 2205.05198): between the forward and the backward only
  /// each layer's input (the residual stream) is kept; the backward re-runs a layer's forward
  /// before its backward, and one set of per-layer activation buffers serves every layer (the
  /// saved FP8/BF16 operands of each layer are freed after its forward). The losses and gradients
  /// are bitwise those without it (the forward kernels are deterministic); the cost is one more
  /// forward of every layer per step. diagnostics() and attention_sample() need every layer's
  /// activations and throw octet::Error while it is on.
  bool activation_checkpointing = false;
};

/// The transformer. Buffers live on the backend; one instance serves micro-batches of exactly
/// `batch` sequences of config.seq_len tokens (N = batch·seq_len tokens). Activations and their
/// gradients are tensors of precision.activations; parameters, gradients and statistics are F32.
/// The model holds the SavedLinear/SavedAttention of its current micro-batch per layer between the
/// forward and the backward (docs/design.md §"Saved state").
class Model {
 public:
  /// Throws octet::Error if the config or precision is invalid. Parameters start at zero: call init().
  Model(const ModelConfig& config, const PrecisionConfig& precision, Backend& backend, int64_t batch,
        const ModelMemory& memory = {});
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return config_; }
  const PrecisionConfig& precision() const { return precision_; }
  int64_t batch() const { return batch_; }
  const ModelMemory& memory() const { return memory_; }
  Backend& backend() { return backend_; }

  const std::vector<ParamInfo>& params() const { return params_; }
  size_t num_params() const { return n_params_; }
  const ParamInfo& param(const std::string& name) const;  ///< throws octet::Error if unknown
  /// F32 [num_params()] views of all parameters / gradients (backend memory, params() order).
  /// The parameters may be written between update_quant_scales() and the next forward (the
  /// optimizer step) or through upload_params(): the FP8 linears keep their quantized weights in
  /// between (backend.h LinearSpec::cache_weight).
  Tensor param_data() const;
  Tensor grad_data() const;

  /// Deterministic init from `seed` (portable: splitmix64 + Box–Muller, independent of the arm).
  void init(uint64_t seed);
  /// Host copies of all parameters / gradients (num_params() floats, params() order). Synchronize.
  std::vector<float> download_params();
  std::vector<float> download_grads();
  void upload_params(const std::vector<float>& host);

  /// Zeroes the gradients and the attention row-residual accumulators of diagnostics().
  void zero_grad();
  /// Forward on ids/targets (host, batch·seq_len each; a target < 0 is ignored; ids in
  /// [0, vocab_size)). Enqueues everything without a host synchronization; the summed loss (nats)
  /// accumulates in an F64 accumulator on the backend (take_loss). With backward=true, the
  /// gradients of grad_scale·(summed loss) are accumulated into grad_data().
  void forward_backward(const int32_t* ids, const int32_t* targets, bool backward, float grad_scale);
  /// The backward's seam for data parallel (docs/distributed.md §"Gradient buckets"): while
  /// forward_backward runs its backward, `hook(f)` is called each time the gradients of every parameter at
  /// flat offsets >= f (params() order) are final for this micro-batch — after the LM head and the final norm
  /// (f = norm_f's offset), then after each layer from the top (f = the layer's first parameter,
  /// h.<l>.norm1). The rest (the embeddings, which the tied LM head also writes) is final when
  /// forward_backward returns. On CUDA the hook runs when the kernels are enqueued, not done: work it
  /// enqueues is ordered after them. An empty hook (the default) is not called.
  void set_grad_ready_hook(std::function<void(int64_t)> hook) { grad_ready_hook_ = std::move(hook); }
  /// The summed loss (nats) accumulated by forward_backward() since the last take_loss(), and
  /// resets it. Synchronizes once.
  double take_loss();
  /// The F64 [1] backend accumulator take_loss() reads and resets (for a device-side check or sum
  /// over ranks without a host read).
  const Tensor& loss_sum() const;
  /// forward_backward + take_loss; *n_counted (if given) is the number of counted targets (host).
  double step(const int32_t* ids, const int32_t* targets, bool backward, float grad_scale,
              int64_t* n_counted = nullptr);
  /// Delayed scaling's update step: Linear::update_scales() of every linear. The trainer calls it
  /// once per optimizer step, after the last micro-batch's backward and before the optimizer and
  /// any checkpoint.
  void update_quant_scales();
  /// Delayed scaling across ranks (docs/distributed.md §"Amax reduction"; octet/dist.h
  /// reduce_pending_amaxes): 3 I32 slots (X, W, dY) per linear in quant_states' key order when the
  /// linears are FP8 with the tensor-delayed recipe, else 0.
  int64_t amax_slots() const;
  /// Linear::pending_amaxes of every linear into amax (I32 [amax_slots()], backend memory) /
  /// Linear::set_pending_amaxes from it. Enqueued, no host synchronization.
  void pending_amaxes(const Tensor& amax);
  void set_pending_amaxes(const Tensor& amax);

  /// A linear whose weight the FP8 weight all-gather (octet/dist.h Fp8WeightGather) installs
  /// (Linear::gathers_weight_codes), with its weight's entry of params().
  struct CodeWeight {
    const ParamInfo* param;
    Linear* linear;
  };
  /// Those linears in quant_states' key order: the FP8 transformer-layer linears under the
  /// tensor-current recipe; empty for the other arms and recipes.
  std::vector<CodeWeight> code_weights();

  /// Diagnostics of the last forward/backward (kurtosis of its saved activations, quantizer stats;
  /// the attention row residual of the capturing backwards since zero_grad(): max over the
  /// micro-batches and mean of their means, LayerDiag). Synchronizes. Throws octet::Error under
  /// activation checkpointing (ModelMemory).
  std::vector<LayerDiag> diagnostics();
  /// While on, each backward copies batch element 0's attention output gradient dO of every
  /// attention layer aside (1/batch of one activation tensor per layer, allocated at the first
  /// call with true; one device copy per layer and micro-batch), for attention_sample(), and
  /// measures the attention row residual that diagnostics() reports (FP64 work per score in the
  /// fused CUDA backward). Off by default: the trainer turns it on only for the steps that end in
  /// an evaluation, the only ones whose diagnostics it reads.
  void set_attention_capture(bool on);
  /// The sample of layer `layer` (AttentionSample). Throws octet::Error if the layer is out of range
  /// or has no attention (a Gated DeltaNet layer of the hybrid mixer), and under activation
  /// checkpointing (ModelMemory). Synchronizes.
  AttentionSample attention_sample(int64_t layer);

  /// The quantizer state of every linear that keeps one (Linear::quant_state: tensor-delayed FP8
  /// linears), keyed "h.<l>.attn.qkv", "h.<l>.attn.proj", "h.<l>.mlp.fc1", "h.<l>.mlp.fc2" (and
  /// "head" if it had state). Empty for the BF16/FP32 arms and the stateless recipes. Host copies
  /// (the CUDA backend synchronizes).
  std::map<std::string, std::vector<float>> quant_states() const;
  /// Restores quant_states() of a model with the same config and precision. The keys must be
  /// exactly those quant_states() returns; throws octet::Error naming a missing or unknown key or
  /// the linear whose state does not fit (Linear::load_quant_state), and then leaves every
  /// linear's state as it was.
  void load_quant_states(const std::map<std::string, std::vector<float>>& states);

 private:
  struct Impl;
  ModelConfig config_;
  PrecisionConfig precision_;
  Backend& backend_;
  int64_t batch_;
  ModelMemory memory_;
  std::vector<ParamInfo> params_;
  size_t n_params_ = 0;
  std::function<void(int64_t)> grad_ready_hook_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace octet
