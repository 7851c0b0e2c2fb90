// src/train/eval.cpp — loading a finished run and scoring text with it (octet/eval.h).
#include "octet/dist.h"
#include "octet/eval.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "octet/error.h"
#include "octet/generate.h"

namespace octet {

namespace fs = std::filesystem;

LoadedRun load_run(const std::string& dir, const std::string& device, const std::string& checkpoint) {
  const std::string cfg_path = (fs::path(dir) / "config.toml").string();
  std::error_code ec;
  const bool has_config = fs::is_regular_file(cfg_path, ec);
  OCTET_CHECK(
      has_config || !ec || ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory,
      io_error("cannot read", cfg_path, ec.message()));  // e.g. a loop of symbolic links
  OCTET_CHECK(has_config, "no run in " + dir + " (missing " + cfg_path + ")");
  LoadedRun r;
  try {
    r.cfg = load_config(cfg_path);
  } catch (const Error& e) {  // a run's config that is not a whole run (emptied, hand-edited)
    const std::string what = e.what();
    throw Error(what.find(cfg_path) == std::string::npos ? cfg_path + ": " + what : what);
  }
  std::string file = checkpoint;
  if (file.empty())
    file = fs::exists(fs::path(dir) / "checkpoint.safetensors")
               ? (fs::path(dir) / "checkpoint.safetensors").string()
               : (fs::path(dir) / "model.safetensors").string();
  OCTET_CHECK(fs::exists(file), "no weights: " + file + " does not exist");
  OCTET_CHECK(fs::is_regular_file(file), "no weights: " + file +
                                             " is not a file (--checkpoint takes a "
                                             "checkpoint or weights file, --run the run's folder)");
  const bool is_checkpoint = is_training_checkpoint(file);   // by its metadata, not its name
  const std::string other = checkpoint.empty() ? "" : file;  // a --checkpoint: named in the errors
  if (is_checkpoint) {
    // The meaning keys the checkpoint recorded must be config.toml's (as a resume checks): a
    // hand-edited config, or another run's checkpoint, would otherwise run as another model.
    const TrainState st = peek_checkpoint_file_state(file);
    check_recorded_meaning(st.meaning, r.cfg, dir, "load", other);
    r.tokens_hash = st.tokens_hash;
  } else {  // a weights file of save_weights records its meaning keys too
    check_recorded_meaning(weights_meaning(file), r.cfg, dir, "load", other);
    const auto metadata = read_safetensors_metadata(file);
    if (auto it = metadata.find("octet_tokens_hash"); it != metadata.end()) r.tokens_hash = it->second;
  }
  if (!device.empty()) r.cfg.device = device;
  r.backend = make_backend(r.cfg.device);
  resolve_run_config(r.cfg, *r.backend);
  r.model = std::make_unique<Model>(r.cfg.model, r.cfg.precision, *r.backend, r.cfg.train.batch_size);
  if (is_checkpoint) {
    std::vector<float> m, v;
    load_checkpoint_file(file, *r.model, m, v);
  } else {
    load_weights(file, *r.model);
  }
  return r;
}

std::unique_ptr<Tokenizer> load_run_tokenizer(const RunConfig& cfg, const std::string& run_dir) {
  if (cfg.data.tokenizer == "byte") return make_tokenizer(cfg, {});
  const std::string own = run_tokenizer_model(run_dir);
  if (!own.empty()) return load_bpe_tokenizer(own, cfg.model.vocab_size);
  // a run from before runs kept their tokenizer: the one the corpus of data.path gives now
  return make_tokenizer(
      cfg, read_corpus(resolve_corpus_path(cfg.data.path), cfg.data.max_bytes, cfg.data.path.empty()).text);
}

std::string run_tokenizer_model(const std::string& run_dir) {
  const fs::path own = fs::path(run_dir) / kRunTokenizerFile;
  return fs::exists(own) ? own.string() : std::string();
}

std::string tokens_hash_hex(const Dataset& ds) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(ds.tokens_hash()));
  return hex;
}

void check_run_tokens(const TrainState& recorded, const Dataset& ds, const std::string& run_dir,
                      const std::string& action, const std::string& remedy) {
  OCTET_CHECK(recorded.tokens_hash.empty() || recorded.tokens_hash == tokens_hash_hex(ds),
              "cannot " + action + " " + run_dir +
                  ": the corpus of data.path gives other tokens than the run trained on (the text there is "
                  "not the one the run started with); " +
                  remedy);
}

void keep_run_tokenizer(const std::string& run_dir, const Dataset& ds) {
  if (ds.tokenizer_model().empty() || !run_tokenizer_model(run_dir).empty()) return;
  write_file_atomic((fs::path(run_dir) / kRunTokenizerFile).string(),
                    {read_file_bytes(ds.tokenizer_model(), "SentencePiece model")});
}

EvalResult evaluate_text(Model& model, const Tokenizer& tok, const std::string& text,
                         const std::vector<int64_t>& separators) {
  // The pieces between separators are encoded one by one (the same tokens as the whole text: a
  // newline ends a line in either tokenizer); a separator's tokens are context, never a target.
  std::vector<int32_t> all;
  std::vector<uint8_t> scored;  // per token: 1 = predicted when it is a target
  const std::vector<int32_t> sep = tok.encode("\n");
  size_t from = 0;
  for (size_t i = 0; i <= separators.size(); ++i) {
    const bool last = i == separators.size();
    const size_t to = last ? text.size() : size_t(separators[i]);
    OCTET_CHECK(to >= from && to <= text.size() && (last || (to < text.size() && text[to] == '\n')),
                "evaluate_text: separator offset " + std::to_string(to) + " is not a newline of the text");
    const std::vector<int32_t> ids = tok.encode(text.substr(from, to - from));
    all.insert(all.end(), ids.begin(), ids.end());
    scored.insert(scored.end(), ids.size(), 1);
    if (last) break;
    all.insert(all.end(), sep.begin(), sep.end());
    scored.insert(scored.end(), sep.size(), 0);
    from = to + 1;
  }
  OCTET_CHECK(all.size() >= 2, "the text has " + std::to_string(all.size()) +
                                   " tokens; evaluation needs at least 2 (one to predict)");
  const int64_t T = model.config().seq_len, B = model.batch(), n = int64_t(all.size());
  std::vector<int32_t> ids(size_t(B * T)), targets(size_t(B * T));
  int64_t counted = 0;
  for (int64_t start = 0; start < n - 1;) {
    std::fill(ids.begin(), ids.end(), 0);
    std::fill(targets.begin(), targets.end(), -1);
    for (int64_t b = 0; b < B && start < n - 1; ++b, start += T) {
      const int64_t len = std::min(T, n - 1 - start);
      for (int64_t t = 0; t < len; ++t) {
        const size_t next = size_t(start + t + 1);
        ids[size_t(b * T + t)] = all[size_t(start + t)];
        targets[size_t(b * T + t)] = scored[next] ? all[next] : -1;
        counted += scored[next];
      }
    }
    model.forward_backward(ids.data(), targets.data(), false, 1.0f);
  }
  OCTET_CHECK(counted >= 1, "the text has no token to predict (only file separators after its first token)");
  EvalResult r;
  r.tokens = counted;
  r.bytes = int64_t(text.size() - separators.size());
  r.loss = model.take_loss() / double(counted);
  r.perplexity = std::exp(r.loss);
  r.bits_per_byte = r.loss * double(counted) / std::log(2.0) / double(std::max<int64_t>(r.bytes, 1));
  return r;
}

double evaluate_validation(Model& model, const Dataset& data, int64_t batches, Communicator* comm) {
  OCTET_CHECK(batches >= 1, "evaluation needs at least one batch");
  const int rank = comm ? comm->rank() : 0, world = comm ? comm->size() : 1;
  std::vector<int32_t> ids, targets;
  int64_t count = 0;
  for (int64_t i = 0; i < batches; ++i) {
    data.val_batch(i * world + rank, model.batch(), ids, targets);  // this rank's slice
    for (int32_t y : targets) count += y >= 0;
    model.forward_backward(ids.data(), targets.data(), false, 1.0f);
  }
  if (!comm) return model.take_loss() / double(std::max<int64_t>(count, 1));
  double sums[2] = {model.take_loss(), double(count)};
  all_reduce_host_sum(*comm, model.backend(), sums, 2);
  return sums[0] / std::max(sums[1], 1.0);
}

struct EvalSampler::Impl {
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<Generator> gen;
  std::vector<int32_t> prompt;
  int64_t n = 0;
};

EvalSampler::EvalSampler(const RunConfig& cfg, Model& model, const Dataset& data)
    : impl_(std::make_unique<Impl>()) {
  impl_->tok = data.tokenizer_model().empty()
                   ? make_byte_tokenizer()
                   : load_bpe_tokenizer(data.tokenizer_model(), cfg.model.vocab_size);
  impl_->gen = std::make_unique<Generator>(
      model, model.backend().name() == "cpu" ? DecodePrecision::FP32 : DecodePrecision::BF16);
  std::vector<int32_t> ids, targets;
  data.val_batch(0, 1, ids, targets);
  ids.resize(size_t(std::clamp<int64_t>(cfg.model.seq_len / 2, 1, 8)));
  impl_->prompt = ids;
  impl_->n = cfg.train.sample_tokens;
}
EvalSampler::~EvalSampler() = default;

std::string EvalSampler::sample() {
  SampleOptions opt;
  opt.temperature = 0.0f;
  opt.max_new_tokens = impl_->n;
  const std::vector<int32_t> out = generate(*impl_->gen, impl_->prompt, opt);
  return impl_->tok->decode(impl_->prompt) + "|" + impl_->tok->decode(out);
}

}  // namespace octet
