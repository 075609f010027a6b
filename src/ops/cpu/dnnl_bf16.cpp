// dnnl_bf16.cpp — the oneDNN backend's bf16 convolutions (--amp bf16 on the CPU): the per-pass
// choice between oneDNN's bf16 primitive and fp32 on bf16-rounded inputs, and the bf16 primitives
// with the reorders that bring fp32 activations in and fp32 results out.
#include "ops/cpu/dnnl_bf16.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mnist_ddp/base/half.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "ops/cpu/conv1_bf16.hpp"

namespace mnist_ddp::bf16 {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr auto kF32 = memory::data_type::f32;
constexpr auto kBf16 = memory::data_type::bf16;

}  // namespace

bool runs_bf16(const ConvGeom& g, Pass pass, Units units, const std::string& bf16_impl) {
  if (units == Units::None || bf16_impl.starts_with("ref")) return false;
  // The image's filter gradient (one input channel) on AMX: oneDNN 2.6.3's AMX kernel measured
  // 1.15 ms against fp32's 0.34 ms (Sapphire Rapids class, batch 100, one core). With AVX512-BF16
  // only (AMD EPYC Zen 4) bf16 is the faster there too (0.50 ms against 0.53 ms, and the fp32
  // path would also round dy first): bench/results/2026-11-29-bf16-cpu.md.
  return !(units == Units::Amx && pass == Pass::BackwardWeights && g.c == 1);
}

bool runs_ours(const ConvGeom& g, Pass pass, Units units) {
  // Zen 5, batch 100, one core (BM_Bf16ImageConv): forward 0.21 ms against oneDNN's 0.36, filter
  // gradient 0.17 against 0.28 (bench/results/2026-12-03-bf16-image-kernels-zen5.md).
  return units == Units::Avx512Bf16 && pass != Pass::BackwardData && image_kernels_fit(g);
}

// A pass's primitive runs on bf16 copies made by reorders from the fp32 views (`in`), and writes
// fp32 either straight into the backend's buffer or into `out` and a reorder from it (`staged`),
// where oneDNN picked another layout.
struct Conv::Prims {
  dnnl::engine engine;
  ConvGeom g;
  bool run[3] = {false, false, false};
  bool own[3] = {false, false, false};  // ours (conv1_bf16.hpp), not oneDNN's primitive
  std::vector<std::uint16_t> own_dy16;  // ours: dy in bf16 where no copy was handed over
  std::string impls[3];
  // fp32 views in the backend's layout and PyTorch's (their handles are set per call).
  memory x32, y32, dy32, dx32, w32, b32, dw32, db32;
  // What oneDNN would run; the primitives and buffers are made from them on first use.
  dnnl::convolution_forward::primitive_desc fwd_pd;
  std::optional<dnnl::convolution_backward_data::primitive_desc> bd_pd;
  dnnl::convolution_backward_weights::primitive_desc bw_pd;
  bool built[3] = {false, false, false};
  // Forward: bf16 x and w in, fp32 y out.
  dnnl::convolution_forward fwd;
  memory fx, fw, fy;
  dnnl::reorder fx_in, fw_in, fy_out;
  bool fy_staged = false;
  // Data gradient: bf16 dy and w in, fp32 dx out.
  dnnl::convolution_backward_data bd;
  memory ddy, dwt, ddx;
  dnnl::reorder ddy_in, dwt_in, ddx_out;
  bool ddx_staged = false;
  // Filter gradient: bf16 x and dy in, fp32 dw (plain OIHW, staged otherwise) and db out.
  dnnl::convolution_backward_weights bw;
  memory wx, wdy, wdw;
  dnnl::reorder wx_in, wdy_in, wdw_out;
  bool wdw_staged = false;
  // Copies one pass makes and the next reuses, where both passes want the same bf16 layout:
  // forward's x for the filter gradient (armed by a forward, used once, for the same x), and the
  // data gradient's dy for the filter gradient inside backward().
  bool share_x = false, share_dy = false;
  const float* fx_of = nullptr;
  // bf16 copies the caller made (Conv::forward's x16, backward's dy16), in the activations' own
  // layout (x16_md, y16_md: the fp32 layouts' bf16 twins), read in place where a pass wants that
  // layout; their handles are set per call.
  memory::desc x16_md, y16_md;
  memory x16_view, dy16_view;
  bool fx_from_view = false;  // the last forward read x16_view, not fx

  // A bf16 copy of `from` in the layout `want`, and the reorder that makes it.
  void input(const memory& from, const memory::desc& want, memory& to, dnnl::reorder& copy) {
    to = memory(want, engine);
    copy = dnnl::reorder(from, to);
  }
  // The fp32 output: straight into `into` where oneDNN's layout is its, else staged.
  bool output(const memory::desc& got, memory& into, memory& staged, dnnl::reorder& copy) {
    if (got == into.get_desc()) return false;
    staged = memory(got, engine);
    copy = dnnl::reorder(staged, into);
    return true;
  }
  void build(Pass pass) {
    switch (pass) {
      case Pass::Forward:
        fwd = dnnl::convolution_forward(fwd_pd);
        input(x32, fwd_pd.src_desc(), fx, fx_in);
        input(w32, fwd_pd.weights_desc(), fw, fw_in);
        fy_staged = output(fwd_pd.dst_desc(), y32, fy, fy_out);
        break;
      case Pass::BackwardData:
        bd = dnnl::convolution_backward_data(*bd_pd);
        input(dy32, bd_pd->diff_dst_desc(), ddy, ddy_in);
        input(w32, bd_pd->weights_desc(), dwt, dwt_in);
        ddx_staged = output(bd_pd->diff_src_desc(), dx32, ddx, ddx_out);
        break;
      case Pass::BackwardWeights:
        bw = dnnl::convolution_backward_weights(bw_pd);
        input(x32, bw_pd.src_desc(), wx, wx_in);
        input(dy32, bw_pd.diff_dst_desc(), wdy, wdy_in);
        wdw_staged = output(bw_pd.diff_weights_desc(), dw32, wdw, wdw_out);
        share_x = run[0] && bw_pd.src_desc() == fwd_pd.src_desc();
        share_dy = bd_pd && run[1] && bw_pd.diff_dst_desc() == bd_pd->diff_dst_desc();
        break;
    }
    built[static_cast<int>(pass)] = true;
  }
  void ready(Pass pass) {
    MNIST_DDP_CHECK(run[static_cast<int>(pass)], "bf16 pass not chosen for this geometry");
    if (!built[static_cast<int>(pass)]) build(pass);
  }
};

Conv::Conv(const dnnl::engine& engine, const ConvGeom& g, Units units, Pick pick)
    : p_(std::make_unique<Prims>()) {
  MNIST_DDP_CHECK(g.k % 16 == 0 && (g.c == 1 || g.c % 16 == 0),
                  "bf16 convolutions need 1 or a multiple of 16 channels");
  Prims& p = *p_;
  p.engine = engine;
  p.g = g;
  const memory::dims src_d{g.n, g.c, g.h, g.w}, w_d{g.k, g.c, g.r, g.r}, b_d{g.k},
      dst_d{g.n, g.k, g.out_h(), g.out_w()}, strides{1, 1}, pad{g.pad, g.pad};
  // The backend's fp32 buffers.
  const memory::desc x32_md(src_d, kF32, g.c == 1 ? Tag::nchw : Tag::nChw16c);
  const memory::desc y32_md(dst_d, kF32, Tag::nChw16c);
  const memory::desc w32_md(w_d, kF32, Tag::oihw);
  const memory::desc b_md(b_d, kF32, Tag::x);
  p.x32 = memory(x32_md, engine, nullptr);
  p.dx32 = memory(x32_md, engine, nullptr);
  p.y32 = memory(y32_md, engine, nullptr);
  p.dy32 = memory(y32_md, engine, nullptr);
  p.w32 = memory(w32_md, engine, nullptr);
  p.dw32 = memory(w32_md, engine, nullptr);
  p.b32 = memory(b_md, engine, nullptr);
  p.db32 = memory(b_md, engine, nullptr);
  p.x16_md = memory::desc(src_d, kBf16, g.c == 1 ? Tag::nchw : Tag::nChw16c);
  p.y16_md = memory::desc(dst_d, kBf16, Tag::nChw16c);
  p.x16_view = memory(p.x16_md, engine, nullptr);
  p.dy16_view = memory(p.y16_md, engine, nullptr);
  // The primitives on layouts oneDNN picks (`any`): bf16 inputs, fp32 outputs.
  const memory::desc x_any(src_d, kBf16, Tag::any), w_any(w_d, kBf16, Tag::any),
      dy_any(dst_d, kBf16, Tag::any), y_any(dst_d, kF32, Tag::any), dx_any(src_d, kF32, Tag::any),
      dw_any(w_d, kF32, Tag::any);
  const auto algo = dnnl::algorithm::convolution_direct;
  p.fwd_pd = dnnl::convolution_forward::primitive_desc(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, x_any, w_any, b_md,
                                      y_any, strides, pad, pad),
      engine);
  p.bw_pd = dnnl::convolution_backward_weights::primitive_desc(
      dnnl::convolution_backward_weights::desc(algo, x_any, dw_any, b_md, dy_any, strides, pad,
                                               pad),
      engine, p.fwd_pd);
  // The image's gradient is never needed (layer1).
  if (g.c != 1) {
    p.bd_pd = dnnl::convolution_backward_data::primitive_desc(
        dnnl::convolution_backward_data::desc(algo, dx_any, w_any, dy_any, strides, pad, pad),
        engine, p.fwd_pd);
    p.impls[1] = p.bd_pd->impl_info_str();
  }
  p.impls[0] = p.fwd_pd.impl_info_str();
  p.impls[2] = p.bw_pd.impl_info_str();
  for (const Pass pass : {Pass::Forward, Pass::BackwardData, Pass::BackwardWeights}) {
    const int i = static_cast<int>(pass);
    if (p.impls[i].empty()) continue;  // no such pass (the image's data gradient)
    if (pick == Pick::OneThread && runs_ours(g, pass, units)) {
      p.own[i] = p.run[i] = true;
      p.impls[i] = "mnist_ddp avx512_bf16";
      continue;
    }
    p.run[i] = pick == Pick::EveryOneDnn ? units != Units::None && !p.impls[i].starts_with("ref")
                                         : runs_bf16(g, pass, units, p.impls[i]);
  }
}

Conv::~Conv() = default;

bool Conv::bf16(Pass pass) const {
  return p_->run[static_cast<int>(pass)];
}
bool Conv::ours(Pass pass) const {
  return p_->own[static_cast<int>(pass)];
}
const std::string& Conv::impl(Pass pass) const {
  return p_->impls[static_cast<int>(pass)];
}

void Conv::forward(dnnl::stream& s, const float* x, const float* w, const float* b, float* y,
                   const std::uint16_t* x16) {
  Prims& p = *p_;
  if (p.own[0]) return image_forward(p.g, x, w, b, y);
  p.ready(Pass::Forward);
  p.x32.set_data_handle(const_cast<float*>(x));
  p.w32.set_data_handle(const_cast<float*>(w));
  p.b32.set_data_handle(const_cast<float*>(b));
  p.y32.set_data_handle(y);
  p.fx_from_view = x16 != nullptr && p.fwd_pd.src_desc() == p.x16_md;
  if (p.fx_from_view) {
    p.x16_view.set_data_handle(const_cast<std::uint16_t*>(x16));
  } else {
    p.fx_in.execute(s, p.x32, p.fx);
  }
  p.fx_of = x;  // the filter gradient of this forward reuses this copy (Prims::share_x)
  p.fw_in.execute(s, p.w32, p.fw);
  p.fwd.execute(s, {{DNNL_ARG_SRC, p.fx_from_view ? p.x16_view : p.fx},
                    {DNNL_ARG_WEIGHTS, p.fw},
                    {DNNL_ARG_BIAS, p.b32},
                    {DNNL_ARG_DST, p.fy_staged ? p.fy : p.y32}});
  if (p.fy_staged) p.fy_out.execute(s, p.fy, p.y32);
  s.wait();
}

void Conv::backward_data(dnnl::stream& s, const float* w, const float* dy, float* dx) {
  data_grad(s, w, dy, nullptr, dx);
}

const dnnl::memory& Conv::data_grad(dnnl::stream& s, const float* w, const float* dy,
                                    const std::uint16_t* dy16, float* dx) {
  Prims& p = *p_;
  p.ready(Pass::BackwardData);
  p.w32.set_data_handle(const_cast<float*>(w));
  p.dy32.set_data_handle(const_cast<float*>(dy));
  p.dx32.set_data_handle(dx);
  const bool view = dy16 != nullptr && p.bd_pd->diff_dst_desc() == p.y16_md;
  if (view) {
    p.dy16_view.set_data_handle(const_cast<std::uint16_t*>(dy16));
  } else {
    p.ddy_in.execute(s, p.dy32, p.ddy);
  }
  p.dwt_in.execute(s, p.w32, p.dwt);
  p.bd.execute(s, {{DNNL_ARG_DIFF_DST, view ? p.dy16_view : p.ddy},
                   {DNNL_ARG_WEIGHTS, p.dwt},
                   {DNNL_ARG_DIFF_SRC, p.ddx_staged ? p.ddx : p.dx32}});
  if (p.ddx_staged) p.ddx_out.execute(s, p.ddx, p.dx32);
  s.wait();
  return view ? p.dy16_view : p.ddy;
}

void Conv::backward_weights(dnnl::stream& s, const float* x, const float* dy, float* dw,
                            float* db) {
  filter_grad(s, x, dy, nullptr, dw, db);
}

void Conv::backward(dnnl::stream& s, const float* x, const float* w, const float* dy, float* dw,
                    float* db, float* dx, const std::uint16_t* dy16) {
  Prims& p = *p_;
  MNIST_DDP_CHECK(dy != nullptr || (dy16 != nullptr && reads_dy16_only(dx != nullptr)),
                  "bf16 convolution backward without the fp32 dy its passes read");
  if (p.own[2]) {
    MNIST_DDP_CHECK(dx == nullptr, "input gradient of a 1-channel (image) convolution");
    return own_filter_grad(x, dy, dy16, dw, db);
  }
  p.ready(Pass::BackwardWeights);
  const dnnl::memory* ready = nullptr;  // dy in bf16, in the filter gradient's layout
  if (dy16 != nullptr && p.bw_pd.diff_dst_desc() == p.y16_md) {
    p.dy16_view.set_data_handle(const_cast<std::uint16_t*>(dy16));
    ready = &p.dy16_view;
  }
  if (dx != nullptr) {
    const dnnl::memory& used = data_grad(s, w, dy, dy16, dx);
    // dy's bf16 copy, just made or read for the data gradient, where both take one layout.
    if (ready == nullptr && p.share_dy) ready = &used;
  }
  filter_grad(s, x, dy, ready, dw, db);
}

bool Conv::reads_dy16_only(bool data_grad) const {
  const Prims& p = *p_;
  if (p.own[2]) return !data_grad;  // ours read dy16 (the image has no data gradient)
  return p.run[2] && p.bw_pd.diff_dst_desc() == p.y16_md &&
         (!data_grad || (p.run[1] && p.bd_pd->diff_dst_desc() == p.y16_md));
}

void Conv::own_filter_grad(const float* x, const float* dy, const std::uint16_t* dy16, float* dw,
                           float* db) {
  Prims& p = *p_;
  if (dy16 == nullptr) {
    const std::size_t n = static_cast<std::size_t>(p.g.n) * p.g.k * p.g.out_h() * p.g.out_w();
    if (p.own_dy16.size() != n) p.own_dy16.resize(n);
    to_bf16(n, dy, p.own_dy16.data());
    dy16 = p.own_dy16.data();
  }
  image_filter_grad(p.g, x, dy16, dw, db);
}

void Conv::filter_grad(dnnl::stream& s, const float* x, const float* dy, const dnnl::memory* dy16,
                       float* dw, float* db) {
  Prims& p = *p_;
  if (p.own[2]) return own_filter_grad(x, dy, nullptr, dw, db);
  p.ready(Pass::BackwardWeights);
  p.x32.set_data_handle(const_cast<float*>(x));
  p.dy32.set_data_handle(const_cast<float*>(dy));
  p.dw32.set_data_handle(dw);
  p.db32.set_data_handle(db);
  // x as the last forward of this geometry converted it, where that forward read this x: used
  // once (a forward arms it again), so a later call on the same buffer converts afresh.
  const bool x_from_forward = p.share_x && p.built[0] && p.fx_of == x;
  p.fx_of = nullptr;
  if (!x_from_forward) p.wx_in.execute(s, p.x32, p.wx);
  if (dy16 == nullptr) p.wdy_in.execute(s, p.dy32, p.wdy);
  const dnnl::memory& src = !x_from_forward ? p.wx : p.fx_from_view ? p.x16_view : p.fx;
  p.bw.execute(s, {{DNNL_ARG_SRC, src},
                   {DNNL_ARG_DIFF_DST, dy16 != nullptr ? *dy16 : p.wdy},
                   {DNNL_ARG_DIFF_WEIGHTS, p.wdw_staged ? p.wdw : p.dw32},
                   {DNNL_ARG_DIFF_BIAS, p.db32}});
  if (p.wdw_staged) p.wdw_out.execute(s, p.wdw, p.dw32);
  s.wait();
}

}  // namespace mnist_ddp::bf16
