// cuda_backend.hpp — the CUDA backend as a plugin: the table of entry points that
// libmnist_ddp_cuda.so (src/*/cuda/, built with the CUDA libraries) hands the mnist_ddp binary,
// which loads it (dlopen, src/runtime/cuda_loader.cpp) only when a run asks a GPU something. A
// CPU run never maps cuDNN, cuBLAS, NCCL or the CUDA runtime: it starts without them installed,
// and ~0.45 s of CPU sooner per rank (their static constructors and relocations). The test and
// benchmark binaries link the backend's objects directly and do not use this table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mnist_ddp/dist/comm.hpp"
#include "mnist_ddp/model/amp.hpp"
#include "mnist_ddp/ops/ops.hpp"
#include "mnist_ddp/ops/step_graph.hpp"

namespace mnist_ddp {

// Raised when the table's layout or a seam class's virtual functions change (2:
// Ops::conv2d_backward): a plugin from another build is refused, not called.
inline constexpr int kCudaBackendAbi = 2;

// The sizes of the types that cross between the binary and the plugin, folded into one number
// that each side compiles from its own headers: a plugin built from other headers is refused
// rather than handed objects of another layout.
inline constexpr std::size_t kCudaBackendLayout =
    ((((sizeof(StepGraphs) * 131 + sizeof(CaptureHooks)) * 131 + sizeof(LossScaleRule)) * 131 +
      sizeof(Comm)) *
         131 +
     sizeof(Ops));

// One pointer per function of the CUDA seam (runtime/device.hpp, dist/comm.hpp, ops/ops.hpp,
// ops/step_graph.hpp, model/amp.hpp), each with that function's contract.
struct CudaBackend {
  int abi;
  std::size_t size;    // sizeof(CudaBackend) in the plugin's build
  std::size_t layout;  // kCudaBackendLayout in the plugin's build
  int (*device_count)();
  void* (*alloc)(std::size_t bytes);
  void (*free)(void* p);
  void (*use_device)(int index);
  void (*release_device)();
  std::string (*device_description)(int index);
  std::vector<std::string> (*library_versions)();
  std::unique_ptr<Comm> (*make_nccl_comm)();
  std::unique_ptr<Comm> (*make_nccl_group_comm)(int color);
  std::unique_ptr<Comm> (*make_host_staged_comm)();
  std::unique_ptr<Comm> (*make_host_staged_group_comm)(int color);
  std::unique_ptr<Ops> (*make_cuda_ops)(bool tf32);
  std::unique_ptr<GradScaler> (*make_grad_scaler)(Ops& ops, const LossScaleRule& rule);
  StepRun (*step_graphs_run)(StepGraphs& graphs, std::int64_t n, const std::function<void()>& body);
  void (*destroy_graph_exec)(void* exec);
};

}  // namespace mnist_ddp

// The plugin's one exported symbol (C linkage: found by dlsym without a mangled name).
extern "C" const mnist_ddp::CudaBackend* mnist_ddp_cuda_backend();
