// src/dist/rendezvous.cpp — the TCP rendezvous of octet/dist.h: rank 0 serves a small payload (the
// NCCL unique id) at MASTER_ADDR:MASTER_PORT to the other ranks, and the connections stay open as
// liveness links: a peer's socket that closes without its goodbye byte is a crashed process, which
// the NCCL communicator's watchdog turns into an abort of every rank instead of a hang.
// Wire format: a connecting rank sends its rank (int32, little-endian host order on one host or
// between x86 hosts); rank 0 answers with the payload's length (uint32) and bytes. Afterwards the
// only byte on a link is 'B' (goodbye). (docs/distributed.md §"Failures")
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "octet/dist.h"
#include "octet/error.h"

namespace octet {

namespace {

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
  const auto d = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return d > 0 ? int(d) : 0;
}

// Reads or writes exactly n bytes before the deadline; false on EOF, error or timeout.
bool io_all(int fd, void* buf, size_t n, bool write, Clock::time_point deadline) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    pollfd pf{fd, short(write ? POLLOUT : POLLIN), 0};
    if (::poll(&pf, 1, ms_left(deadline)) <= 0) return false;
    const ssize_t k = write ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (k <= 0) {
      if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      return false;
    }
    p += k;
    n -= size_t(k);
  }
  return true;
}

class TcpRendezvous final : public Rendezvous {
 public:
  TcpRendezvous(const DistEnv& env, const std::string& payload, double timeout_s)
      : env_(env), timeout_(std::chrono::milliseconds(int64_t(timeout_s * 1000))) {
    OCTET_CHECK(env.master_port > 0, "rendezvous: MASTER_PORT is not set (rank 0 serves the NCCL id there)");
    const auto deadline = Clock::now() + timeout_;
    if (env.rank == 0)
      serve(payload, deadline);
    else
      join(deadline);
  }
  ~TcpRendezvous() override {
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
  }
  const std::string& payload() const override { return payload_; }

  std::string watch(int timeout_ms) override {
    std::vector<pollfd> pf;
    std::vector<int> who;
    for (size_t i = 0; i < fds_.size(); ++i)
      if (fds_[i] >= 0 && !bye_[i]) {
        pf.push_back({fds_[i], POLLIN, 0});
        who.push_back(peer_rank(i));
      }
    if (pf.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
      return "";
    }
    if (::poll(pf.data(), pf.size(), timeout_ms) <= 0) return "";
    for (size_t j = 0; j < pf.size(); ++j) {
      if (!pf[j].revents) continue;
      const size_t i = slot_of(who[j]);
      char c = 0;
      const ssize_t k = ::recv(fds_[i], &c, 1, MSG_DONTWAIT);
      if (k == 1 && c == 'B') {
        bye_[i] = true;
        continue;
      }
      if (k < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      return "rank " + std::to_string(who[j]) + " disconnected (its process ended without finishing)";
    }
    return "";
  }

  void finish() override {
    const auto deadline = Clock::now() + timeout_;
    char c = 'B';
    if (env_.rank != 0) {
      if (fds_[0] < 0) return;
      io_all(fds_[0], &c, 1, true, deadline);
      io_all(fds_[0], &c, 1, false, deadline);  // rank 0's answer (or EOF)
      return;
    }
    for (size_t i = 0; i < fds_.size(); ++i)
      if (!bye_[i]) bye_[i] = io_all(fds_[i], &c, 1, false, deadline);
    c = 'B';
    for (int fd : fds_) io_all(fd, &c, 1, true, deadline);
  }

 private:
  int peer_rank(size_t slot) const { return env_.rank == 0 ? int(slot) + 1 : 0; }
  size_t slot_of(int rank) const { return env_.rank == 0 ? size_t(rank - 1) : 0; }

  void serve(const std::string& payload, Clock::time_point deadline) {
    payload_ = payload;
    const int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
    OCTET_CHECK(lfd >= 0,
                io_error("rendezvous: cannot create a socket for port", std::to_string(env_.master_port)));
    const int one = 1;
    ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(uint16_t(env_.master_port));
    if (::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(lfd, 128) != 0) {
      const std::string why =
          io_error("rendezvous: rank 0 cannot listen on port", std::to_string(env_.master_port));
      ::close(lfd);
      OCTET_FAIL(why);
    }
    fds_.assign(size_t(env_.world - 1), -1);
    bye_.assign(fds_.size(), false);
    int joined = 0;
    while (joined < env_.world - 1) {
      pollfd pf{lfd, POLLIN, 0};
      if (::poll(&pf, 1, ms_left(deadline)) <= 0) break;
      const int fd = ::accept(lfd, nullptr, nullptr);
      if (fd < 0) continue;
      int32_t r = -1;
      if (!io_all(fd, &r, 4, false, deadline) || r < 1 || r >= env_.world || fds_[size_t(r - 1)] >= 0) {
        ::close(fd);
        continue;
      }
      const uint32_t len = uint32_t(payload.size());
      if (!io_all(fd, const_cast<uint32_t*>(&len), 4, true, deadline) ||
          !io_all(fd, const_cast<char*>(payload.data()), payload.size(), true, deadline)) {
        ::close(fd);
        continue;
      }
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      fds_[size_t(r - 1)] = fd;
      ++joined;
    }
    ::close(lfd);
    OCTET_CHECK(joined == env_.world - 1, "rendezvous: only " + std::to_string(joined) + " of " +
                                              std::to_string(env_.world - 1) + " ranks connected to port " +
                                              std::to_string(env_.master_port) + " within " +
                                              std::to_string(timeout_.count() / 1000) + " s");
  }

  void join(Clock::time_point deadline) {
    const std::string host = env_.master_addr.empty() ? "127.0.0.1" : env_.master_addr;
    const std::string port = std::to_string(env_.master_port);
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int gai = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
    OCTET_CHECK(gai == 0, "rendezvous: cannot resolve MASTER_ADDR " + host + ": " + ::gai_strerror(gai));
    int fd = -1;
    while (Clock::now() < deadline) {  // rank 0 may not listen yet
      fd = ::socket(AF_INET, SOCK_STREAM, 0);
      if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) break;
      if (fd >= 0) ::close(fd);
      fd = -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ::freeaddrinfo(res);
    OCTET_CHECK(fd >= 0, "rendezvous: rank " + std::to_string(env_.rank) + " could not reach rank 0 at " +
                             host + ":" + port + " within " + std::to_string(timeout_.count() / 1000) + " s");
    fds_ = {fd};
    bye_ = {false};
    int32_t r = env_.rank;
    uint32_t len = 0;
    bool ok = io_all(fd, &r, 4, true, deadline) && io_all(fd, &len, 4, false, deadline) && len <= (1u << 20);
    if (ok) {
      payload_.resize(len);
      ok = io_all(fd, payload_.data(), len, false, deadline);
    }
    OCTET_CHECK(ok, "rendezvous: rank " + std::to_string(env_.rank) +
                        " did not receive the payload from rank 0 at " + host + ":" + port);
  }

  DistEnv env_;
  std::chrono::milliseconds timeout_;
  std::string payload_;
  std::vector<int> fds_;   // rank 0: the link of rank i + 1 at i; others: the link to rank 0
  std::vector<bool> bye_;  // that peer said goodbye
};

}  // namespace

std::unique_ptr<Rendezvous> tcp_rendezvous(const DistEnv& env, const std::string& payload, double timeout_s) {
  return std::make_unique<TcpRendezvous>(env, payload, timeout_s);
}

}  // namespace octet
