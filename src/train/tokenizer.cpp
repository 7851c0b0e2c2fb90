// src/train/tokenizer.cpp — the byte-level tokenizer and the SentencePiece BPE tokenizer (Kudo &
// Richardson, "SentencePiece", arXiv 1808.06226; BPE after Sennrich et al. 2016), trained once per
// (corpus, vocab size) and cached. Settings: identity normalization and no whitespace folding (code
// and reStructuredText keep their indentation), byte fallback (every byte sequence encodes, no
// <unk> in practice), newline as its own piece <nl> (lines are SentencePiece's sentences; the piece
// is matched for newlines only, never in text: "<nl>" typed in the text round-trips as text).
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unordered_map>

#include "model/layout.h"
#include "octet/error.h"
#include "octet/train.h"
#include "train/spm_proto.h"
#include "train/utf8.h"

namespace octet {

namespace fs = std::filesystem;

namespace {

class ByteTokenizer : public Tokenizer {
 public:
  std::string name() const override { return "byte"; }
  int64_t vocab_size() const override { return 256; }
  std::vector<int32_t> encode(const std::string& text) const override {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = int32_t(static_cast<unsigned char>(text[i]));
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string s;
    for (int32_t t : ids) {
      OCTET_CHECK(t >= 0 && t < 256, "token id " + std::to_string(t) + " outside the byte vocabulary");
      s.push_back(char(t));
    }
    return s;
  }
};

constexpr const char* kNewline = "<nl>";

// The one line a failed SentencePiece training becomes: its two failures a corpus or a vocab size
// causes, said in octet's terms (SentencePiece's own text names its source lines and options octet
// does not have); anything else as SentencePiece says it.
std::string bpe_training_failure(const std::string& sp, int64_t vocab_size) {
  const std::string byte = "; or use data.tokenizer = \"byte\"";
  if (sp.find("sentences_.empty()") != std::string::npos)
    return "BPE tokenizer: the corpus has no line SentencePiece can train on (each is longer than 16384 "
           "bytes "
           "or not UTF-8): split the text into lines" +
           byte;
  const size_t at = sp.find("Vocabulary size is smaller than required_chars.");
  long long have = 0, need = 0;
  if (at != std::string::npos &&
      std::sscanf(sp.c_str() + at, "Vocabulary size is smaller than required_chars. %lld vs %lld", &have,
                  &need) == 2)
    return "BPE tokenizer: model.vocab_size " + std::to_string(vocab_size) + " is below the " +
           std::to_string(need) +
           " pieces SentencePiece needs for this corpus (its characters, 256 byte fallbacks, the special "
           "tokens): raise model.vocab_size above " +
           std::to_string(need) + byte;
  return "SentencePiece BPE training failed: " + sp;
}

// Feeds the non-empty lines of the text to the SentencePiece trainer.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::string& text) : text_(text) { advance(); }
  bool done() const override { return done_; }
  void Next() override { advance(); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void advance() {
    while (pos_ < text_.size()) {
      size_t nl = text_.find('\n', pos_);
      if (nl == std::string::npos) nl = text_.size();
      line_.assign(text_, pos_, nl - pos_);
      pos_ = nl + 1;
      if (!line_.empty()) return;
    }
    done_ = true;
  }
  const std::string& text_;
  size_t pos_ = 0;
  std::string line_;
  bool done_ = false;
};

class BpeTokenizer : public Tokenizer {
 public:
  BpeTokenizer(const std::string& model_path) : path_(model_path) {
    const auto st = sp_.Load(model_path);
    OCTET_CHECK(st.ok(), "cannot load SentencePiece model " + model_path + ": " + st.ToString());
    newline_id_ = sp_.PieceToId(kNewline);
    OCTET_CHECK(newline_id_ != sp_.unk_id(), "SentencePiece model " + model_path + " lacks the <nl> piece");
    // The model was trained with <nl> as a user-defined piece, which SentencePiece would also match
    // in a line's text. encode() emits it for the newlines alone, so it becomes a control piece here:
    // a literal "<nl>" (like "<unk>" or "<0x0A>") in the text is then ordinary text, split into the
    // pieces of its characters as the exported Hugging Face tokenizer splits it, and decodes back.
    const auto re = sp_.LoadFromSerializedProto(train_detail::with_piece_type(
        sp_.serialized_model_proto(), kNewline, train_detail::SpmPieceType::Control));
    OCTET_CHECK(re.ok(), "cannot load SentencePiece model " + model_path + ": " + re.ToString());
    OCTET_CHECK(sp_.PieceToId(kNewline) == newline_id_ && sp_.IsControl(newline_id_),
                "SentencePiece model " + model_path + ": cannot make <nl> a control piece");
  }
  std::string name() const override { return "bpe"; }
  int64_t vocab_size() const override { return sp_.GetPieceSize(); }
  std::vector<int32_t> encode(const std::string& raw) const override {
    const std::string text = train_detail::utf8_sanitize(raw);
    std::vector<int32_t> out;
    out.reserve(text.size() / 3);
    std::vector<int> ids;
    size_t pos = 0;
    while (pos <= text.size()) {
      size_t nl = text.find('\n', pos);
      const bool last = nl == std::string::npos;
      if (last) nl = text.size();
      if (nl > pos) {
        const auto st = sp_.Encode(std::string_view(text).substr(pos, nl - pos), &ids);
        OCTET_CHECK(st.ok(), "SentencePiece encode failed: " + st.ToString());
        out.insert(out.end(), ids.begin(), ids.end());
      }
      if (last) break;
      out.push_back(newline_id_);
      pos = nl + 1;
    }
    return out;
  }
  // Per piece: <nl> -> "\n", a byte piece <0xNN> -> that byte, else the piece with U+2581 -> ' ';
  // the space SentencePiece's dummy prefix put at the start of each line is dropped.
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string s;
    bool line_start = true;
    for (int32_t t : ids) {
      OCTET_CHECK(t >= 0 && t < sp_.GetPieceSize(), "token id " + std::to_string(t) +
                                                        " outside the vocabulary of " +
                                                        std::to_string(sp_.GetPieceSize()));
      if (t == newline_id_) {
        s.push_back('\n');
        line_start = true;
        continue;
      }
      std::string piece = sp_.IdToPiece(t);
      if (sp_.IsByte(t)) {
        piece = std::string(1, char(std::stoi(piece.substr(3, 2), nullptr, 16)));
      } else if (sp_.IsUnknown(t) || sp_.IsControl(t)) {
        piece.clear();
      } else {
        std::string spaced;  // U+2581 (3 bytes) -> ' '
        for (size_t i = 0; i < piece.size();) {
          const bool meta = piece.compare(i, 3, "\xe2\x96\x81") == 0;
          spaced += meta ? ' ' : piece[i];
          i += meta ? 3 : 1;
        }
        piece = std::move(spaced);
      }
      if (line_start && !sp_.IsByte(t) && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
      line_start = false;
      s += piece;
    }
    return s;
  }
  std::string sentencepiece_model() const override { return path_; }

 private:
  std::string path_;
  sentencepiece::SentencePieceProcessor sp_;
  int newline_id_ = 0;
};

}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(const RunConfig& cfg, const std::string& corpus_text) {
  return cfg.data.tokenizer == "byte"
             ? make_byte_tokenizer()
             : make_bpe_tokenizer(corpus_text, cfg.model.vocab_size, resolve_cache_dir(cfg.data.cache_dir));
}

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

std::unique_ptr<Tokenizer> make_bpe_tokenizer(const std::string& raw, int64_t vocab_size,
                                              const std::string& cache_dir) {
  const std::string text = train_detail::utf8_sanitize(raw);
  uint64_t h = model_detail::fnv1a64(text.data(), text.size());
  h = model_detail::fnv1a64(&vocab_size, sizeof vocab_size, h);
  char name[64];
  std::snprintf(name, sizeof name, "spm-%016llx.model", static_cast<unsigned long long>(h));
  std::error_code ec;
  fs::create_directories(cache_dir, ec);
  OCTET_CHECK(!ec, io_error("cannot create cache directory", cache_dir, ec.message()));
  const std::string path = (fs::path(cache_dir) / name).string();
  if (!fs::exists(path)) {
    LineIterator lines(text);
    const std::unordered_map<std::string, std::string> args = {
        {"model_type", "bpe"},
        {"vocab_size", std::to_string(vocab_size)},
        {"byte_fallback", "true"},
        {"normalization_rule_name", "identity"},
        {"remove_extra_whitespaces", "false"},
        {"split_digits", "true"},
        {"character_coverage", "0.9995"},
        {"max_sentence_length", "16384"},
        {"input_sentence_size", "400000"},
        {"shuffle_input_sentence", "true"},
        {"user_defined_symbols", kNewline},
        {"unk_id", "0"},
        {"bos_id", "-1"},
        {"eos_id", "-1"},
        {"pad_id", "-1"},
        {"num_threads", "2"},
        {"minloglevel", "2"},
    };
    // Beyond input_sentence_size lines SentencePiece samples them, with a generator seeded from
    // std::random_device unless a seed is set (sentencepiece_processor.h): the cache key as seed.
    sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned int>(h ^ (h >> 32)));
    std::string model;
    const auto st = sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
    OCTET_CHECK(st.ok(), bpe_training_failure(st.ToString(), vocab_size));
    const std::string tmp = path + ".tmp";
    {
      errno = 0;
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(model.data(), std::streamsize(model.size()));
      out.close();
      OCTET_CHECK(out.good(), io_error("cannot write", tmp));
    }
    fs::rename(tmp, path, ec);
    OCTET_CHECK(!ec, io_error("cannot rename " + tmp + " to", path, ec.message()));
  }
  return load_bpe_tokenizer(path, vocab_size);
}

std::unique_ptr<Tokenizer> load_bpe_tokenizer(const std::string& model_path, int64_t vocab_size) {
  OCTET_CHECK(fs::is_regular_file(model_path), "no SentencePiece model: " + model_path + " does not exist");
  auto tok = std::make_unique<BpeTokenizer>(model_path);
  OCTET_CHECK(tok->vocab_size() == vocab_size, "SentencePiece model " + model_path + " has " +
                                                   std::to_string(tok->vocab_size()) + " pieces, expected " +
                                                   std::to_string(vocab_size));
  return tok;
}

}  // namespace octet
