// src/cuda/attention/flash/flash_persistent.h — the work order of the persistent wgmma forward
// (flash_fwd_sm90.cu, ForwardParams::persistent), for host and device: the host tests check that
// every work item is visited exactly once (tests/attention/flash_persistent_test.cpp).
#pragma once

#include <cstdint>

#include "octet/fp8.h"  // OCTET_HD

namespace octet::cuda::flash {

/// A persistent CTA's it-th work item: rounds of `grid` items, CTA `cta` taking item cta of the
/// even rounds and grid − 1 − cta of the odd ones (a snake: with the longest items first, every
/// CTA gets one long and one short item of each pair of rounds); −1 past the last item. A CTA's
/// items rise with it, so the first −1 ends its walk. cta < grid; grid ≥ 1.
OCTET_HD int64_t persistent_item(int it, unsigned cta, unsigned grid, int64_t n_items) {
  const int64_t w = int64_t(it) * grid + ((it & 1) ? int64_t(grid) - 1 - cta : int64_t(cta));
  return w < n_items ? w : -1;
}

}  // namespace octet::cuda::flash
