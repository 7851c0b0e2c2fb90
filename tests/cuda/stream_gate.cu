// stream_gate.cu — StreamGate (stream_gate.h): the spinning gate kernel and its host side.
#include "stream_gate.h"

#include "cuda/check.h"

namespace octet::test {
namespace {

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins (one thread) until flags[0] is set by the host, or the limit passes (then sets flags[1]).
__global__ void gate_kernel(volatile int* flags, unsigned long long limit_ns) {
  const unsigned long long t0 = now_ns();
  while (flags[0] == 0) {
    if (now_ns() - t0 > limit_ns) {
      flags[1] = 1;
      break;
    }
    __nanosleep(1000);
  }
  __threadfence_system();
}

}  // namespace

StreamGate::StreamGate(cudaStream_t stream, double limit_s) : stream_(stream) {
  void* host = nullptr;
  OCTET_CUDA_CHECK(cudaHostAlloc(&host, 2 * sizeof(int), cudaHostAllocMapped));
  flags_ = static_cast<volatile int*>(host);
  flags_[0] = 0;
  flags_[1] = 0;
  void* dev = nullptr;
  OCTET_CUDA_CHECK(cudaHostGetDevicePointer(&dev, host, 0));
  gate_kernel<<<1, 1, 0, stream_>>>(static_cast<volatile int*>(dev),
                                    static_cast<unsigned long long>(limit_s * 1e9));
  OCTET_CUDA_LAUNCH_CHECK();
}

StreamGate::~StreamGate() {
  flags_[0] = 1;  // never leave a spinning kernel behind
  (void)cudaStreamSynchronize(stream_);
  (void)cudaFreeHost(const_cast<int*>(flags_));
}

void StreamGate::open() { flags_[0] = 1; }

bool StreamGate::timed_out() const { return flags_[1] != 0; }

}  // namespace octet::test
