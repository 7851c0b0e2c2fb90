// backend_factory.cpp — make_backend(device): picks the CPU reference backend or the CUDA backend
// by name (octet/backend.h): "cpu", "cuda" (device 0) or "cuda:N". Without CUDA support compiled
// in (OCTET_WITH_CUDA undefined), the CUDA factory is defined here and throws, so the CLI's
// --device cuda fails with a clear message.
#include <cstdlib>
#include <memory>
#include <string>

#include "octet/backend.h"
#include "octet/error.h"

namespace octet {

std::unique_ptr<Backend> make_backend(const std::string& device) {
  if (device == "cpu") return make_cpu_backend();
  if (device == "cuda") return make_cuda_backend();
  if (device.rfind("cuda:", 0) == 0) {
    const std::string n = device.substr(5);
    char* end = nullptr;
    const long ordinal = n.empty() ? -1 : std::strtol(n.c_str(), &end, 10);
    OCTET_CHECK(ordinal >= 0 && end && *end == '\0',
                "unknown device '" + device + "' (expected cpu, cuda or cuda:N with N >= 0)");
    CudaOptions options;
    options.device = int(ordinal);
    return make_cuda_backend(options);
  }
  OCTET_FAIL("unknown device '" + device + "' (expected cpu, cuda or cuda:N)");
}

#ifndef OCTET_WITH_CUDA
std::unique_ptr<Backend> make_cuda_backend(const CudaOptions&) {
  OCTET_FAIL("octet was built without CUDA (configure with -DOCTET_CUDA=ON)");
}
#endif

}  // namespace octet
