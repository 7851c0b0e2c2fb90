// src/cuda/attention/flash/flash_env.cpp — flash_env.h: the flash kernels' environment switches.
#include "cuda/attention/flash/flash_env.h"

#include <cstdlib>
#include <string>

#include "octet/error.h"

namespace octet::cuda::flash {

bool env_switch(const char* name, const char* meaning, bool unset) {
  const char* env = std::getenv(name);
  const std::string v = env ? env : "";
  OCTET_CHECK(v.empty() || v == "0" || v == "1", std::string(name) + " must be 0 or 1 (" + meaning +
                                                     "; unset: " + (unset ? "1" : "0") + "), got '" + v +
                                                     "'");
  return v.empty() ? unset : v == "1";
}

int env_count(const char* name, const char* meaning, int unset) {
  const char* env = std::getenv(name);
  const std::string v = env ? env : "";
  if (v.empty()) return unset;
  const bool digits = v.size() <= 6 && v.find_first_not_of("0123456789") == std::string::npos;
  OCTET_CHECK(digits,
              std::string(name) + " must be a whole number, 0 to 999999 (" + meaning + "), got '" + v + "'");
  return std::stoi(v);
}

}  // namespace octet::cuda::flash
