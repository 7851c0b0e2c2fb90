// octet/error.h — the one error type octet throws, and the check macros that raise it.
//
// Every failed precondition (bad shape, unknown name, unreadable file, CUDA or cuBLASLt failure)
// throws octet::Error whose message names the problem; the source location (file:line, the habit of
// Transformer Engine's NVTE_CHECK) travels beside the message, not inside it, so a user sees only
// the message and `octet --verbose` adds the location (docs/cli.md §"Errors"). I/O failures name
// their cause through io_error ("cannot write config.toml.tmp: Permission denied").
#pragma once

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace octet {

/// An error with a human-readable message. `what()` is the message alone; `location()` is the
/// "file:line" of the check that raised it (empty when thrown without one).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg, std::string location = {})
      : std::runtime_error(msg), location_(std::move(location)) {}
  const std::string& location() const noexcept { return location_; }

 private:
  std::string location_;
};

/// Memory (host or device) that ran out: not bad input but a run that failed on its way, which the
/// CLI reports as "octet: failed: out of memory (<message>)" with exit code 1 (docs/cli.md
/// §"Errors"). Thrown by the backends' allocators.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

/// Builds the message and throws. Prefer the OCTET_CHECK / OCTET_FAIL macros.
[[noreturn]] inline void throw_error(const char* file, int line, const std::string& msg) {
  std::string f(file);
  auto slash = f.find_last_of('/');
  if (slash != std::string::npos) f = f.substr(slash + 1);
  throw Error(msg, f + ":" + std::to_string(line));
}

/// "<action> <path>: <cause>", the cause being strerror(errno) as the failed call left it (or
/// `cause` when given, e.g. a std::error_code's message). Every I/O error message is built here:
/// io_error("cannot write", "config.toml.tmp") -> "cannot write config.toml.tmp: Permission denied".
inline std::string io_error(const std::string& action, const std::string& path,
                            const std::string& cause = {}) {
  const int err = errno;
  std::string why = !cause.empty() ? cause : err != 0 ? std::strerror(err) : "unknown I/O error";
  return action + " " + path + ": " + why;
}

}  // namespace octet

/// Throws octet::Error with `msg` (any expression convertible to std::string) unless `cond` holds.
#define OCTET_CHECK(cond, msg)                                    \
  do {                                                            \
    if (!(cond)) ::octet::throw_error(__FILE__, __LINE__, (msg)); \
  } while (0)

/// Throws octet::Error with `msg` unconditionally.
#define OCTET_FAIL(msg) ::octet::throw_error(__FILE__, __LINE__, (msg))
