// octet/attention_cases.h — the attention shapes octet is measured and checked on: one list for the
// benchmark (`octet bench attention`, src/bench/cuda/bench_attention.cpp) and the GPU correctness
// test (tests/cuda/attention/cases_test.cpp), as llama.cpp's test-backend-ops keeps one list of
// cases for its correctness and performance modes. A kernel change then answers "correct? faster?"
// on the same shapes. docs/benchmarks.md §"`octet bench attention`".
#pragma once

#include <string>
#include <vector>

#include "octet/attention.h"

namespace octet {

struct AttentionCase {
  std::string name;  ///< attention_case_name(shape), e.g. "b4-h16-d128-s4096-causal"
  AttentionShape shape;
};

/// bench: the shapes the speed targets name — B4 H16 D128 at S 1024, 4096, 8192, 16384, causal and
/// not; GPT-2 small's B8 H12 D64 S1024 causal; Llama-3 8B's GQA (32 query, 8 KV heads) D128 S8192
/// causal. check: what the GPU test runs in seconds — every head layout of the bench set (H, G, D,
/// causal) at B1 S1024, and the awkward ones: one query, 17 and 129 tokens, Tq ≠ Tk both ways
/// (rows that see no key when causal), GQA, head_dim 64 and 128.
enum class AttentionCaseSet { Bench, Check };

std::vector<AttentionCase> attention_cases(AttentionCaseSet set);

/// "b<B>-h<H>[g<G>]-d<D>-s<S>[x<Tk>][-causal]": g only when G ≠ H, x only when Tk ≠ Tq.
std::string attention_case_name(const AttentionShape& shape);

/// The cases `spec` names, comma-separated (spaces around a name are ignored): "bench" or "check"
/// (a whole set) and case names of either set, in the order given. Throws octet::Error for an empty spec or
/// an unknown name, listing the known ones.
std::vector<AttentionCase> select_attention_cases(const std::string& spec);

}  // namespace octet
