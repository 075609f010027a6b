// dnnl_backend.cpp — DnnlOps, the default CPU backend: oneDNN's JIT convolutions on
// channel-blocked activations [N][C/16][H][W][16] (nChw16c; the network input, C = 1, is plain
// NCHW), the blocked BN/ReLU/pool kernels of blocked_ops.hpp, and the reference kernels for the
// layout-free ops (fc, loss, SGD). Measured 2.5x faster convolutions than im2col + OpenBLAS at
// this model's shapes (bench/ops_bench: BM_ModelStep/onednn vs /reference).
#include <dnnl.hpp>

#include <map>
#include <memory>
#include <tuple>

#include "mnist_ddp/ops/ops.hpp"
#include "mnist_ddp/runtime/check.hpp"
#include "ops/cpu/blocked_ops.hpp"
#include "ops/cpu/cpu_ops.hpp"
#include "ops/cpu/host_ops.hpp"

namespace mnist_ddp {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr auto kF32 = memory::data_type::f32;

// Primitives and weight buffers for one convolution geometry (batch size included), built once.
struct ConvPrims {
  memory src, dst, bias, w_plain, w_fwd, w_bwd, dw_blocked, dsrc, ddst, dbias, dw_plain;
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights bwd_weights;
  dnnl::reorder w_to_fwd, w_to_bwd, dw_to_plain;
  bool fwd_needs_reorder = false, bwd_needs_reorder = false, dw_needs_reorder = false;
  bool has_bwd_data = false;
};

class DnnlOps final : public HostOps {
 public:
  DnnlOps() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

  void conv2d_forward(const ConvGeom& g, const float* x, const float* w, const float* b,
                      float* y) override {
    ConvPrims& p = prims(g);
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

  void conv2d_backward_filter(const ConvGeom& g, const float* x, const float* dy, float* dw,
                              float* db) override {
    ConvPrims& p = prims(g);
    p.src.set_data_handle(const_cast<float*>(x));
    p.ddst.set_data_handle(const_cast<float*>(dy));
    p.dbias.set_data_handle(db);
    p.dw_plain.set_data_handle(dw);
    p.bwd_weights.execute(stream_,
                          {{DNNL_ARG_SRC, p.src},
                           {DNNL_ARG_DIFF_DST, p.ddst},
                           {DNNL_ARG_DIFF_WEIGHTS, p.dw_needs_reorder ? p.dw_blocked : p.dw_plain},
                           {DNNL_ARG_DIFF_BIAS, p.dbias}});
    if (p.dw_needs_reorder) p.dw_to_plain.execute(stream_, p.dw_blocked, p.dw_plain);
    stream_.wait();
  }

  void conv2d_backward_data(const ConvGeom& g, const float* w, const float* dy,
                            float* dx) override {
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

  void batchnorm_stats(int c, int n, int hw, const float* x, double eps, double momentum,
                       float* save_mean, float* save_invstd, float* running_mean,
                       float* running_var) override {
    blocked::batchnorm_stats(c, n, hw, x, eps, momentum, save_mean, save_invstd, running_mean,
                             running_var, bn_sync_);
  }
  void bn_relu_pool_forward(int c, int n, int h, int w, const float* x, const float* gamma,
                            const float* beta, const float* mean, const float* invstd, float* y,
                            std::uint8_t* argmax) override {
    blocked::bn_relu_pool_forward(c, n, h, w, x, gamma, beta, mean, invstd, y, argmax);
  }
  void bn_relu_pool_backward(int c, int n, int h, int w, const float* x, const float* y,
                             const float* dy, const std::uint8_t* argmax, const float* gamma,
                             const float* mean, const float* invstd, bool batch_stats, float* dx,
                             float* dgamma, float* dbeta) override {
    blocked::bn_relu_pool_backward(c, n, h, w, x, y, dy, argmax, gamma, mean, invstd, batch_stats,
                                   dx, dgamma, dbeta, bn_sync_);
  }
  void to_fc_rows(int c, int n, int hw, const float* x, float* y) override {
    blocked::to_rows(c, n, hw, x, y);
  }
  void from_fc_rows(int c, int n, int hw, const float* x, float* y) override {
    blocked::from_rows(c, n, hw, x, y);
  }

 private:
  using Key = std::tuple<int, int, int, int, int, int, int>;

  ConvPrims& prims(const ConvGeom& g) {
    const Key key{g.n, g.c, g.h, g.w, g.k, g.r, g.pad};
    auto it = cache_.find(key);
    if (it != cache_.end()) return *it->second;
    MNIST_DDP_CHECK(g.k % blocked::kBlock == 0 && (g.c == 1 || g.c % blocked::kBlock == 0),
                    "oneDNN backend needs 1 or a multiple of 16 channels");
    auto p = std::make_unique<ConvPrims>();
    const memory::dims src_d{g.n, g.c, g.h, g.w}, w_d{g.k, g.c, g.r, g.r}, b_d{g.k},
        dst_d{g.n, g.k, g.out_h(), g.out_w()}, strides{1, 1}, pad{g.pad, g.pad};
    const memory::desc src_md(src_d, kF32, g.c == 1 ? Tag::nchw : Tag::nChw16c);
    const memory::desc dst_md(dst_d, kF32, Tag::nChw16c);
    const memory::desc b_md(b_d, kF32, Tag::x);
    const memory::desc w_plain_md(w_d, kF32, Tag::oihw);
    const memory::desc w_any(w_d, kF32, Tag::any);
    const auto algo = dnnl::algorithm::convolution_direct;
    const dnnl::convolution_forward::primitive_desc fwd_pd(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, src_md, w_any,
                                        b_md, dst_md, strides, pad, pad),
        engine_);
    const dnnl::convolution_backward_weights::primitive_desc bw_pd(
        dnnl::convolution_backward_weights::desc(algo, src_md, w_any, b_md, dst_md, strides, pad,
                                                 pad),
        engine_, fwd_pd);
    p->fwd = dnnl::convolution_forward(fwd_pd);
    p->bwd_weights = dnnl::convolution_backward_weights(bw_pd);
    p->src = memory(src_md, engine_, nullptr);
    p->dst = memory(dst_md, engine_, nullptr);
    p->ddst = memory(dst_md, engine_, nullptr);
    p->bias = memory(b_md, engine_, nullptr);
    p->dbias = memory(b_md, engine_, nullptr);
    p->w_plain = memory(w_plain_md, engine_, nullptr);
    p->dw_plain = memory(w_plain_md, engine_, nullptr);
    p->fwd_needs_reorder = fwd_pd.weights_desc() != w_plain_md;
    if (p->fwd_needs_reorder) {
      p->w_fwd = memory(fwd_pd.weights_desc(), engine_);
      p->w_to_fwd = dnnl::reorder(p->w_plain, p->w_fwd);
    }
    p->dw_needs_reorder = bw_pd.diff_weights_desc() != w_plain_md;
    if (p->dw_needs_reorder) {
      p->dw_blocked = memory(bw_pd.diff_weights_desc(), engine_);
      p->dw_to_plain = dnnl::reorder(p->dw_blocked, p->dw_plain);
    }
    // The image's gradient is never needed (layer1), and oneDNN has no JIT kernel for it.
    p->has_bwd_data = g.c != 1;
    if (p->has_bwd_data) {
      const dnnl::convolution_backward_data::primitive_desc bd_pd(
          dnnl::convolution_backward_data::desc(algo, src_md, w_any, dst_md, strides, pad, pad),
          engine_, fwd_pd);
      p->bwd_data = dnnl::convolution_backward_data(bd_pd);
      p->dsrc = memory(src_md, engine_, nullptr);
      p->bwd_needs_reorder = bd_pd.weights_desc() != w_plain_md;
      if (p->bwd_needs_reorder) {
        p->w_bwd = memory(bd_pd.weights_desc(), engine_);
        p->w_to_bwd = dnnl::reorder(p->w_plain, p->w_bwd);
      }
    }
    return *cache_.emplace(key, std::move(p)).first->second;
  }

  dnnl::engine engine_;
  dnnl::stream stream_;
  std::map<Key, std::unique_ptr<ConvPrims>> cache_;
};

}  // namespace

std::unique_ptr<Ops> make_dnnl_ops() {
  return std::make_unique<DnnlOps>();
}

}  // namespace mnist_ddp
