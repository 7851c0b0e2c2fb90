// stream_gate.h — a gate on a CUDA stream for tests that must show where work is enqueued: a
// one-thread kernel on the stream spins until the host opens the gate (a flag in mapped, pinned
// host memory), so every later operation of that stream waits behind it while other streams run.
// The gate is on the device, not a host callback: a sleeping host function can hold back work of
// other streams too (e.g. a pageable copy), which would make a correct backend look wrong. A time
// limit (default 5 s) opens it by itself, so a backend that waits for its own stream inside a
// call (a hidden synchronization) fails the test instead of hanging it.
#pragma once

#include <cuda_runtime.h>

namespace octet::test {

class StreamGate {
 public:
  /// Enqueues the closed gate on `stream`. Throws octet::Error on a CUDA failure.
  explicit StreamGate(cudaStream_t stream, double limit_s = 5.0);
  ~StreamGate();
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;
  /// Opens the gate (host side); the stream runs on.
  void open();
  /// True if the gate opened by its time limit rather than by open(); valid once the stream
  /// has passed the gate (e.g. after cudaStreamSynchronize).
  bool timed_out() const;

 private:
  cudaStream_t stream_;
  volatile int* flags_ = nullptr;  // [0]: opened by the host, [1]: opened by the time limit
};

}  // namespace octet::test
