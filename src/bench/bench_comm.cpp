// src/bench/bench_comm.cpp — `octet bench comm` (octet/bench.h bench_comm): all-reduce,
// reduce-scatter and all-gather through octet's Communicator (NCCL on GPUs, MPI on CPU ranks) at
// sizes doubling from 1 MiB to 1 GiB, reported as nccl-tests reports them (algorithm and bus
// bandwidth, nccl-tests PERFORMANCE.md). The bus bandwidth is the input of docs/distributed.md's
// scaling formula.
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "octet/bench.h"
#include "octet/dist.h"
#include "octet/error.h"

namespace octet {

namespace {

double max_over_ranks(Communicator& comm, Backend& be, double x) {
  Buffer b = be.alloc(DType::F64, {1});
  be.upload(b, &x);
  comm.all_reduce(b, ReduceOp::Max);
  be.download(&x, b);
  return x;
}

}  // namespace

void bench_comm(Communicator& comm, Backend& be, const CommBenchOptions& o,
                const std::function<void(const CommBenchRow&)>& on_row) {
  const int n = comm.size();
  for (const std::string& op : o.ops)
    OCTET_CHECK(op == "all_reduce" || op == "reduce_scatter" || op == "all_gather",
                "bench comm: unknown op '" + op + "' (all_reduce, reduce_scatter, all_gather)");
  OCTET_CHECK(o.min_bytes >= 4 * n && o.min_bytes <= o.max_bytes,
              "bench comm: need " + std::to_string(4 * n) + " <= min bytes <= max bytes, got " +
                  std::to_string(o.min_bytes) + " and " + std::to_string(o.max_bytes));
  OCTET_CHECK(o.reps >= 1 && o.warmup >= 0, "bench comm: need reps >= 1 and warmup >= 0");
  auto elems_of = [n](int64_t bytes) { return bytes / 4 / n * n; };  // a multiple of the ranks
  const int64_t max_elems = elems_of(o.max_bytes);
  Buffer a = be.alloc(DType::F32, {max_elems}), b = be.alloc(DType::F32, {max_elems});  // zeros: sums stay 0
  using clock = std::chrono::steady_clock;
  for (const std::string& op : o.ops)
    for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
      const int64_t elems = elems_of(bytes), part = elems / n;
      auto run = [&] {
        if (op == "all_reduce")
          comm.all_reduce(a.tensor().slice(0, elems), ReduceOp::Sum);
        else if (op == "reduce_scatter")
          comm.reduce_scatter(a.tensor().slice(0, elems), b.tensor().slice(0, part));
        else
          comm.all_gather(a.tensor().slice(0, part), b.tensor().slice(0, elems));
      };
      CommBenchRow r;
      r.op = op;
      r.ranks = n;
      r.bytes = elems * 4;
      r.iters = int(std::clamp<int64_t>((int64_t(256) << 20) / r.bytes, 1, 20));
      r.reps = o.reps;
      for (int w = 0; w < o.warmup; ++w) run();
      be.synchronize();
      std::vector<double> ms;
      for (int rep = 0; rep < o.reps; ++rep) {
        comm.barrier();  // every rank starts the batch together
        const auto t0 = clock::now();
        for (int i = 0; i < r.iters; ++i) run();
        be.synchronize();
        ms.push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count() / r.iters);
      }
      std::nth_element(ms.begin(), ms.begin() + ptrdiff_t(ms.size() / 2), ms.end());
      r.ms = max_over_ranks(comm, be, ms[ms.size() / 2]);
      r.algbw_gbs = double(r.bytes) / (r.ms * 1e-3) / 1e9;
      const double factor = op == "all_reduce" ? 2.0 * (n - 1) / n : double(n - 1) / n;
      r.busbw_gbs = r.algbw_gbs * factor;
      on_row(r);
    }
}

}  // namespace octet
