// src/cuda/runtime/tensor_map.h — TMA descriptors (CUtensorMap) for the Hopper kernels' bulk tensor
// copies and reduces (PTX ISA "cp.async.bulk.tensor", §9.7.9.25, and "cp.reduce.async.bulk.tensor";
// CUDA Driver API cuTensorMapEncodeTiled). The
// driver entry point is fetched through the runtime (cudaGetDriverEntryPointByVersion), so octet
// links no libcuda. A descriptor is plain data: built on the host per call (~1 µs), passed to the
// kernel as a __grid_constant__ parameter.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace octet::cuda {

/// The byte swizzle a TMA copy applies in shared memory: none, or the 64- / 128-byte swizzle that
/// wgmma's K-major descriptors name (flash_wgmma_sm90.cuh). The box's innermost extent must not
/// exceed the swizzle span.
enum class TmaSwizzle { None, B64, B128 };

/// The element type a descriptor moves: 8-bit codes (FP8, read as bytes), or FP32 (the type a
/// bulk reduce-add adds in: cp.reduce.async.bulk.tensor's .add on an FP32 map adds floats).
enum class TmaElement { U8, F32 };

/// A tiled TMA descriptor over `element`s: `rank` (1..5) dimensions, innermost first; dims[i]
/// elements in dimension i; strides[i] the byte stride of dimension i + 1 (rank − 1 values, each a
/// multiple of 16 below 2^40; any order: a dimension may step back over another's rows, which
/// gives row permutations); box[i] the elements one copy moves in dimension i (each 1..256; box[0]
/// elements a multiple of 16 bytes, within the swizzle span when there is one). Elements outside dims read as
/// zero (and are not written by a store or reduce). `base` must be 16-byte aligned. Throws octet::Error
/// naming the problem on an invalid argument or when the driver refuses the descriptor (its
/// CUresult in the message).
CUtensorMap make_tensor_map(const void* base, TmaElement element, int rank, const uint64_t* dims,
                            const uint64_t* strides, const uint32_t* box, TmaSwizzle swizzle);

}  // namespace octet::cuda
