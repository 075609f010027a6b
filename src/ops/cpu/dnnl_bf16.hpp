// dnnl_bf16.hpp — the oneDNN backend's bf16 convolutions (--amp bf16 on the CPU): for one
// convolution geometry, each pass (forward, data gradient, filter gradient) either as oneDNN's
// bf16 primitive (bf16 copies of the input, weights and output gradient; fp32 accumulation; fp32
// output, bias and filter gradient) or, where bf16 loses on this CPU, as the fp32 kernel on
// inputs rounded to bf16, which computes the same products exactly (a product of two bf16 values
// fits in fp32's mantissa) with the same fp32 accumulation, or, for the image's passes on
// AVX512-BF16 at one thread per rank, as this project's vdpbf16ps kernels (conv1_bf16.hpp). The
// activations arrive and leave in the backend's fp32 layout ([N][C/16][H][W][16]; the image
// [N][1][H][W]), so BN, ReLU, pooling and the fc layer read them as in fp32 training.
#pragma once

#include <dnnl.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "ops/cpu/bf16_units.hpp"
#include "ops/cpu/cpu_kernels.hpp"

namespace mnist_ddp::bf16 {

// The three passes of a convolution.
enum class Pass { Forward, BackwardData, BackwardWeights };

// Whether a pass runs as oneDNN's bf16 primitive on this CPU, by a fixed rule (the same on every
// rank and every run, so resumes stay bit-exact): bf16 where oneDNN has a JIT bf16 kernel for it,
// except where it measured slower than fp32 on that kind of unit (layer1's filter gradient, one
// input channel, on AMX: 1.15 ms against fp32's 0.34 ms; see dnnl_bf16.cpp).
bool runs_bf16(const ConvGeom& g, Pass pass, Units units, const std::string& bf16_impl);

// Whether a pass runs as this project's bf16 kernel (conv1_bf16.hpp) where the rank computes on
// one thread (they are single-threaded): the image's forward and filter gradient on AVX512-BF16
// without AMX, where they fit the geometry and this build has them (measured against oneDNN's:
// bench/ops_bench.cpp's BM_Bf16ImageConv; AMX keeps oneDNN's, not measured there).
bool runs_ours(const ConvGeom& g, Pass pass, Units units);

// How a Conv picks each pass's kernel.
enum class Pick {
  OneThread,    // the rank computes on one thread: runs_ours, else runs_bf16
  Threads,      // on several threads: runs_bf16 (oneDNN's kernels are the multi-threaded ones)
  EveryOneDnn,  // oneDNN's bf16 primitive for every pass with a JIT kernel, runs_bf16's
                // exceptions ignored (the benchmark that measures them: bench/ops_bench.cpp)
};

// One geometry's bf16 primitives, their bf16 buffers and the reorders into and out of the
// backend's fp32 layout. The primitive descriptors (what oneDNN would run) are made at once; a
// pass's primitive and buffers on its first call (evaluation's batch size runs forward only).
class Conv {
 public:
  // The fp32 activations are channel-blocked by 16 (K, and C unless 1, multiples of 16).
  // units: this CPU's (cpu_units()).
  Conv(const dnnl::engine& engine, const ConvGeom& g, Units units, Pick pick);
  ~Conv();
  Conv(const Conv&) = delete;
  Conv& operator=(const Conv&) = delete;

  // Whether a pass runs in bf16 (oneDNN's primitive or ours), and whether as ours.
  bool bf16(Pass pass) const;
  bool ours(Pass pass) const;
  // The implementation of a pass in bf16: oneDNN's name for its primitive
  // ("jit_bf16:avx512_core_bf16", ...), or "mnist_ddp avx512_bf16" for ours.
  const std::string& impl(Pass pass) const;

  // The passes in bf16, on fp32 buffers in the backend's layout (x, y, dy, dx) and PyTorch's (w,
  // b, dw: OIHW; db: [K]). Each converts its inputs to bf16 first, except where the caller hands
  // over x's (forward) or dy's (backward) bf16 copy, x16/dy16, in the fp32 buffer's own layout
  // (the activations' [N][C/16][H][W][16], the image's NCHW, as bf16): a pass whose primitive
  // takes that layout reads it in place (the copy stays unchanged until the pass returns; x16
  // until the filter gradient of this forward). Ours read dy16 in place; the image they convert
  // themselves (it is no kernel's output, so no copy of it is ever handed over).
  void forward(dnnl::stream& s, const float* x, const float* w, const float* b, float* y,
               const std::uint16_t* x16 = nullptr);
  void backward_data(dnnl::stream& s, const float* w, const float* dy, float* dx);
  // The filter gradient reads the bf16 copy of x its geometry's last forward made, where that
  // forward read the same x (once per forward: the caller keeps x unchanged between a forward and
  // its backward, as the model's backward already requires).
  void backward_weights(dnnl::stream& s, const float* x, const float* dy, float* dw, float* db);
  // The filter gradient and, where dx is not nullptr, the data gradient (both passes bf16 then),
  // dy converted to bf16 once where both take the same layout: bitwise the calls above in turn.
  void backward(dnnl::stream& s, const float* x, const float* w, const float* dy, float* dw,
                float* db, float* dx, const std::uint16_t* dy16 = nullptr);
  // Whether backward() (with a data gradient where `data_grad`) reads a handed-over dy16 in place
  // in every pass: then it never reads the fp32 dy, which may be left unwritten (dy == nullptr).
  bool reads_dy16_only(bool data_grad) const;

 private:
  // The data gradient; returns the bf16 dy it read (the caller's copy or its own).
  const dnnl::memory& data_grad(dnnl::stream& s, const float* w, const float* dy,
                                const std::uint16_t* dy16, float* dx);
  void filter_grad(dnnl::stream& s, const float* x, const float* dy, const dnnl::memory* dy16,
                   float* dw, float* db);
  // Ours (conv1_bf16.hpp): dy16 where handed over, else dy converted here.
  void own_filter_grad(const float* x, const float* dy, const std::uint16_t* dy16, float* dw,
                       float* db);
  struct Prims;
  std::unique_ptr<Prims> p_;
};

}  // namespace mnist_ddp::bf16
