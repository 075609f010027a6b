// library_versions.cu — which CUDA libraries this process loaded (runtime, cuBLAS, cuDNN, NCCL)
// next to the versions it was compiled against, for --print-env: a GPU machine's libraries come
// from wherever it has them (PyTorch's wheels, a toolkit), and a major version that differs from
// the build's is the first thing to rule out when a GPU run fails. None of these calls needs a GPU.
// (Plain string building: nvcc cannot evaluate fmt's compile-time format checks.)
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <string>
#include <vector>

#include "mnist_ddp/launch/device.hpp"

namespace mnist_ddp {

namespace {

struct Version {
  int major = -1, minor = -1, patch = -1;  // -1: the library did not say
};

std::string text(const Version& v) {
  if (v.major < 0) return "unknown";
  std::string t = std::to_string(v.major) + "." + std::to_string(v.minor);
  return v.patch < 0 ? t : t + "." + std::to_string(v.patch);
}

// cudart encodes 1000 * major + 10 * minor.
Version cudart_version(int code) {
  return {code / 1000, code % 1000 / 10, -1};
}
// cuDNN 9: 10000 * major + 100 * minor + patch.
Version cudnn_version(long code) {
  return {static_cast<int>(code / 10000), static_cast<int>(code % 10000 / 100),
          static_cast<int>(code % 100)};
}
// NCCL from 2.9 on: 10000 * major + 100 * minor + patch (before: 1000 * major + 100 * minor +
// patch).
Version nccl_version(int code) {
  if (code < 20900) return {code / 1000, code % 1000 / 100, code % 100};
  return {code / 10000, code % 10000 / 100, code % 100};
}

}  // namespace

std::vector<std::string> cuda_library_versions() {
  int runtime = 0, driver = 0, nccl = 0;
  Version loaded_runtime, loaded_driver, loaded_cublas, loaded_nccl;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) loaded_runtime = cudart_version(runtime);
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0)
    loaded_driver = cudart_version(driver);
  cudaGetLastError();  // a missing driver is reported below, not left for the next call
  int v = 0;
  if (cublasGetProperty(MAJOR_VERSION, &v) == CUBLAS_STATUS_SUCCESS) loaded_cublas.major = v;
  if (cublasGetProperty(MINOR_VERSION, &v) == CUBLAS_STATUS_SUCCESS) loaded_cublas.minor = v;
  if (cublasGetProperty(PATCH_LEVEL, &v) == CUBLAS_STATUS_SUCCESS) loaded_cublas.patch = v;
  const Version loaded_cudnn = cudnn_version(static_cast<long>(cudnnGetVersion()));
  if (ncclGetVersion(&nccl) == ncclSuccess) loaded_nccl = nccl_version(nccl);

  struct Row {
    const char* name;
    Version loaded, built;
  };
  const Row rows[] = {
      {"runtime", loaded_runtime, cudart_version(CUDART_VERSION)},
      {"cuBLAS", loaded_cublas, {CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH}},
      {"cuDNN", loaded_cudnn, cudnn_version(CUDNN_VERSION)},
      {"NCCL", loaded_nccl, nccl_version(NCCL_VERSION_CODE)},
  };
  std::string line = "CUDA libraries loaded (built against): driver supports CUDA " +
                     (loaded_driver.major < 0 ? std::string("none") : text(loaded_driver));
  std::vector<std::string> out;
  std::vector<std::string> mismatches;
  for (const Row& r : rows) {
    const std::string name = r.name;
    line += ", " + name + " " + text(r.loaded) + " (" + text(r.built) + ")";
    const bool older = r.loaded.major == r.built.major &&
                       (r.loaded.minor < r.built.minor ||
                        (r.loaded.minor == r.built.minor && r.loaded.patch < r.built.patch));
    if (older)
      mismatches.push_back("CUDA libraries: " + name + " loaded " + text(r.loaded) +
                           " is older than the " + text(r.built) +
                           " it was built against (same major: it should work; a missing symbol "
                           "or an unsupported call points here)");
    if (r.loaded.major != r.built.major)
      mismatches.push_back("CUDA libraries: MAJOR VERSION DIFFERS: " + name + " loaded " +
                           text(r.loaded) + ", built against " + text(r.built) + ": put " + name +
                           " " + std::to_string(r.built.major) +
                           ".x first on the library path (the bundle: MNIST_DDP_CUDA_LIBS) or "
                           "rebuild against " +
                           text(r.loaded));
  }
  if (loaded_driver.major >= 0 && loaded_driver.major < loaded_runtime.major)
    mismatches.push_back("CUDA libraries: the driver supports CUDA " + text(loaded_driver) +
                         " but the runtime is " + text(loaded_runtime) + ": update the driver");
  out.push_back(line);
  out.insert(out.end(), mismatches.begin(), mismatches.end());
  return out;
}

}  // namespace mnist_ddp
