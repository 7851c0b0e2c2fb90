// src/core/attention_cases.cpp — the attention case lists of octet/attention_cases.h.
#include "octet/attention_cases.h"

#include <algorithm>
#include <sstream>

#include "octet/error.h"

namespace octet {
namespace {

AttentionShape shape(int64_t B, int64_t H, int64_t G, int64_t D, int64_t Tq, int64_t Tk, bool causal) {
  AttentionShape s;
  s.batch = B, s.n_heads = H, s.n_kv_heads = G, s.head_dim = D, s.seq_q = Tq, s.seq_k = Tk;
  s.causal = causal;
  return s;
}

}  // namespace

std::string attention_case_name(const AttentionShape& s) {
  // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on "b" + std::to_string(..).
  std::string n;
  auto put = [&n](const char* tag, int64_t v) { n.append(tag).append(std::to_string(v)); };
  put("b", s.batch);
  put("-h", s.n_heads);
  if (s.n_kv_heads != s.n_heads) put("g", s.n_kv_heads);
  put("-d", s.head_dim);
  put("-s", s.seq_q);
  if (s.seq_k != s.seq_q) put("x", s.seq_k);
  if (s.causal) n.append("-causal");
  return n;
}

std::vector<AttentionCase> attention_cases(AttentionCaseSet set) {
  std::vector<AttentionShape> shapes;
  if (set == AttentionCaseSet::Bench) {
    for (int64_t S : {1024, 4096, 8192, 16384})
      for (bool causal : {false, true}) shapes.push_back(shape(4, 16, 16, 128, S, S, causal));
    shapes.push_back(shape(8, 12, 12, 64, 1024, 1024, true));  // GPT-2 small
    shapes.push_back(shape(1, 32, 8, 128, 8192, 8192, true));  // Llama-3 8B (GQA 32/8)
  } else {
    for (bool causal : {false, true}) shapes.push_back(shape(1, 16, 16, 128, 1024, 1024, causal));
    shapes.push_back(shape(1, 12, 12, 64, 1024, 1024, true));
    shapes.push_back(shape(1, 32, 8, 128, 1024, 1024, true));
    shapes.push_back(shape(2, 4, 2, 64, 1, 1, true));  // one query, one key
    shapes.push_back(shape(2, 4, 2, 64, 17, 17, true));
    shapes.push_back(shape(1, 2, 1, 128, 1, 129, false));    // one query over a partial key tile
    shapes.push_back(shape(1, 4, 4, 64, 129, 1000, true));   // Tq < Tk
    shapes.push_back(shape(1, 8, 2, 128, 1000, 129, true));  // Tq > Tk: early rows see no key
  }
  std::vector<AttentionCase> out;
  for (const AttentionShape& s : shapes) out.push_back({attention_case_name(s), s});
  return out;
}

std::vector<AttentionCase> select_attention_cases(const std::string& spec) {
  std::vector<AttentionCase> all = attention_cases(AttentionCaseSet::Bench);
  for (AttentionCase& c : attention_cases(AttentionCaseSet::Check)) all.push_back(std::move(c));
  std::vector<AttentionCase> out;
  std::stringstream ss(spec);
  for (std::string name; std::getline(ss, name, ',');) {
    const size_t b = name.find_first_not_of(" \t"), e = name.find_last_not_of(" \t");
    name = b == std::string::npos ? "" : name.substr(b, e - b + 1);
    if (name.empty()) continue;
    if (name == "bench" || name == "check") {  // a whole set
      for (AttentionCase& c :
           attention_cases(name == "bench" ? AttentionCaseSet::Bench : AttentionCaseSet::Check))
        out.push_back(std::move(c));
      continue;
    }
    const auto it =
        std::find_if(all.begin(), all.end(), [&](const AttentionCase& c) { return c.name == name; });
    if (it == all.end()) {
      std::string known;
      for (const AttentionCase& c : all) known += (known.empty() ? "" : ", ") + c.name;
      OCTET_FAIL("unknown attention case '" + name + "' (known: bench, check, " + known + ")");
    }
    out.push_back(*it);
  }
  OCTET_CHECK(!out.empty(), "no attention case named in '" + spec + "' (give bench, check or case names)");
  return out;
}

}  // namespace octet
