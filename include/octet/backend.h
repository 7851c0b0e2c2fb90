// octet/backend.h — the compute interface the transformer and trainer are written against.
//
// The model (src/model) calls only these operations, so the same forward/backward code runs on the
// CPU reference backend (src/cpu, the readable twin, as in karpathy/llm.c) and on the CUDA backend
// (src/cuda). Every CUDA operation is tested against its CPU twin of the same name.
//
// Memory: all float/int buffers passed to a backend live where that backend computes (host memory
// for "cpu", device memory for "cuda") and are obtained from alloc()/alloc_i32(). All tensors are
// row-major and contiguous; shapes are given per function in elements. Activations, gradients,
// master weights and optimizer states are FP32; low precision exists only inside the GEMMs and the
// attention (as quantized operands), as DeepSeek-V3 §3.3 keeps embedding, norms, loss and optimizer
// in higher precision.
//
// Errors: invalid arguments throw octet::Error; backend failures (CUDA, cuBLASLt) throw octet::Error
// naming the failed call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "octet/attention.h"
#include "octet/quant.h"

namespace octet {

/// Precision of the three GEMMs of a linear layer. FP32 (gemm_f32, no rounding of the operands) is
/// the reference path for whole-model gradient checks and the PyTorch twin (tests only; the CPU
/// backend must support it, the CUDA backend may reject it with octet::Error).
enum class LinearPrecision { BF16, FP8, FP32 };

struct LinearSpec {
  int64_t in_features = 0, out_features = 0;
  LinearPrecision precision = LinearPrecision::BF16;
  QuantConfig quant;  ///< FP8 only: recipe and formats (X, W: forward roles; dY: gradient role)
};

/// Statistics of one quantized operand at its last quantization.
struct QuantStats {
  float amax = 0.0f;
  float scale_min = 0.0f, scale_max = 0.0f;  ///< over the scale grid (scale = 1/scale_inv)
  double underflow_frac = 0.0;               ///< non-zero inputs that became 0
  double saturated_frac = 0.0;               ///< inputs beyond fp8_max after scaling
};

/// One linear layer's GEMMs Y = X Wᵀ and their quantizer state (delayed-scaling histories).
/// X [M, in], W [out, in], Y [M, out]. Forward: Y = X̂Ŵᵀ. Backward: dX = dŶŴ, dW += dŶᵀX̂ with each
/// operand quantized from its high-precision source in the orientation its GEMM needs.
class Linear {
 public:
  virtual ~Linear() = default;
  virtual void forward(const float* x, const float* w, float* y, int64_t m) = 0;
  /// dx is overwritten (may be null: skipped); dw is accumulated (+=).
  virtual void backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                        int64_t m) = 0;
  /// Stats of X, W (forward) and dY (backward) at their last quantization (FP8 only).
  virtual QuantStats stats_x() const = 0;
  virtual QuantStats stats_w() const = 0;
  virtual QuantStats stats_dy() const = 0;
  /// The quantizer state a checkpoint must hold for a bitwise resume (host copy; the CUDA backend
  /// synchronizes). Layout (quant.h pack_delayed_states): for each slot X, W, dY in that order
  /// [n, amax history (n values, most recent last), delayed scale, overflow count]. Empty for
  /// BF16/FP32 and for the stateless FP8 recipes (all but tensor-delayed).
  virtual std::vector<float> quant_state() const = 0;
  /// Restores a quant_state() of a linear with the same spec; the next forward() then quantizes as
  /// the saving linear's next forward() would. Throws octet::Error naming the mismatch (wrong
  /// size, a history longer than amax_history_len, invalid values, non-empty for a stateless
  /// linear) and leaves the state unchanged.
  virtual void load_quant_state(const std::vector<float>& state) = 0;
};

/// One attention layer's forward/backward and the tensors its forward saves.
/// Layouts as in attention.h: q [B,H,Tq,D], k/v [B,G,Tk,D], o [B,H,Tq,D], lse [B,H,Tq].
class Attention {
 public:
  virtual ~Attention() = default;
  virtual void forward(const float* q, const float* k, const float* v, float* o, float* lse) = 0;
  /// dq, dk, dv overwritten. Returns the softmax-gradient residual stats (attention.h).
  virtual AttentionStats backward(const float* d_o, float* dq, float* dk, float* dv) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  ///< "cpu" or "cuda"

  // ---- memory (counts in elements) ----
  virtual float* alloc(size_t n) = 0;        ///< zero-initialized
  virtual int32_t* alloc_i32(size_t n) = 0;  ///< zero-initialized
  virtual void release(void* p) = 0;
  virtual void upload(float* dst, const float* host_src, size_t n) = 0;
  virtual void upload_i32(int32_t* dst, const int32_t* host_src, size_t n) = 0;
  virtual void download(float* host_dst, const float* src, size_t n) = 0;
  virtual void fill(float* x, float value, size_t n) = 0;
  virtual void copy(float* dst, const float* src, size_t n) = 0;
  virtual void synchronize() = 0;

  // ---- elementwise ----
  /// y = y + a*x
  virtual void axpy(float a, const float* x, float* y, size_t n) = 0;
  /// x = a*x
  virtual void scale(float a, float* x, size_t n) = 0;

  // ---- embedding: table [vocab, dim], ids [n], out [n, dim] ----
  virtual void embedding_forward(const int32_t* ids, const float* table, float* out, int64_t n,
                                 int64_t dim) = 0;
  /// dtable[ids[i]] += dout[i] for every i.
  virtual void embedding_backward(const int32_t* ids, const float* dout, float* dtable, int64_t n,
                                  int64_t dim) = 0;

  // ---- norms over the last dim; x, y [rows, dim]; stats [rows] ----
  /// RMSNorm (Zhang & Sennrich 2019): y = x * rstd * w, rstd = 1/sqrt(mean(x²) + eps).
  /// weight may be null (non-trainable, = 1: FOG's QK-norm).
  virtual void rmsnorm_forward(const float* x, const float* weight, float* y, float* rstd,
                               int64_t rows, int64_t dim, float eps) = 0;
  /// dx overwritten; dweight accumulated (skipped if null).
  virtual void rmsnorm_backward(const float* x, const float* weight, const float* rstd,
                                const float* dy, float* dx, float* dweight, int64_t rows,
                                int64_t dim) = 0;
  /// LayerNorm (Ba et al. 2016): y = (x − mean) * rstd * w + b.
  virtual void layernorm_forward(const float* x, const float* weight, const float* bias, float* y,
                                 float* mean, float* rstd, int64_t rows, int64_t dim,
                                 float eps) = 0;
  virtual void layernorm_backward(const float* x, const float* weight, const float* mean,
                                  const float* rstd, const float* dy, float* dx, float* dweight,
                                  float* dbias, int64_t rows, int64_t dim) = 0;

  // ---- RoPE (Su et al., arXiv 2104.09864), rotate-half pairing (i, i + D/2) ----
  /// x [B, H, T, D] rotated in place by angle t * theta^(-2i/D); inverse=true rotates by −angle
  /// (the backward of the forward rotation).
  virtual void rope(float* x, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim,
                    float theta, bool inverse) = 0;

  // ---- activations ----
  /// GELU, tanh approximation (Hendrycks & Gimpel 2016), as GPT-2. x, y [n].
  virtual void gelu_forward(const float* x, float* y, size_t n) = 0;
  virtual void gelu_backward(const float* x, const float* dy, float* dx, size_t n) = 0;
  /// SwiGLU (Shazeer 2020): h [rows, 2F] = [gate | up], y [rows, F] = silu(gate) * up.
  virtual void swiglu_forward(const float* h, float* y, int64_t rows, int64_t f) = 0;
  virtual void swiglu_backward(const float* h, const float* dy, float* dh, int64_t rows,
                               int64_t f) = 0;

  // ---- head layout ----
  /// qkv [B, T, (H + 2G) * D] (q heads, then k heads, then v heads) -> q [B,H,T,D], k,v [B,G,T,D].
  virtual void split_qkv(const float* qkv, float* q, float* k, float* v, int64_t batch,
                         int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim) = 0;
  /// The inverse: dq, dk, dv -> dqkv [B, T, (H + 2G) * D].
  virtual void merge_qkv(const float* q, const float* k, const float* v, float* qkv,
                         int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads,
                         int64_t head_dim) = 0;
  /// [B, H, T, D] <-> [B, T, H * D].
  virtual void heads_to_tokens(const float* x, float* y, int64_t batch, int64_t heads,
                               int64_t seq, int64_t head_dim) = 0;
  virtual void tokens_to_heads(const float* x, float* y, int64_t batch, int64_t heads,
                               int64_t seq, int64_t head_dim) = 0;

  // ---- GEMMs and attention ----
  virtual std::unique_ptr<Linear> make_linear(const LinearSpec& spec) = 0;
  /// config.precision FP64 is CPU-only; the CUDA backend takes BF16 and FP8.
  virtual std::unique_ptr<Attention> make_attention(const AttentionShape& shape,
                                                    const AttentionConfig& config) = 0;

  // ---- loss: logits [n, vocab], targets [n] (a target < 0 is ignored) ----
  /// Softmax cross-entropy. Writes dlogits = (softmax − onehot) * grad_scale (may alias logits)
  /// and returns the summed loss over counted tokens (nats) in double.
  virtual double cross_entropy(const float* logits, const int32_t* targets, float* dlogits,
                               int64_t n, int64_t vocab, float grad_scale) = 0;

  // ---- reductions (results on the host) ----
  virtual double sum_squares(const float* x, size_t n) = 0;
  /// Central moments: returns {mean, variance, kurtosis = m4 / var²} (kurtosis 0 if var == 0).
  struct Moments {
    double mean = 0, variance = 0, kurtosis = 0;
  };
  virtual Moments moments(const float* x, size_t n) = 0;

  // ---- optimizer ----
  /// AdamW (Loshchilov & Hutter, arXiv 1711.05101) on FP32 master weights, step >= 1:
  /// m = b1 m + (1−b1) g; v = b2 v + (1−b2) g²; p -= lr (m̂/(sqrt(v̂)+eps) + wd p).
  virtual void adamw(float* param, const float* grad, float* m, float* v, size_t n, float lr,
                     float beta1, float beta2, float eps, float weight_decay, int64_t step) = 0;
};

/// The CPU reference backend. Never null.
std::unique_ptr<Backend> make_cpu_backend();
/// The CUDA backend on the current device; throws octet::Error if octet was built without CUDA or
/// no GPU is usable.
std::unique_ptr<Backend> make_cuda_backend();
/// "cpu" or "cuda"; throws octet::Error naming an unknown device.
std::unique_ptr<Backend> make_backend(const std::string& device);

}  // namespace octet
