// src/train/spm_proto.cpp — with_piece_type (spm_proto.h): walks the ModelProto's top-level fields,
// rewrites each `pieces` entry (field 1: a SentencePiece message of piece = 1, score = 2, type = 3)
// whose piece matches, and copies everything else as it is. Wire format: protobuf's encoding guide
// (varint tags and lengths; wire types 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32).
#include "train/spm_proto.h"

#include <cstdint>

#include "octet/error.h"

namespace octet::train_detail {

namespace {

constexpr const char* kWhat = "SentencePiece model: corrupt protobuf encoding";

uint64_t read_varint(const std::string& s, size_t& pos) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    OCTET_CHECK(pos < s.size(), std::string(kWhat) + " (a varint runs past the end)");
    const auto byte = static_cast<unsigned char>(s[pos++]);
    v |= uint64_t(byte & 0x7F) << shift;
    if (!(byte & 0x80)) return v;
  }
  OCTET_FAIL(std::string(kWhat) + " (a varint longer than 10 bytes)");
}

void write_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(char(v));
}

// One field at `pos`: its number, wire type and the extent of its value ([value_begin, end)).
struct Field {
  uint64_t number = 0;
  int wire = 0;
  size_t begin = 0, value_begin = 0, end = 0;
};

Field read_field(const std::string& s, size_t pos) {
  Field f;
  f.begin = pos;
  const uint64_t tag = read_varint(s, pos);
  f.number = tag >> 3;
  f.wire = int(tag & 7);
  size_t len = 0;
  switch (f.wire) {
    case 0: {
      const size_t start = pos;
      read_varint(s, pos);
      len = pos - start;
      pos = start;
      break;
    }
    case 1:
      len = 8;
      break;
    case 2:
      len = size_t(read_varint(s, pos));
      break;
    case 5:
      len = 4;
      break;
    default:
      OCTET_FAIL(std::string(kWhat) + " (wire type " + std::to_string(f.wire) + ")");
  }
  OCTET_CHECK(len <= s.size() - pos, std::string(kWhat) + " (a field runs past the end)");
  f.value_begin = pos;
  f.end = pos + len;
  return f;
}

}  // namespace

std::string with_piece_type(const std::string& model, const std::string& piece, SpmPieceType type) {
  std::string out;
  out.reserve(model.size() + 16);
  bool found = false;
  for (size_t pos = 0; pos < model.size();) {
    const Field f = read_field(model, pos);
    pos = f.end;
    if (f.number != 1 || f.wire != 2) {  // not a `pieces` entry
      out.append(model, f.begin, f.end - f.begin);
      continue;
    }
    const std::string msg = model.substr(f.value_begin, f.end - f.value_begin);
    std::string text, kept;  // the piece's text; its fields other than `type`
    for (size_t p = 0; p < msg.size();) {
      const Field g = read_field(msg, p);
      p = g.end;
      if (g.number == 1 && g.wire == 2) text = msg.substr(g.value_begin, g.end - g.value_begin);
      if (g.number != 3) kept.append(msg, g.begin, g.end - g.begin);
    }
    if (text != piece) {
      out.append(model, f.begin, f.end - f.begin);
      continue;
    }
    found = true;
    kept.push_back(char(3 << 3));  // field 3 (type), varint
    write_varint(kept, uint64_t(type));
    out.push_back(char(1 << 3 | 2));  // field 1 (pieces), length-delimited
    write_varint(out, kept.size());
    out += kept;
  }
  OCTET_CHECK(found, "SentencePiece model has no piece '" + piece + "'");
  return out;
}

}  // namespace octet::train_detail
