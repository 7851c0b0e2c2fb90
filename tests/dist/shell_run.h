// tests/dist/shell_run.h — one shell command of the launch tests (`octet ... --nproc`, plain
// mpirun): its exit status and its stdout and stderr together. Open MPI refuses to run as root
// unless told; the tests run as root on the CI machine, so every command gets the two variables.
// Each command also gets its own TMPDIR (made by mktemp, removed after), where Open MPI puts its
// session directory: ctest runs tests in parallel, and two jobs creating the shared
// /tmp/ompi.<host>.<uid> at once can fail ("unable to create the desired directory: File exists").
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace octet::test {

struct ShellRun {
  int status = -1;  ///< the exit status, -1 if the command did not exit normally
  std::string out;  ///< stdout and stderr
};

/// Runs `cmd` through the shell with the Open MPI root variables set and stderr into stdout.
inline ShellRun run_shell(const std::string& cmd) {
  const std::string full =
      "d=$(mktemp -d) || exit 125; export TMPDIR=\"$d\" OMPI_ALLOW_RUN_AS_ROOT=1 "
      "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; "
      "( " +
      cmd + " ) 2>&1; s=$?; rm -rf \"$d\"; exit $s";
  ShellRun r;
  FILE* p = ::popen(full.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t k;
  while ((k = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, k);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace octet::test
