// octet/eval.h — evaluation: using a finished run (load its config, weights and tokenizer, and
// score text with it: loss, perplexity, bits per byte; docs/use.md §"Evaluation"), the trainer's
// validation loss and sample, and the per-layer diagnostics each evaluation logs (docs/training.md
// §Output).
//
// A run directory is what `octet train --out D` writes: config.toml (the resolved config),
// model.safetensors (weights), checkpoint.safetensors (weights, AdamW moments and the FP8
// quantizer state) and, for a BPE tokenizer, tokenizer.model. Errors: a missing or corrupt run throws
// octet::Error naming the file.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "octet/backend.h"
#include "octet/model.h"
#include "octet/train.h"

namespace octet {

class Communicator;  // octet/dist.h

struct LoadedRun {
  RunConfig cfg;                     ///< <dir>/config.toml (device replaced by the one asked for)
  std::unique_ptr<Backend> backend;  ///< make_backend(device)
  std::unique_ptr<Model> model;      ///< the run's arm and activations, micro-batch cfg.train.batch_size
  /// The tokens the loaded weights trained on (tokens_hash_hex of their corpus), as the loaded file
  /// records it (a checkpoint's state, a weights file's octet_tokens_hash); empty if it records none.
  std::string tokens_hash;
};

/// Loads the run in `dir` on `device` ("" = the run's own). Weights: `checkpoint` if given (a
/// training checkpoint under any file name, told by its metadata, whose quantizer state is restored
/// too, or any weights file of save_weights), else <dir>/checkpoint.safetensors if present (so tensor-delayed
/// FP8 scales are the trained ones), else <dir>/model.safetensors. A training checkpoint's recorded
/// meaning keys must be config.toml's (check_recorded_meaning: another arm's or another model's
/// checkpoint is refused, whichever file it is). Throws octet::Error: "no run in DIR (missing
/// config.toml)", a missing weights file, meaning keys that differ, weights that do not fit the config.
LoadedRun load_run(const std::string& dir, const std::string& device, const std::string& checkpoint = "");

/// <run>/tokenizer.model: the SentencePiece model a BPE run trained with, copied into the run when
/// it starts, so that sample, eval and export encode as the run did whatever becomes of the corpus
/// and the cache.
inline constexpr const char* kRunTokenizerFile = "tokenizer.model";

/// The tokenizer of the run in `run_dir`: bytes, or the run's tokenizer.model. A run written before
/// runs kept their tokenizer has none: its tokenizer is then the one data.path's corpus gives now
/// (found in data.cache_dir, or trained again). Throws octet::Error for an unreadable model or one
/// whose piece count is not model.vocab_size.
std::unique_ptr<Tokenizer> load_run_tokenizer(const RunConfig& cfg, const std::string& run_dir);

/// <run_dir>/tokenizer.model if the run has one, else "" (load_dataset's tokenizer_model).
std::string run_tokenizer_model(const std::string& run_dir);

/// Dataset::tokens_hash as TrainState::tokens_hash records it (16 lowercase hex digits).
std::string tokens_hash_hex(const Dataset& ds);

/// That `ds` holds the tokens the run's checkpoint `recorded` (TrainState::tokens_hash; not
/// checked when it records none). Throws octet::Error "cannot <action> <run_dir>: the corpus of
/// data.path gives other tokens than the run trained on (...); <remedy>" otherwise.
void check_run_tokens(const TrainState& recorded, const Dataset& ds, const std::string& run_dir,
                      const std::string& action, const std::string& remedy);
/// Writes `ds`'s SentencePiece model to <run_dir>/tokenizer.model (crash-safely) unless it is
/// there; nothing for a byte tokenizer. Throws octet::Error if it cannot be read or written.
void keep_run_tokenizer(const std::string& run_dir, const Dataset& ds);

struct EvalResult {
  double loss = 0;           ///< mean cross-entropy, nats per predicted token
  double perplexity = 0;     ///< exp(loss)
  double bits_per_byte = 0;  ///< summed loss / ln 2 / bytes of the text (tokenizer-independent)
  int64_t tokens = 0;        ///< predicted tokens
  int64_t bytes = 0;         ///< bytes of the text scored
};

/// Scores `text`: its tokens are cut into consecutive windows of seq_len + 1 (stride seq_len, as
/// the training split; the last window may be shorter), so every token after the first is
/// predicted once with up to seq_len tokens of context. `separators` are offsets of newlines in
/// `text` that are not text (Corpus::separators: what read_corpus puts between two files): their
/// tokens are context for what follows but are never predicted, and their bytes are not counted.
/// Throws octet::Error if the text has fewer than 2 tokens or nothing to predict.
EvalResult evaluate_text(Model& model, const Tokenizer& tok, const std::string& text,
                         const std::vector<int64_t>& separators = {});

/// The trainer's validation loss: the mean over the first `batches` fixed validation batches
/// (Dataset::val_batch) of model.batch() windows — the number `octet train` logs at an evaluation.
/// With `comm` of N ranks (octet/dist.h; every rank calls it), rank r scores the r-th slice of each
/// batch of N·model.batch() windows and the sums are added over the ranks: the windows and the
/// number of one rank with batch N·model.batch() (docs/distributed.md).
double evaluate_validation(Model& model, const Dataset& data, int64_t batches, Communicator* comm = nullptr);

// ---- per-layer diagnostics of an evaluation (layer_diagnostics.cpp; docs/training.md §Output) ----

/// The dQ bias along the mean key of one attention layer (docs/delta-matching.md §"The dQ bias
/// along the mean key"). A non-zero softmax-gradient row sum r_i = Σ_j dS_ij puts the term
/// τ r_i k̄_i into dQ_i, along the attention-weighted mean key k̄_i = Σ_j P_ij K̂_j; per sampled
/// query row i its size relative to the gradient is b_i = ||τ r_i k̄_i||₂ / ||dQ_i||₂, with r_i
/// before dS is quantized and dQ the backward's own (from the quantized dS). Rows whose dQ is 0
/// (a row that sees one key, under the matched delta) are left out of mean and max.
struct DqBias {
  /// The per-row b_i shares the degeneracy docs/training.md §Output describes for the row residual:
  /// in rows whose exact dQ is ~0 (one-hot and sink rows) r_i and dQ_i are both rounding noise and
  /// b_i ~ 1 in any arm, FP64 included, so mean and max can be set by a few such rows; `norm` weighs
  /// each row by its gradient and is the number to compare.
  double mean = 0;               ///< mean of b_i over the sampled rows
  double max = 0;                ///< max of b_i (NaN if any row is NaN)
  double norm = 0;               ///< sqrt(Σ_i ||τ r_i k̄_i||²) / sqrt(Σ_i ||dQ_i||²) over the rows
  double row_residual_mean = 0;  ///< the replay's own mean row residual (attention.h AttentionStats)
  int64_t rows = 0;              ///< rows in mean and max
};

/// The query rows attention_dq_bias samples, [begin, end) of one sequence of seq_len tokens: four
/// blocks ending at ⌈k·seq_len/4⌉ (k = 1..4: short and long rows alike), each of
/// clamp(8192 / seq_len, 1, 16) rows (at most the rows since the previous block), so a layer costs
/// ~20k query-key pairs per head whatever seq_len (8 rows per block at 1024 tokens). Throws
/// octet::Error if seq_len < 1.
struct DqSampleBlock {
  int64_t begin = 0, end = 0;
};
std::vector<DqSampleBlock> dq_sample_blocks(int64_t seq_len);

/// Replays one attention layer's backward on the CPU reference (octet/attention.h: the twin of
/// every backend's kernels, with the layer's own config: precision, delta, form, formats,
/// p_scale) for the rows of dq_sample_blocks(T), every head, and returns their DqBias. Each block
/// of rows [b, e) is its own causal problem with the keys [0, e) it sees (bottom-right aligned:
/// the same rows as in the full attention); the only difference to the layer's own backward is
/// that the FP8 scales of Q, K, V and dO come from the sample, not the whole batch (E4M3/E5M2
/// rounding is relative, so this moves only values near the subnormal range). Cost: ~20k·H query-key pairs,
/// on the host (0.2 s per layer of 12 heads of 64 at 1024 tokens on one core). Throws octet::Error if s.d_o
/// is empty (no capture) or the sample's vectors do not match its shape (batch 1, seq_q = seq_k).
DqBias attention_dq_bias(const AttentionSample& s);

/// One layer of an evaluation's diagnostics.
struct LayerReport {
  LayerDiag diag;                 ///< Model::diagnostics(): kurtosis, row residual, quantizer stats
  bool attention = false;         ///< the layer has attention (not a Gated DeltaNet layer)
  std::optional<DqBias> dq_bias;  ///< attention layers whose last backward ran with capture
};
/// Model::diagnostics() and, per attention layer with a capture (Model::set_attention_capture),
/// attention_dq_bias of its sample, the layers' replays on up to 8 host threads. Synchronizes; the
/// cost is the replays' (host only).
std::vector<LayerReport> layer_diagnostics(Model& model);

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
