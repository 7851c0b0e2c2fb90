// backend_factory.cpp — make_backend(device): picks the CPU reference backend or the CUDA backend
// by name (octet/backend.h). Without CUDA support compiled in (OCTET_WITH_CUDA undefined), the
// CUDA factory is defined here and throws, so the CLI's --device cuda fails with a clear message.
#include <memory>
#include <string>

#include "octet/backend.h"
#include "octet/error.h"

namespace octet {

std::unique_ptr<Backend> make_backend(const std::string& device) {
  if (device == "cpu") return make_cpu_backend();
  if (device == "cuda") return make_cuda_backend();
  OCTET_FAIL("unknown device '" + device + "' (expected 'cpu' or 'cuda')");
}

#ifndef OCTET_WITH_CUDA
std::unique_ptr<Backend> make_cuda_backend() {
  OCTET_FAIL("octet was built without CUDA (configure with -DOCTET_CUDA=ON)");
}
#endif

}  // namespace octet
