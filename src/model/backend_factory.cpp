// backend_factory.cpp — make_backend(device): picks the CPU reference backend or the CUDA backend
// by name (octet/backend.h): "cpu", "cuda" (device 0) or "cuda:N" (device ordinal N). Without CUDA
// support compiled in (OCTET_WITH_CUDA undefined), the CUDA factory is defined here and throws, so
// the CLI's --device cuda fails with a clear message.
#include <cctype>
#include <memory>
#include <string>

#include "octet/backend.h"
#include "octet/error.h"

namespace octet {

std::unique_ptr<Backend> make_backend(const std::string& device) {
  if (device == "cpu") return make_cpu_backend();
  if (device == "cuda") return make_cuda_backend();
  const std::string prefix = "cuda:";
  if (device.size() > prefix.size() && device.compare(0, prefix.size(), prefix) == 0 &&
      device.size() <= prefix.size() + 4) {
    int ordinal = 0;
    bool digits = true;
    for (size_t i = prefix.size(); i < device.size(); ++i) {
      digits = digits && std::isdigit(static_cast<unsigned char>(device[i]));
      ordinal = ordinal * 10 + (device[i] - '0');
    }
    if (digits) return make_cuda_backend(CudaOptions{ordinal, nullptr});
  }
  OCTET_FAIL("unknown device '" + device + "' (expected 'cpu', 'cuda' or 'cuda:N')");
}

#ifndef OCTET_WITH_CUDA
std::unique_ptr<Backend> make_cuda_backend(const CudaOptions&) {
  OCTET_FAIL("octet was built without CUDA (configure with -DOCTET_CUDA=ON)");
}
#endif

}  // namespace octet
