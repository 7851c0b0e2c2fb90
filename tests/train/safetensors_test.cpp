// safetensors: round trip (dtype, shape, bytes, metadata), the layout the spec fixes (8-byte LE
// header length, JSON header, offsets relative to the data section), and rejection of truncated,
// corrupt and inconsistent files.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "octet/error.h"
#include "octet/train.h"
#include "train_test_util.h"

using namespace octet;

namespace {

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

StFile sample() {
  StFile f;
  const float a[6] = {1, -2, 3.5f, 0, 1e-30f, -7};
  f.tensors["a"] = st_f32({2, 3}, a);
  StTensor i;
  i.dtype = "I32";
  i.shape = {2};
  i.data = {1, 0, 0, 0, 255, 255, 255, 255};
  f.tensors["ids"] = i;
  f.metadata["note"] = "hello";
  return f;
}

TEST(Safetensors, RoundTripAndSpecLayout) {
  test::TempDir dir("st");
  const std::string p = dir / "x.safetensors";
  write_safetensors(p, sample());
  EXPECT_FALSE(std::filesystem::exists(p + ".tmp"));
  const StFile g = read_safetensors(p);
  EXPECT_EQ(g.metadata.at("note"), "hello");
  EXPECT_EQ(g.tensors.at("a").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(st_to_f32(g.tensors.at("a"))[2], 3.5f);
  EXPECT_EQ(g.tensors.at("ids").data, sample().tensors.at("ids").data);
  // Independent parse of the layout.
  const std::string raw = slurp(p);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  const auto h = nlohmann::json::parse(raw.substr(8, n));
  EXPECT_EQ(h["a"]["dtype"], "F32");
  const auto off = h["a"]["data_offsets"].get<std::vector<size_t>>();
  float v;
  std::memcpy(&v, raw.data() + 8 + n + off[0] + 8, 4);  // element 2
  EXPECT_EQ(v, 3.5f);
  EXPECT_EQ(raw.size(), 8 + n + 24 + 8);
}

TEST(Safetensors, RejectsTruncatedAndCorruptFiles) {
  test::TempDir dir("st-bad");
  const std::string p = dir / "x.safetensors";
  write_safetensors(p, sample());
  const std::string raw = slurp(p);
  auto expect_error = [&](const std::string& bytes, const char* what) {
    test::write_file(dir / "y.safetensors", bytes);
    EXPECT_THROW(read_safetensors(dir / "y.safetensors"), Error) << what;
  };
  expect_error(raw.substr(0, raw.size() - 3), "truncated data");
  expect_error(raw.substr(0, 5), "shorter than the length field");
  expect_error(raw.substr(0, 40), "truncated header");
  std::string flipped = raw;
  flipped[raw.size() - 10] ^= 0x40;
  expect_error(flipped, "flipped data bit (checksum)");
  std::string bad_json = raw;
  bad_json[8] = '#';
  expect_error(bad_json, "broken JSON");
  EXPECT_THROW(read_safetensors(dir / "none.safetensors"), Error);
}

}  // namespace
