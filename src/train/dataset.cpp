// src/train/dataset.cpp — the token stream, its deterministic train/validation split, the seeded
// per-epoch order of training windows, and load_dataset (corpus → tokenizer → cached tokens).
//
// Windows: window w holds tokens [w·T, w·T + T + 1) (inputs and the shifted targets, as nanoGPT).
// Split: windows are grouped (8 per group, fewer for tiny corpora) and every k-th group is
// validation, k = round(1/val_fraction), so validation text is spread over the whole corpus.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "model/layout.h"
#include "octet/error.h"
#include "octet/train.h"

namespace octet {

namespace fs = std::filesystem;
using model_detail::fnv1a64;
using model_detail::splitmix64;

Dataset::Dataset(std::vector<int32_t> tokens, int64_t vocab_size, int64_t seq_len, double val_fraction,
                 uint64_t seed)
    : tokens_(std::move(tokens)), seq_len_(seq_len), seed_(seed) {
  OCTET_CHECK(seq_len >= 1, "seq_len must be >= 1");
  tokens_hash_ = fnv1a64(tokens_.data(), tokens_.size() * sizeof(int32_t));
  for (int32_t t : tokens_)
    OCTET_CHECK(t >= 0 && t < vocab_size,
                "token id " + std::to_string(t) + " outside the vocabulary of " + std::to_string(vocab_size));
  const int64_t n_windows = tokens_.size() > 1 ? (int64_t(tokens_.size()) - 1) / seq_len : 0;
  const int64_t k = std::max<int64_t>(2, std::llround(1.0 / val_fraction));
  const int64_t group = std::clamp<int64_t>(n_windows / (2 * k), 1, 8);
  for (int64_t w = 0; w < n_windows; ++w) ((w / group) % k == k - 1 ? val_ : train_).push_back(w);
  OCTET_CHECK(!train_.empty() && !val_.empty(),
              "corpus too small: " + std::to_string(tokens_.size()) + " tokens give " +
                  std::to_string(n_windows) + " windows of seq_len+1 = " + std::to_string(seq_len + 1) +
                  " tokens; need at least " + std::to_string(k) + " for a train/validation split");
}

int64_t Dataset::window_at(int64_t pos) const {
  const int64_t n = int64_t(train_.size());
  const int64_t epoch = pos / n;
  if (epoch != perm_epoch_) {  // Fisher–Yates with a stream keyed by (seed, epoch)
    perm_.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) perm_[size_t(i)] = i;
    uint64_t state = seed_ ^ (0xD1B54A32D192ED03ull * uint64_t(epoch + 1));
    for (int64_t i = n - 1; i > 0; --i) {
      const int64_t j = int64_t(splitmix64(state) % uint64_t(i + 1));
      std::swap(perm_[size_t(i)], perm_[size_t(j)]);
    }
    perm_epoch_ = epoch;
  }
  return train_[size_t(perm_[size_t(pos % n)])];
}

namespace {
void fill_window(const std::vector<int32_t>& tok, int64_t w, int64_t T, int32_t* ids, int32_t* tgt) {
  const int32_t* src = tok.data() + w * T;
  std::copy(src, src + T, ids);
  std::copy(src + 1, src + T + 1, tgt);
}
}  // namespace

void Dataset::next_train_batch(int64_t batch, std::vector<int32_t>& ids, std::vector<int32_t>& targets,
                               int rank, int world) {
  OCTET_CHECK(world >= 1 && rank >= 0 && rank < world, "next_train_batch: rank " + std::to_string(rank) +
                                                           " outside [0, " + std::to_string(world) + ")");
  ids.resize(size_t(batch * seq_len_));
  targets.resize(size_t(batch * seq_len_));
  // rank r reads the r-th slice of the global batch of batch·world windows (docs/distributed.md)
  const int64_t first = position_ + int64_t(rank) * batch;
  for (int64_t b = 0; b < batch; ++b)
    fill_window(tokens_, window_at(first + b), seq_len_, ids.data() + b * seq_len_,
                targets.data() + b * seq_len_);
  position_ += batch * world;
}

void Dataset::val_batch(int64_t i, int64_t batch, std::vector<int32_t>& ids,
                        std::vector<int32_t>& targets) const {
  ids.resize(size_t(batch * seq_len_));
  targets.resize(size_t(batch * seq_len_));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t w = val_[size_t((i * batch + b) % int64_t(val_.size()))];
    fill_window(tokens_, w, seq_len_, ids.data() + b * seq_len_, targets.data() + b * seq_len_);
  }
}

double Dataset::unigram_entropy() const {
  int32_t vmax = 0;
  for (int32_t t : tokens_) vmax = std::max(vmax, t);
  std::vector<int64_t> count(size_t(vmax) + 1, 0);
  for (int32_t t : tokens_) ++count[size_t(t)];
  double h = 0;
  const double n = double(tokens_.size());
  for (int64_t c : count)
    if (c > 0) h -= double(c) / n * std::log(double(c) / n);
  return h;
}

namespace {
// Token cache: "OCTT" magic, count (int64), FNV-1a of the ids, then the int32 ids.
bool read_token_cache(const std::string& path, std::vector<int32_t>& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  char magic[4];
  int64_t n = 0;
  uint64_t h = 0;
  in.read(magic, 4);
  in.read(reinterpret_cast<char*>(&n), 8);
  in.read(reinterpret_cast<char*>(&h), 8);
  if (!in || std::string(magic, 4) != "OCTT" || n < 0 || n > (int64_t(1) << 34)) return false;
  out.resize(size_t(n));
  in.read(reinterpret_cast<char*>(out.data()), std::streamsize(n * 4));
  return in && fnv1a64(out.data(), out.size() * 4) == h;
}
void write_token_cache(const std::string& path, const std::vector<int32_t>& ids) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    const int64_t n = int64_t(ids.size());
    const uint64_t h = fnv1a64(ids.data(), ids.size() * 4);
    out.write("OCTT", 4);
    out.write(reinterpret_cast<const char*>(&n), 8);
    out.write(reinterpret_cast<const char*>(&h), 8);
    out.write(reinterpret_cast<const char*>(ids.data()), std::streamsize(ids.size() * 4));
    if (!out.good()) return;  // a cache is optional
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
}
}  // namespace

std::unique_ptr<Dataset> load_dataset(const RunConfig& cfg, std::string* description,
                                      const std::string& tokenizer_model) {
  const std::string corpus_path = resolve_corpus_path(cfg.data.path);
  const Corpus corpus = read_corpus(corpus_path, cfg.data.max_bytes, cfg.data.path.empty());
  const std::string cache_dir = resolve_cache_dir(cfg.data.cache_dir);
  std::unique_ptr<Tokenizer> tok = !tokenizer_model.empty() && cfg.data.tokenizer == "bpe"
                                       ? load_bpe_tokenizer(tokenizer_model, cfg.model.vocab_size)
                                       : make_tokenizer(cfg, corpus.text);
  std::vector<int32_t> ids;
  uint64_t h = fnv1a64(corpus.text.data(), corpus.text.size());
  const std::string tname = tok->name() + std::to_string(tok->vocab_size());
  h = fnv1a64(tname.data(), tname.size(), h);
  if (!tok->sentencepiece_model().empty()) {  // the model itself: a run's own may differ from the cache's
    const std::string model = read_file_bytes(tok->sentencepiece_model(), "SentencePiece model");
    h = fnv1a64(model.data(), model.size(), h);
  }
  char name[64];
  std::snprintf(name, sizeof name, "tokens-%016llx.bin", static_cast<unsigned long long>(h));
  const std::string cache = (fs::path(cache_dir) / name).string();
  const bool use_cache = tok->name() == "bpe";  // bytes are cheaper to encode than to read
  if (!use_cache || !read_token_cache(cache, ids)) {
    ids = tok->encode(corpus.text);
    if (use_cache) write_token_cache(cache, ids);
  }
  auto ds = std::make_unique<Dataset>(std::move(ids), cfg.model.vocab_size, cfg.model.seq_len,
                                      cfg.data.val_fraction, cfg.train.seed);
  ds->set_tokenizer_model(tok->sentencepiece_model());
  if (description) {
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "corpus %s: %zu file(s), %zu bytes (%lld invalid UTF-8); tokenizer %s (vocab %lld): "
                  "%lld tokens (%.2f bytes/token), %lld train / %lld validation windows; "
                  "unigram entropy %.4f nats/token",
                  corpus_path.c_str(), corpus.files.size(), corpus.text.size(),
                  static_cast<long long>(corpus.invalid_utf8), tok->name().c_str(),
                  static_cast<long long>(tok->vocab_size()), static_cast<long long>(ds->n_tokens()),
                  double(corpus.text.size()) / double(ds->n_tokens()),
                  static_cast<long long>(ds->n_train_windows()), static_cast<long long>(ds->n_val_windows()),
                  ds->unigram_entropy());
    *description = buf;
  }
  return ds;
}

}  // namespace octet
