// capture.hpp — one piece of CUDA graph capture handling shared by the CUDA sources of two
// folders (ops/cuda, comm/cuda; public so that both may include it, and only they do): ending a
// capture a failure left open.
#pragma once

#include <cuda_runtime.h>

namespace mnist_ddp {

// Ends a capture still open on `stream` (after a failed call), drops what it recorded and clears
// the error it left, so the next eager call does not report it. A no-op when not capturing.
void abandon_capture(cudaStream_t stream);

}  // namespace mnist_ddp
