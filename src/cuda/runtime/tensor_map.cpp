// src/cuda/runtime/tensor_map.cpp — make_tensor_map (tensor_map.h): argument checks, then the
// driver's cuTensorMapEncodeTiled through the runtime's entry-point lookup.
#include "cuda/runtime/tensor_map.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <string>

#include "cuda/runtime/check.h"
#include "octet/error.h"

namespace octet::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult status{};
    OCTET_CUDA_CHECK(
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &status));
    OCTET_CHECK(status == cudaDriverEntryPointSuccess && f,
                "TMA: the driver has no cuTensorMapEncodeTiled (needs a CUDA 12 driver)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

}  // namespace

CUtensorMap make_tensor_map(const void* base, TmaElement element, int rank, const uint64_t* dims,
                            const uint64_t* strides, const uint32_t* box, TmaSwizzle swizzle) {
  OCTET_CHECK(rank >= 1 && rank <= 5, "TMA descriptor: rank must be 1..5, got " + std::to_string(rank));
  OCTET_CHECK(base && (reinterpret_cast<uintptr_t>(base) & 15) == 0,
              "TMA descriptor: the base address must be non-null and 16-byte aligned");
  const uint32_t bytes = element == TmaElement::F32 ? 4 : 1;
  const uint32_t span = swizzle == TmaSwizzle::B128 ? 128 : swizzle == TmaSwizzle::B64 ? 64 : 256 * bytes;
  OCTET_CHECK(box[0] * bytes % 16 == 0 && box[0] * bytes <= span,
              "TMA descriptor: the innermost box extent must be a multiple of 16 bytes within the swizzle "
              "span, got " +
                  std::to_string(box[0] * bytes) + " bytes");
  cuuint64_t gdim[5], gstride[4];
  cuuint32_t gbox[5], estride[5];
  for (int i = 0; i < rank; ++i) {
    OCTET_CHECK(dims[i] >= 1 && dims[i] <= (uint64_t(1) << 32) && box[i] >= 1 && box[i] <= 256,
                "TMA descriptor: dimension " + std::to_string(i) + " has size " + std::to_string(dims[i]) +
                    " and box " + std::to_string(box[i]) + " (need 1..2^32 and 1..256)");
    gdim[i] = dims[i];
    gbox[i] = box[i];
    estride[i] = 1;
  }
  for (int i = 0; i + 1 < rank; ++i) {
    OCTET_CHECK(strides[i] % 16 == 0 && strides[i] < (uint64_t(1) << 40),
                "TMA descriptor: stride " + std::to_string(i + 1) +
                    " must be a multiple of 16 below 2^40, got " + std::to_string(strides[i]));
    gstride[i] = strides[i];
  }
  const CUtensorMapSwizzle sw = swizzle == TmaSwizzle::B128  ? CU_TENSOR_MAP_SWIZZLE_128B
                                : swizzle == TmaSwizzle::B64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                                             : CU_TENSOR_MAP_SWIZZLE_NONE;
  const CUtensorMapDataType type =
      element == TmaElement::F32 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_UINT8;
  CUtensorMap map;
  const CUresult r = encode_tiled()(&map, type, cuuint32_t(rank), const_cast<void*>(base), gdim, gstride,
                                    gbox, estride, CU_TENSOR_MAP_INTERLEAVE_NONE, sw,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  OCTET_CHECK(r == CUDA_SUCCESS,
              "TMA descriptor: cuTensorMapEncodeTiled refused it (CUresult " + std::to_string(int(r)) + ")");
  return map;
}

}  // namespace octet::cuda
