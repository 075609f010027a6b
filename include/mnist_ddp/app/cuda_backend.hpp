// cuda_backend.hpp — the CUDA backend as a plugin: the table of entry points that
// libmnist_ddp_cuda.so (src/*/cuda/, built with the CUDA libraries) hands the mnist_ddp binary,
// which loads it (dlopen, src/app/cuda_loader.cpp) only when a run asks a GPU something. A
// CPU run never maps cuDNN, cuBLAS, NCCL or the CUDA runtime: it starts without them installed,
// and ~0.45 s of CPU sooner per rank (their static constructors and relocations). The test and
// benchmark binaries link the backend's objects directly: they call its functions by name, and the
// app layer's code in them reaches the backend through the table of backend_table.cu.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/ops/grad_scaler.hpp"
#include "mnist_ddp/ops/ops.hpp"
#include "mnist_ddp/ops/step_graph.hpp"

namespace mnist_ddp {

// The CUDA seam, written once: every function the binary asks the plugin for. From this list come
// the table below, the plugin's table (app/cuda/backend_table.cu), the binary's loader
// (app/cuda_loader.cpp), the CPU-only stand-ins (stub/cuda_stub.cpp) and the ABI number, so an
// entry point cannot be added to some of them and not the others, and a plugin built from another
// list is refused. Each function keeps its declaration (and contract) in its concern's header
// (launch/device.hpp, comm/comm.hpp, ops/ops.hpp) and its one definition in the plugin
// (src/*/cuda/); when one of them and this list disagree, the plugin's table does not compile (a
// function's address does not convert to its field). What the backend's objects do (an Ops, its
// step graphs and loss scaler, a Comm) is reached through those objects, not through this list.
//
// X(kind, field, function, return type, (parameters), (arguments), stand-in body):
//   PLUGIN    reached only through the one object, cuda_plugin().field(...), by the app layer:
//             the binary defines no function of that name (go to definition lands in the
//             plugin); a call from a lower layer does not link;
//   CALL      a lower layer's call (model/tensor.cpp's device memory): the binary's function of
//             the same name loads the plugin and calls it;
//   IF_LOADED as CALL, but a no-op until the plugin is loaded (teardown and freeing: a run that
//             never loaded it has nothing to release);
//   CUSTOM    as CALL, written out in cuda_loader.cpp (it decides before loading: no driver, no
//             GPU); its stand-in is generated like the others'.
#define MNIST_DDP_CUDA_SEAM(X)                                                                     \
  X(CUSTOM, device_count, cuda_device_count, int, (), (), return 0;)                               \
  X(CALL, alloc, cuda_alloc, void*, (std::size_t bytes), (bytes),                                  \
    throw UserError("this mnist_ddp was built without CUDA; device memory is unavailable");)       \
  X(IF_LOADED, free, cuda_free, void, (void* p), (p), (void)p;)                                    \
  X(PLUGIN, use_device, use_cuda_device, void, (int index), (index), (void)index;                  \
    throw UserError("this mnist_ddp was built without CUDA");)                                     \
  X(IF_LOADED, release_device, release_cuda_device, void, (), (), )                                \
  X(PLUGIN, device_description, cuda_device_description, std::string, (int index), (index),        \
    (void)index;                                                                                   \
    return "";)                                                                                    \
  X(PLUGIN, library_versions, cuda_library_versions, std::vector<std::string>, (), (), return {};) \
  X(PLUGIN, make_nccl_comm, make_nccl_comm, std::unique_ptr<Comm>, (), (),                         \
    throw UserError("--comm nccl: this mnist_ddp was built without CUDA (make USE_CUDA=1)");)      \
  X(PLUGIN, make_nccl_group_comm, make_nccl_group_comm, std::unique_ptr<Comm>, (int color),        \
    (color), (void)color;                                                                          \
    throw UserError("--local-sgd-start on a GPU: this mnist_ddp was built without CUDA");)         \
  X(PLUGIN, make_host_staged_comm, make_host_staged_comm, std::unique_ptr<Comm>, (), (),           \
    throw UserError("--comm mpi with --device cuda: this mnist_ddp was built without CUDA");)      \
  X(PLUGIN, make_host_staged_group_comm, make_host_staged_group_comm, std::unique_ptr<Comm>,       \
    (int color), (color), (void)color;                                                             \
    throw UserError("--comm mpi with --device cuda: this mnist_ddp was built without CUDA");)      \
  X(PLUGIN, make_cuda_ops, make_cuda_ops, std::unique_ptr<Ops>, (const BackendOptions& options),   \
    (options), (void)options;                                                                      \
    throw UserError(                                                                               \
        "this mnist_ddp was built without CUDA (make USE_CUDA=1 to build the GPU backend)");)

// A change to the seam's classes that the list cannot see (a virtual function of Ops, Comm,
// StepGraphs or GradScaler) bumps this by hand (2: Ops::conv2d_backward; 3: Ops::make_step_graphs
// and Ops::make_grad_scaler; 4: Ops::bn_relu_pool_conv_backward).
inline constexpr int kCudaBackendRevision = 4;

// The list as text (kinds, names and signatures), and its FNV-1a hash folded with the revision:
// the ABI number both sides compile in. Adding, removing or retyping an entry point changes it.
#define MNIST_DDP_CUDA_SEAM_TEXT(kind, field, function, ret, params, args, stub) \
#kind " " #field " " #function " " #ret " " #params ";"
inline constexpr const char kCudaSeamText[] = MNIST_DDP_CUDA_SEAM(MNIST_DDP_CUDA_SEAM_TEXT);
#undef MNIST_DDP_CUDA_SEAM_TEXT
constexpr std::uint64_t cuda_seam_hash(const char* s) {
  std::uint64_t h = 14695981039346656037ull;  // FNV-1a, 64 bits
  for (; *s != '\0'; ++s) h = (h ^ static_cast<unsigned char>(*s)) * 1099511628211ull;
  return h;
}
inline constexpr std::uint64_t kCudaBackendAbi =
    cuda_seam_hash(kCudaSeamText) ^ static_cast<std::uint64_t>(kCudaBackendRevision);

// The sizes of the types that cross between the binary and the plugin, folded into one number
// that each side compiles from its own headers: a plugin built from other headers is refused
// rather than handed objects of another layout.
inline constexpr std::size_t kCudaBackendLayout =
    ((((sizeof(BackendOptions) * 131 + sizeof(CaptureHooks)) * 131 + sizeof(LossScaleRule)) * 131 +
      sizeof(Comm)) *
         131 +
     sizeof(Ops));

// One pointer per entry of MNIST_DDP_CUDA_SEAM.
struct CudaBackend {
  std::uint64_t abi;   // kCudaBackendAbi in the plugin's build
  std::size_t size;    // sizeof(CudaBackend) in the plugin's build
  std::size_t layout;  // kCudaBackendLayout in the plugin's build
#define MNIST_DDP_CUDA_SEAM_FIELD(kind, field, function, ret, params, args, stub) \
  ret(*field) params;
  MNIST_DDP_CUDA_SEAM(MNIST_DDP_CUDA_SEAM_FIELD)
#undef MNIST_DDP_CUDA_SEAM_FIELD
};

// The CUDA backend as one object, for the app layer (the PLUGIN entries are reached only
// through it): in the binary the plugin's table, loaded on first use (app/cuda_loader.cpp;
// UserError when it cannot be loaded); in the test and benchmark binaries, which link the backend,
// its own table (app/cuda/backend_table.cu); in a CPU-only build the stand-ins'
// (stub/cuda_stub.cpp).
const CudaBackend& cuda_plugin();

}  // namespace mnist_ddp

// The plugin's one exported symbol (C linkage: found by dlsym without a mangled name).
extern "C" const mnist_ddp::CudaBackend* mnist_ddp_cuda_backend();
