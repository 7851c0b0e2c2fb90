// src/train/safetensors.cpp — reader and writer of the safetensors format (Hugging Face,
// github.com/huggingface/safetensors "Format"): an 8-byte little-endian unsigned header length N,
// N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}},
// then the raw little-endian data; offsets are relative to the end of the header. The header is
// padded with spaces to a multiple of 8. octet adds "octet_checksum" (FNV-1a 64 of the data
// section, hex) to the metadata so that corruption, not only truncation, is detected.
// Writes go through write_file_atomic (atomic_file.cpp): a crash leaves the old file intact.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/layout.h"
#include "octet/error.h"
#include "octet/train.h"

namespace octet {

namespace {
size_t dtype_size(const std::string& d) {
  if (d == "F32" || d == "I32") return 4;
  if (d == "F64" || d == "I64") return 8;
  if (d == "F16" || d == "BF16") return 2;
  if (d == "U8" || d == "I8" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}
std::string hex64(uint64_t h) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}
}  // namespace

StTensor st_f32(const std::vector<int64_t>& shape, const float* data) {
  StTensor t;
  t.dtype = "F32";
  t.shape = shape;
  size_t n = 1;
  for (int64_t s : shape) n *= size_t(s);
  t.data.resize(n * 4);
  std::memcpy(t.data.data(), data, n * 4);
  return t;
}

std::vector<float> st_to_f32(const StTensor& t) {
  OCTET_CHECK(t.dtype == "F32", "expected an F32 tensor, got " + t.dtype);
  std::vector<float> v(t.data.size() / 4);
  std::memcpy(v.data(), t.data.data(), v.size() * 4);
  return v;
}

void write_safetensors(const std::string& path, const StFile& f) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  uint64_t offset = 0;
  uint64_t h = 0xCBF29CE484222325ull;
  for (auto& [name, t] : f.tensors) {
    size_t n = 1;
    for (int64_t s : t.shape) n *= size_t(s);
    OCTET_CHECK(dtype_size(t.dtype) * n == t.data.size(),
                "tensor " + name + ": shape and data size disagree");
    header[name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
    h = model_detail::fnv1a64(t.data.data(), t.data.size(), h);
  }
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  for (auto& [k, v] : f.metadata) meta[k] = v;
  meta["octet_checksum"] = hex64(h);
  header["__metadata__"] = meta;
  std::string js = header.dump();
  while (js.size() % 8) js += ' ';

  const uint64_t len = js.size();  // little-endian on every platform octet builds for
  std::vector<std::string_view> chunks{{reinterpret_cast<const char*>(&len), 8}, js};
  for (auto& [name, t] : f.tensors)
    chunks.emplace_back(reinterpret_cast<const char*>(t.data.data()), t.data.size());
  write_file_atomic(path, chunks);
}

namespace {
// Opens `path` and reads its header: the JSON object, and the sizes of the file and the header.
nlohmann::json read_header(std::ifstream& in, const std::string& path, uint64_t& size, uint64_t& hlen) {
  OCTET_CHECK(in.good(), io_error("cannot open", path));
  in.seekg(0, std::ios::end);
  size = uint64_t(in.tellg());
  in.seekg(0);
  OCTET_CHECK(size >= 8, path + ": truncated safetensors file (" + std::to_string(size) + " bytes)");
  hlen = 0;
  in.read(reinterpret_cast<char*>(&hlen), 8);
  OCTET_CHECK(hlen <= size - 8 && hlen < (uint64_t(100) << 20),
              path + ": truncated or corrupt safetensors file (header length " + std::to_string(hlen) +
                  " exceeds the file)");
  std::string js(hlen, '\0');
  in.read(js.data(), std::streamsize(hlen));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(js);
  } catch (const nlohmann::json::exception& e) {
    OCTET_FAIL(path + ": corrupt safetensors header (" + std::string(e.what()) + ")");
  }
  OCTET_CHECK(header.is_object(), path + ": corrupt safetensors header (not a JSON object)");
  return header;
}
}  // namespace

std::map<std::string, std::string> read_safetensors_metadata(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t size = 0, hlen = 0;
  const nlohmann::json header = read_header(in, path, size, hlen);
  std::map<std::string, std::string> metadata;
  try {
    if (header.contains("__metadata__"))
      for (auto& [k, s] : header["__metadata__"].items()) metadata[k] = s.get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    OCTET_FAIL(path + ": corrupt safetensors header (" + std::string(e.what()) + ")");
  }
  metadata.erase("octet_checksum");
  return metadata;
}

StFile read_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t size = 0, hlen = 0;
  const nlohmann::json header = read_header(in, path, size, hlen);
  const uint64_t data_size = size - 8 - hlen;
  std::vector<uint8_t> data(data_size);
  in.read(reinterpret_cast<char*>(data.data()), std::streamsize(data_size));
  OCTET_CHECK(in.good() || data_size == 0,
              io_error("cannot read", path, in.eof() ? "file ended early" : std::strerror(errno)));

  StFile f;
  uint64_t covered = 0;
  // Data is hashed in the order of the data offsets (the writer's order).
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  try {
    for (auto& [name, v] : header.items()) {
      if (name == "__metadata__") {
        for (auto& [k, s] : v.items()) f.metadata[k] = s.get<std::string>();
        continue;
      }
      StTensor t;
      t.dtype = v.at("dtype").get<std::string>();
      t.shape = v.at("shape").get<std::vector<int64_t>>();
      const auto off = v.at("data_offsets").get<std::vector<uint64_t>>();
      OCTET_CHECK(off.size() == 2 && off[0] <= off[1] && off[1] <= data_size,
                  path + ": tensor " + name + " lies outside the file (truncated?)");
      size_t n = 1;
      for (int64_t s : t.shape) {
        OCTET_CHECK(s >= 0, path + ": tensor " + name + " has a negative dimension");
        n *= size_t(s);
      }
      const size_t es = dtype_size(t.dtype);
      OCTET_CHECK(es > 0, path + ": tensor " + name + " has unknown dtype " + t.dtype);
      OCTET_CHECK(n * es == off[1] - off[0],
                  path + ": tensor " + name + " shape does not match its data size");
      t.data.assign(data.begin() + int64_t(off[0]), data.begin() + int64_t(off[1]));
      covered += off[1] - off[0];
      ranges.emplace_back(off[0], off[1]);
      f.tensors[name] = std::move(t);
    }
  } catch (const nlohmann::json::exception& e) {
    OCTET_FAIL(path + ": corrupt safetensors header (" + std::string(e.what()) + ")");
  }
  OCTET_CHECK(covered == data_size, path + ": data section size does not match the tensors (" +
                                        std::to_string(data_size) + " bytes vs " + std::to_string(covered) +
                                        ")");
  auto it = f.metadata.find("octet_checksum");
  if (it != f.metadata.end()) {
    std::sort(ranges.begin(), ranges.end());
    uint64_t h = 0xCBF29CE484222325ull;
    for (auto& [b, e] : ranges) h = model_detail::fnv1a64(data.data() + b, e - b, h);
    OCTET_CHECK(hex64(h) == it->second, path + ": checksum mismatch (file corrupt)");
    f.metadata.erase(it);
  }
  return f;
}

}  // namespace octet
