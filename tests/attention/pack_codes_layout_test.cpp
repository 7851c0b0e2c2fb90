// The code pack's shared-memory staging map (src/cuda/attention/glue/pack_codes_layout.h), checked
// on the host by simulating the accesses pack_codes.cu makes: every (token, column) has its own
// byte of the 4 KiB tile; phase 1's 8-byte stores (8 consecutive columns of one token) are 8-byte
// aligned and contiguous, and each half-warp's stores (two tokens, as the hardware splits a warp's
// 8-byte accesses) touch 32 different banks; phase 2's byte loads (lane = chunk c + 4·column) read,
// per instruction, only words that no other lane of the warp needs in another row of the same bank.
#include "cuda/attention/glue/pack_codes_layout.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <vector>

namespace octet::cuda {
namespace {

constexpr int kBanks = 32;

TEST(PackCodesLayout, EveryCodeHasItsOwnByte) {
  std::vector<int> hits(kCodesTileT * kCodesTileD, 0);
  for (int t = 0; t < kCodesTileT; ++t)
    for (int d = 0; d < kCodesTileD; ++d) {
      const int at = codes_staged_at(t, d);
      ASSERT_GE(at, 0);
      ASSERT_LT(at, kCodesTileT * kCodesTileD);
      ++hits[size_t(at)];
    }
  for (int h : hits) EXPECT_EQ(h, 1);
}

TEST(PackCodesLayout, PhaseOneStoresAreAlignedAndConflictFree) {
  // Thread tid: dc = tid % 8 (columns 8dc .. 8dc + 7), tr = tid / 8 (tokens tr and tr + 32).
  for (int pass = 0; pass < 2; ++pass)
    for (int warp = 0; warp < 8; ++warp)
      for (int half = 0; half < 2; ++half) {
        std::set<int> banks;
        for (int lane = 16 * half; lane < 16 * half + 16; ++lane) {
          const int tid = 32 * warp + lane, dc = tid % 8, t = tid / 8 + 32 * pass;
          const int at = codes_staged_at(t, 8 * dc);
          ASSERT_EQ(at % 8, 0) << "t " << t << " dc " << dc;
          for (int j = 1; j < 8; ++j) ASSERT_EQ(codes_staged_at(t, 8 * dc + j), at + j);
          banks.insert(at / 4 % kBanks);
          banks.insert(at / 4 % kBanks + 1);
        }
        EXPECT_EQ(banks.size(), 32u) << "pass " << pass << " warp " << warp << " half " << half;
      }
}

TEST(PackCodesLayout, PhaseTwoLoadsAreConflictFree) {
  // Thread tid: c = tid % 4 (tokens 16c .. 16c + 15), dl = tid / 4 (column); load k of the 16 reads
  // token 16c + k. A bank conflict: two lanes of one instruction reading different words of a bank.
  for (int warp = 0; warp < 8; ++warp)
    for (int k = 0; k < 16; ++k) {
      std::map<int, std::set<int>> words_of_bank;
      for (int lane = 0; lane < 32; ++lane) {
        const int tid = 32 * warp + lane, c = tid % 4, dl = tid / 4;
        const int word = codes_staged_at(16 * c + k, dl) / 4;
        words_of_bank[word % kBanks].insert(word);
      }
      for (const auto& [bank, words] : words_of_bank)
        EXPECT_EQ(words.size(), 1u) << "warp " << warp << " load " << k << " bank " << bank;
    }
}

}  // namespace
}  // namespace octet::cuda
