// src/dist/mpi.cpp — the MPI communicator for CPU ranks (octet/dist.h; MPI 3.1 standard:
// MPI_Allreduce with MPI_IN_PLACE, MPI_Reduce_scatter_block and its non-blocking
// MPI_Ireduce_scatter_block, MPI_Allgather (MPI_IN_PLACE for an in-place call), MPI_Bcast, MPI_Abort),
// on a duplicate of MPI_COMM_WORLD whose errors return (MPI_ERRORS_RETURN) and become octet::Error
// naming the call and the rank. MPI is initialized once per process and finalized at exit.
// (docs/distributed.md §"The communicator")
#include <mpi.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include "dist/checks.h"
#include "dist/mpi_init.h"
#include "octet/dist.h"
#include "octet/error.h"

namespace octet {

namespace {

void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::F64:
      return MPI_DOUBLE;
    case DType::I32:
      return MPI_INT32_T;
    default:
      OCTET_FAIL("mpi: no MPI datatype for " + to_string(t));
  }
}

int mpi_count(const Tensor& t) {
  OCTET_CHECK(t.numel() <= (int64_t(1) << 31) - 1,
              "mpi: a collective of " + std::to_string(t.numel()) + " elements exceeds MPI's int count");
  return int(t.numel());
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    dist_detail::ensure_mpi();
    OCTET_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_) == MPI_SUCCESS, "MPI_Comm_dup failed");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    int finalized = 0;  // pending requests of an abandoned step are left to MPI_Finalize / the abort
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }
  std::string library_version() const override {
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(v, &len);
    const std::string s(v, size_t(len));
    return s.substr(0, s.find_first_of(",\n"));  // "Open MPI v4.1.4"
  }

  void all_reduce(const Tensor& x, ReduceOp op) override {
    dist_detail::check_all_reduce(x, op);
    wait_async();
    check(MPI_Allreduce(MPI_IN_PLACE, x.data, mpi_count(x), mpi_type(x.dtype),
                        op == ReduceOp::Sum ? MPI_SUM : MPI_MAX, comm_),
          "all_reduce");
  }
  void reduce_scatter(const Tensor& in, const Tensor& out) override {
    dist_detail::check_reduce_scatter(in, out, size_);
    mpi_count(in);
    wait_async();
    check(MPI_Reduce_scatter_block(in.data, out.data, mpi_count(out), MPI_FLOAT, MPI_SUM, comm_),
          "reduce_scatter");
  }
  void all_gather(const Tensor& in, const Tensor& out) override {
    dist_detail::check_all_gather(in, out, size_);
    mpi_count(out);
    wait_async();
    const int n = mpi_count(in);
    const MPI_Datatype t = in.dtype == DType::F32 ? MPI_FLOAT : MPI_BYTE;  // FP8 codes: bytes
    const bool in_place = in.data == static_cast<char*>(out.data) + int64_t(rank_) * int64_t(in.bytes());
    check(MPI_Allgather(in_place ? MPI_IN_PLACE : in.data, n, t, out.data, n, t, comm_), "all_gather");
  }
  void reduce_scatter_async(const Tensor& in, const Tensor& out) override {
    dist_detail::check_reduce_scatter(in, out, size_);
    mpi_count(in);
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Ireduce_scatter_block(in.data, out.data, mpi_count(out), MPI_FLOAT, MPI_SUM, comm_, &req),
          "reduce_scatter_async");
    pending_.push_back(req);
  }
  void wait_async() override {
    if (pending_.empty()) return;
    std::vector<MPI_Request> reqs;
    reqs.swap(pending_);
    check(MPI_Waitall(int(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE), "wait_async");
  }
  void progress() override {
    if (pending_.empty()) return;
    int done = 0;
    check(MPI_Testall(int(pending_.size()), pending_.data(), &done, MPI_STATUSES_IGNORE), "progress");
    if (done) pending_.clear();
  }
  void broadcast(const Tensor& x, int root) override {
    OCTET_CHECK(root >= 0 && root < size_,
                "broadcast: root " + std::to_string(root) + " outside [0, " + std::to_string(size_) + ")");
    OCTET_CHECK(x.bytes() <= size_t(1) << 31, "broadcast: more than 2 GiB in one call");
    wait_async();
    check(MPI_Bcast(x.data, int(x.bytes()), MPI_BYTE, root, comm_), "broadcast");
  }
  void barrier() override {
    wait_async();
    check(MPI_Barrier(comm_), "barrier");
  }
  [[noreturn]] void abort(int code) noexcept override {
    MPI_Abort(comm_, code);
    ::_exit(code);
  }

 private:
  void check(int rc, const char* call) const {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    OCTET_FAIL(dist_detail::where("mpi", call, rank_, size_) + ": " + std::string(msg, size_t(len)));
  }
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::vector<MPI_Request> pending_;  // reduce_scatter_async calls not yet waited for
};

}  // namespace

void dist_detail::ensure_mpi() {
  static std::once_flag once;
  std::call_once(once, [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) return;
    int provided = 0;
    OCTET_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) == MPI_SUCCESS,
                "MPI_Init_thread failed (is this process started by mpirun?)");
    std::atexit(finalize_mpi);
  });
}

std::unique_ptr<Communicator> make_mpi_communicator(Backend& backend) {
  OCTET_CHECK(backend.name() == "cpu",
              "the MPI communicator runs on CPU-backend tensors, not " + backend.name());
  return std::make_unique<MpiCommunicator>();
}

}  // namespace octet
