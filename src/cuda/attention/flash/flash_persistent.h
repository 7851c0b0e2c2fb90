// src/cuda/attention/flash/flash_persistent.h — the work order of the flash kernels, for host and
// device: the persistent wgmma forward's walk (flash_fwd_sm90.cu, ForwardParams::persistent) and
// every flash kernel's work item -> (head, block) (ForwardParams::head_group,
// BackwardParams::key_head_group and its automatic rule). The host tests check that every work item
// is visited exactly once (tests/attention/flash_persistent_test.cpp).
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

/// A work item's head and block (a query block of the forward and the Q-block-major backward
/// kernels, a key block of the key-block-major backward), block 0 the one with the most work when
/// causal.
struct GridItem {
  int64_t head, block;
};

/// Work item w of heads × blocks (0 <= w < heads·blocks, heads and blocks >= 1: the callers' grids
/// are exactly heads·blocks), the heads taken `group` at a time: every item of heads
/// [k·group, (k + 1)·group) comes before any of the next group's; inside a group the blocks in
/// order, the group's heads fastest (the last group may hold fewer heads). group <= 0 or >= heads:
/// one group, head = w % heads, block = w / heads. The CTAs that run at one time then work on the
/// heads of a few groups (one or two when group·blocks is at least the CTAs resident at once),
/// which share their operands (and the backward's dQ accumulator) in L2; with all heads in one
/// group each head's stream is read by only ~SMs / heads CTAs at a time. (FlashAttention's grids
/// also take one head's blocks together.)
OCTET_HD GridItem grouped_item(int64_t w, int64_t heads, int64_t blocks, int64_t group) {
  if (group <= 0 || group > heads) group = heads;
  const int64_t per_group = group * blocks, k = w / per_group, r = w % per_group;
  const int64_t first = k * group, in_group = heads - first < group ? heads - first : group;
  return {first + r % in_group, r / in_group};
}

/// The key-block-major backward's head group when the caller leaves it to octet
/// (BackwardParams::key_head_group −1, OCTET_FLASH_BWD_HEAD_GROUP unset): n = the fewest KV heads
/// whose key blocks fill the `ctas` CTAs resident at once (n · key_blocks >= ctas), rounded down to
/// a power of two (which divides power-of-two head counts: no partial group), so that the resident
/// CTAs work on one or two groups, read each of their query tiles from L2 and add into their dQ
/// there; 0 (one group) when that is all of them. kv_heads, key_blocks, ctas >= 1. The rule that
/// was best or within 2 % of the best group at all ten bench cases on an H100
/// (bench/results/2026-12-06-h100-attention-bwd-order.jsonl).
OCTET_HD int64_t auto_key_head_group(int64_t kv_heads, int64_t key_blocks, int64_t ctas) {
  const int64_t n = (ctas + key_blocks - 1) / key_blocks;
  int64_t g = 1;
  while (2 * g <= n) g *= 2;
  return g >= kv_heads ? 0 : g;
}

}  // namespace octet::cuda::flash
