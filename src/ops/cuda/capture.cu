// capture.cu — ending a CUDA graph capture that a failure left open (capture.hpp).
#include "mnist_ddp/ops/cuda/capture.hpp"

namespace mnist_ddp {

void abandon_capture(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) == cudaSuccess &&
      status != cudaStreamCaptureStatusNone) {
    cudaGraph_t dropped = nullptr;
    cudaStreamEndCapture(stream, &dropped);
    if (dropped != nullptr) cudaGraphDestroy(dropped);
  }
  cudaGetLastError();
}

}  // namespace mnist_ddp
