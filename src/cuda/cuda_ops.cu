// cuda_ops.cu — the factory for the CUDA Ops backend. The cuDNN/cuBLAS implementation is the next
// step of the GPU issue; until it lands, --device cuda on a GPU machine stops with this message
// instead of running something half-done.
#include "mnist_ddp/check.hpp"
#include "mnist_ddp/ops.hpp"

namespace mnist_ddp {

std::unique_ptr<Ops> make_cuda_ops() {
  throw UserError(
      "--device cuda: the CUDA compute backend (cuDNN/cuBLAS ops) is not implemented in this "
      "version yet; the GPU runtime and NCCL are. Use --device cpu");
}

}  // namespace mnist_ddp
