// octet/error.h — the one error type octet throws, and the check macro that raises it.
//
// Every failed precondition (bad shape, unknown name, unreadable file, CUDA or cuBLASLt failure)
// throws octet::Error whose message names the problem and the source location, following the
// habit of Transformer Engine's NVTE_CHECK. The CLI catches it, prints the message on one line and
// exits with a non-zero code.
#pragma once

#include <stdexcept>
#include <string>

namespace octet {

/// An error with a human-readable message; `what()` is "file:line: message".
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Builds the message and throws. Prefer the OCTET_CHECK / OCTET_FAIL macros.
[[noreturn]] inline void throw_error(const char* file, int line, const std::string& msg) {
  std::string f(file);
  auto slash = f.find_last_of('/');
  if (slash != std::string::npos) f = f.substr(slash + 1);
  throw Error(f + ":" + std::to_string(line) + ": " + msg);
}

}  // namespace octet

/// Throws octet::Error with `msg` (any expression convertible to std::string) unless `cond` holds.
#define OCTET_CHECK(cond, msg)                                      \
  do {                                                              \
    if (!(cond)) ::octet::throw_error(__FILE__, __LINE__, (msg));   \
  } while (0)

/// Throws octet::Error with `msg` unconditionally.
#define OCTET_FAIL(msg) ::octet::throw_error(__FILE__, __LINE__, (msg))
