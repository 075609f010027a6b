// dnnl_bf16.hpp — the oneDNN backend's bf16 convolutions (--amp bf16 on the CPU): for one
// convolution geometry, each pass (forward, data gradient, filter gradient) either as oneDNN's
// bf16 primitive (bf16 copies of the input, weights and output gradient; fp32 accumulation; fp32
// output, bias and filter gradient) or, where bf16 loses on this CPU, as the fp32 kernel on
// inputs rounded to bf16, which computes the same products exactly (a product of two bf16 values
// fits in fp32's mantissa) with the same fp32 accumulation. The activations arrive and leave in
// the backend's fp32 layout ([N][C/16][H][W][16]; the image [N][1][H][W]), so BN, ReLU, pooling
// and the fc layer read them as in fp32 training.
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

// One geometry's bf16 primitives, their bf16 buffers and the reorders into and out of the
// backend's fp32 layout. The primitive descriptors (what oneDNN would run) are made at once; a
// pass's primitive and buffers on its first call (evaluation's batch size runs forward only).
class Conv {
 public:
  // The fp32 activations are channel-blocked by 16 (K, and C unless 1, multiples of 16).
  // units: this CPU's (cpu_units()). every_pass: each pass with a JIT bf16 kernel runs it,
  // runs_bf16's exceptions ignored (for the benchmark that measures them: bench/ops_bench.cpp).
  Conv(const dnnl::engine& engine, const ConvGeom& g, Units units, bool every_pass = false);
  ~Conv();
  Conv(const Conv&) = delete;
  Conv& operator=(const Conv&) = delete;

  bool bf16(Pass pass) const;
  // oneDNN's implementation name of a pass's bf16 primitive ("jit_bf16:avx512_core_bf16", ...).
  const std::string& impl(Pass pass) const;

  // The passes in bf16, on fp32 buffers in the backend's layout (x, y, dy, dx) and PyTorch's (w,
  // b, dw: OIHW; db: [K]). Each converts its inputs to bf16 first, except where the caller hands
  // over x's (forward) or dy's (backward) bf16 copy, x16/dy16, in the fp32 buffer's own layout
  // (the activations' [N][C/16][H][W][16], the image's NCHW, as bf16): a pass whose primitive
  // takes that layout reads it in place (the copy stays unchanged until the pass returns; x16
  // until the filter gradient of this forward).
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
  struct Prims;
  std::unique_ptr<Prims> p_;
};

}  // namespace mnist_ddp::bf16
