// backend_table.cu — libmnist_ddp_cuda.so's entry point: the table of the CUDA seam's functions
// (runtime/cuda_backend.hpp) that the mnist_ddp binary's loader calls through. The plugin is linked
// with -Bsymbolic-functions, so these bind to the plugin's own definitions, never to the loader's
// forwarding functions of the same names in the binary.
#include "mnist_ddp/runtime/cuda_backend.hpp"
#include "mnist_ddp/runtime/device.hpp"

namespace mnist_ddp {
namespace {

StepRun run_step_graphs(StepGraphs& graphs, std::int64_t n, const std::function<void()>& body) {
  return graphs.run(n, body);
}

const CudaBackend kTable{
    kCudaBackendAbi,
    sizeof(CudaBackend),
    kCudaBackendLayout,
    &cuda_device_count,
    &cuda_alloc,
    &cuda_free,
    &use_cuda_device,
    &release_cuda_device,
    &cuda_device_description,
    &cuda_library_versions,
    &make_nccl_comm,
    &make_nccl_group_comm,
    &make_host_staged_comm,
    &make_host_staged_group_comm,
    &make_cuda_ops,
    &make_grad_scaler,
    &run_step_graphs,
    &destroy_graph_exec,
};

}  // namespace
}  // namespace mnist_ddp

extern "C" __attribute__((visibility("default"))) const mnist_ddp::CudaBackend*
mnist_ddp_cuda_backend() {
  return &mnist_ddp::kTable;
}
