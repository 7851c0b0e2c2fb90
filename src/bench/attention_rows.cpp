// src/bench/attention_rows.cpp — the names of `octet bench attention`'s rows and the --rows filter
// over them (octet/bench.h). Host-only, so the CLI checks --rows on any build.
#include <algorithm>
#include <string>
#include <vector>

#include "octet/bench.h"
#include "octet/error.h"

namespace octet {

const std::vector<std::string>& attention_bench_row_names() {
  static const std::vector<std::string> names = {"cudnn-bf16",
                                                 "cudnn-fp8-stale",
                                                 "octet-fp8-flash-kernels",
                                                 "octet-fp8-flash-stale-kernels",
                                                 "octet-fp8-flash",
                                                 "octet-fp8-flash-stale",
                                                 "octet-fp8-flash-head-block",
                                                 "octet-bf16-cudnn",
                                                 "unfused-bf16",
                                                 "unfused-fp8-stale",
                                                 "unfused-fp8-matched"};
  return names;
}

std::vector<std::string> parse_attention_bench_rows(const std::string& csv) {
  std::vector<std::string> out;
  if (csv.empty()) return out;
  const std::vector<std::string>& known = attention_bench_row_names();
  size_t start = 0;
  while (true) {
    const size_t comma = csv.find(',', start);
    const std::string name =
        csv.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    OCTET_CHECK(!name.empty(),
                "--rows: an empty item in '" + csv + "' (items are separated by single commas)");
    OCTET_CHECK(name.rfind("torch-sdpa", 0) != 0,
                "octet bench attention: --rows takes the rows octet times itself; '" + name +
                    "' comes from the PyTorch SDPA peer script, which --peer runs ('' skips it)");
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      OCTET_FAIL("octet bench attention: unknown row '" + name + "' in --rows (known: " + list + ")");
    }
    OCTET_CHECK(std::find(out.begin(), out.end(), name) == out.end(),
                "octet bench attention: --rows names '" + name + "' twice");
    out.push_back(name);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

bool attention_bench_row_wanted(const std::vector<std::string>& rows, const std::string& name) {
  return rows.empty() || std::find(rows.begin(), rows.end(), name) != rows.end();
}

}  // namespace octet
