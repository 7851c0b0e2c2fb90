// apps/octet/bench_output.h — what every `octet bench` line carries and how it is printed: the UTC
// date, the GPU and library versions (CUDA builds), one JSON object per line with --json or a table
// line otherwise (cmd_bench.cpp, cmd_bench_comm.cpp).
#pragma once

#include <chrono>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>

#include <CLI/CLI.hpp>

#include "octet/bench.h"

namespace octet::cli {

inline std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

inline void emit(bool json, const nlohmann::json& j, const std::string& table_line) {
  if (json)
    std::printf("%s\n", j.dump().c_str());
  else
    std::printf("%s\n", table_line.c_str());
  std::fflush(stdout);
}

#ifdef OCTET_WITH_CUDA
/// The current GPU's name, CUDA runtime/driver, cuBLASLt and cuDNN versions, and the date.
inline nlohmann::json env_json() {
  const auto e = octet::cuda::bench_env();
  return {{"gpu", e.gpu},
          {"cuda_runtime", e.runtime_version},
          {"cuda_driver", e.driver_version},
          {"cublaslt", e.cublaslt_version},
          {"cudnn", e.cudnn_version},
          {"date", utc_now()}};
}
#endif

/// Adds `octet bench comm` to the bench subcommand (cmd_bench_comm.cpp).
void add_bench_comm(CLI::App* bench);

}  // namespace octet::cli
