// octet/train.h — everything around the model that makes a training run: configuration (TOML),
// corpus and tokenizers, the train/validation split, AdamW with warmup + cosine decay, safetensors
// weights and crash-safe checkpoints, metrics (JSONL, progress lines, plots) and the trainer loop,
// plus the side-by-side comparison of precision arms.
//
// Formats and sources: TOML v1.0 (toml++), safetensors (Hugging Face's format: 8-byte little-endian
// header length, a JSON header of dtype/shape/data_offsets, raw little-endian data), SentencePiece
// BPE (Kudo & Richardson 2018), AdamW (Loshchilov & Hutter, arXiv 1711.05101), warmup + cosine decay
// (Loshchilov & Hutter, SGDR, arXiv 1608.03983, as GPT-3 uses it).
// Errors: bad input (unknown key, out-of-range value, missing corpus, corrupt checkpoint) throws
// octet::Error with one line naming the problem; a run that stops because of repeated NaN/inf steps
// throws TrainingStopped.
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "octet/model.h"

namespace octet {

struct DistSession;  // octet/dist.h

// ---------------------------------------------------------------------------------------------
// Configuration

struct TrainConfig {
  int64_t steps = 200;        ///< optimizer steps
  int64_t batch_size = 16;    ///< sequences per micro-batch (over all ranks: docs/distributed.md)
  int64_t grad_accum = 1;     ///< micro-batches per optimizer step
  float lr = 3e-3f;           ///< peak learning rate
  float min_lr_ratio = 0.1f;  ///< cosine floor as a fraction of lr
  int64_t warmup_steps = 20;  ///< linear warmup from lr/warmup to lr
  float weight_decay = 0.1f;  ///< decoupled; matrices and embeddings only
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float grad_clip = 1.0f;  ///< global-norm clip; 0 disables
  uint64_t seed = 1234;
  int64_t eval_every = 50;         ///< steps between validation passes (and the last step)
  int64_t eval_batches = 4;        ///< validation micro-batches per pass (fixed windows)
  int64_t sample_tokens = 0;       ///< greedy sample printed at each evaluation (eval.h); 0: off
  int64_t checkpoint_every = 100;  ///< 0: only at the end
  /// Keep the run's weights: the end-of-run checkpoint.safetensors and model.safetensors. false:
  /// periodic checkpoints (checkpoint_every) are written while the run goes, so a cut run resumes,
  /// and removed when it finishes, which leaves metrics and config only (a sweep that keeps no
  /// weights); `compare --resume` keeps such a finished arm when its config is the same run.
  bool save_weights = true;
  int64_t log_every = 1;      ///< progress-line interval
  int64_t max_bad_steps = 5;  ///< consecutive NaN/inf steps before the run stops
  /// Keep only each layer's input between forward and backward and recompute the rest (model.h
  /// ModelMemory): less activation memory for one more forward per step, bitwise the same run.
  /// The per-layer diagnostics of the evaluation records are then not computed.
  bool activation_checkpointing = false;
};

struct DataConfig {
  std::string path;               ///< text file, directory (recursive) or glob; "": the default
                                  ///< corpus, default_corpus_path()
  std::string tokenizer = "bpe";  ///< "bpe" (SentencePiece) | "byte"
  double val_fraction = 0.1;      ///< fraction of windows held out, in (0, 0.5]
  std::string cache_dir;          ///< tokenizer model and token cache; "": default_cache_dir()
  int64_t max_bytes = 0;          ///< 0: whole corpus; else the first max_bytes bytes
};

/// Data parallel (docs/distributed.md); ignored by a run of one rank.
struct DistConfig {
  /// MiB of F32 gradients per bucket reduce-scattered while the backward runs (§"Gradient buckets");
  /// 0: one bucket after the whole backward.
  float bucket_mb = 25.0f;
  /// ZeRO-1's weight all-gather moves the FP8 linears' weights as their E4M3/E5M2 codes (1 byte per
  /// parameter, octet/dist.h Fp8WeightGather) instead of FP32; the rest stays FP32. Needs the
  /// tensor-current recipe; a no-op for the bf16/fp32 arms (nothing is FP8). §"FP8 all-gather".
  bool allgather_fp8 = false;
};

struct RunConfig {
  ModelConfig model;
  PrecisionConfig precision;
  /// The config key precision.activations as given: "auto" (resolve_run_config() picks the
  /// backend's preferred_activation_dtype()), "f32" or "bf16". precision.activations holds the dtype.
  std::string activations = "auto";
  /// The config key precision.attn_form as given: "auto" (resolve_run_config() picks flash — the
  /// fused FP8 kernels, or cuDNN's fused SDPA for BF16 attention — on cuda, whole otherwise: the
  /// unfused path), "whole" or "flash".
  std::string attn_form = "auto";
  TrainConfig train;
  DataConfig data;
  DistConfig dist;
  std::string device = "cpu";
  void validate() const;  ///< all sections; throws octet::Error naming the field
};

/// Reads a TOML file (sections [model], [precision], [train], [data], top-level `device`), then
/// applies "key=value" overrides (dotted keys, e.g. "model.n_layer=4"). Unknown keys, wrong types and
/// out-of-range values throw octet::Error naming the key. `path` may be empty (defaults only).
RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {});
/// Sets one dotted key from its string form; throws octet::Error for an unknown key or bad value.
void set_config_value(RunConfig& cfg, const std::string& key, const std::string& value);
/// Resolves what a run's config leaves to its circumstances: precision.activations = "auto" to
/// `backend`'s preferred_activation_dtype() (bf16 on cuda, f32 on cpu); precision.attn_form = "auto"
/// to flash (the flash FP8 attention kernels) for the FP8-attention arms on cuda when they support
/// the shape, whole otherwise; an empty data.path / data.cache_dir to the default corpus / tokenizer
/// cache under octet's home, as absolute paths. Afterwards the config names every value (what
/// config.toml records). Throws octet::Error for model.mixer = hybrid on cuda (no CUDA Gated
/// DeltaNet kernel yet), before a run writes anything.
void resolve_run_config(RunConfig& cfg, const Backend& backend);
/// Data parallel: train.batch_size (the global micro-batch) must divide evenly over `ranks`. Throws
/// octet::Error naming both otherwise; the `--nproc` launcher calls it before starting any rank.
void check_rank_split(const RunConfig& cfg, int64_t ranks);
/// The resolved config as TOML (round-trips through load_config).
std::string to_toml(const RunConfig& cfg);
/// One row of the start-up table: the dotted key, its value as typed (floats in the shortest form
/// that reads back exactly: 0.003) and what it means.
struct ConfigRow {
  std::string key, value, meaning;
  bool operator==(const ConfigRow&) const = default;
};
/// Every setting, in a stable order (the start-up table).
std::vector<ConfigRow> config_rows(const RunConfig& cfg);
/// Prints rows as the Markdown table `| parameter | value | meaning |` (llm.c's start-up table); with
/// `base` (the same keys), only the rows whose value differs from base's.
void print_config_table(FILE* log, const std::vector<ConfigRow>& rows,
                        const std::vector<ConfigRow>& base = {});

/// A key whose value a resume changes (values in config.toml's form).
struct ConfigChange {
  std::string key, from, to;
};
/// The keys whose values differ between a run's saved config and the one requested on resume.
/// "Schedule" keys (train.steps, train.lr, train.min_lr_ratio, train.warmup_steps,
/// train.eval_every, train.checkpoint_every, train.log_every, train.max_bad_steps,
/// train.activation_checkpointing, device, data.path, data.cache_dir, ...: the table in
/// src/train/config.cpp marks them) may change (a new data.path must give the tokens the checkpoint
/// recorded: check_run_tokens, check_resume); any other key changes what the run is,
/// and a change throws octet::Error naming the key, its two values and `run_dir` (docs/training.md §Resume).
std::vector<ConfigChange> resume_changes(const RunConfig& saved, const RunConfig& requested,
                                         const std::string& run_dir);
/// The meaning keys (those resume_changes refuses to change) and their values in config.toml's form.
std::map<std::string, std::string> meaning_values(const RunConfig& cfg);
/// A resume's (and a load's: sample, eval, export) check of config.toml itself: the meaning keys of
/// `requested` against those `recorded` in the run's checkpoint (TrainState::meaning; keys it does
/// not record are not checked). Throws octet::Error "cannot <action> <run_dir> with ..." naming the
/// first key that differs and both values: a hand-edited meaning key is refused as the same change
/// through --set is. `file`: the weights file that recorded them when it is not the run's own (a
/// --checkpoint of another run): "cannot load <file> into <run_dir>: it was trained with ...".
void check_recorded_meaning(const std::map<std::string, std::string>& recorded, const RunConfig& requested,
                            const std::string& run_dir, const std::string& action = "resume",
                            const std::string& file = "");

/// Replaces `path` by the concatenated `chunks` crash-safely: writes <path>.tmp (created fresh: a
/// file or symbolic link of that name is unlinked first, never written through), fsyncs, renames.
/// Throws octet::Error "cannot write <path>.tmp: <cause>" (or "cannot rename ...") and leaves
/// `path` as it was.
void write_file_atomic(const std::string& path, const std::vector<std::string_view>& chunks);
/// The bytes of the file at `path`. Throws octet::Error "cannot read <what> <path>: <cause>".
std::string read_file_bytes(const std::string& path, const std::string& what);

/// The output rules of the commands that write (docs/cli.md): a file given on the command line is
/// never replaced, and a directory is written only when new or empty. Each throws octet::Error
/// naming the option and the path ("--dump x.st exists; not overwritten (remove it or give another
/// path)"), before any work is done.
void require_new_file(const std::string& path, const std::string& option);
void require_empty_or_new_dir(const std::string& path, const std::string& option);
/// When the directory `dir` holds nothing but write_file_atomic's temporary files of `names`
/// ("config.toml.tmp", ...: the leftovers of a process stopped while writing its first file),
/// removes them, leaving `dir` empty; otherwise (anything else there, or no such directory) touches
/// nothing. Throws octet::Error if a leftover cannot be removed.
void remove_interrupted_writes(const std::string& dir, const std::vector<std::string>& names);
/// That `path` can be a directory: it is one (or a link to one), or it does not exist and the
/// nearest of its ancestors that exists is a directory. Throws octet::Error naming the option and
/// the path: "is a file, not a directory" (the path, or "PATH: ANCESTOR is a file, ..."), "is a
/// symbolic link to nothing". require_empty_or_new_dir checks it first.
void require_directory_path(const std::string& path, const std::string& option);
/// Creates the output directory `path` (and its parents) of `option`. Throws octet::Error
/// "cannot create <option> <path>: <cause>".
void create_output_dir(const std::string& path, const std::string& option);

// ---------------------------------------------------------------------------------------------
// Corpus and tokenizers

/// octet's home, where the default corpus and the tokenizer cache live (docs/cli.md §"Where octet
/// keeps data"): $OCTET_HOME, else the source repository the running binary was built in, else
/// $XDG_DATA_HOME/octet (~/.local/share/octet). Throws octet::Error if none can be named.
std::string octet_home();
/// <home>/data/linux-docs: the corpus of `./dev demo`, used when data.path is "".
std::string default_corpus_path();
/// <home>/.cache/octet: SentencePiece models and token streams, used when data.cache_dir is "".
std::string default_cache_dir();
/// data.path / data.cache_dir as configured, or the default when "".
std::string resolve_corpus_path(const std::string& configured);
std::string resolve_cache_dir(const std::string& configured);

/// The corpus as raw bytes: a file, every regular file under a directory (sorted by path), or the
/// files matching a glob (sorted); files are joined with "\n". Throws octet::Error if the path
/// matches nothing, a file cannot be read (naming the cause), or the result is empty; `is_default`
/// (the path is default_corpus_path()) makes "not found" say how to get the default corpus.
struct Corpus {
  std::string text;
  std::vector<std::string> files;
  int64_t invalid_utf8 = 0;  ///< bytes that are not valid UTF-8 (kept as bytes)
  /// Offsets in `text` of the '\n' read_corpus inserted between two files (none for one file):
  /// not text of the corpus (octet eval does not score them).
  std::vector<int64_t> separators;
};
Corpus read_corpus(const std::string& path, int64_t max_bytes = 0, bool is_default = false);
/// Number of bytes of `s` that are not part of a valid UTF-8 sequence.
int64_t count_invalid_utf8(const std::string& s);

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  /// The text of `ids`: decode(encode(s)) == s for valid UTF-8 s. Decoding is a concatenation of
  /// per-token strings, so decode(prefix) is a prefix of decode(ids) (streaming prints the growth).
  /// Throws octet::Error for an id outside the vocabulary.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  /// The SentencePiece model file behind a "bpe" tokenizer; empty for "byte".
  virtual std::string sentencepiece_model() const { return {}; }
};
/// Bytes 0..255 are the tokens (vocab 256): every input is encodable.
std::unique_ptr<Tokenizer> make_byte_tokenizer();
/// SentencePiece BPE with `vocab_size` pieces (byte fallback, identity normalization, newline as
/// its own piece), trained on `text` once and cached as <cache_dir>/spm-<hash>.model (the hash covers
/// the text and the vocab size). Invalid UTF-8 is replaced by U+FFFD before training and encoding.
std::unique_ptr<Tokenizer> make_bpe_tokenizer(const std::string& text, int64_t vocab_size,
                                              const std::string& cache_dir);

/// A BPE tokenizer from a SentencePiece model file written by make_bpe_tokenizer (a run's own
/// tokenizer.model). Throws octet::Error if the file is missing or unreadable, or if it has other
/// than `vocab_size` pieces.
std::unique_ptr<Tokenizer> load_bpe_tokenizer(const std::string& model_path, int64_t vocab_size);

/// The tokenizer of a run: data.tokenizer "byte", or "bpe" with model.vocab_size pieces trained on
/// (or cached for) `corpus_text` in data.cache_dir.
std::unique_ptr<Tokenizer> make_tokenizer(const RunConfig& cfg, const std::string& corpus_text);

/// Tokenized corpus with a deterministic train/validation split into windows of seq_len+1 tokens:
/// windows are grouped 8 at a time and every k-th group (k = round(1/val_fraction)) is validation.
/// Training windows are visited in a seeded permutation per epoch; the data position (windows
/// consumed) is all the state a checkpoint needs.
class Dataset {
 public:
  Dataset(std::vector<int32_t> tokens, int64_t vocab_size, int64_t seq_len, double val_fraction,
          uint64_t seed);
  int64_t n_tokens() const { return int64_t(tokens_.size()); }
  int64_t n_train_windows() const { return int64_t(train_.size()); }
  int64_t n_val_windows() const { return int64_t(val_.size()); }
  /// Fills ids/targets [batch, seq_len] with the next training windows and advances the position
  /// by batch·world: data parallel rank `rank` of `world` takes windows [rank·batch, (rank+1)·batch)
  /// of the next batch·world, so N ranks × batch B see the global order of 1 rank × batch N·B
  /// (docs/distributed.md). Throws octet::Error for a rank outside [0, world).
  void next_train_batch(int64_t batch, std::vector<int32_t>& ids, std::vector<int32_t>& targets, int rank = 0,
                        int world = 1);
  /// The i-th fixed validation batch (wraps around the validation windows).
  void val_batch(int64_t i, int64_t batch, std::vector<int32_t>& ids, std::vector<int32_t>& targets) const;
  int64_t position() const { return position_; }
  void set_position(int64_t p) { position_ = p; }
  /// Unigram entropy of the training tokens, in nats per token: the loss of the best model that
  /// ignores context (a learned model must go far below it).
  double unigram_entropy() const;
  /// FNV-1a (64-bit) of the token ids as int32 bytes: what a checkpoint records of its data, so
  /// that a resume notices a corpus whose text (and so its tokens) changed.
  uint64_t tokens_hash() const { return tokens_hash_; }
  /// The SentencePiece model file the tokens were encoded with (load_dataset sets it for a BPE
  /// tokenizer; empty for bytes and for a Dataset built from tokens).
  const std::string& tokenizer_model() const { return tokenizer_model_; }
  void set_tokenizer_model(std::string path) { tokenizer_model_ = std::move(path); }

 private:
  int64_t window_at(int64_t pos) const;  // training window index of a data position
  std::vector<int32_t> tokens_;
  int64_t seq_len_;
  uint64_t seed_;
  std::vector<int64_t> train_, val_;
  int64_t position_ = 0;
  mutable int64_t perm_epoch_ = -1;
  mutable std::vector<int64_t> perm_;
  std::string tokenizer_model_;
  uint64_t tokens_hash_ = 0;
};

/// Memory the kernel can give without swapping (MemAvailable of /proc/meminfo), in bytes; 0 when
/// unknown.
double host_memory_available();
/// A lower bound of a CPU training process's memory, in bytes: FP32 parameters, gradients and
/// AdamW's two moments (16 bytes per parameter of `model`), and the FP32 logits of one micro-batch
/// of `micro_batch` sequences and their gradient.
double cpu_train_bytes_lower_bound(const ModelConfig& model, int64_t micro_batch);
/// Throws octet::OutOfMemory naming both sizes and the keys to lower when that lower bound exceeds
/// host_memory_available() (not checked when it is unknown). train() calls it on the cpu backend
/// before the model is built: beyond it Linux would kill the run mid-step (overcommit), not refuse
/// an allocation.
/// `processes`: the training processes of this host that each hold that much (the --nproc ranks).
void check_cpu_train_memory(const ModelConfig& model, int64_t micro_batch, int processes = 1);

/// Loads the corpus, builds or loads the tokenizer (model.vocab_size pieces; byte needs >= 256)
/// and the split. Token streams are cached next to the tokenizer (keyed by the corpus text and, for
/// BPE, the SentencePiece model's bytes). `tokenizer_model`: a SentencePiece model file to encode
/// with instead of the one data.cache_dir holds or trains for the corpus (a BPE run's own
/// tokenizer.model: resume and eval use it); ignored for the byte tokenizer.
std::unique_ptr<Dataset> load_dataset(const RunConfig& cfg, std::string* description = nullptr,
                                      const std::string& tokenizer_model = "");
/// An evaluation must read each validation window at most once: train.eval_batches ×
/// train.batch_size <= the validation windows of `ds`. Throws octet::Error naming the keys
/// otherwise (train() checks it first; a job's ranks check it before their first collective).
void check_eval_split(const RunConfig& cfg, const Dataset& ds);

// ---------------------------------------------------------------------------------------------
// safetensors and checkpoints

struct StTensor {
  std::string dtype;  ///< "F32" | "I32" | "F64"
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  ///< little-endian
};
struct StFile {
  std::map<std::string, StTensor> tensors;
  std::map<std::string, std::string> metadata;  ///< "__metadata__" (string -> string)
};
/// Writes to path + ".tmp", fsyncs and renames over `path`; adds metadata "octet_checksum"
/// (FNV-1a 64 of the data section). Throws octet::Error if the file cannot be written.
void write_safetensors(const std::string& path, const StFile& f);
/// Reads and validates (header length, JSON, dtypes, shapes vs offsets, checksum when present).
/// Throws octet::Error naming the file and the problem (truncated, corrupt, checksum mismatch).
StFile read_safetensors(const std::string& path);
/// The "__metadata__" of the header alone (the data is neither read nor checked). Throws
/// octet::Error naming the file if it is missing, truncated or its header is not valid JSON.
std::map<std::string, std::string> read_safetensors_metadata(const std::string& path);
StTensor st_f32(const std::vector<int64_t>& shape, const float* data);
std::vector<float> st_to_f32(const StTensor& t);  ///< throws unless dtype F32

/// Everything a resume needs besides the config.
struct TrainState {
  int64_t step = 0;       ///< optimizer steps done (next step index)
  int64_t adam_step = 0;  ///< successful AdamW updates (bias correction)
  int64_t data_position = 0;
  int64_t skipped_steps = 0;
  int64_t bad_in_a_row = 0;
  /// The meaning keys of the run that wrote the checkpoint (meaning_values; config.toml's form),
  /// checked on resume against config.toml; empty in a checkpoint written before octet recorded them.
  std::map<std::string, std::string> meaning;
  /// Dataset::tokens_hash of the run's token stream as 16 hex digits, checked on resume and by
  /// `octet eval` of the validation split; empty in a checkpoint written before octet recorded it.
  std::string tokens_hash;
};
/// <out>/checkpoint.safetensors: "param.<name>", "adam_m.<name>", "adam_v.<name>", the quantizer
/// state "quant.<linear>" of every linear that keeps one (Model::quant_states: tensor-delayed FP8
/// linears, e.g. "quant.h.0.attn.qkv") and the state in the metadata. Written atomically (tmp +
/// rename).
void save_checkpoint(const std::string& out_dir, Model& model, const std::vector<float>& adam_m,
                     const std::vector<float>& adam_v, const TrainState& state);
/// The train state of <out_dir>/checkpoint.safetensors alone (no model needed); throws
/// octet::Error if the file is missing, corrupt or not an octet checkpoint.
TrainState read_checkpoint_state(const std::string& out_dir);
/// The same from the checkpoint's header alone (the tensors are neither read nor checked: cheap
/// before load_checkpoint); throws octet::Error if the header is missing, corrupt or not octet's.
TrainState peek_checkpoint_state(const std::string& out_dir);
/// peek_checkpoint_state of a checkpoint file by its path (any name); the same errors.
TrainState peek_checkpoint_file_state(const std::string& file);
/// Loads into model (weights and quantizer states) and adam m/v (sized num_params) and returns the
/// state; throws octet::Error if the file is missing, corrupt, or its tensors do not match the
/// model. A checkpoint without "quant." tensors (a stateless recipe) leaves the quantizers fresh.
TrainState load_checkpoint(const std::string& out_dir, Model& model, std::vector<float>& adam_m,
                           std::vector<float>& adam_v);
/// load_checkpoint of a checkpoint file by its path (any name: a copied or renamed
/// checkpoint.safetensors); the same errors.
TrainState load_checkpoint_file(const std::string& file, Model& model, std::vector<float>& adam_m,
                                std::vector<float>& adam_v);
/// True when the safetensors file at `file` is a training checkpoint (its metadata holds
/// "octet_state", whatever the file is called), false for a weights file; reads only the header.
/// Throws octet::Error if the file is missing or not safetensors.
bool is_training_checkpoint(const std::string& file);
/// Weights only (the PyTorch twin reads this): "<name>" tensors. `tokens_hash` (tokens_hash_hex of
/// the run's corpus), if given, is kept in the file's metadata as "octet_tokens_hash", so that
/// `octet eval` checks the validation split of a run that keeps only its weights as it checks one
/// with a checkpoint; `meaning` (meaning_values of the run's config), if given, as "octet_meaning"
/// (JSON), so that loading the file into a run checks its meaning keys as a checkpoint's are.
void save_weights(const std::string& path, Model& model, const std::string& tokens_hash = "",
                  const std::map<std::string, std::string>& meaning = {});
/// The meaning keys a weights file of save_weights records ("octet_meaning"), empty if none (an
/// older file, or one written without them). Throws octet::Error for a missing or corrupt file.
std::map<std::string, std::string> weights_meaning(const std::string& path);
void load_weights(const std::string& path, Model& model);

// ---------------------------------------------------------------------------------------------
// Schedule and metrics

/// Learning rate at step s (0-based): linear warmup over warmup_steps (lr·(s+1)/warmup), then cosine
/// decay from lr at step warmup_steps to lr·min_lr_ratio at the last step (steps − 1); with
/// steps = warmup_steps + 1 the one step after the warmup is the last and takes lr·min_lr_ratio.
float learning_rate(const TrainConfig& t, int64_t step);

/// Appends JSON lines to <out>/metrics.jsonl (flushed per line).
class MetricsLog {
 public:
  explicit MetricsLog(const std::string& path, bool append);
  void write(const std::string& json_line);

 private:
  std::string path_;
};

// ---------------------------------------------------------------------------------------------
// The trainer

/// Thrown when max_bad_steps NaN/inf steps came in a row; the last good checkpoint is intact.
struct TrainingStopped : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct TrainResult {
  std::vector<double> train_loss;                    ///< per step (NaN for skipped steps)
  std::vector<std::pair<int64_t, double>> val_loss;  ///< (step, loss) per evaluation
  double final_val_loss = 0;
  double tokens_per_s = 0;       ///< mean over the steps of this process
  double kurtosis_max = 0;       ///< over evaluations and layers
  double row_residual_max = 0;   ///< over evaluations and layers; NaN if some evaluation did not measure it
  double row_residual_mean = 0;  ///< max over evaluations and layers of the row mean; NaN likewise
                                 ///< (cuDNN's SDPA keeps dS inside: Attention::measures_row_residual)
  int64_t skipped_steps = 0;
  /// A resume found the checkpoint at train.steps: nothing was trained and nothing written.
  bool complete = false;
};

/// Test hooks: called after backward of each step (before the NaN check), e.g. to poison gradients.
struct TrainHooks {
  std::function<void(int64_t step, Model& model)> after_backward;
};

/// Trains cfg in out_dir (created). Writes out_dir/config.toml, metrics.jsonl, checkpoint.safetensors
/// and model.safetensors. resume=true continues from out_dir/checkpoint.safetensors: cfg may differ
/// from out_dir/config.toml only in schedule keys (resume_changes; else octet::Error before anything
/// is written); a checkpoint at train.steps returns `complete` with nothing written, one beyond it
/// throws octet::Error; otherwise metrics.jsonl is cut back to the checkpoint's step (atomically),
/// config.toml is rewritten with the changes before the first step, and the log and metrics.jsonl
/// note each change (docs/training.md §Resume). `dataset` may be shared between runs (its position
/// is reset/restored here). Progress goes to `log` (may be null). The settings table lists every
/// key, or with `table_base` only the keys whose values differ from it (compare prints the rest once).
///
/// Data parallel (docs/distributed.md): with `dist` (octet/dist.h open_dist_session) of N > 1 ranks,
/// every rank calls train() with the same arguments; train.batch_size stays the global micro-batch
/// (it must divide by N): rank r trains on the r-th slice of batch_size / N sequences on dist's
/// backend, so the run is the one-rank run up to summation order; ZeRO-1 shards AdamW's moments; only rank 0
/// creates out_dir and writes config.toml, metrics, checkpoints (the full, gathered optimizer state:
/// resumable on any number of ranks) and `log`. Every rank returns the same result. Without `dist`
/// (or with one rank) the run is the single-process one, on a backend made from cfg.device.
TrainResult train(const RunConfig& cfg, const std::string& out_dir, bool resume, Dataset& dataset, FILE* log,
                  const TrainHooks& hooks = {}, const RunConfig* table_base = nullptr,
                  DistSession* dist = nullptr);

/// The checks of resuming `dir` with `requested` (activations resolved) from a checkpoint with
/// state `checkpoint`, before anything is written: the changes of schedule keys against
/// dir/config.toml (resume_changes), the meaning keys against those the checkpoint recorded
/// (check_recorded_meaning), a changed data.path only from a checkpoint that records its
/// tokens_hash, and a checkpoint not beyond train.steps. Throws octet::Error.
std::vector<ConfigChange> check_resume(const std::string& dir, const RunConfig& requested,
                                       const TrainState& checkpoint);

/// What `octet train --resume DIR --set ...` would do, found before anything is loaded or written:
/// DIR's config with the overrides, the checkpoint's state and the changed schedule keys. Throws
/// octet::Error if DIR has no config.toml or checkpoint, an override changes a meaning key, or the
/// checkpoint's step is beyond train.steps (a run cannot be shortened).
struct ResumePlan {
  RunConfig config;
  TrainState state;
  std::vector<ConfigChange> changes;
  bool complete() const { return state.step >= config.train.steps; }  ///< nothing left to train
};
ResumePlan plan_resume(const std::string& dir, const std::vector<std::string>& overrides);

/// One row of `octet compare`, read from the arm's metrics.jsonl (the whole run, resumes included).
struct CompareRow {
  std::string arm;
  double train_loss = 0, val_loss = 0, gap_pct = 0, kurtosis_max = 0, row_residual_max = 0, tokens_per_s = 0;
  double row_residual_mean = 0;  ///< extra column: the mean over rows of the row residual (attention.h)
  /// The arm's attention uses the matched delta: only then is row_residual_max a check (FP32
  /// rounding); with the stale delta it sits at ~1 in any long run (docs/training.md §Output).
  bool matched_delta = false;
  uint64_t seed = 0;  ///< the run's train.seed
};
/// A row from <dir>/metrics.jsonl: train loss = mean of the last 10 finite step losses, the last
/// validation loss, maxima over evaluations, tokens/s = all tokens / all step time. Throws
/// octet::Error if the file is missing or holds no step.
CompareRow compare_row_from_metrics(const std::string& arm, const std::string& dir);

/// What compare does with a non-empty out_dir: refuse it (Fresh), keep finished arms and resume
/// unfinished ones (Resume), or first remove what an earlier compare wrote there (Overwrite: the
/// arm folders, summary.json, curves.png).
enum class CompareMode { Fresh, Resume, Overwrite };
/// Trains every arm with the same seed and data order in out_dir/<arm>, writes out_dir/summary.json
/// and out_dir/curves.png, prints the settings table once (each arm then prints what differs) and
/// the comparison table to `log`. Gap is relative to the bf16 arm if present. Throws octet::Error
/// before anything is written for an invalid config or arm, a repeated arm, an unavailable device
/// or a non-empty out_dir in Fresh mode. Without gnuplot the curves are skipped with a warning on
/// stderr; the results stay.
///
/// seeds > 1 (`octet compare --seeds N`): every arm trains once per seed train.seed, train.seed + 1,
/// ..., train.seed + N − 1 (the seed sets the initialization and the data order, so the arms of one
/// seed see the same data in the same order), in out_dir/<arm>/seed-<seed>; seeds are run in turn,
/// each over all arms. The table then gives each arm's validation loss as mean ± std over its seeds
/// and marks its gap to bf16 as inside or outside noise by Welch's t-test (welch_test);
/// summary.json adds per arm the seeds, their validation losses, the std and the test. Returns one
/// row per run (arm × seed), in run order. Throws octet::Error for seeds < 1.
///
/// With `dist` of N > 1 ranks every rank calls it alike and trains every arm data parallel (train());
/// rank 0 alone checks and writes out_dir and logs, and returns the rows (the others: none).
std::vector<CompareRow> compare_arms(const RunConfig& cfg, const std::vector<std::string>& arms,
                                     const std::string& out_dir, FILE* log,
                                     CompareMode mode = CompareMode::Fresh, int64_t seeds = 1,
                                     DistSession* dist = nullptr);
/// The table as Markdown (one row per run).
std::string format_compare_table(const std::vector<CompareRow>& rows);

/// Welch's unequal-variances t-test of the means of two samples (Welch, Biometrika 34, 1947):
/// t = (mean_a − mean_b) / sqrt(s_a²/n_a + s_b²/n_b) with sample variances (n − 1), the
/// Welch–Satterthwaite degrees of freedom, and the two-sided p-value from Student's t
/// (Boost.Math). `outside_noise` is p < alpha. Degenerate case: both variances 0 gives t = ±inf,
/// p = 0 if the means differ, else t = 0, p = 1 (dof = n_a + n_b − 2). Throws octet::Error if a
/// sample has fewer than 2 values, a value is not finite, or alpha is not in (0, 1).
struct WelchTest {
  double t = 0, dof = 0, p = 1;
  bool outside_noise = false;
};
WelchTest welch_test(const std::vector<double>& a, const std::vector<double>& b, double alpha = 0.05);

/// One arm of a multi-seed comparison: its runs' validation losses and the test against bf16.
struct CompareArmStats {
  std::string arm;
  std::vector<uint64_t> seeds;
  std::vector<double> val_losses;    ///< per seed, in seed order (NaN: the run stopped)
  double val_mean = 0, val_std = 0;  ///< over the finite losses; std with n − 1 (0 if n < 2)
  double gap_pct = 0;                ///< 100 (mean − bf16 mean) / bf16 mean; NaN without bf16
  bool tested = false;               ///< a test against bf16 was possible (>= 2 finite each, not bf16)
  WelchTest vs_bf16;
  double kurtosis_max = 0, row_residual_max = 0, row_residual_mean = 0, tokens_per_s = 0;
  bool matched_delta = false;
};
/// Groups runs by arm (first-seen order) and tests each arm's validation losses against bf16's at
/// the 95 % level. Throws nothing; arms with fewer than 2 finite losses are left untested.
std::vector<CompareArmStats> compare_arm_stats(const std::vector<CompareRow>& runs);
/// The multi-seed table as Markdown (one row per arm).
std::string format_compare_seeds_table(const std::vector<CompareArmStats>& arms);

/// One layer's diagnostics at a run's final evaluation (the last "layers" record of its
/// metrics.jsonl; docs/training.md §Output), or their mean over an arm's seeds. v[k] is NaN where
/// the record has none (no dq_bias without attention or capture; no amax without FP8 linears).
struct LayerFinal {
  enum Field : size_t {
    RowResidualMean,
    RowResidualMax,
    DqBiasNorm,
    DqBiasMean,
    DqBiasMax,
    KurtosisMax,
    AmaxX,
    AmaxW,
    AmaxDy,
    kFields
  };
  /// summary.json's names of the fields, in Field order ("row_residual_mean", ..., "amax_dy").
  static const std::array<const char*, kFields>& names();
  int64_t layer = 0;
  std::array<double, kFields> v{};
};
/// The layers of <dir>/metrics.jsonl's last evaluation (empty if none). Throws octet::Error if the
/// file is missing.
std::vector<LayerFinal> final_layers_from_metrics(const std::string& dir);
/// Per arm (first-seen order) and layer, the mean over the arm's runs of each field (of the runs
/// where it is finite; NaN if none). layers[r] belongs to runs[r]. Throws octet::Error if the sizes
/// differ.
struct CompareArmLayers {
  std::string arm;
  int64_t runs = 0;
  std::vector<LayerFinal> layers;
};
std::vector<CompareArmLayers> compare_arm_layers(const std::vector<CompareRow>& runs,
                                                 const std::vector<std::vector<LayerFinal>>& layers);
/// The layers as a JSON array text of objects {"layer", <names()>...} (NaN as null).
std::string compare_layers_json(const std::vector<LayerFinal>& layers);
/// The per-layer table as Markdown (one row per arm and layer; the layer first, so that a row of
/// it never reads like a row of the arm tables, which start with the arm).
std::string format_compare_layers_table(const std::vector<CompareArmLayers>& arms);

/// Writes a PNG of train (thin) and validation (thick) loss curves of the runs (each a directory
/// holding metrics.jsonl) with gnuplot, run without a shell; any title and path work (quoted for
/// gnuplot, shown literally). Blank lines of metrics.jsonl are passed over; lines that are not JSON
/// objects with an integer "step" are skipped, with a warning on stderr unless the only one is the
/// last line (cut short by a crash). Throws octet::Error if a run has no metrics, gnuplot is missing or
/// fails.
void plot_runs(const std::vector<std::string>& run_dirs, const std::string& png_path,
               const std::string& title = "octet: loss");

}  // namespace octet
