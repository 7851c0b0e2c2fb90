// src/cpu/parallel.h — the CPU backend's threads: how many (OCTET_NUM_THREADS, else this host's
// cores shared among the job's ranks on it) and a parallel loop over independent work items. Each
// item runs exactly once, on one thread, so results do not depend on the number of threads.
#pragma once

#include <cstdint>
#include <functional>

namespace octet::cpu {

/// Threads of the CPU ops: the environment variable OCTET_NUM_THREADS if set (a whole number >= 1;
/// it then sets OpenBLAS's thread count too), else the cores of this machine
/// (std::thread::hardware_concurrency) divided by the MPI ranks on this host
/// (OMPI_COMM_WORLD_LOCAL_SIZE), at least 1, with OpenBLAS left at its own default (all cores, or
/// OPENBLAS_NUM_THREADS). Read once. Throws octet::Error for an invalid OCTET_NUM_THREADS.
int cpu_threads();
/// Sets the count cpu_threads() returns from now on (not OpenBLAS's), n >= 1: tests compare thread
/// counts in one process. Not to be called while a parallel_for runs.
void set_cpu_threads(int n);

/// Runs body(i) for every i in [0, n) on up to cpu_threads() threads (the caller's among them) and
/// returns when all are done; items must not write what another item reads or writes. Called from
/// inside a body, it runs serially. The first exception a body throws is rethrown here.
void parallel_for(int64_t n, const std::function<void(int64_t)>& body);

}  // namespace octet::cpu
