// src/cpu/parallel.cpp — cpu_threads and parallel_for (parallel.h): a call starts cpu_threads() − 1
// std::threads that take items from a shared counter with the caller (dynamic scheduling: the
// causal rows of attention differ in cost), and joins them.
#include "cpu/parallel.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "octet/error.h"

namespace octet::cpu {

namespace {

thread_local bool t_inside = false;  // this thread runs a parallel_for body

int threads_from_environment() {
  if (const char* v = std::getenv("OCTET_NUM_THREADS")) {
    const std::string s(v);
    char* end = nullptr;
    const long n = std::strtol(s.c_str(), &end, 10);
    OCTET_CHECK(!s.empty() && end && *end == '\0' && n >= 1 && n <= 4096,
                "environment variable OCTET_NUM_THREADS=" + s + " is not a whole number in [1, 4096]");
    openblas_set_num_threads(int(n));  // one setting for both; unset, OpenBLAS keeps its own default
    return int(n);
  }
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  int ranks = 1;  // the ranks of an mpirun job on this host share its cores
  if (const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) ranks = std::max(1, std::atoi(v));
  return std::max(1, cores / ranks);
}

std::atomic<int> g_threads{0};  // 0: not read yet

}  // namespace

int cpu_threads() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (g_threads == 0) set_cpu_threads(threads_from_environment());
  });
  return g_threads;
}

void set_cpu_threads(int n) {
  OCTET_CHECK(n >= 1, "CPU threads must be >= 1, got " + std::to_string(n));
  g_threads = n;
}

void parallel_for(int64_t n, const std::function<void(int64_t)>& body) {
  const int64_t threads = t_inside ? 1 : std::min<int64_t>(cpu_threads(), n);
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    t_inside = true;
    try {
      for (int64_t i; (i = next.fetch_add(1)) < n;) body(i);
    } catch (...) {
      const std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      next = n;  // the others stop taking items
    }
    t_inside = false;
  };
  std::vector<std::thread> pool;
  pool.reserve(size_t(threads - 1));
  try {
    for (int64_t t = 1; t < threads; ++t) pool.emplace_back(work);
  } catch (const std::system_error&) {  // no more threads to be had: those started take every item
  }
  work();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace octet::cpu
