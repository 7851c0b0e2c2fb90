// src/dist/run_rank.cpp — run_rank (octet/dist.h): an error on one rank ends every rank with one
// line and a non-zero exit, never a hang of the others in their next collective.
// (docs/distributed.md §Failures)
#include <cstdio>
#include <exception>

#include "octet/dist.h"
#include "octet/error.h"

namespace octet {

void run_rank(Communicator& comm, const std::function<void()>& body) {
  int code = 0;
  std::string msg;
  try {
    body();
    return;
  } catch (const Error& e) {
    code = 2;
    msg = e.what();
  } catch (const std::exception& e) {
    code = 1;
    msg = e.what();
  } catch (...) {
    code = 1;
    msg = "unknown error";
  }
  std::fprintf(stderr, "octet: failed: rank %d of %d: %s\n", comm.rank(), comm.size(), msg.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  comm.abort(code);
}

}  // namespace octet
