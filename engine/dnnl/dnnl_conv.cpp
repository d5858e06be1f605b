// oneDNN convolutions for the CPU backend. Weights arrive as plain OIHW pointers, activations as
// NCHW or, where the caller keeps them so, this CPU's blocked layout; each call runs its shape's
// cached primitives (dnnl_conv_plan.h), with reorders between the caller's layout and the
// primitive's around them where the two differ.
#include "engine/dnnl/dnnl_conv.h"

#include <string>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "engine/check.h"
#include "engine/dnnl/dnnl_conv_plan.h"
#include "engine/dnnl/omp_threads.h"

namespace pb {

namespace {

using dnnl::memory;
using dnnl_plan::BwdData;
using dnnl_plan::BwdWeights;
using dnnl_plan::Fwd;

// A convolution below this many FLOPs finishes on one thread before a second one could be woken
// (threads wait passively, engine/openmp_wait.cpp; on a busy machine a wake-up costs a time
// slice): a team would only add its wake-ups. Primitives are created and run with the same team.
constexpr double kTeamMinFlops = 1 << 22;
int team(const ConvGeom& g, int threads) {
  const double flops = 2.0 * static_cast<double>(g.n * g.k * g.c * g.r * g.s) * static_cast<double>(g.p() * g.q());
  return flops < kTeamMinFlops ? 1 : threads;
}

}  // namespace

struct DnnlConv::Impl : dnnl_plan::Plans {
  using Plans::Plans;
};

DnnlConv::DnnlConv(int threads, bool winograd, std::size_t winograd_scratch_cap, Device device)
    : impl_(std::make_unique<Impl>(threads, winograd, winograd_scratch_cap, device)) {}
DnnlConv::~DnnlConv() = default;
bool DnnlConv::winograd() const { return impl_->winograd; }
void DnnlConv::release_scratch() {
  for (dnnl_plan::Scratch* s : {&impl_->src_buf, &impl_->dst_buf, &impl_->wei_buf, &impl_->bias_buf, &impl_->pad_buf}) s->release();
}

namespace {
// oneDNN reports errors as dnnl::error; pass them on as ours, with the call and the shape.
template <class Body>
void dnnl_call(const char* what, const ConvGeom& g, Body&& body) {
  try {
    body();
  } catch (const dnnl::error& e) {
    throw Error(fmt::format("oneDNN {} ({}x{}x{}x{} * {}x{}x{}, stride {}x{}, pad {}x{}): {} (status {})", what,
                            g.n, g.c, g.h, g.w, g.k, g.r, g.s, g.stride_h, g.stride_w, g.pad_h, g.pad_w, e.what(),
                            static_cast<int>(e.status)));
  }
}
}  // namespace

std::string DnnlConv::plan(const ConvGeom& g, bool bias) {
  Impl& I = *impl_;
  OmpThreads omp(team(g, I.threads));
  std::string out;
  dnnl_call("convolution plan", g, [&] {
    const Fwd& f = I.get_fwd(g, bias);
    const BwdData& bd = I.get_bwd_data(g);
    const BwdWeights& bw = I.get_bwd_weights(g, bias);
    out = fmt::format("forward {} x{} ({} B scratch), backward data {} x{} ({} B), backward weights {} x{} ({} B)",
                      f.impl, f.parts, f.pad.get_size(), bd.impl, bd.parts, bd.pad.get_size(), bw.impl, bw.parts,
                      bw.pad.get_size());
  });
  return out;
}

std::array<std::string, 3> DnnlConv::pass_plans(const ConvGeom& g, bool bias) {
  Impl& I = *impl_;
  OmpThreads omp(team(g, I.threads));
  std::array<std::string, 3> out;
  dnnl_call("convolution plan", g, [&] {
    const auto str = [](const auto& p) { return fmt::format("{} x{} ({} B scratch)", p.impl, p.parts, p.pad.get_size()); };
    out = {str(I.get_fwd(g, bias)), str(I.get_bwd_data(g)), str(I.get_bwd_weights(g, bias))};
  });
  return out;
}

bool DnnlConv::forward_is_winograd(const ConvGeom& g, bool bias) {
  Impl& I = *impl_;
  if (!I.winograd) return false;
  OmpThreads omp(team(g, I.threads));
  bool wino = false;
  dnnl_call("convolution plan", g, [&] { wino = I.get_fwd(g, bias).impl.find("wino") != std::string::npos; });
  return wino;
}

bool DnnlConv::backward_data_is_winograd(const ConvGeom& g) {
  Impl& I = *impl_;
  if (!I.winograd) return false;
  OmpThreads omp(team(g, I.threads));
  bool wino = false;
  dnnl_call("convolution plan", g, [&] { wino = I.get_bwd_data(g).impl.find("wino") != std::string::npos; });
  return wino;
}

bool DnnlConv::backward_weights_is_winograd(const ConvGeom& g, bool bias) {
  Impl& I = *impl_;
  if (!I.winograd) return false;
  OmpThreads omp(team(g, I.threads));
  bool wino = false;
  dnnl_call("convolution plan", g, [&] { wino = I.get_bwd_weights(g, bias).impl.find("wino") != std::string::npos; });
  return wino;
}

namespace {
void run_forward(dnnl_plan::Plans& I, const Fwd& f, const ConvGeom& g, const float* x, const float* w, const float* b,
                 float* y, ConvLayouts io) {
  const int64_t ks = g.k / f.parts;  // output channels per slice
  const dnnl_plan::Arg& src_arg = f.src.in(io.x);
  const dnnl_plan::Arg& dst_arg = f.dst.in(io.y);
  memory src = I.input(src_arg, x, I.src_buf);
  for (int64_t i = 0; i < f.parts; ++i) {
    // A slice of whole blocks starts at the same offset in NCHW and in nChw16c / nChw8c.
    float* yi = y + i * ks * g.p() * g.q();
    memory wei = I.input(f.wei, w + i * ks * g.c * g.r * g.s, I.wei_buf);
    memory dst = I.output(dst_arg, yi, I.dst_buf);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src},
                                         {DNNL_ARG_WEIGHTS, wei},
                                         {DNNL_ARG_DST, dst},
                                         {DNNL_ARG_SCRATCHPAD, I.scratchpad(f.pad)}};
    if (b) args.emplace(DNNL_ARG_BIAS, memory(f.bias, I.eng, const_cast<float*>(b + i * ks)));
    f.prim.execute(I.strm, args);
    I.finish(dst_arg, dst, yi);
  }
  I.strm.wait();
}
}  // namespace

bool DnnlConv::keeps_blocked(const ConvGeom& a, const ConvGeom& b) {
  Impl& I = *impl_;
  PB_CHECK(a.n == b.n && a.k == b.c && a.p() == b.h && a.q() == b.w, "convolutions that do not chain");
  bool keep = false;
  dnnl_call("convolution plan", b, [&] {
    // Each primitive is created under the team its convolution runs with.
    auto fwd = [&](const ConvGeom& g) -> const Fwd& {
      OmpThreads omp(team(g, I.threads));
      return I.get_fwd(g, true);
    };
    keep = !I.blocked({a.n, a.k, a.p(), a.q()}, a.k).is_zero() && I.is_blocked(fwd(a).dst.plain.prim) &&
           I.is_blocked(fwd(b).src.plain.prim);
  });
  return keep;
}

void DnnlConv::forward(const ConvGeom& g, const float* x, const float* w, const float* b, float* y, ConvLayouts io) {
  Impl& I = *impl_;
  OmpThreads omp(team(g, I.threads));
  dnnl_call("convolution forward", g, [&] { run_forward(I, I.get_fwd(g, b != nullptr), g, x, w, b, y, io); });
}

bool DnnlConv::forward_relu(const ConvGeom& g, const float* x, const float* w, const float* b, float* y,
                            ConvLayouts io) {
  Impl& I = *impl_;
  OmpThreads omp(team(g, I.threads));
  bool fused = false;
  dnnl_call("convolution forward with ReLU", g, [&] {
    if (const Fwd* f = I.get_fwd_relu(g, b != nullptr)) {
      run_forward(I, *f, g, x, w, b, y, io);
      fused = true;
    }
  });
  return fused;
}

void DnnlConv::backward_data(const ConvGeom& g, const float* dy, const float* w, float* dx, ConvLayouts io) {
  Impl& I = *impl_;
  OmpThreads omp(team(g, I.threads));
  dnnl_call("convolution backward data", g, [&] {
    BwdData& bd = I.get_bwd_data(g);
    const int64_t cs = g.c / bd.parts;  // input channels per slice
    const dnnl_plan::Arg& diff_dst_arg = bd.diff_dst.in(io.y);
    const dnnl_plan::Arg& diff_src_arg = bd.diff_src.in(io.x);
    memory diff_dst = I.input(diff_dst_arg, dy, I.dst_buf);
    for (int64_t i = 0; i < bd.parts; ++i) {
      float* dxi = dx + i * cs * g.h * g.w;
      memory wei = I.input(bd.wei, w + i * cs * g.r * g.s, I.wei_buf);
      memory diff_src = I.output(diff_src_arg, dxi, I.src_buf);
      bd.prim.execute(I.strm, {{DNNL_ARG_DIFF_DST, diff_dst},
                               {DNNL_ARG_WEIGHTS, wei},
                               {DNNL_ARG_DIFF_SRC, diff_src},
                               {DNNL_ARG_SCRATCHPAD, I.scratchpad(bd.pad)}});
      I.finish(diff_src_arg, diff_src, dxi);
    }
    I.strm.wait();
  });
}

void DnnlConv::backward_weights(const ConvGeom& g, const float* x, const float* dy, float* dw, float* db,
                                bool accumulate, ConvLayouts io) {
  Impl& I = *impl_;
  OmpThreads omp(team(g, I.threads));
  dnnl_call("convolution backward weights", g, [&] {
    BwdWeights& bw = I.get_bwd_weights(g, db != nullptr);
    const int64_t ks = g.k / bw.parts;  // output channels per slice
    const dnnl_plan::Arg& diff_dst_arg = bw.diff_dst.in(io.y);
    memory src = I.input(bw.src.in(io.x), x, I.src_buf);
    // oneDNN has no accumulate for backward weights: with accumulate, compute into scratch and
    // add (a reorder with a sum post-op adds while converting the layout back).
    const bool wei_direct = !accumulate && !bw.diff_wei.reordered();
    for (int64_t i = 0; i < bw.parts; ++i) {
      float* dwi = dw + i * ks * g.c * g.r * g.s;
      memory diff_dst = I.input(diff_dst_arg, dy + i * ks * g.p() * g.q(), I.dst_buf);
      memory diff_wei = wei_direct ? I.user_mem(bw.diff_wei, dwi)
                                   : memory(bw.diff_wei.prim, I.eng, I.wei_buf.get(bw.diff_wei.prim.get_size()));
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src},
                                           {DNNL_ARG_DIFF_DST, diff_dst},
                                           {DNNL_ARG_DIFF_WEIGHTS, diff_wei},
                                           {DNNL_ARG_SCRATCHPAD, I.scratchpad(bw.pad)}};
      float* dbi = db ? db + i * ks : nullptr;
      float* bias_out = dbi && accumulate ? static_cast<float*>(I.bias_buf.get(sizeof(float) * ks)) : dbi;
      if (dbi) args.emplace(DNNL_ARG_DIFF_BIAS, memory(bw.bias, I.eng, bias_out));
      bw.prim.execute(I.strm, args);
      if (!wei_direct) {
        memory user = I.user_mem(bw.diff_wei, dwi);
        if (accumulate)
          bw.add_to_user.execute(I.strm, diff_wei, user);
        else
          bw.diff_wei.to_user.execute(I.strm, diff_wei, user);
      }
      if (dbi && accumulate) {
        I.strm.wait();
        for (int64_t k = 0; k < ks; ++k) dbi[k] += bias_out[k];
      }
    }
    I.strm.wait();
  });
}

}  // namespace pb
