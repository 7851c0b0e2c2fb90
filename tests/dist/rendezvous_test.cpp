// The TCP rendezvous (octet/dist.h) with ranks as threads of one process on a free local port:
// rank 0's payload reaches every rank; a rank whose link closes without its goodbye is reported by
// rank 0's watch() (what ends a job instead of a hang), an orderly finish() is not; an absent rank
// 0 is a timeout error naming the address.
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <string>

#include "octet/dist.h"
#include "octet/error.h"

using namespace octet;

namespace {

DistEnv env_of(int rank, int world, int port) {
  DistEnv e;
  e.rank = rank;
  e.world = world;
  e.master_addr = "127.0.0.1";
  e.master_port = port;
  return e;
}

TEST(Rendezvous, PayloadReachesEveryRankAndACrashIsSeen) {
  const int port = free_tcp_port();
  const std::string id(128, '\x5a');
  auto r0 = std::async(std::launch::async, [&] { return tcp_rendezvous(env_of(0, 3, port), id, 20); });
  auto r1 = std::async(std::launch::async, [&] { return tcp_rendezvous(env_of(1, 3, port), "", 20); });
  auto r2 = std::async(std::launch::async, [&] { return tcp_rendezvous(env_of(2, 3, port), "", 20); });
  std::unique_ptr<Rendezvous> a = r0.get(), b = r1.get(), c = r2.get();
  EXPECT_EQ(a->payload(), id);
  EXPECT_EQ(b->payload(), id);
  EXPECT_EQ(c->payload(), id);
  EXPECT_EQ(a->watch(50), "");
  EXPECT_EQ(b->watch(50), "");
  c.reset();  // rank 2 "crashes": its link closes without a goodbye
  std::string seen;
  for (int i = 0; i < 20 && seen.empty(); ++i) seen = a->watch(100);
  EXPECT_NE(seen.find("rank 2 disconnected"), std::string::npos) << seen;
}

TEST(Rendezvous, OrderlyFinishIsNotACrash) {
  const int port = free_tcp_port();
  auto r0 = std::async(std::launch::async, [&] { return tcp_rendezvous(env_of(0, 2, port), "id", 20); });
  std::unique_ptr<Rendezvous> b = tcp_rendezvous(env_of(1, 2, port), "", 20);
  std::unique_ptr<Rendezvous> a = r0.get();
  auto fin1 = std::async(std::launch::async, [&] { b->finish(); });
  EXPECT_EQ(a->watch(200), "");  // rank 1's goodbye arrives while rank 0 still watches
  a->finish();
  fin1.get();
}

TEST(Rendezvous, MissingRankZeroTimesOut) {
  try {
    tcp_rendezvous(env_of(1, 2, free_tcp_port()), "", 0.5);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("could not reach rank 0 at 127.0.0.1"), std::string::npos)
        << e.what();
  }
}

}  // namespace
