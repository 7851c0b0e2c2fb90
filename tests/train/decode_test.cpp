// tests/train/decode_test.cpp — Tokenizer::decode (train.h) inverts encode for valid UTF-8, for the
// byte tokenizer and octet's line-wise SentencePiece BPE (indentation, empty lines, a trailing
// newline, characters outside the training text that fall back to bytes), and decoding is a
// concatenation (decode of a prefix of the ids is a prefix of the text: what streaming relies on).
#include <gtest/gtest.h>

#include "octet/error.h"
#include "octet/train.h"
#include "train/train_test_util.h"

namespace octet {
namespace {

const std::vector<std::string>& texts() {
  static const std::vector<std::string> t = {"the kernel reads the page",
                                             "  indented\n    deeper\nback",
                                             "a\n\nb c\n",
                                             "\nleading newline",
                                             "trailing spaces   ",
                                             "h\xc3\xa9llo w\xc3\xb6rld \xe2\x9c\x93 42",
                                             "",
                                             " ",
                                             "x"};
  return t;
}

TEST(Decode, InvertsEncodeAndStreams) {
  test::TempDir dir("decode");
  auto bpe = make_bpe_tokenizer(test::synthetic_text(600), 320, dir / "cache");
  auto bytes = make_byte_tokenizer();
  for (const Tokenizer* tok : {bpe.get(), bytes.get()}) {
    for (const std::string& s : texts()) {
      SCOPED_TRACE(tok->name() + ": '" + s + "'");
      const std::vector<int32_t> ids = tok->encode(s);
      EXPECT_EQ(tok->decode(ids), s);
      for (size_t n = 0; n <= ids.size(); ++n) {
        const std::string part =
            tok->decode(std::vector<int32_t>(ids.begin(), ids.begin() + std::ptrdiff_t(n)));
        EXPECT_EQ(s.compare(0, part.size(), part), 0) << "prefix of " << n << " ids";
      }
    }
    EXPECT_THROW(tok->decode({int32_t(tok->vocab_size())}), Error);
  }
  EXPECT_FALSE(bpe->sentencepiece_model().empty());
  EXPECT_TRUE(bytes->sentencepiece_model().empty());
}

}  // namespace
}  // namespace octet
