// octet/backend.h — the compute interface the transformer and trainer are written against.
// (docs/design.md §"The compute interface")
//
// The model (src/model) calls only these operations, so the same forward/backward code runs on the
// CPU reference backend (src/cpu, the readable twin, as in karpathy/llm.c) and on the CUDA backend
// (src/cuda). Every CUDA operation is tested against its CPU twin of the same name.
//
// Tensors (tensor.h): every argument is a typed view in the memory of this backend, obtained from
// alloc() (or, for the CUDA backend, any device memory of its device, e.g. a PyTorch tensor's).
// Dtype rules, checked at each operation's boundary:
//   act    activations and gradients between ops: F32 or BF16, each tensor independently. An op
//          reads its inputs as FP32, computes in FP32 and rounds to the output's dtype once (round
//          to nearest even for BF16), so the CPU backend run with BF16 tensors is the twin of the
//          CUDA backend run with BF16 tensors.
//   param  master weights and their gradients: F32.   stat  norm mean/rstd, LSE: F32.
//   ids    token ids and targets: I32.                acc   loss / norm accumulators: F64 [1].
// Shapes are taken from the views and checked against each other; row-wise ops treat a tensor as
// [rows, cols] with cols its last dimension.
//
// Asynchrony: on the CUDA backend every operation is enqueued on the backend's stream (the caller's,
// see CudaOptions) and returns without waiting, except where a function says it synchronizes
// (download, read_f64, moments, synchronize, the checkpoint state getters). Results the trainer
// needs on the host (loss, gradient norm) accumulate in F64 tensors on the device and are read once
// per step.
//
// Errors: invalid arguments throw octet::Error naming the argument and the problem; backend failures
// (CUDA, cuBLASLt) throw octet::Error naming the failed call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "octet/attention.h"
#include "octet/quant.h"
#include "octet/recurrent.h"
#include "octet/saved_size.h"
#include "octet/tensor.h"

namespace octet {

/// Precision of the three GEMMs of a linear layer. FP32 (no rounding of the operands) is the
/// reference path for whole-model gradient checks and the PyTorch twin (the CUDA backend runs it
/// with cuBLASLt FP32, no TF32).
enum class LinearPrecision { BF16, FP8, FP32 };

/// One run of Backend::copy_spans, in elements of the tensors' dtype: dst[dst_at + i] =
/// src[src_at + i] for 0 <= i < count.
struct CopySpan {
  int64_t src_at = 0, dst_at = 0, count = 0;
};

struct LinearSpec {
  int64_t in_features = 0, out_features = 0;
  LinearPrecision precision = LinearPrecision::BF16;
  QuantConfig quant;  ///< FP8 only: recipe and formats (X, W: forward roles; dY: gradient role)
  /// FP8 weight cache: W is quantized (both orientations) at the first forward after construction,
  /// update_scales(), load_quant_state() or weights_changed(), and every later forward reuses those
  /// codes and scales, whatever `w` it is given — for callers whose weights change only at those
  /// points (the trainer: gradient accumulation quantizes W once per optimizer step). The results
  /// equal an uncached linear's bitwise. Off: every forward quantizes its `w`. The CUDA backend
  /// keeps a BF16 linear's rounded copy of W the same way. Backends without a cache ignore it.
  bool cache_weight = false;
};

/// Statistics of one quantized operand at its last quantization.
struct QuantStats {
  float amax = 0.0f;
  float scale_min = 0.0f, scale_max = 0.0f;  ///< over the scale grid (scale = 1/scale_inv)
  double underflow_frac = 0.0;               ///< non-zero inputs that became 0
  double saturated_frac = 0.0;               ///< inputs beyond fp8_max after scaling
};

/// Backend-specific tensors a forward keeps for its backward (quantized copies and their scales).
/// Opaque to callers; a backend throws octet::Error if handed another backend's or layer's state.
struct SavedState {
  virtual ~SavedState() = default;
};

/// What Linear::forward returns for Linear::backward. The caller holds it and passes it to
/// backward (any number of forwards may be outstanding: autograd, activation checkpointing).
/// x and w are views of the forward's inputs: the caller keeps them alive and unchanged until the
/// backward (as autograd keeps saved tensors). `state` owns the FP8 operands the forward quantized
/// (X̂ᵀ and Ŵᵀ in the layout the backward GEMMs read). Move-only.
struct SavedLinear {
  Tensor x, w;
  std::unique_ptr<SavedState> state;
};

/// What Attention::forward returns for Attention::backward: views of the caller's o and lse (kept
/// alive by the caller) and the backend's quantized Q̂, K̂, V̂ (owned by `state`). Move-only.
struct SavedAttention {
  Tensor q, k, v, o, lse;
  std::unique_ptr<SavedState> state;
};

/// The inputs of Backend::gated_delta_forward/backward: one Gated DeltaNet mixer call (recurrent.h;
/// Yang, Kautz & Hatamizadeh, arXiv 2412.06464) on B sequences of T tokens, H heads.
///   q, k act [B, H, T, Dk] (k's rows should have unit L2 norm: the caller normalizes q and k),
///   v act [B, H, T, Dv],
///   gates act [B, T, 2H] (or [B·T, 2H]): the raw gate projections of each token, a in columns
///     0..H−1 and b in H..2H−1; log decay g = log σ(a)/16 and β = σ(b) (gated_delta_gates).
struct GatedDeltaArgs {
  Tensor q, k, v, gates;
  float scale = 1.0f;  ///< o_t = scale · S_tᵀ q_t
  int64_t chunk = 64;  ///< chunk length of the chunked (WY/UT) form; any value >= 1 gives the same o

  /// The call's sizes from q and v, after checking every tensor of the call against them (k as q;
  /// gates [B·T, 2H]; chunk >= 1): one octet::Error naming `op` and the argument otherwise. The
  /// boundary check of every backend (src/core/gated_delta_rules.cpp).
  GatedDeltaShape shape(const char* op) const;
};

/// One linear layer's GEMMs Y = X Wᵀ and its quantizer state (delayed-scaling histories).
/// Forward: Y = X̂Ŵᵀ. Backward: dX = dŶŴ, dW += dŶᵀX̂, each operand quantized from its
/// high-precision source in the orientation its GEMM needs (never re-quantized from FP8).
class Linear {
 public:
  virtual ~Linear() = default;
  /// x act [M, in], w param [out, in], y act [M, out] (overwritten). Throws on a shape/dtype
  /// mismatch. Quantization uses each slot's current scale and records its amax (quant.h).
  /// y empty: no GEMM, only what the backward needs — the same SavedLinear (the same codes and
  /// scales) that a forward would return (the C ABI's backward re-quantizes this way when its
  /// caller passes no saved state: forward_to below). stats_x() then describes X̂ᵀ, the copy
  /// it quantized (its amax is X's; with row, block or MX scaling its scale range differs).
  /// x_amax (optional, I32 [1], this backend's memory): the amax of x as stored (|x| max as float
  /// bits, NaN largest), computed by the op that wrote x (the norms' and GELU's amax output below).
  /// The tensor-current recipe then takes it instead of reducing x again (one pass less, the same
  /// scale and codes); every other recipe and precision ignores it. It must be the amax of this x:
  /// a stale one gives wrong scales (not detected).
  /// residual (optional, act [M, out], y's dtype; may be y itself): y = X̂Ŵᵀ + residual, accumulated
  /// in FP32 and rounded once into y's dtype (a pre-norm block's stream add x + f(x)): on the CUDA
  /// backend cuBLASLt's epilogue adds it to the product, on the CPU the GEMM's FP32 sum starts from it
  /// (so the K-chunks join it one at a time: the same to FP32 accumulation error, not bit for bit).
  /// Needs a y; throws octet::Error if residual is not like y.
  virtual SavedLinear forward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& x_amax = {},
                              const Tensor& residual = {}) = 0;
  /// dy act [M, out]; dx act [M, in] overwritten (empty: skipped); dw param [out, in] accumulated
  /// (+=; empty: skipped). `saved` must come from this linear's forward; it is not consumed.
  /// dy_amax: the amax of dy as stored, from its producer (as forward's x_amax; e.g. GELU's backward).
  virtual void backward(const SavedLinear& saved, const Tensor& dy, const Tensor& dx, const Tensor& dw,
                        const Tensor& dy_amax = {}) = 0;
  /// Delayed scaling's update step (TransformerEngine amax_and_scale_update): folds the amaxes
  /// recorded since the last update into each slot's history and computes the scales the next
  /// quantizations use. The trainer calls it once per optimizer step (this is where a cross-rank
  /// amax max-reduction goes). A no-op for the stateless recipes, BF16 and FP32.
  virtual void update_scales() = 0;
  /// The weights changed outside an optimizer step (e.g. Model::upload_params): a weight cache
  /// (LinearSpec::cache_weight) is dropped, so the next forward quantizes the new W. Enqueues nothing.
  virtual void weights_changed() {}
  /// Stats of X, W (forward) and dY (backward) at their last quantization (FP8 only).
  /// May synchronize (diagnostics only).
  virtual QuantStats stats_x() const = 0;
  virtual QuantStats stats_w() const = 0;
  virtual QuantStats stats_dy() const = 0;
  /// The quantizer state a checkpoint must hold for a bitwise resume (host copy; synchronizes).
  /// Layout (quant.h pack_delayed_states): for each slot X, W, dY in that order
  /// [n, amax history (n values, most recent last), delayed scale, overflow count]. Empty for
  /// BF16/FP32 and for the stateless FP8 recipes (all but tensor-delayed). Taken after
  /// update_scales(): amaxes recorded since the last update are not part of it.
  virtual std::vector<float> quant_state() const = 0;
  /// Restores a quant_state() of a linear with the same spec. Throws octet::Error naming the
  /// mismatch (wrong size, a history longer than amax_history_len, invalid values, non-empty for a
  /// stateless linear) and leaves the state unchanged.
  virtual void load_quant_state(const std::vector<float>& state) = 0;
  /// Delayed scaling across ranks (docs/distributed.md §"Amax reduction"): writes the amaxes of X,
  /// W and dY recorded since the last update_scales() to `amax` (I32 [3], this backend's memory) as
  /// IEEE-754 bit patterns with the sign bit cleared, so that integer order is float order and NaN
  /// sorts above inf, and −1 for a slot with nothing recorded (or a linear without delayed state).
  /// Enqueued, no host synchronization. The default (a backend without it) throws octet::Error.
  virtual void pending_amaxes(const Tensor& amax) const;
  /// Replaces the recorded amaxes by `amax` (I32 [3] in pending_amaxes' form; −1: none), e.g. their
  /// max over ranks; the next update_scales() folds them in. A no-op without delayed state.
  /// Enqueued. The default throws octet::Error.
  virtual void set_pending_amaxes(const Tensor& amax);

  // ---- FP8 weight all-gather (ZeRO-1 with dist.allgather_fp8; docs/distributed.md §"FP8 all-gather")
  // Each rank quantizes its shard of W with the tensor scale of W's amax over all ranks; the codes
  // are all-gathered and installed here as the weight cache. The scale rule is the weight slot's
  // own (fp8.h scale_from_amax with the recipe's format, margin and pow2), so the installed codes
  // are bitwise those the forward would have computed from the whole FP32 W.
  // Amaxes travel as I32 |x| float bit patterns (NaN above inf: integer max = float max).
  /// True for FP8 with the tensor-current recipe and LinearSpec::cache_weight: the only linears
  /// whose weight operand a gathered code set can stand in for. The defaults below throw
  /// octet::Error for every other linear.
  virtual bool gathers_weight_codes() const { return false; }
  /// amax (I32 [1], this backend's memory) = max(amax, max |w_piece|) in the bit form above;
  /// w_piece F32 [n >= 1], any contiguous piece of W. Enqueued.
  virtual void weight_piece_amax(const Tensor& w_piece, const Tensor& amax) const;
  /// codes (E4M3 or E5M2: the weight slot's format, [n]) = fp8(w_piece · s), s = the tensor scale
  /// of amax (I32 [1], the whole W's amax). Enqueued.
  virtual void encode_weight_piece(const Tensor& w_piece, const Tensor& amax, const Tensor& codes) const;
  /// Installs W's codes (the weight slot's format, [out·in] row-major) with the scale of amax
  /// (I32 [1]) as the weight cache (both orientations): the forwards until the next
  /// update_scales(), load_quant_state() or weights_changed() use them and ignore their `w`.
  /// stats_w() then reports that amax and scale, and NaN underflow/saturation fractions (not
  /// counted without the FP32 W). Enqueued; `codes` and `amax` may be reused once it returns.
  virtual void install_weight_codes(const Tensor& codes, const Tensor& amax);

  // ---- saved state in caller memory (as Attention's below): for op boundaries that carry only
  // tensors (PyTorch's custom ops keep it as a byte tensor saved for backward), so that a backward
  // never re-quantizes X or W.
  /// The saved state's buffers as terms in M (octet/saved_size.h), in the order forward_to()
  /// places them: FP8, X̂ᵀ [in, M] and Ŵᵀ [in, out] with their scales (the codes and scales
  /// backward() reads); the same for every linear of this spec on this backend. Empty: the linear
  /// keeps nothing but its views of x and w (BF16, FP32), and forward_to and saved_from throw.
  virtual std::vector<SavedSizeTerm> saved_size_terms() const { return {}; }
  /// Bytes of this backend's memory that forward_to() places the saved state of a forward of
  /// `rows` rows (M) in: saved_size(saved_size_terms(), rows); 0 where the terms are empty.
  /// Throws octet::Error for rows < 1 where they are not, and for a size beyond int64.
  int64_t saved_bytes(int64_t rows) const;
  /// forward() (x_amax and residual as there) with the saved state placed in `memory` instead of
  /// memory of the linear's own: any dtype, at least saved_bytes(x.rows()) bytes of this backend's
  /// memory, 256-byte aligned, contents on entry ignored. The returned SavedLinear views it (and x,
  /// w): the caller keeps `memory` alive and unchanged until the backward, which reads neither x
  /// nor w. Throws octet::Error for a memory too small or misaligned (naming it), for a linear
  /// whose saved_bytes() is 0, and for what forward() refuses.
  virtual SavedLinear forward_to(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& memory,
                                 const Tensor& x_amax = {}, const Tensor& residual = {});
  /// The SavedLinear of an earlier forward_to(x of `rows` rows, …, memory) by a linear of this
  /// spec on this backend, for this linear's backward; its x and w are empty (the FP8 backward
  /// reads neither). Computes nothing (CPU: copies the image). The caller guarantees the
  /// provenance: only the size is checked (octet::Error naming it).
  virtual SavedLinear saved_from(int64_t rows, const Tensor& memory) const;
};

/// The sizes of `s` that an attention's saved state depends on (octet/saved_size.h).
inline AttnSizes attn_sizes(const AttentionShape& s) {
  return AttnSizes{s.batch, s.n_heads, s.n_kv_heads, s.head_dim, s.seq_q, s.seq_k};
}

/// attention_saved_size(terms, attn_sizes(shape)): an attention's saved_bytes() from its
/// saved_size_terms(). Throws octet::Error naming the shape when the size does not fit in int64.
int64_t attention_saved_bytes(const std::vector<AttnSizeTerm>& terms, const AttentionShape& shape);

/// One attention layer's forward/backward (semantics: attention.h, the CPU reference).
class Attention {
 public:
  virtual ~Attention() = default;
  /// q act [B,H,Tq,D], k, v act [B,G,Tk,D] (the shape given to make_attention); o act [B,H,Tq,D]
  /// and lse stat [B,H,Tq] written. With the shape's layout TokensMajor (attention.h AttnLayout)
  /// q, o are [B,Tq,H,D] and k, v [B,Tk,G,D] (and so are d_o, dq, dk, dv below); lse is the same.
  virtual SavedAttention forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                                 const Tensor& lse) = 0;
  /// d_o act [B,H,Tq,D]; dq, dk, dv act overwritten. `residual` (F64 [2], may be empty: not
  /// computed) accumulates the softmax-gradient row residual of attention.h AttentionStats:
  /// residual[0] = max(residual[0], this backward's max), residual[1] += this backward's mean.
  virtual void backward(const SavedAttention& saved, const Tensor& d_o, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv, const Tensor& residual) = 0;
  // ---- saved state in caller memory: for op boundaries that carry only tensors (PyTorch's custom
  // ops keep it as a byte tensor saved for backward), so that a backward never re-runs a forward.
  /// Bytes of this backend's memory that forward_to() places the saved state in, the same for every
  /// call of this attention and of any attention of the same shape and config on this backend:
  /// attention_saved_size(saved_size_terms(), attn_sizes(shape)). 0: this attention keeps its
  /// state only in its own memory (forward_to and saved_from throw).
  virtual int64_t saved_bytes() const { return 0; }
  /// The same size as terms in the shape's sizes (octet/saved_size.h), one per buffer that
  /// forward_to() places, for a caller that must write it as an expression of symbolic sizes
  /// (torch.compile's dynamic shapes). The terms hold for this attention's implementation at
  /// every shape: another shape gives the same terms wherever make_attention picks the same
  /// implementation for it. Empty where saved_bytes() is 0.
  virtual std::vector<AttnSizeTerm> saved_size_terms() const { return {}; }
  /// forward() with the saved state (the FP8 codes, scales and softmax statistics the backward
  /// reads) placed in `memory` instead of memory of the attention's own: any dtype, at least
  /// saved_bytes() bytes of this backend's memory, 256-byte aligned, contents on entry ignored. The
  /// returned SavedAttention views it: the caller keeps `memory`, o and lse alive and unchanged
  /// until the backward. Throws octet::Error for a memory too small or misaligned (naming it), and
  /// for what forward() refuses.
  virtual SavedAttention forward_to(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                                    const Tensor& lse, const Tensor& memory);
  /// The SavedAttention of an earlier forward_to(…, o, lse, memory) by an attention of this shape
  /// and config on this backend, for this attention's backward: o and lse as that forward wrote
  /// them. Computes nothing (CPU: copies the host image). The caller guarantees the provenance:
  /// only the size is checked (octet::Error naming it); q, k, v of the result are empty (no
  /// backward reads them).
  virtual SavedAttention saved_from(const Tensor& o, const Tensor& lse, const Tensor& memory) const;
  /// Whether backward() measures the row residual into `residual`. False for cuDNN's fused SDPA
  /// (the bf16 and fp8-linear arms on CUDA): its dS stays inside cuDNN and the accumulator is left
  /// unchanged, so a 0 there means "not measured" (Model::diagnostics reports NaN).
  virtual bool measures_row_residual() const { return true; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  ///< "cpu" or "cuda"
  /// The activation dtype this backend computes fastest in: BF16 for "cuda", F32 for "cpu".
  virtual DType preferred_activation_dtype() const = 0;

  // ---- memory ----
  /// A zero-initialized tensor of this backend. Throws octet::Error when out of memory (naming the
  /// bytes asked for).
  virtual Buffer alloc(DType dtype, Shape shape) = 0;
  /// Returns memory obtained by alloc() (Buffer's destructor calls it).
  virtual void release(void* p) = 0;
  /// Copies dst.bytes() bytes from host memory (the dtype's own representation).
  virtual void upload(const Tensor& dst, const void* host_src) = 0;
  /// Copies src.bytes() bytes to host memory. Synchronizes.
  virtual void download(void* host_dst, const Tensor& src) = 0;
  /// Host FP32 copy of an F32 or BF16 tensor. Synchronizes.
  std::vector<float> download_f32(const Tensor& src);
  /// The value of an F64 [1] accumulator. Synchronizes.
  double read_f64(const Tensor& acc);
  /// x = value (act, param, stat or acc).
  virtual void fill(const Tensor& x, double value) = 0;
  /// dst = src, converting F32 <-> BF16 (round to nearest even) when the dtypes differ; equal numel.
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;
  /// Every span's run of src copied into dst (same dtype, no conversion), in one batched copy: the
  /// gathers and scatters of row blocks (packed sequences into a padded batch and back, capi's
  /// attention_varlen.cpp). Spans must not overlap in dst; a span of count 0 copies nothing.
  /// Throws octet::Error (check_copy_spans) on a dtype mismatch, a negative offset or count, or a
  /// span past the end of either tensor, before anything is copied.
  virtual void copy_spans(const Tensor& dst, const Tensor& src, const std::vector<CopySpan>& spans) = 0;
  /// Waits for every enqueued operation.
  virtual void synchronize() = 0;

  // ---- elementwise (act or param; equal numel) ----
  /// y = y + a*x
  virtual void axpy(float a, const Tensor& x, const Tensor& y) = 0;
  /// x = a*x
  virtual void scale(float a, const Tensor& x) = 0;

  // ---- embedding: ids [n], table param [vocab, dim], out act [n, dim] ----
  virtual void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) = 0;
  /// dtable[ids[i]] += dout[i] for every i (dout act [n, dim], dtable param).
  virtual void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) = 0;

  // ---- norms over the last dim; x, y act [rows, dim]; mean, rstd stat [rows] ----
  // amax (the forwards' and GELU's, optional): I32 [1] of this backend's memory, amax = max(amax,
  // |y| max as stored) in float bits (NaN largest; zero it first), in the pass that writes y — the
  // producer's amax a tensor-current FP8 cast of y takes (Linear::forward x_amax). Throws
  // octet::Error for another dtype or size.
  /// RMSNorm (Zhang & Sennrich 2019): y = x * rstd * w, rstd = 1/sqrt(mean(x²) + eps).
  /// weight param [dim], or empty (non-trainable gain 1: FOG's QK-norm).
  virtual void rmsnorm_forward(const Tensor& x, const Tensor& weight, const Tensor& y, const Tensor& rstd,
                               float eps, const Tensor& amax = {}) = 0;
  /// dx act overwritten — or, with accumulate, dx += the gradient rounded to dx's dtype first (the
  /// bits of writing the gradient to a tensor of dx's dtype and axpy(1, it, dx): a residual
  /// branch's gradient added to the stream's in the pass that computes it); dweight param
  /// accumulated (skipped if empty). dx must not alias x or dy.
  virtual void rmsnorm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy,
                                const Tensor& dx, const Tensor& dweight, bool accumulate) = 0;
  /// LayerNorm (Ba et al. 2016): y = (x − mean) * rstd * w + b; weight, bias param [dim].
  virtual void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                                 const Tensor& mean, const Tensor& rstd, float eps,
                                 const Tensor& amax = {}) = 0;
  /// dx, dweight, dbias as rmsnorm_backward (accumulate the same).
  virtual void layernorm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                                  const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                                  const Tensor& dweight, const Tensor& dbias, bool accumulate) = 0;

  // ---- RoPE (Su et al., arXiv 2104.09864), rotate-half pairing (i, i + D/2) ----
  /// x act rotated in place by angle t * theta^(-2i/D), x [B, H, T, D] when layout is HeadsMajor,
  /// [B, T, H, D] when TokensMajor (attention.h AttnLayout; the same bits per (b, h, t) row in
  /// both); inverse=true rotates by −angle (the backward of the forward rotation). Throws
  /// octet::Error for a rank other than 4, an odd head_dim or a theta that is not positive and finite.
  virtual void rope(const Tensor& x, float theta, bool inverse, AttnLayout layout) = 0;

  // ---- activations (act) ----
  /// GELU, tanh approximation (Hendrycks & Gimpel 2016), as GPT-2. x, y equal numel. amax: the
  /// amax of y (forward) or dx (backward) as stored, as the norms' (above).
  virtual void gelu_forward(const Tensor& x, const Tensor& y, const Tensor& amax = {}) = 0;
  virtual void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx,
                             const Tensor& amax = {}) = 0;
  /// SwiGLU (Shazeer 2020): h [rows, 2F] = [gate | up], y [rows, F] = silu(gate) * up.
  virtual void swiglu_forward(const Tensor& h, const Tensor& y) = 0;
  virtual void swiglu_backward(const Tensor& h, const Tensor& dy, const Tensor& dh) = 0;

  // ---- head layout (act) ----
  /// qkv [B, T, (H + 2G) * D] (q heads, then k heads, then v heads) -> q [B,H,T,D], k,v [B,G,T,D]
  /// in `layout` HeadsMajor, q [B,T,H,D], k,v [B,T,G,D] in TokensMajor (attention.h AttnLayout).
  /// Pure data movement. Throws octet::Error when the shapes disagree.
  virtual void split_qkv(const Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v,
                         AttnLayout layout) = 0;
  /// The inverse: dq, dk, dv (in `layout`) -> dqkv [B, T, (H + 2G) * D].
  virtual void merge_qkv(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qkv,
                         AttnLayout layout) = 0;
  /// x [B, H, T, D] -> y [B, T, H * D].
  virtual void heads_to_tokens(const Tensor& x, const Tensor& y) = 0;
  /// x [B, T, H * D] -> y [B, H, T, D] (H and D from y's shape).
  virtual void tokens_to_heads(const Tensor& x, const Tensor& y) = 0;

  // ---- GEMMs and attention ----
  virtual std::unique_ptr<Linear> make_linear(const LinearSpec& spec) = 0;
  /// config.precision FP64 is CPU-only; the CUDA backend takes BF16 and FP8.
  virtual std::unique_ptr<Attention> make_attention(const AttentionShape& shape,
                                                    const AttentionConfig& config) = 0;

  // ---- recurrent mixer (Gated DeltaNet, recurrent.h); no saved state: the backward recomputes ----
  /// o act [B, H, T, Dv] written. Throws octet::Error naming a shape or dtype mismatch; the CUDA
  /// backend throws "not implemented on cuda yet".
  virtual void gated_delta_forward(const GatedDeltaArgs& in, const Tensor& o) = 0;
  /// d_o act [B, H, T, Dv]; dq, dk act [B, H, T, Dk], dv act [B, H, T, Dv] and dgates act (the
  /// layout of in.gates) overwritten.
  virtual void gated_delta_backward(const GatedDeltaArgs& in, const Tensor& d_o, const Tensor& dq,
                                    const Tensor& dk, const Tensor& dv, const Tensor& dgates) = 0;

  // ---- loss: logits act [n, vocab], targets ids [n] (a target < 0 is ignored) ----
  /// Softmax cross-entropy. Writes dlogits act = (softmax − onehot) * grad_scale (may alias
  /// logits) and adds the summed loss over counted tokens (nats) to loss_sum (acc F64 [1]).
  virtual void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& dlogits,
                             float grad_scale, const Tensor& loss_sum) = 0;

  // ---- reductions ----
  /// out (acc F64 [1]) += Σ x² over x (act or param). NaN/inf propagate.
  virtual void sum_squares(const Tensor& x, const Tensor& out) = 0;
  /// Central moments of x (act or param): {mean, variance, kurtosis = m4 / var²} (kurtosis 0 if
  /// var == 0). Synchronizes (diagnostics only).
  struct Moments {
    double mean = 0, variance = 0, kurtosis = 0;
  };
  virtual Moments moments(const Tensor& x) = 0;

  // ---- optimizer ----
  /// AdamW (Loshchilov & Hutter, arXiv 1711.05101) on FP32 master weights, step >= 1; all param
  /// [n]: m = b1 m + (1−b1) g; v = b2 v + (1−b2) g²; p -= lr (m̂/(sqrt(v̂)+eps) + wd p).
  virtual void adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, float lr,
                     float beta1, float beta2, float eps, float weight_decay, int64_t step) = 0;
  /// The fused optimizer step, part 1 (octet/adamw_rule.h decide_step; no host read): from
  /// norm_sq (acc F64 [1], the global Σg²) and loss_sum (acc F64 [1], or an empty Tensor: not
  /// checked) decides on the device whether the step is skipped (norm or loss not finite) and the
  /// clip factor, and updates state (F64 [kOptStateSlots], adamw_rule.h OptStateSlot): a skip
  /// bumps kOptSkipped and kOptBadInARow; an update advances kOptSteps to t and writes
  /// kOptBc1/kOptBc2 = bias_corr[t − 1] (F64 [T, 2], row t−1 = {1−β1^t, 1−β2^t}; the caller keeps
  /// T >= every t it can reach — a t beyond T writes NaN corrections, poisoning the update).
  virtual void adamw_prepare(const Tensor& norm_sq, const Tensor& loss_sum, const Tensor& bias_corr,
                             const Tensor& state, float grad_clip) = 0;
  /// Part 2: unless state says skip, AdamW (as adamw(), with t and the corrections from state)
  /// with the gradients multiplied by the clip factor (fp32(g·c); grad itself is not written) over
  /// param [n] and grad, m, v [n] (all F32). Weight decay per element from segments (F64 [k, 2],
  /// rows {end, decay} with integer ends increasing to n: element i belongs to the first row whose
  /// end > i, decayed by weight_decay if decay != 0, else not). One launch for the n elements.
  virtual void adamw_apply(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                           const Tensor& segments, const Tensor& state, float lr, float beta1, float beta2,
                           float eps, float weight_decay) = 0;
};

/// copy_spans' checks, shared by every backend: dst and src of one dtype and not empty (unless no
/// span copies anything), every span inside both. Throws octet::Error naming the first span that is
/// not.
void check_copy_spans(const Tensor& dst, const Tensor& src, const std::vector<CopySpan>& spans);

/// The CPU reference backend. Never null.
std::unique_ptr<Backend> make_cpu_backend();

/// Where the CUDA backend runs. Every call of the backend makes `device` current for its duration
/// (and restores the caller's device), and enqueues on `stream`.
struct CudaOptions {
  int device = 0;          ///< CUDA device ordinal
  void* stream = nullptr;  ///< the caller's cudaStream_t (e.g. PyTorch's current stream); null:
                           ///< the backend creates and owns a non-blocking stream on `device`
};
/// The CUDA backend; throws octet::Error if octet was built without CUDA, the device does not
/// exist, or it is not sm_90 or newer.
std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& options = {});
/// "cpu", "cuda" or "cuda:N"; throws octet::Error naming an unknown device.
std::unique_ptr<Backend> make_backend(const std::string& device);

}  // namespace octet
