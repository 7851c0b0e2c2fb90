// octet/generate.h — autoregressive generation with a KV cache, written once against the Backend
// interface (backend.h), so the CPU reference and the CUDA backend decode with the same code.
// (docs/use.md §"Sampling")
//
// A Generator reads the parameters of a Model (model.h) and keeps, per layer, the keys and values
// of every position fed so far. feed() runs only the new tokens through the layers (their queries
// attend to the cached keys: causal attention aligned to the bottom-right, attention.h), so the
// prefix is never recomputed. Cost per new token: the linears of one position, plus O(L·d) copies
// and RoPE over the L cached positions (the same order as the attention over them).
//
// Precision. Sampling runs the model as it is deployed, not as it was trained: FP8 is a training
// device here (the master weights are FP32 in every arm, and `octet export` writes BF16 or FP32).
//   fp32  FP32 linears and LM head, FP64 attention, FP32 activations (CPU only): the reference that
//         the Hugging Face export is tested against.
//   bf16  BF16 linears, head and attention (FP32 accumulate), FP32 activations: CPU and CUDA.
// Sampling (Holtzman et al., arXiv 1904.09751 for top-p): logits / temperature, keep the top-k,
// then the smallest set of tokens whose probability reaches top-p, renormalize, draw with a
// seeded std::mt19937_64. Temperature 0 is greedy (argmax, lowest id on ties): deterministic.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "octet/model.h"

namespace octet {

enum class DecodePrecision { FP32, BF16 };
DecodePrecision parse_decode_precision(const std::string& s);  ///< "fp32" | "bf16"
std::string to_string(DecodePrecision p);

struct SampleOptions {
  int64_t max_new_tokens = 64;
  float temperature = 1.0f;  ///< 0: greedy
  int64_t top_k = 0;         ///< 0: all tokens
  float top_p = 1.0f;        ///< in (0, 1]
  uint64_t seed = 0;
  /// Throws octet::Error naming the field: max_new_tokens < 0, temperature < 0 or not finite,
  /// top_k < 0, top_p outside (0, 1].
  void validate() const;
};

class Generator {
 public:
  /// Reads model.param_data() at every feed() (the model must outlive the generator; its
  /// parameters may change between calls, e.g. during training). Any Model batch works. Throws
  /// octet::Error if `precision` is fp32 on a backend without FP64 attention (cuda).
  Generator(Model& model, DecodePrecision precision);
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  /// Positions fed since the last reset() (the cache length).
  int64_t length() const;
  /// The most positions the cache holds: the model's seq_len.
  int64_t context() const;
  /// Empties the cache.
  void reset();
  /// Runs `ids` (n >= 1 tokens, each in [0, vocab_size)) at positions [length(), length() + n)
  /// and appends their keys and values to the cache. Returns the FP32 logits [n, vocab_size]
  /// (row-major, host) of the fed positions. Throws octet::Error if length() + n exceeds the
  /// model's seq_len (the context) or an id is out of range; the cache is then unchanged.
  std::vector<float> feed(const std::vector<int32_t>& ids);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The next token from one row of logits [vocab] under `opt` (see the header comment).
int32_t sample_token(const float* logits, int64_t vocab, const SampleOptions& opt, std::mt19937_64& rng);

/// Feeds the prompt (>= 1 token), then samples up to opt.max_new_tokens tokens one at a time,
/// calling on_token(id) for each as it comes; stops early when the context (seq_len) is full.
/// Resets the generator first. Returns the new tokens. Throws octet::Error if the prompt is empty
/// or longer than the context, or opt is invalid.
std::vector<int32_t> generate(Generator& gen, const std::vector<int32_t>& prompt, const SampleOptions& opt,
                              const std::function<void(int32_t)>& on_token = {});

}  // namespace octet
