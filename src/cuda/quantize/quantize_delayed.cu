// src/cuda/quantize/quantize_delayed.cu — the tensor-delayed scaling state kernels of quantize.h (one thread
// each, on the stream: select, record, update, and the cross-rank exchange forms of the recorded
// amax), quantize-then-update as TransformerEngine's amax_and_scale_update (docs/design.md §2 of
// the recipes). Scale rules are fp8.h's scale_from_amax, shared with the CPU Quantizer.
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/runtime/check.h"
#include "cuda/quantize/fp8_device.cuh"
#include "cuda/quantize/quantize.h"

namespace octet::cuda {
namespace {

// tensor-delayed (quantize.h): the scale of this quantization, after the amax pre-pass.
// Non-empty history or a non-finite amax: the delayed scale; else this tensor's own amax.
__global__ void delayed_select_kernel(const unsigned* amax_bits, const int* st, float* scale, Format format,
                                      int margin, bool pow2) {
  const float amax = amax_from_bits(*amax_bits);
  const bool finite = amax < INFINITY;
  scale[1] = (finite && st[0] == 0) ? scale_from_amax(amax, format, margin, pow2) : scale[0];
}

__global__ void delayed_record_kernel(const unsigned* amax_bits, unsigned* pending, int* st) {
  *pending = st[4] ? max(*pending, *amax_bits) : *amax_bits;
  st[4] = 1;
}

__global__ void delayed_update_kernel(unsigned* pending, float* history, int hist_len, int* st, float* scale,
                                      Format format, int margin, bool pow2, bool most_recent) {
  if (!st[4]) return;  // nothing recorded since the last update
  const float amax = amax_from_bits(*pending);
  st[4] = 0;
  *pending = 0;
  if (!(amax < INFINITY)) {  // NaN or inf: keep the scale, the history does not advance
    st[2] = 1;
    st[3] += 1;
    return;
  }
  st[2] = 0;
  history[st[1]] = amax;
  st[1] = (st[1] + 1) % hist_len;
  st[0] = min(st[0] + 1, hist_len);
  float reduced = amax;
  if (!most_recent)
    for (int i = 0; i < st[0]; ++i) reduced = fmaxf(reduced, history[i]);
  scale[0] = scale_from_amax(reduced, format, margin, pow2);
}

__global__ void delayed_set_pending_kernel(unsigned* pending, int* st, float amax) {
  const bool none = amax < 0.0f;  // NaN compares false: recorded
  *pending = none ? 0u : (__float_as_uint(amax) & 0x7FFFFFFFu);
  st[4] = none ? 0 : 1;
}

// Cross-rank amax exchange form (fp8/linear_state.h amax_to_exchange): −1 none, else the bits.
__global__ void delayed_get_exchange_kernel(const unsigned* pending, const int* st, int* out) {
  *out = st[4] ? int(*pending & 0x7FFFFFFFu) : -1;
}

__global__ void delayed_set_exchange_kernel(unsigned* pending, int* st, const int* in) {
  const int v = *in;
  *pending = v < 0 ? 0u : unsigned(v);
  st[4] = v < 0 ? 0 : 1;
}
}  // namespace

void delayed_select_launch(const unsigned* amax_bits, const int* state_i, float* scale, Format format,
                           int margin, bool pow2, cudaStream_t stream) {
  delayed_select_kernel<<<1, 1, 0, stream>>>(amax_bits, state_i, scale, format, margin, pow2);
  OCTET_CUDA_LAUNCH_CHECK();
}

void delayed_record_launch(const unsigned* amax_bits, unsigned* pending, int* state_i, cudaStream_t stream) {
  delayed_record_kernel<<<1, 1, 0, stream>>>(amax_bits, pending, state_i);
  OCTET_CUDA_LAUNCH_CHECK();
}

void delayed_update_launch(unsigned* pending, float* history, int hist_len, int* state_i, float* scale,
                           Format format, int margin, bool pow2, bool most_recent, cudaStream_t stream) {
  delayed_update_kernel<<<1, 1, 0, stream>>>(pending, history, hist_len, state_i, scale, format, margin, pow2,
                                             most_recent);
  OCTET_CUDA_LAUNCH_CHECK();
}

void delayed_set_pending_launch(unsigned* pending, int* state_i, float amax, cudaStream_t stream) {
  delayed_set_pending_kernel<<<1, 1, 0, stream>>>(pending, state_i, amax);
  OCTET_CUDA_LAUNCH_CHECK();
}

void delayed_get_exchange_launch(const unsigned* pending, const int* state_i, int* out, cudaStream_t stream) {
  delayed_get_exchange_kernel<<<1, 1, 0, stream>>>(pending, state_i, out);
  OCTET_CUDA_LAUNCH_CHECK();
}

void delayed_set_exchange_launch(unsigned* pending, int* state_i, const int* in, cudaStream_t stream) {
  delayed_set_exchange_kernel<<<1, 1, 0, stream>>>(pending, state_i, in);
  OCTET_CUDA_LAUNCH_CHECK();
}
}  // namespace octet::cuda
