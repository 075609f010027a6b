// dnnl_backend.cpp — DnnlOps, the default CPU backend: oneDNN's JIT convolutions on
// channel-blocked activations [N][C/B][H][W][B] (the network input, C = 1, is plain NCHW), the
// blocked BN/ReLU/pool kernels of blocked_ops.hpp, and the reference kernels for the layout-free
// ops (fc, loss, SGD). B is the block oneDNN has JIT convolutions for on this CPU: 16 (nChw16c)
// with AVX-512, 8 (nChw8c) with AVX2; on a layout it has no JIT kernel for, oneDNN falls back to
// its reference convolution, ~100x slower (measured: an AVX2-only EPYC given nChw16c). Measured
// 2.5x faster convolutions than im2col + OpenBLAS at this model's shapes (bench/ops_bench:
// BM_ModelStep/onednn vs /reference).
#include <omp.h>
#include <dnnl.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "mnist_ddp/base/half.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/ops/ops.hpp"
#include "ops/cpu/bf16_units.hpp"
#include "ops/cpu/blocked_ops.hpp"
#include "ops/cpu/conv1_avx2.hpp"
#include "ops/cpu/conv2_filter_grad_avx2.hpp"
#include "ops/cpu/conv_taps.hpp"
#include "ops/cpu/cpu_kernels.hpp"
#include "ops/cpu/dnnl_bf16.hpp"
#include "ops/cpu/host_ops.hpp"

namespace mnist_ddp {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr auto kF32 = memory::data_type::f32;

Tag block_tag(int block) {
  MNIST_DDP_CHECK(block == 8 || block == 16, "oneDNN channel block must be 8 or 16");
  return block == 8 ? Tag::nChw8c : Tag::nChw16c;
}

bool is_reference(const std::string& impl) {
  return impl.starts_with("ref");
}

// Whether this rank computes on one thread (--threads 1, set_compute_threads): where our
// single-threaded kernels may stand in for oneDNN's multi-threaded ones.
bool one_thread() {
  return omp_get_max_threads() == 1;
}

// How --amp bf16 picks its convolution kernels at this thread count (ours are single-threaded).
bf16::Pick bf16_pick() {
  return one_thread() ? bf16::Pick::OneThread : bf16::Pick::Threads;
}

// Primitives and weight buffers for one convolution geometry (batch size included), built once.
struct ConvPrims {
  memory src, dst, bias, w_plain, w_fwd, w_bwd, dw_blocked, dsrc, ddst, dbias, dw_plain;
  memory src_bw, ddst_bw;  // backward-weights' own layouts, where they differ
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights bwd_weights;
  dnnl::reorder w_to_fwd, w_to_bwd, dw_to_plain, src_to_bw, ddst_to_bw;
  bool fwd_needs_reorder = false, bwd_needs_reorder = false, dw_needs_reorder = false;
  bool src_bw_needs_reorder = false, ddst_bw_needs_reorder = false, has_bwd_data = false;
  // Passes ours compute instead of oneDNN (see build_prims): the image's forward and filter
  // gradient (conv1_avx2.cpp); a blocked input's filter gradient (conv2_filter_grad_avx2.cpp),
  // where the rank computes on one thread (one_thread()).
  bool own_forward = false, own_filter_grad = false, own_channel_grad = false;
  std::vector<std::string> impls;  // oneDNN's implementation of each convolution primitive it runs
};

// The backward-weights primitive on the activations' own layout; where oneDNN has only its
// reference kernel for that, on NHWC input and output gradient (copied into that layout each
// step), then on the input layout oneDNN picks. Measured on AVX2 (the 1-channel image, whose NCHW
// input has no JIT kernel there, batch 100): NHWC 1.8 ms + 0.2 ms for the copy, the image padded
// to 8 channels 6.9 ms, the reference kernel ~1,900 ms.
dnnl::convolution_backward_weights::primitive_desc backward_weights_pd(
    const dnnl::engine& engine, const dnnl::convolution_forward::primitive_desc& fwd_pd,
    const memory::desc& src_md, const memory::desc& w_any, const memory::desc& b_md,
    const memory::desc& dst_md, const memory::dims& strides, const memory::dims& pad) {
  const auto algo = dnnl::algorithm::convolution_direct;
  const auto make = [&](const memory::desc& src, const memory::desc& dst) {
    return dnnl::convolution_backward_weights::primitive_desc(
        dnnl::convolution_backward_weights::desc(algo, src, w_any, b_md, dst, strides, pad, pad),
        engine, fwd_pd);
  };
  auto pd = make(src_md, dst_md);
  if (!is_reference(pd.impl_info_str())) return pd;
  const auto nhwc = make(memory::desc(src_md.dims(), kF32, Tag::nhwc),
                         memory::desc(dst_md.dims(), kF32, Tag::nhwc));
  if (!is_reference(nhwc.impl_info_str())) return nhwc;
  auto any = make(memory::desc(src_md.dims(), kF32, Tag::any), dst_md);
  // Reference kernels everywhere: the activations' own layout, without copies.
  return is_reference(any.impl_info_str()) ? pd : any;
}

// Where `want` differs from `from`'s layout: `to`, a buffer in `want`, and `copy`, the reorder
// from `from` into it. Returns whether it does (the caller then runs `copy` before each use).
bool relayout(const dnnl::engine& engine, const memory& from, const memory::desc& want, memory& to,
              dnnl::reorder& copy) {
  if (want == from.get_desc()) return false;
  to = memory(want, engine);
  copy = dnnl::reorder(from, to);
  return true;
}

// Every primitive, buffer and reorder of one convolution geometry at one channel block.
std::unique_ptr<ConvPrims> build_prims(const dnnl::engine& engine, const ConvGeom& g, int block) {
  MNIST_DDP_CHECK(g.k % block == 0 && (g.c == 1 || g.c % block == 0),
                  "oneDNN backend needs 1 or a multiple of the channel block (8 or 16)");
  auto p = std::make_unique<ConvPrims>();
  const memory::dims src_d{g.n, g.c, g.h, g.w}, w_d{g.k, g.c, g.r, g.r}, b_d{g.k},
      dst_d{g.n, g.k, g.out_h(), g.out_w()}, strides{1, 1}, pad{g.pad, g.pad};
  const memory::desc src_md(src_d, kF32, g.c == 1 ? Tag::nchw : block_tag(block));
  const memory::desc dst_md(dst_d, kF32, block_tag(block));
  const memory::desc b_md(b_d, kF32, Tag::x);
  const memory::desc w_plain_md(w_d, kF32, Tag::oihw);
  const memory::desc w_any(w_d, kF32, Tag::any);
  const auto algo = dnnl::algorithm::convolution_direct;
  const dnnl::convolution_forward::primitive_desc fwd_pd(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, src_md, w_any, b_md,
                                      dst_md, strides, pad, pad),
      engine);
  const auto bw_pd = backward_weights_pd(engine, fwd_pd, src_md, w_any, b_md, dst_md, strides, pad);
  // Where oneDNN would copy the image's output gradient into another layout for its filter
  // gradient (AVX2: no kernel for the one-channel image on nChw8c), ours reads it as it is; and
  // at block 8 ours runs the image's forward too (see conv1_avx2.hpp), and the filter gradient of
  // a blocked input on one thread (conv2_filter_grad_avx2.hpp: oneDNN's AVX2 kernel is slow there;
  // ours is single-threaded). At block 16 oneDNN's AVX-512 kernels stay.
  const bool ours = kAvx2Build && g.r <= blocked::kMaxTaps;  // the widths our kernels have
  p->own_filter_grad = ours && g.c == 1 && bw_pd.diff_dst_desc() != dst_md;
  p->own_forward = ours && g.c == 1 && block == 8;
  p->own_channel_grad = ours && g.c != 1 && block == 8;
  if (!p->own_forward) p->impls.push_back(fwd_pd.impl_info_str());
  if (!p->own_filter_grad && !(p->own_channel_grad && one_thread()))
    p->impls.push_back(bw_pd.impl_info_str());
  p->fwd = dnnl::convolution_forward(fwd_pd);
  p->bwd_weights = dnnl::convolution_backward_weights(bw_pd);
  p->src = memory(src_md, engine, nullptr);
  p->dst = memory(dst_md, engine, nullptr);
  p->ddst = memory(dst_md, engine, nullptr);
  p->bias = memory(b_md, engine, nullptr);
  p->dbias = memory(b_md, engine, nullptr);
  p->w_plain = memory(w_plain_md, engine, nullptr);
  p->dw_plain = memory(w_plain_md, engine, nullptr);
  p->fwd_needs_reorder = relayout(engine, p->w_plain, fwd_pd.weights_desc(), p->w_fwd, p->w_to_fwd);
  if (!p->own_filter_grad) {
    p->src_bw_needs_reorder = relayout(engine, p->src, bw_pd.src_desc(), p->src_bw, p->src_to_bw);
    p->ddst_bw_needs_reorder =
        relayout(engine, p->ddst, bw_pd.diff_dst_desc(), p->ddst_bw, p->ddst_to_bw);
  }
  p->dw_needs_reorder = bw_pd.diff_weights_desc() != w_plain_md;
  if (p->dw_needs_reorder) {
    p->dw_blocked = memory(bw_pd.diff_weights_desc(), engine);
    p->dw_to_plain = dnnl::reorder(p->dw_blocked, p->dw_plain);
  }
  // The image's gradient is never needed (layer1), and oneDNN has no JIT kernel for it.
  p->has_bwd_data = g.c != 1;
  if (p->has_bwd_data) {
    const dnnl::convolution_backward_data::primitive_desc bd_pd(
        dnnl::convolution_backward_data::desc(algo, src_md, w_any, dst_md, strides, pad, pad),
        engine, fwd_pd);
    p->impls.push_back(bd_pd.impl_info_str());
    p->bwd_data = dnnl::convolution_backward_data(bd_pd);
    p->dsrc = memory(src_md, engine, nullptr);
    p->bwd_needs_reorder =
        relayout(engine, p->w_plain, bd_pd.weights_desc(), p->w_bwd, p->w_to_bwd);
  }
  return p;
}

class DnnlOps final : public HostOps {
 public:
  explicit DnnlOps(int block)
      : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_), block_(block) {
    block_tag(block_);  // checks it
  }

  // --amp bf16: each pass as oneDNN's bf16 primitive, or (where bf16 loses on this CPU) as the
  // fp32 one on bf16-rounded copies of its inputs: the same products, the same fp32 accumulation.
  void conv2d_forward(const ConvGeom& g, const float* x, const float* w, const float* b,
                      float* y) override {
    if (amp_ == AmpMode::Bf16) {
      const std::uint16_t* x16 = take_bf16(x, src_elems(g));
      bf16::Conv& c = bf16_conv(g);
      if (c.bf16(bf16::Pass::Forward)) return c.forward(stream_, x, w, b, y, x16);
      return f32_forward(g, rounded(0, x, src_elems(g)), rounded(1, w, w_elems(g)), b, y);
    }
    f32_forward(g, x, w, b, y);
  }
  void conv2d_backward_filter(const ConvGeom& g, const float* x, const float* dy, float* dw,
                              float* db) override {
    pending_ = {};
    if (amp_ == AmpMode::Bf16) {
      bf16::Conv& c = bf16_conv(g);
      if (c.bf16(bf16::Pass::BackwardWeights)) return c.backward_weights(stream_, x, dy, dw, db);
      return f32_backward_filter(g, rounded(0, x, src_elems(g)), rounded(2, dy, dst_elems(g)), dw,
                                 db);
    }
    f32_backward_filter(g, x, dy, dw, db);
  }
  void conv2d_backward_data(const ConvGeom& g, const float* w, const float* dy,
                            float* dx) override {
    pending_ = {};
    if (amp_ == AmpMode::Bf16) {
      bf16::Conv& c = bf16_conv(g);
      if (c.bf16(bf16::Pass::BackwardData)) return c.backward_data(stream_, w, dy, dx);
      return f32_backward_data(g, rounded(1, w, w_elems(g)), rounded(2, dy, dst_elems(g)), dx);
    }
    f32_backward_data(g, w, dy, dx);
  }
  // Both gradients under --amp bf16, where the passes asked for are bf16 primitives: dy in bf16
  // once (the BN->ReLU->pool backward's copy, or one conversion for both passes).
  void conv2d_backward(const ConvGeom& g, const float* x, const float* w, const float* dy,
                       float* dw, float* db, float* dx) override {
    const std::uint16_t* dy16 = take_bf16(dy, dst_elems(g));
    if (amp_ == AmpMode::Bf16) {
      bf16::Conv& c = bf16_conv(g);
      if (c.bf16(bf16::Pass::BackwardWeights) &&
          (dx == nullptr || c.bf16(bf16::Pass::BackwardData)))
        return c.backward(stream_, x, w, dy, dw, db, dx, dy16);
    }
    Ops::conv2d_backward(g, x, w, dy, dw, db, dx);
  }
  // A block's backward under --amp bf16, where its convolution's passes all read the bf16 copy
  // of their dy in place: the BN->ReLU->pool kernel stores only that copy (bn.dx, the block's
  // scratch, stays unwritten: no pass would read its fp32 values). Elsewhere, and in fp32, the
  // two calls.
  void bn_relu_pool_conv_backward(const BnReluPoolGrad& bn, const ConvGeom& g, const float* x,
                                  const float* w, float* dw, float* db, float* dx) override {
    if (amp_ == AmpMode::Bf16) {
      bf16::Conv& c = bf16_conv(g);
      if (c.reads_dy16_only(dx != nullptr)) {
        const std::size_t n = static_cast<std::size_t>(bn.n) * bn.c * bn.h * bn.w;
        MNIST_DDP_CHECK(n == dst_elems(g), "block backward: BN and convolution shapes differ");
        std::uint16_t* dy16 = keep_bf16(bn.dx, n);
        pending_ = {};
        blocked::bn_relu_pool_backward(block_, bn.c, bn.n, bn.h, bn.w, bn.x, bn.y, bn.dy, bn.argmax,
                                       bn.gamma, bn.mean, bn.invstd, bn.batch_stats, nullptr,
                                       bn.dgamma, bn.dbeta, bn_sync_, dy16);
        return c.backward(stream_, x, w, nullptr, dw, db, dx, dy16);
      }
    }
    Ops::bn_relu_pool_conv_backward(bn, g, x, w, dw, db, dx);
  }
  // The fc layer under --amp bf16: the fp32 GEMMs on bf16-rounded x[N][in], w[out][in] and
  // dy[N][out] (exact products, fp32 accumulation: what a bf16 GEMM computes), fp32 outputs.
  void linear_forward(int n, int in, int out, const float* x, const float* w, const float* b,
                      float* y) override {
    pending_ = {};
    if (amp_ != AmpMode::Bf16) return HostOps::linear_forward(n, in, out, x, w, b, y);
    const std::size_t nx = static_cast<std::size_t>(n) * in,
                      nw = static_cast<std::size_t>(out) * in;
    HostOps::linear_forward(n, in, out, rounded(0, x, nx), rounded(1, w, nw), b, y);
  }
  void linear_backward(int n, int in, int out, const float* x, const float* w, const float* dy,
                       float* dx, float* dw, float* db) override {
    pending_ = {};
    if (amp_ != AmpMode::Bf16) return HostOps::linear_backward(n, in, out, x, w, dy, dx, dw, db);
    const std::size_t nx = static_cast<std::size_t>(n) * in,
                      nw = static_cast<std::size_t>(out) * in,
                      ny = static_cast<std::size_t>(n) * out;
    HostOps::linear_backward(n, in, out, rounded(0, x, nx), rounded(1, w, nw), rounded(2, dy, ny),
                             dx, dw, db);
  }
  // --amp bf16 where this CPU has bf16 units (else one clear error); fp16 stays the GPU's.
  void set_amp(AmpMode mode, const float* loss_scale, const float* skip_step) override {
    if (mode == AmpMode::Bf16) {
      bf16::require_units("--amp bf16");
      MNIST_DDP_CHECK(block_ == 16, "bf16 units come with AVX-512: the activations' block is 16");
      units_ = bf16::cpu_units();
      amp_ = mode;
      return;
    }
    HostOps::set_amp(mode, loss_scale, skip_step);
    amp_ = AmpMode::Off;
  }

 private:
  void f32_forward(const ConvGeom& g, const float* x, const float* w, const float* b, float* y) {
    ConvPrims& p = prims(g);
    if constexpr (kAvx2Build) {
      if (p.own_forward) return blocked::image_conv_forward(block_, g, x, w, b, y);
    }
    p.w_plain.set_data_handle(const_cast<float*>(w));
    if (p.fwd_needs_reorder) p.w_to_fwd.execute(stream_, p.w_plain, p.w_fwd);
    p.src.set_data_handle(const_cast<float*>(x));
    p.bias.set_data_handle(const_cast<float*>(b));
    p.dst.set_data_handle(y);
    p.fwd.execute(stream_, {{DNNL_ARG_SRC, p.src},
                            {DNNL_ARG_WEIGHTS, p.fwd_needs_reorder ? p.w_fwd : p.w_plain},
                            {DNNL_ARG_BIAS, p.bias},
                            {DNNL_ARG_DST, p.dst}});
    stream_.wait();
  }

  void f32_backward_filter(const ConvGeom& g, const float* x, const float* dy, float* dw,
                           float* db) {
    ConvPrims& p = prims(g);
    if constexpr (kAvx2Build) {
      if (p.own_filter_grad) return blocked::image_filter_grad(block_, g, x, dy, dw, db);
      if (p.own_channel_grad && one_thread()) return blocked::channel_filter_grad(g, x, dy, dw, db);
    }
    p.src.set_data_handle(const_cast<float*>(x));
    if (p.src_bw_needs_reorder) p.src_to_bw.execute(stream_, p.src, p.src_bw);
    p.ddst.set_data_handle(const_cast<float*>(dy));
    if (p.ddst_bw_needs_reorder) p.ddst_to_bw.execute(stream_, p.ddst, p.ddst_bw);
    p.dbias.set_data_handle(db);
    p.dw_plain.set_data_handle(dw);
    p.bwd_weights.execute(stream_,
                          {{DNNL_ARG_SRC, p.src_bw_needs_reorder ? p.src_bw : p.src},
                           {DNNL_ARG_DIFF_DST, p.ddst_bw_needs_reorder ? p.ddst_bw : p.ddst},
                           {DNNL_ARG_DIFF_WEIGHTS, p.dw_needs_reorder ? p.dw_blocked : p.dw_plain},
                           {DNNL_ARG_DIFF_BIAS, p.dbias}});
    if (p.dw_needs_reorder) p.dw_to_plain.execute(stream_, p.dw_blocked, p.dw_plain);
    stream_.wait();
  }

  void f32_backward_data(const ConvGeom& g, const float* w, const float* dy, float* dx) {
    ConvPrims& p = prims(g);
    MNIST_DDP_CHECK(p.has_bwd_data, "input gradient of a 1-channel (image) convolution");
    p.w_plain.set_data_handle(const_cast<float*>(w));
    if (p.bwd_needs_reorder) p.w_to_bwd.execute(stream_, p.w_plain, p.w_bwd);
    p.ddst.set_data_handle(const_cast<float*>(dy));
    p.dsrc.set_data_handle(dx);
    p.bwd_data.execute(stream_, {{DNNL_ARG_DIFF_DST, p.ddst},
                                 {DNNL_ARG_WEIGHTS, p.bwd_needs_reorder ? p.w_bwd : p.w_plain},
                                 {DNNL_ARG_DIFF_SRC, p.dsrc}});
    stream_.wait();
  }

 public:
  void batchnorm_stats(int c, int n, int hw, const float* x, double eps, double momentum,
                       float* save_mean, float* save_invstd, float* running_mean,
                       float* running_var) override {
    pending_ = {};
    blocked::batchnorm_stats(block_, c, n, hw, x, eps, momentum, save_mean, save_invstd,
                             running_mean, running_var, bn_sync_);
  }
  void bn_relu_pool_forward(int c, int n, int h, int w, const float* x, const float* gamma,
                            const float* beta, const float* mean, const float* invstd, float* y,
                            std::uint8_t* argmax) override {
    pending_ = {};
    // A pooled output is the next convolution's input (layer1's, read by layer2): under --amp bf16
    // the kernel stores its bf16 copy too.
    std::uint16_t* y16 = amp_ == AmpMode::Bf16
                             ? keep_bf16(y, static_cast<std::size_t>(n) * c * (h / 2) * (w / 2))
                             : nullptr;
    blocked::bn_relu_pool_forward(block_, c, n, h, w, x, gamma, beta, mean, invstd, y, argmax, y16);
  }
  void bn_relu_pool_backward(int c, int n, int h, int w, const float* x, const float* y,
                             const float* dy, const std::uint8_t* argmax, const float* gamma,
                             const float* mean, const float* invstd, bool batch_stats, float* dx,
                             float* dgamma, float* dbeta) override {
    pending_ = {};
    // dx is the convolution's output gradient, which its backward reads next.
    std::uint16_t* dx16 =
        amp_ == AmpMode::Bf16 ? keep_bf16(dx, static_cast<std::size_t>(n) * c * h * w) : nullptr;
    blocked::bn_relu_pool_backward(block_, c, n, h, w, x, y, dy, argmax, gamma, mean, invstd,
                                   batch_stats, dx, dgamma, dbeta, bn_sync_, dx16);
  }
  void to_fc_rows(int c, int n, int hw, const float* x, float* y) override {
    pending_ = {};
    blocked::to_rows(block_, c, n, hw, x, y);
  }
  void from_fc_rows(int c, int n, int hw, const float* x, float* y) override {
    pending_ = {};
    blocked::from_rows(block_, c, n, hw, x, y);
  }
  void upload(const void* host, void* backend, std::size_t bytes) override {
    pending_ = {};
    HostOps::upload(host, backend, bytes);
  }
  void zero(std::size_t n, float* y) override {
    pending_ = {};
    HostOps::zero(n, y);
  }
  void add_into(std::size_t n, const float* x, float* y) override {
    pending_ = {};
    HostOps::add_into(n, x, y);
  }

 private:
  using Key = std::tuple<int, int, int, int, int, int, int>;

  ConvPrims& prims(const ConvGeom& g) {
    const Key key{g.n, g.c, g.h, g.w, g.k, g.r, g.pad};
    auto it = cache_.find(key);
    if (it != cache_.end()) return *it->second;
    return *cache_.emplace(key, build_prims(engine_, g, block_)).first->second;
  }
  // A geometry's kernels are picked when it is first met, at the thread count of then (set once,
  // before any compute, by set_compute_threads in a run).
  bf16::Conv& bf16_conv(const ConvGeom& g) {
    const Key key{g.n, g.c, g.h, g.w, g.k, g.r, g.pad};
    auto it = bf16_cache_.find(key);
    if (it != bf16_cache_.end()) return *it->second;
    return *bf16_cache_.emplace(key, std::make_unique<bf16::Conv>(engine_, g, units_, bf16_pick()))
                .first->second;
  }
  static std::size_t src_elems(const ConvGeom& g) {
    return static_cast<std::size_t>(g.n) * g.c * g.h * g.w;
  }
  static std::size_t dst_elems(const ConvGeom& g) {
    return static_cast<std::size_t>(g.n) * g.k * g.out_h() * g.out_w();
  }
  static std::size_t w_elems(const ConvGeom& g) {
    return static_cast<std::size_t>(g.k) * g.c * g.r * g.r;
  }
  // --amp bf16: the buffer for the bf16 copy of an output the fused BN->ReLU->pool kernels are
  // about to write (they store each value's bf16 with it), for the convolution that reads it
  // next; handed to exactly the next call (take_bf16), and only where that call reads the same
  // buffer: any other call drops it, so a caller's own writes after this backend's are never
  // missed.
  std::uint16_t* keep_bf16(const float* of, std::size_t n) {
    // One buffer per (output, size), never resized: a convolution may hold a copy from its
    // forward until its filter gradient while an evaluation's larger batch writes the same output.
    std::vector<std::uint16_t>& copy = bf16_copies_[{of, n}];
    if (copy.size() != n) copy.resize(n);
    pending_ = {of, n, copy.data()};
    return copy.data();
  }
  const std::uint16_t* take_bf16(const float* of, std::size_t n) {
    const Pending p = pending_;
    pending_ = {};
    return p.of == of && p.n == n ? p.copy : nullptr;
  }

  // x rounded to bf16 in scratch buffer `slot` (0: activations, 1: weights, 2: output gradients),
  // valid until the next use of that slot.
  const float* rounded(int slot, const float* x, std::size_t n) {
    std::vector<float>& r = round_[slot];
    if (r.size() < n) r.resize(n);
    round_to_bf16(n, x, r.data());
    return r.data();
  }

  dnnl::engine engine_;
  dnnl::stream stream_;
  int block_;  // channels per block of the activations (8 or 16)
  std::map<Key, std::unique_ptr<ConvPrims>> cache_;
  AmpMode amp_ = AmpMode::Off;
  bf16::Units units_ = bf16::Units::None;
  std::map<Key, std::unique_ptr<bf16::Conv>> bf16_cache_;
  std::vector<float> round_[3];
  struct Pending {
    const float* of = nullptr;
    std::size_t n = 0;
    const std::uint16_t* copy = nullptr;
  };
  Pending pending_;  // the last call's bf16 copy of its output (keep_bf16)
  std::map<std::pair<const float*, std::size_t>, std::vector<std::uint16_t>> bf16_copies_;
};

// What --amp bf16 runs for the model's passes on this CPU and thread count: oneDNN's bf16
// implementations, the passes ours compute (bf16::runs_ours), then those that run in fp32 on
// bf16-rounded inputs (bf16::runs_bf16), named.
std::string bf16_kernels() {
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  std::vector<std::string> names, fp32, ours;
  int layer = 0;
  for (const ConvGeom& g :
       {ConvGeom{64, 1, 28, 28, 16, 5, 2}, ConvGeom{64, 16, 14, 14, 32, 5, 2}}) {
    const bf16::Conv conv(engine, g, bf16::cpu_units(), bf16_pick());
    ++layer;
    const std::pair<bf16::Pass, const char*> passes[] = {
        {bf16::Pass::Forward, "forward"},
        {bf16::Pass::BackwardData, "data gradient"},
        {bf16::Pass::BackwardWeights, "filter gradient"}};
    for (const auto& [pass, what] : passes) {
      if (g.c == 1 && pass == bf16::Pass::BackwardData) continue;  // never needed (the image's)
      if (!conv.bf16(pass)) {
        fp32.push_back(fmt::format("layer{} {}", layer, what));
      } else if (conv.ours(pass)) {
        ours.push_back(fmt::format("layer{} {}", layer, what));
      } else if (std::find(names.begin(), names.end(), conv.impl(pass)) == names.end()) {
        names.push_back(conv.impl(pass));
      }
    }
  }
  std::string out = fmt::format("bf16 {}", fmt::join(names, ", "));
  if (!ours.empty()) out += fmt::format("; mnist_ddp avx512_bf16: {}", fmt::join(ours, ", "));
  if (!fp32.empty()) out += fmt::format("; fp32 on bf16-rounded inputs: {}", fmt::join(fp32, ", "));
  return out;
}

}  // namespace

DnnlLayout dnnl_layout(AmpMode amp) try {
  // --amp bf16 on a CPU without bf16 units: one error here, where every rank agrees on it.
  if (amp == AmpMode::Bf16) bf16::require_units("--amp bf16");
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  // oneDNN's implementations of the model's two convolutions (model.cpp's geometries) at a block,
  // and which of their passes ours compute there instead.
  std::vector<std::string> own;
  const auto impls = [&](int block) {
    std::vector<std::string> names;
    own.clear();
    int layer = 0;
    for (const ConvGeom& g :
         {ConvGeom{64, 1, 28, 28, 16, 5, 2}, ConvGeom{64, 16, 14, 14, 32, 5, 2}}) {
      const auto prims = build_prims(engine, g, block);
      const bool grad = prims->own_filter_grad || (prims->own_channel_grad && one_thread());
      const char* passes = prims->own_forward && grad ? "forward and filter gradient"
                           : grad                     ? "filter gradient"
                           : prims->own_forward       ? "forward"
                                                      : nullptr;
      ++layer;
      if (passes != nullptr) own.push_back(fmt::format("layer{} {}", layer, passes));
      for (const std::string& name : prims->impls)
        if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
    return names;
  };
  // The AVX-512 layout first: where both have JIT kernels only, it is the wider vector.
  std::vector<std::string> names;
  int chosen = 16;
  for (const int block : {16, 8}) {
    names = impls(block);
    chosen = block;
    if (std::none_of(names.begin(), names.end(), is_reference)) break;
  }
  if (std::any_of(names.begin(), names.end(), is_reference)) names = impls(chosen = 16);
  DnnlLayout layout;
  layout.block = chosen;
  layout.convolution = fmt::format("{}", fmt::join(names, ", "));
  if (!own.empty()) layout.own = fmt::format("{}: mnist_ddp avx2", fmt::join(own, ", "));
  layout.bf16_units = bf16::units_name(bf16::cpu_units());
  if (amp == AmpMode::Bf16 && bf16::cpu_units() != bf16::Units::None) layout.bf16 = bf16_kernels();
  return layout;
} catch (const dnnl::error& e) {
  // One clear error on every rank (the caller agrees on it), not an internal failure.
  throw UserError(fmt::format(
      "oneDNN cannot build this model's convolutions on this CPU ({}); {}", e.what(),
      amp == AmpMode::Bf16 ? "drop --amp bf16 (and pass --cpu-kernels reference if this stays)"
                           : "use --cpu-kernels reference"));
}

std::unique_ptr<Ops> make_dnnl_ops(int block) {
  return std::make_unique<DnnlOps>(block == 0 ? dnnl_layout().block : block);
}

}  // namespace mnist_ddp
