// src/dist/cuda/nccl.cpp — the NCCL communicator (octet/dist.h; NCCL 2 API: ncclCommInitRank,
// ncclAllReduce, ncclReduceScatter, ncclAllGather, ncclBroadcast, ncclCommGetAsyncError,
// ncclCommAbort) on the CUDA backend's stream: every collective is enqueued and returns without a
// host synchronization. reduce_scatter_async runs on a second, high-priority stream of the
// communicator, ordered after the backend's stream by a CUDA event, so that the gradient buckets are
// reduced while the backward's kernels run; wait_async makes the backend's stream wait for it, and
// every other collective does so first, so that the collectives of one communicator keep one order
// on the device as on the host (docs/distributed.md §"Gradient buckets"). The unique id travels
// from rank 0 over the TCP rendezvous (no shared file), whose links stay open; a watchdog thread ends every
// rank (ncclCommAbort, exit 1, one message) when a peer's link closes without its goodbye or NCCL reports an
// asynchronous error, so a crashed rank never leaves the others hanging in a collective. (docs/distributed.md
// §"Failures")
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "dist/checks.h"
#include "dist/nccl.h"
#include "octet/error.h"

namespace octet::dist_detail {

namespace {

void cuda_check(cudaError_t e, const std::string& what) {
  OCTET_CHECK(e == cudaSuccess, what + ": " + cudaGetErrorString(e));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32:
      return ncclFloat32;
    case DType::F64:
      return ncclFloat64;
    case DType::I32:
      return ncclInt32;
    default:
      OCTET_FAIL("nccl: no NCCL datatype for " + to_string(t));
  }
}

// Makes `device` current for a scope and restores the caller's device.
struct DeviceScope {
  int prev = 0;
  explicit DeviceScope(int device) {
    cudaGetDevice(&prev);
    if (prev != device) cudaSetDevice(device);
  }
  ~DeviceScope() { cudaSetDevice(prev); }
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const DistEnv& env, int device, cudaStream_t stream)
      : rank_(env.rank), size_(env.world), device_(device), stream_(stream) {
    DeviceScope d(device_);
    ncclUniqueId id{};
    std::string payload;
    if (rank_ == 0) {
      check(ncclGetUniqueId(&id), "get_unique_id");
      payload.assign(reinterpret_cast<const char*>(&id), sizeof id);
    }
    rdv_ = tcp_rendezvous(env, payload);
    OCTET_CHECK(rdv_->payload().size() == sizeof id,
                where("nccl", "rendezvous", rank_, size_) + ": the unique id from rank 0 has the wrong size");
    std::memcpy(&id, rdv_->payload().data(), sizeof id);
    check(ncclCommInitRank(&comm_, size_, id, rank_), "comm_init_rank");
    cuda_check(cudaMalloc(&flag_, sizeof(int)), where("nccl", "barrier buffer", rank_, size_));
    cuda_check(cudaMemset(flag_, 0, sizeof(int)), where("nccl", "barrier buffer", rank_, size_));
    int least = 0, greatest = 0;  // the second stream at the highest priority: buckets go first
    cuda_check(cudaDeviceGetStreamPriorityRange(&least, &greatest), where("nccl", "stream", rank_, size_));
    cuda_check(cudaStreamCreateWithPriority(&side_, cudaStreamNonBlocking, greatest),
               where("nccl", "stream", rank_, size_));
    cuda_check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming),
               where("nccl", "event", rank_, size_));
    cuda_check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming),
               where("nccl", "event", rank_, size_));
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclCommunicator() override {
    try {
      barrier();  // every rank reached its end: no goodbye is taken for a crash
    } catch (...) {}
    stop_ = true;
    watchdog_.join();
    rdv_->finish();
    DeviceScope d(device_);
    ncclCommDestroy(comm_);
    cudaFree(flag_);
    cudaEventDestroy(ready_);
    cudaEventDestroy(done_);
    cudaStreamDestroy(side_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }
  std::string library_version() const override {
    int v = 0;  // NCCL >= 2.9: major·10000 + minor·100 + patch
    if (ncclGetVersion(&v) != ncclSuccess) return "NCCL";
    return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
           std::to_string(v % 100);
  }

  void all_reduce(const Tensor& x, ReduceOp op) override {
    check_all_reduce(x, op);
    DeviceScope d(device_);
    join_side();
    check(ncclAllReduce(x.data, x.data, size_t(x.numel()), nccl_type(x.dtype),
                        op == ReduceOp::Sum ? ncclSum : ncclMax, comm_, stream_),
          "all_reduce");
  }
  void reduce_scatter(const Tensor& in, const Tensor& out) override {
    check_reduce_scatter(in, out, size_);
    DeviceScope d(device_);
    join_side();
    check(ncclReduceScatter(in.data, out.data, size_t(out.numel()), ncclFloat32, ncclSum, comm_, stream_),
          "reduce_scatter");
  }
  void reduce_scatter_async(const Tensor& in, const Tensor& out) override {
    check_reduce_scatter(in, out, size_);
    DeviceScope d(device_);
    cuda_check(cudaEventRecord(ready_, stream_), where("nccl", "reduce_scatter_async", rank_, size_));
    cuda_check(cudaStreamWaitEvent(side_, ready_, 0), where("nccl", "reduce_scatter_async", rank_, size_));
    check(ncclReduceScatter(in.data, out.data, size_t(out.numel()), ncclFloat32, ncclSum, comm_, side_),
          "reduce_scatter_async");
    pending_ = true;
  }
  void wait_async() override {
    DeviceScope d(device_);
    join_side();
  }
  void all_gather(const Tensor& in, const Tensor& out) override {
    check_all_gather(in, out, size_);
    DeviceScope d(device_);
    join_side();
    check(ncclAllGather(in.data, out.data, size_t(in.numel()),
                        in.dtype == DType::F32 ? ncclFloat32 : ncclUint8, comm_, stream_),
          "all_gather");  // FP8 codes travel as bytes
  }
  void broadcast(const Tensor& x, int root) override {
    OCTET_CHECK(root >= 0 && root < size_,
                "broadcast: root " + std::to_string(root) + " outside [0, " + std::to_string(size_) + ")");
    DeviceScope d(device_);
    join_side();
    check(ncclBroadcast(x.data, x.data, x.bytes(), ncclUint8, root, comm_, stream_), "broadcast");
  }
  void barrier() override {
    DeviceScope d(device_);
    join_side();
    check(ncclAllReduce(flag_, flag_, 1, ncclInt32, ncclSum, comm_, stream_), "barrier");
    cuda_check(cudaStreamSynchronize(stream_), where("nccl", "barrier", rank_, size_));
  }
  [[noreturn]] void abort(int code) noexcept override {
    stop_ = true;
    ncclCommAbort(comm_);
    ::_exit(code);
  }

 private:
  void check(ncclResult_t r, const char* call) const {
    if (r == ncclSuccess) return;
    std::string msg = where("nccl", call, rank_, size_) + ": " + ncclGetErrorString(r);
    if (comm_) {
      const char* last = ncclGetLastError(comm_);
      if (last && *last) msg += std::string(" (") + last + ")";
    }
    OCTET_FAIL(msg);
  }

  // The backend's stream waits for the second stream's collectives (no host wait). The device must
  // be current.
  void join_side() {
    if (!pending_) return;
    cuda_check(cudaEventRecord(done_, side_), where("nccl", "wait_async", rank_, size_));
    cuda_check(cudaStreamWaitEvent(stream_, done_, 0), where("nccl", "wait_async", rank_, size_));
    pending_ = false;
  }

  // The watchdog: a lost peer or an asynchronous NCCL error ends this rank at once (the others
  // see its link close and end too).
  void watch() {
    while (!stop_) {
      std::string why = rdv_->watch(200);
      if (why.empty()) {
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess &&
            async != ncclInProgress)
          why = std::string("NCCL asynchronous error: ") + ncclGetErrorString(async);
      }
      if (why.empty() || stop_) continue;
      std::fprintf(stderr, "octet: failed: rank %d of %d: %s; ending every rank\n", rank_, size_,
                   why.c_str());
      std::fflush(stderr);
      ncclCommAbort(comm_);
      ::_exit(1);
    }
  }

  int rank_, size_, device_;
  cudaStream_t stream_;          // the backend's (owned: destroyed last)
  cudaStream_t side_ = nullptr;  // reduce_scatter_async's
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  bool pending_ = false;  // side_ holds collectives stream_ has not waited for
  ncclComm_t comm_ = nullptr;
  int* flag_ = nullptr;
  std::unique_ptr<Rendezvous> rdv_;
  std::atomic<bool> stop_{false};
  std::thread watchdog_;
};

}  // namespace

DistSession open_nccl_session(const DistEnv& env) {
  int count = 0;
  cuda_check(cudaGetDeviceCount(&count), "rank " + std::to_string(env.rank) + ": cudaGetDeviceCount");
  OCTET_CHECK(env.local_rank < count, "rank " + std::to_string(env.rank) + ": LOCAL_RANK " +
                                          std::to_string(env.local_rank) + " but this host has " +
                                          std::to_string(count) + " GPU(s)");
  DeviceScope d(env.local_rank);
  cudaStream_t stream = nullptr;
  cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
             "rank " + std::to_string(env.rank) + ": cudaStreamCreate");
  DistSession s;
  try {
    s.comm = std::make_unique<NcclCommunicator>(env, env.local_rank, stream);  // owns the stream now
  } catch (...) {
    cudaStreamDestroy(stream);
    throw;
  }
  s.backend = make_cuda_backend(CudaOptions{env.local_rank, stream});
  return s;
}

}  // namespace octet::dist_detail
