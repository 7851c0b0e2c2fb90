// octet/eval.h — using a finished run: load its config, weights and tokenizer, and score text with
// it (loss, perplexity, bits per byte) without training. (docs/use.md §"Evaluation")
//
// A run directory is what `octet train --out D` writes: config.toml (the resolved config),
// model.safetensors (weights) and checkpoint.safetensors (weights, AdamW moments and the FP8
// quantizer state). Errors: a missing or corrupt run throws octet::Error naming the file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "octet/backend.h"
#include "octet/model.h"
#include "octet/train.h"

namespace octet {

class Communicator;  // octet/dist.h

struct LoadedRun {
  RunConfig cfg;                     ///< <dir>/config.toml (device replaced by the one asked for)
  std::unique_ptr<Backend> backend;  ///< make_backend(device)
  std::unique_ptr<Model> model;      ///< the run's arm and activations, micro-batch cfg.train.batch_size
};

/// Loads the run in `dir` on `device` ("" = the run's own). Weights: `checkpoint` if given (a
/// checkpoint.safetensors, whose quantizer state is restored too, or any weights file of
/// save_weights), else <dir>/checkpoint.safetensors if present (so tensor-delayed FP8 scales are
/// the trained ones), else <dir>/model.safetensors. Throws octet::Error: "no run in DIR (missing
/// config.toml)", a missing weights file, weights that do not fit the config.
LoadedRun load_run(const std::string& dir, const std::string& device, const std::string& checkpoint = "");

/// The run's tokenizer (reads the corpus of data.path for a BPE tokenizer's cache key: the
/// SentencePiece model is found, or trained again identically, in data.cache_dir).
std::unique_ptr<Tokenizer> load_run_tokenizer(const RunConfig& cfg);

struct EvalResult {
  double loss = 0;           ///< mean cross-entropy, nats per predicted token
  double perplexity = 0;     ///< exp(loss)
  double bits_per_byte = 0;  ///< summed loss / ln 2 / bytes of the text (tokenizer-independent)
  int64_t tokens = 0;        ///< predicted tokens
  int64_t bytes = 0;         ///< bytes of the text scored
};

/// Scores `text`: its tokens are cut into consecutive windows of seq_len + 1 (stride seq_len, as
/// the training split; the last window may be shorter), so every token after the first is
/// predicted once with up to seq_len tokens of context. Throws octet::Error if the text has fewer
/// than 2 tokens.
EvalResult evaluate_text(Model& model, const Tokenizer& tok, const std::string& text);

/// The trainer's validation loss: the mean over the first `batches` fixed validation batches
/// (Dataset::val_batch) of model.batch() windows — the number `octet train` logs at an evaluation.
/// With `comm` of N ranks (octet/dist.h; every rank calls it), rank r scores the r-th slice of each
/// batch of N·model.batch() windows and the sums are added over the ranks: the windows and the
/// number of one rank with batch N·model.batch() (docs/distributed.md).
double evaluate_validation(Model& model, const Dataset& data, int64_t batches, Communicator* comm = nullptr);

/// The trainer's sample at each evaluation (as llm.c prints one): a greedy continuation of
/// sample_tokens tokens after the first min(8, seq_len / 2) tokens of the first validation window,
/// decoded (generate.h; fp32 on the cpu, bf16 on cuda). Greedy, so training's random state is
/// untouched. Loads the run's tokenizer once.
class EvalSampler {
 public:
  EvalSampler(const RunConfig& cfg, Model& model, const Dataset& data);
  ~EvalSampler();
  /// "prompt|continuation" as text, with the current weights of the model.
  std::string sample();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace octet
