// The code pack's shared-memory staging map (src/cuda/attention/glue/pack_codes_layout.h), checked
// on the host by simulating the accesses pack_codes.cu makes: every (token, column) has its own
// byte of the 4 KiB tile; phase 1's 8-byte stores (8 consecutive columns of one token) are 8-byte
// aligned and contiguous, and each half-warp's stores (two tokens, as the hardware splits a warp's
// 8-byte accesses) touch 32 different banks; phase 2's byte loads (lane = chunk c + 4·column) read,
// per instruction, only words that no other lane of the warp needs in another row of the same bank.
// Then the packed copies as the two kernels write them (one CTA per 64 × 64 tile for the code pack;
// per (head, token block) the tiles block_pack_tile names for the block pack): every byte of the
// row copy and of the group transpose written exactly once, by the thread that holds that element.
#include "cuda/attention/glue/pack_codes_layout.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
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

// One tensor's packed copies, simulated: which thread wrote each byte, and how often.
struct Copies {
  int B, heads, rep, T, D, T_p;
  std::vector<int> row_hits, trans_hits;
  Copies(int B_, int heads_, int rep_, int T_, int D_)
      : B(B_),
        heads(heads_),
        rep(rep_),
        T(T_),
        D(D_),
        T_p((T_ + 15) / 16 * 16),
        row_hits(size_t(B_) * heads_ * T_p * D_, 0),
        trans_hits(row_hits.size(), 0) {}

  // The two phases of the 256 threads of the tile at (t0, d0) of head bh, as pack_codes_tile.cuh.
  void tile(int bh, int t0, int d0) {
    const int b = bh / heads, h = bh % heads;
    for (int tid = 0; tid < 256; ++tid) {
      const int d = codes_phase1_col(d0, tid);
      for (int p = 0; p < 2; ++p) {
        const int t = codes_phase1_token(t0, tid, p);
        ASSERT_TRUE(t >= t0 && t < t0 + kCodesTileT && d >= d0 && d + 8 <= d0 + kCodesTileD);
        if (t >= T_p || d >= D) continue;
        const int64_t at = codes_row_at(bh, t, d, T_p, D);
        ASSERT_EQ(at, ((int64_t(b) * heads + h) * T_p + t) * D + d);
        for (int j = 0; j < 8; ++j) ++row_hits[size_t(at + j)];
      }
      const int dd = codes_phase2_col(d0, tid), ts = codes_phase2_token(t0, tid);
      if (dd >= D || ts >= T_p) continue;
      const int64_t at = codes_trans_at(b, h, ts, dd, heads, rep, T_p, D);
      for (int m = 0; m < 16; ++m) {  // one 16-byte store: 16 consecutive tokens of column dd
        const int g = h / rep, l = h % rep;
        ASSERT_EQ(at + m,
                  ((int64_t(b) * (heads / rep) + g) * D + dd) * (int64_t(rep) * T_p) + l * T_p + ts + m);
        ++trans_hits[size_t(at + m)];
      }
    }
  }

  void expect_each_byte_once(const std::string& what) const {
    for (size_t i = 0; i < row_hits.size(); ++i) ASSERT_EQ(row_hits[i], 1) << what << ": row copy byte " << i;
    for (size_t i = 0; i < trans_hits.size(); ++i)
      ASSERT_EQ(trans_hits[i], 1) << what << ": group transpose byte " << i;
  }
};

struct PackShape {
  int B, heads, rep, T, D;
};
constexpr PackShape kShapes[] = {{1, 1, 1, 1, 16},    {2, 3, 1, 200, 128}, {1, 8, 8, 17, 48},
                                 {2, 4, 2, 129, 64},  {1, 2, 1, 300, 80},  {1, 1, 1, 256, 112},
                                 {1, 2, 2, 1000, 128}};

std::string name_of(const PackShape& s) {
  return "B" + std::to_string(s.B) + " heads " + std::to_string(s.heads) + " rep " + std::to_string(s.rep) +
         " T " + std::to_string(s.T) + " D " + std::to_string(s.D);
}

TEST(PackCodesLayout, CodePackWritesEveryByteOnce) {
  for (const PackShape& sh : kShapes) {
    Copies c(sh.B, sh.heads, sh.rep, sh.T, sh.D);
    for (int bh = 0; bh < sh.B * sh.heads; ++bh)  // the grid: every 64 × 64 tile of T_p × D
      for (int t0 = 0; t0 < c.T_p; t0 += kCodesTileT)
        for (int d0 = 0; d0 < sh.D; d0 += kCodesTileD) c.tile(bh, t0, d0);
    c.expect_each_byte_once("code pack " + name_of(sh));
  }
}

TEST(PackCodesLayout, BlockPackWritesEveryByteOnce) {
  for (int block : {64, 128})
    for (const PackShape& sh : kShapes) {
      if (sh.D > 128) continue;  // the block pack's limit (pack_block_takes)
      Copies c(sh.B, sh.heads, sh.rep, sh.T, sh.D);
      const int nb = (sh.T + block - 1) / block;
      for (int bh = 0; bh < sh.B * sh.heads; ++bh)
        for (int k = 0; k < nb; ++k)  // one CTA per (head, token block), as pack_block.cu
          for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 2; ++j) {
              int t0 = -1, d0 = -1;
              if (block_pack_tile(k, block, i, j, c.T_p, sh.D, t0, d0)) {
                // a tile lies inside its block: its amax is the block's
                EXPECT_TRUE(t0 >= k * block && t0 + kCodesTileT <= (k + 1) * block);
                c.tile(bh, t0, d0);
              }
            }
      c.expect_each_byte_once("block pack, block " + std::to_string(block) + ", " + name_of(sh));
    }
}

}  // namespace
}  // namespace octet::cuda
