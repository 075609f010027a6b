// cuda_loader.cpp — the CUDA seam in the mnist_ddp binary (USE_CUDA=1): cuda_plugin(), the table
// of libmnist_ddp_cuda.so (app/cuda_backend.hpp), loaded on first use from the binary's own
// directory (MNIST_DDP_CUDA_BACKEND names another file), and the few forwarding functions the
// lower layers' calls need (the list's CALL, IF_LOADED and CUSTOM entries). A machine without an
// NVIDIA driver has no GPU, and --device auto or cpu never loads the plugin there: cuDNN, cuBLAS,
// NCCL and the CUDA runtime stay unmapped. The plugin is never unloaded (CUDA libraries do not
// survive dlclose in a live process); main's teardown still releases the device
// (release_cuda_device).
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>

#include <fmt/format.h>

#include "mnist_ddp/app/cuda_backend.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/launch/device.hpp"

namespace mnist_ddp {
namespace {

std::string plugin_path() {
  if (const char* env = std::getenv("MNIST_DDP_CUDA_BACKEND"); env != nullptr && *env != '\0')
    return env;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ((ec ? std::filesystem::path(".") : exe.parent_path()) / "libmnist_ddp_cuda.so").string();
}

struct Plugin {
  std::once_flag once;
  const CudaBackend* table = nullptr;
  std::string path, error;
  bool foreign = false;  // it loaded, but is not this build's plugin
};

Plugin& plugin() {
  static Plugin p;  // a pointer and two strings: nothing to tear down (the plugin stays loaded)
  return p;
}

// The table, loading the plugin on the first call; nullptr (and plugin().error) when it cannot.
const CudaBackend* loaded() {
  Plugin& p = plugin();
  std::call_once(p.once, [&p] {
    p.path = plugin_path();
    // RTLD_NOW: a missing CUDA library or symbol fails here, with the loader's words, not at a
    // first call in the middle of a run.
    void* h = dlopen(p.path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* why = dlerror();
      p.error = why != nullptr ? why : "dlopen failed";
      return;
    }
    using Entry = const CudaBackend* (*)();
    auto entry = reinterpret_cast<Entry>(dlsym(h, "mnist_ddp_cuda_backend"));
    const CudaBackend* t = entry != nullptr ? entry() : nullptr;
    // The ABI number is the hash of the seam's list: a plugin built from another list is refused
    // here, not called.
    if (t == nullptr || t->abi != kCudaBackendAbi || t->size != sizeof(CudaBackend) ||
        t->layout != kCudaBackendLayout) {
      p.foreign = true;
      return;
    }
    p.table = t;
  });
  return p.table;
}

const CudaBackend& backend() {
  if (const CudaBackend* t = loaded()) return *t;
  if (plugin().foreign) {
    throw UserError(fmt::format(
        "{} is not the GPU backend of this mnist_ddp build (another build's, or another library): "
        "rebuild both with make, or point MNIST_DDP_CUDA_BACKEND at the libmnist_ddp_cuda.so "
        "built with this binary",
        plugin().path));
  }
  std::error_code ec;
  if (!std::filesystem::exists(plugin().path, ec)) {
    throw UserError(fmt::format(
        "the GPU backend {} is missing: keep libmnist_ddp_cuda.so beside the mnist_ddp binary "
        "(make builds both), set MNIST_DDP_CUDA_BACKEND to its path, or use --device cpu",
        plugin().path));
  }
  throw UserError(fmt::format(
      "the GPU backend {} did not load: {}. It needs the CUDA runtime, cuBLAS, cuDNN and NCCL "
      "this mnist_ddp was built against: make them visible (module load, or LD_LIBRARY_PATH), or "
      "use --device cpu",
      plugin().path, plugin().error));
}

}  // namespace

bool cuda_built() {
  return true;
}

// The forwarding functions of the list's CALL and IF_LOADED entries.
#define MNIST_DDP_CUDA_SEAM_FORWARD(kind, field, function, ret, params, args, stub) \
  MNIST_DDP_CUDA_FORWARD_##kind(field, function, ret, params, args)
#define MNIST_DDP_CUDA_FORWARD_CALL(field, function, ret, params, args) \
  ret function params {                                                 \
    return backend().field args;                                        \
  }
// Device memory or a context exist only once the plugin is loaded: before, nothing to do.
#define MNIST_DDP_CUDA_FORWARD_IF_LOADED(field, function, ret, params, args) \
  ret function params {                                                      \
    if (const CudaBackend* t = plugin().table) t->field args;                \
  }
#define MNIST_DDP_CUDA_FORWARD_CUSTOM(field, function, ret, params, args)
// PLUGIN entries: none; the app reaches them through cuda_plugin().
#define MNIST_DDP_CUDA_FORWARD_PLUGIN(field, function, ret, params, args)
MNIST_DDP_CUDA_SEAM(MNIST_DDP_CUDA_SEAM_FORWARD)
#undef MNIST_DDP_CUDA_SEAM_FORWARD
#undef MNIST_DDP_CUDA_FORWARD_CALL
#undef MNIST_DDP_CUDA_FORWARD_IF_LOADED
#undef MNIST_DDP_CUDA_FORWARD_CUSTOM
#undef MNIST_DDP_CUDA_FORWARD_PLUGIN

const CudaBackend& cuda_plugin() {
  return backend();
}

// The CUSTOM entries.
int cuda_device_count() {
  // Without a driver there is no GPU, and the plugin (with the CUDA libraries) is not loaded to
  // be told so.
  return nvidia_driver_installed() ? backend().device_count() : 0;
}

}  // namespace mnist_ddp
