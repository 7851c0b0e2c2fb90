// src/dist/launch.cpp — `octet train|compare ... --nproc N` on one host (octet/dist.h launch_local):
// CPU ranks through Open MPI's mpirun, GPU ranks as N children with torchrun's variables (RANK,
// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), watched so that one failed rank ends the job
// (SIGTERM, then SIGKILL) instead of leaving the others waiting; ranks end themselves when the
// launcher is gone (a SIGKILL to it). (docs/distributed.md §Launch)
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "octet/dist.h"
#include "octet/error.h"

extern char** environ;

namespace octet {

int free_tcp_port() {  // bind to port 0, read the port back
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  OCTET_CHECK(fd >= 0, io_error("cannot create a socket to find", "a free port"));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  OCTET_CHECK(ok, io_error("cannot find", "a free TCP port"));
  return ntohs(a.sin_port);
}

namespace {

std::string self_exe() {
  std::vector<char> buf(4096);
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  OCTET_CHECK(n > 0, io_error("cannot read", "/proc/self/exe"));
  return std::string(buf.data(), size_t(n));
}

// The environment with `set` ("KEY=value") replacing or adding variables.
std::vector<std::string> environment_with(const std::vector<std::string>& set) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv(*e);
    bool replaced = false;
    for (const std::string& s : set) replaced |= kv.compare(0, s.find('=') + 1, s, 0, s.find('=') + 1) == 0;
    if (!replaced) env.push_back(kv);
  }
  env.insert(env.end(), set.begin(), set.end());
  return env;
}

pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  std::vector<char*> a, e;
  for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  for (const std::string& s : env) e.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  e.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, a[0], nullptr, nullptr, a.data(), e.data());
  OCTET_CHECK(rc == 0, "cannot start " + argv[0] + ": " + std::strerror(rc));
  return pid;
}

int status_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

// A SIGTERM, SIGINT or SIGHUP to the launcher is passed on to the ranks (mpirun passes SIGTERM to
// its own), so that stopping the launcher stops the job and releases its run directory.
volatile std::sig_atomic_t g_stop_signal = 0;
void on_stop_signal(int sig) { g_stop_signal = sig; }

}  // namespace

namespace {

// The state letter and start time (clock ticks after boot) of process `pid` from /proc/<pid>/stat,
// or false when it does not exist. (The name in parentheses may hold spaces and parentheses: the
// fields are counted after the last ')'.)
bool process_stat(long pid, char* state, unsigned long long* start_ticks) {
  std::ifstream in("/proc/" + (pid == 0 ? std::string("self") : std::to_string(pid)) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream fields(line.substr(close + 1));
  std::string field;
  for (int i = 0; i < 20 && fields >> field;
       ++i) {  // state is the 1st field after the name, starttime the 20th
    if (i == 0) *state = field.empty() ? '?' : field[0];
    if (i == 19) {
      *start_ticks = std::strtoull(field.c_str(), nullptr, 10);
      return true;
    }
  }
  return false;
}

}  // namespace

void end_with_launcher() {
  const char* v = std::getenv(kLauncherPidVariable);
  if (!v) return;
  char* end = nullptr;
  const long pid = std::strtol(v, &end, 10);
  unsigned long long start = 0;
  const bool well_formed = *v != '\0' && *end == ':' && pid > 1 && end[1] != '\0';
  if (well_formed) start = std::strtoull(end + 1, &end, 10);
  OCTET_CHECK(well_formed && *end == '\0', std::string("environment variable ") + kLauncherPidVariable + "=" +
                                               v + " is not <process id>:<start time>");
  static std::once_flag once;
  std::call_once(once, [pid, start] {
    std::thread([pid, start] {
      auto alive = [&] {  // a zombie (exited, not yet reaped) or a new process with its id is gone
        char state = '?';
        unsigned long long ticks = 0;
        return process_stat(pid, &state, &ticks) && state != 'Z' && state != 'X' && ticks == start;
      };
      while (alive()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      std::fprintf(stderr, "octet: the --nproc launcher (process %ld) has ended: this rank ends too\n", pid);
      ::kill(::getpid(), SIGTERM);  // as if the launcher had passed its stop signal on
    }).detach();
  });
}

int launch_local(int nproc, const std::string& device, const std::vector<std::string>& args, double grace_s) {
  OCTET_CHECK(nproc >= 1, "--nproc must be >= 1, got " + std::to_string(nproc));
  const std::string exe = self_exe();
  char state = '?';
  unsigned long long start_ticks = 0;
  OCTET_CHECK(process_stat(0, &state, &start_ticks), io_error("cannot read", "/proc/self/stat"));
  const std::string launcher = std::string(kLauncherPidVariable) + "=" + std::to_string(::getpid()) + ":" +
                               std::to_string(start_ticks);
  std::vector<pid_t> kids;
  auto start = [&](std::vector<std::string> argv, std::vector<std::string> set) {
    set.push_back(launcher);
    try {
      kids.push_back(spawn(argv, environment_with(set)));
    } catch (...) {
      for (pid_t k : kids) ::kill(k, SIGKILL);
      for (pid_t k : kids) ::waitpid(k, nullptr, 0);
      throw;
    }
  };
  std::vector<std::string> argv{exe};
  argv.insert(argv.end(), args.begin(), args.end());
  if (device.rfind("cuda", 0) == 0) {
    const char* addr = std::getenv("MASTER_ADDR");
    const char* port = std::getenv("MASTER_PORT");
    const std::string a = addr ? addr : "127.0.0.1", p = port ? port : std::to_string(free_tcp_port());
    for (int r = 0; r < nproc; ++r)
      start(argv, {"RANK=" + std::to_string(r), "LOCAL_RANK=" + std::to_string(r),
                   "WORLD_SIZE=" + std::to_string(nproc), "MASTER_ADDR=" + a, "MASTER_PORT=" + p});
  } else {
    std::vector<std::string> mpi{"mpirun", "--oversubscribe", "-np", std::to_string(nproc)};
    mpi.insert(mpi.end(), argv.begin(), argv.end());
    std::vector<std::string> set;
    if (::geteuid() == 0) set = {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"};
    start(mpi, set);
  }
  // Wait for every child; the first failure, or a stop signal to the launcher, ends the others.
  g_stop_signal = 0;
  struct sigaction sa {
  }, old_int{}, old_term{}, old_hup{};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);
  ::sigaction(SIGHUP, &sa, &old_hup);
  bool forwarded = false;
  int result = 0;
  size_t alive = kids.size();
  auto deadline = std::chrono::steady_clock::time_point::max();
  while (alive > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      --alive;
      for (pid_t& k : kids)
        if (k == pid) k = -1;
      if (status_code(status) != 0 && result == 0) {
        result = status_code(status);
        for (pid_t k : kids)
          if (k > 0) ::kill(k, SIGTERM);
        deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(grace_s * 1000));
      }
      continue;
    }
    if (pid < 0 && errno != EINTR) break;
    if (g_stop_signal != 0 && !forwarded) {
      forwarded = true;
      if (result == 0) result = 128 + int(g_stop_signal);
      for (pid_t k : kids)
        if (k > 0) ::kill(k, SIGTERM);
      deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(grace_s * 1000));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (pid_t k : kids)
        if (k > 0) ::kill(k, SIGKILL);
      deadline = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  ::sigaction(SIGHUP, &old_hup, nullptr);
  return result;
}

}  // namespace octet
