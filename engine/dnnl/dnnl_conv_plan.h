// DnnlConv's primitives: built once per shape and cached, in the layouts oneDNN prefers, with
// the reorders between those and the user's plain layouts, and the scratch buffers they share.
#pragma once

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <oneapi/dnnl/dnnl.hpp>

#include "engine/backend.h"
#include "engine/check.h"

namespace pb::dnnl_plan {

using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;

// Winograd only where it pays: below 32 channels in or out (per slice) direct is as fast.
inline constexpr int64_t kWinogradMinChannels = 32;

// A growable 64-byte-aligned buffer: sized on first use of the largest shape, reused after, so a
// training step allocates nothing. Counted as its device's workspace.
class Scratch {
 public:
  explicit Scratch(Device d) : count_(d) {}
  void* get(std::size_t bytes) {
    if (bytes > bytes_) {
      const std::size_t rounded = (bytes + 63) / 64 * 64;
      ptr_.reset();  // free the old buffer first: peak memory is what we are careful about
      bytes_ = 0;
      count_.set(0);
      void* p = std::aligned_alloc(64, rounded);
      if (!p) throw Error(fmt::format("oneDNN scratch: cannot allocate {} bytes", rounded));
      ptr_.reset(p);
      bytes_ = rounded;
      count_.set(bytes_);
    }
    return ptr_.get();
  }
  void release() {
    ptr_.reset();
    bytes_ = 0;
    count_.set(0);
  }

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> ptr_;
  std::size_t bytes_ = 0;
  WorkspaceCount count_;
};

using Key = std::array<int64_t, 12>;
inline Key key_of(const ConvGeom& g, bool bias) {
  return {g.n, g.c, g.h, g.w, g.k, g.r, g.s, g.stride_h, g.stride_w, g.pad_h, g.pad_w, bias ? 1 : 0};
}

// One tensor argument of a primitive: the user's plain layout (possibly a channel slice of a
// larger tensor), the primitive's, and the reorders between them when they differ.
struct Arg {
  memory::desc user, prim;
  dnnl::reorder to_prim, to_user;
  bool reordered() const { return !(user == prim); }
};

// An activation argument, for each layout the caller may keep it in: Plain (NCHW), and Blocked
// (the plans' block layout) where its channels fill whole blocks; `blocked.user` is empty where not.
struct ActArg {
  Arg plain, blocked;
  const Arg& in(ActLayout l) const {
    if (l == ActLayout::Plain) return plain;
    PB_CHECK(!blocked.user.is_zero(), "a blocked layout for a tensor of {} channels", plain.user.dims()[1]);
    return blocked;
  }
};

// Each op runs its primitive `parts` times, on consecutive slices of the channels it produces
// (forward: output channels, backward data: input channels, backward weights: output channels).
struct Fwd {
  dnnl::convolution_forward prim;
  int64_t parts;  // 1 unless Winograd runs in channel slices
  std::string impl;
  ActArg src, dst;
  Arg wei;
  memory::desc bias, pad;
  dnnl::algorithm alg = dnnl::algorithm::convolution_direct;
};
struct BwdData {
  dnnl::convolution_backward_data prim;
  int64_t parts;
  std::string impl;
  ActArg diff_dst, diff_src;
  Arg wei;
  memory::desc pad;
};
struct BwdWeights {
  dnnl::convolution_backward_weights prim;
  int64_t parts;
  std::string impl;
  ActArg src, diff_dst;
  Arg diff_wei;
  dnnl::reorder add_to_user;  // diff_wei prim -> user layout with a sum post-op: dw += computed
  memory::desc bias, pad;
};

struct Dims {
  memory::dims src, wei, bias, dst, strides, pad;
};
inline Dims dims(const ConvGeom& g) {
  // Right padding = left padding: oneDNN checks the output size with the same floor division
  // as ConvGeom::p()/q(), so symmetric padding describes every geometry (PyTorch does this too).
  return {{g.n, g.c, g.h, g.w}, {g.k, g.c, g.r, g.s}, {g.k}, {g.n, g.k, g.p(), g.q()},
          {g.stride_h, g.stride_w}, {g.pad_h, g.pad_w}};
}
inline memory::desc any(const memory::dims& d) { return memory::desc(d, Dt::f32, Tag::any); }
// Plain NCHW / OIHW layout of a 4-d slice `d` of a tensor whose dimension 1 has `full1` entries.
inline memory::desc plain(const memory::dims& d, int64_t full1) {
  return memory::desc(d, Dt::f32, memory::dims{full1 * d[2] * d[3], d[2] * d[3], d[3], 1});
}
inline ConvGeom slice_k(ConvGeom g, int64_t parts) { return g.k /= parts, g; }
inline ConvGeom slice_c(ConvGeom g, int64_t parts) { return g.c /= parts, g; }

// The state behind DnnlConv (its Impl): one engine and stream, the primitives of every shape
// seen, and the buffers the calls share.
struct Plans {
  int threads;
  bool winograd;
  std::size_t winograd_scratch_cap;
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  std::map<Key, Fwd> fwd;
  // Forward with a ReLU post-op, same algorithm and slicing as fwd's plan of the shape; empty
  // where oneDNN has no such kernel (the caller then runs the plain forward and a ReLU pass).
  std::map<Key, std::optional<Fwd>> fwd_relu;
  std::map<Key, BwdData> bwd_data;
  std::map<Key, BwdWeights> bwd_weights;
  int64_t block_ = -1;  // block(), once known
  // Shared by all shapes: calls on one instance never overlap.
  Scratch src_buf, dst_buf, wei_buf, bias_buf, pad_buf;

  Plans(int t, bool wino, std::size_t cap, Device d)
      : threads(t), winograd(wino), winograd_scratch_cap(cap), src_buf(d), dst_buf(d), wei_buf(d), bias_buf(d),
        pad_buf(d) {}

  dnnl::primitive_attr attr(bool relu = false) const {
    dnnl::primitive_attr a;
    a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (relu) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      a.set_post_ops(ops);
    }
    return a;
  }

  // The blocked activation layout of this CPU's direct kernels (nChw16c with AVX-512, nChw8c with
  // AVX2), asked of oneDNN once; 0 where they use neither.
  int64_t block() {
    if (block_ < 0) {
      ConvGeom g;
      g.n = 1, g.c = g.k = 64, g.h = g.w = 8, g.r = g.s = 3, g.pad_h = g.pad_w = 1;
      const memory::desc dst = fwd_pd(g, true, dnnl::algorithm::convolution_direct).dst_desc();
      block_ = dst == memory::desc(dst.dims(), Dt::f32, Tag::nChw16c) ? 16
               : dst == memory::desc(dst.dims(), Dt::f32, Tag::nChw8c) ? 8
                                                                        : 0;
    }
    return block_;
  }
  // The blocked layout of a 4-d channel slice `d` of a tensor whose dimension 1 has `full1`
  // entries (a view into the whole tensor, at the slice's first channel); empty where the
  // channels do not fill whole blocks.
  memory::desc blocked(const memory::dims& d, int64_t full1) {
    const int64_t b = block();
    if (b == 0 || full1 % b != 0 || d[1] % b != 0) return {};
    const memory::desc whole({d[0], full1, d[2], d[3]}, Dt::f32, b == 16 ? Tag::nChw16c : Tag::nChw8c);
    return d[1] == full1 ? whole : whole.submemory_desc(d, {0, 0, 0, 0});
  }
  // Whether a primitive's layout of an activation is the blocked one.
  bool is_blocked(const memory::desc& prim) {
    const memory::desc b = blocked(prim.dims(), prim.dims()[1]);
    return !b.is_zero() && b == prim;
  }
  ActArg act(const memory::dims& d, int64_t full1, const memory::desc& prim) {
    const memory::desc b = blocked(d, full1);
    return ActArg{arg(plain(d, full1), prim), b.is_zero() ? Arg{} : arg(b, prim)};
  }

  Arg arg(const memory::desc& user, const memory::desc& prim) {
    Arg a{user, prim, {}, {}};
    if (a.reordered()) {
      a.to_prim = dnnl::reorder(dnnl::reorder::primitive_desc(eng, user, eng, prim));
      a.to_user = dnnl::reorder(dnnl::reorder::primitive_desc(eng, prim, eng, user));
    }
    return a;
  }

  dnnl::convolution_forward::primitive_desc fwd_pd(const ConvGeom& g, bool bias, dnnl::algorithm alg,
                                                   bool relu = false) {
    const Dims d = dims(g);
    const auto desc =
        bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, any(d.src), any(d.wei),
                                               memory::desc(d.bias, Dt::f32, Tag::x), any(d.dst), d.strides, d.pad,
                                               d.pad)
             : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, any(d.src), any(d.wei),
                                               any(d.dst), d.strides, d.pad, d.pad);
    return dnnl::convolution_forward::primitive_desc(desc, attr(relu), eng);
  }

  // Picks the algorithm and slicing of one op. Winograd F(4x4, 3x3) (oneDNN's jit_wino_4x3) for
  // 3x3 stride-1 layers with 32+ channels in and out takes about half the direct kernels' time.
  // It is still fp32 arithmetic, with ~10x direct's rounding error (measured ~3e-6 vs ~3e-7 of
  // max|y| at 512 channels). `sliced` is the channel count the op can be split along; make(alg,
  // parts) creates the primitive descriptor for one of `parts` slices. Direct (unsliced) where
  // the CPU has no Winograd kernel or no slicing fits the scratch cap.
  template <class Make>
  auto choose(const ConvGeom& g, int64_t sliced, Make&& make) {
    if (winograd && g.r == 3 && g.s == 3 && g.stride_h == 1 && g.stride_w == 1 &&
        std::min(g.c, g.k) >= kWinogradMinChannels) {
      for (int64_t parts = 1; parts <= 8; parts *= 2) {
        if (sliced % parts != 0 || (parts > 1 && (sliced / parts) % 16 != 0) ||
            sliced / parts < kWinogradMinChannels)
          break;
        try {
          auto pd = make(dnnl::algorithm::convolution_winograd, parts);
          if (pd.scratchpad_desc().get_size() <= winograd_scratch_cap) return std::make_pair(pd, parts);
        } catch (const dnnl::error& e) {
          if (e.status != dnnl_unimplemented) throw;
          break;
        }
      }
    }
    return std::make_pair(make(dnnl::algorithm::convolution_direct, int64_t{1}), int64_t{1});
  }

  Fwd make_fwd(const ConvGeom& g, const dnnl::convolution_forward::primitive_desc& pd, int64_t parts, bool bias,
               dnnl::algorithm alg) {
    const Dims d = dims(slice_k(g, parts));
    return Fwd{dnnl::convolution_forward(pd),
               parts,
               pd.impl_info_str(),
               act(d.src, g.c, pd.src_desc()),
               act(d.dst, g.k, pd.dst_desc()),
               arg(plain(d.wei, g.c), pd.weights_desc()),
               bias ? pd.bias_desc() : memory::desc(),
               pd.scratchpad_desc(),
               alg};
  }

  Fwd& get_fwd(const ConvGeom& g, bool bias) {
    const Key key = key_of(g, bias);
    auto it = fwd.find(key);
    if (it != fwd.end()) return it->second;
    const auto [pd, parts] =
        choose(g, g.k, [&](dnnl::algorithm alg, int64_t n) { return fwd_pd(slice_k(g, n), bias, alg); });
    const dnnl::algorithm alg = parts > 1 || std::string(pd.impl_info_str()).find("wino") != std::string::npos
                                    ? dnnl::algorithm::convolution_winograd
                                    : dnnl::algorithm::convolution_direct;
    return fwd.emplace(key, make_fwd(g, pd, parts, bias, alg)).first->second;
  }

  // The fused conv + ReLU plan of a shape, or null. Only where it keeps the plain plan's
  // algorithm and slicing (and its scratch within the cap): fusing must not trade Winograd for a
  // slower direct kernel.
  const Fwd* get_fwd_relu(const ConvGeom& g, bool bias) {
    const Key key = key_of(g, bias);
    auto it = fwd_relu.find(key);
    if (it != fwd_relu.end()) return it->second ? &*it->second : nullptr;
    const Fwd& plain_plan = get_fwd(g, bias);
    std::optional<Fwd> f;
    try {
      const auto pd = fwd_pd(slice_k(g, plain_plan.parts), bias, plain_plan.alg, true);
      if (plain_plan.impl == pd.impl_info_str() &&
          (plain_plan.alg != dnnl::algorithm::convolution_winograd ||
           pd.scratchpad_desc().get_size() <= winograd_scratch_cap))
        f = make_fwd(g, pd, plain_plan.parts, bias, plain_plan.alg);
    } catch (const dnnl::error& e) {
      if (e.status != dnnl_unimplemented) throw;
    }
    const auto& slot = fwd_relu.emplace(key, std::move(f)).first->second;
    return slot ? &*slot : nullptr;
  }

  BwdData& get_bwd_data(const ConvGeom& g) {
    const Key key = key_of(g, false);
    auto it = bwd_data.find(key);
    if (it != bwd_data.end()) return it->second;
    const auto [pd, parts] = choose(g, g.c, [&](dnnl::algorithm alg, int64_t n) {
      const ConvGeom gs = slice_c(g, n);
      const Dims d = dims(gs);
      const dnnl::convolution_backward_data::desc desc(alg, any(d.src), any(d.wei), any(d.dst), d.strides, d.pad,
                                                       d.pad);
      return dnnl::convolution_backward_data::primitive_desc(desc, attr(), eng, fwd_pd(gs, false, alg));
    });
    const Dims d = dims(slice_c(g, parts));
    BwdData b{dnnl::convolution_backward_data(pd),
              parts,
              pd.impl_info_str(),
              act(d.dst, g.k, pd.diff_dst_desc()),
              act(d.src, g.c, pd.diff_src_desc()),
              arg(plain(d.wei, g.c), pd.weights_desc()),
              pd.scratchpad_desc()};
    return bwd_data.emplace(key, std::move(b)).first->second;
  }

  BwdWeights& get_bwd_weights(const ConvGeom& g, bool bias) {
    const Key key = key_of(g, bias);
    auto it = bwd_weights.find(key);
    if (it != bwd_weights.end()) return it->second;
    const auto [pd, parts] = choose(g, g.k, [&](dnnl::algorithm alg, int64_t n) {
      const ConvGeom gs = slice_k(g, n);
      const Dims d = dims(gs);
      const auto desc =
          bias ? dnnl::convolution_backward_weights::desc(alg, any(d.src), any(d.wei),
                                                          memory::desc(d.bias, Dt::f32, Tag::x), any(d.dst),
                                                          d.strides, d.pad, d.pad)
               : dnnl::convolution_backward_weights::desc(alg, any(d.src), any(d.wei), any(d.dst), d.strides, d.pad,
                                                          d.pad);
      return dnnl::convolution_backward_weights::primitive_desc(desc, attr(), eng, fwd_pd(gs, bias, alg));
    });
    const Dims d = dims(slice_k(g, parts));
    BwdWeights b{dnnl::convolution_backward_weights(pd),
                 parts,
                 pd.impl_info_str(),
                 act(d.src, g.c, pd.src_desc()),
                 act(d.dst, g.k, pd.diff_dst_desc()),
                 arg(plain(d.wei, g.c), pd.diff_weights_desc()),
                 {},
                 bias ? pd.diff_bias_desc() : memory::desc(),
                 pd.scratchpad_desc()};
    dnnl::primitive_attr sum;
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    sum.set_post_ops(ops);
    b.add_to_user = dnnl::reorder(dnnl::reorder::primitive_desc(eng, b.diff_wei.prim, eng, b.diff_wei.user, sum));
    return bwd_weights.emplace(key, std::move(b)).first->second;
  }

  memory user_mem(const Arg& a, const float* p) { return memory(a.user, eng, const_cast<float*>(p)); }

  // The primitive's view of an input: the user's memory itself, or a reorder of it into `buf`.
  memory input(const Arg& a, const float* p, Scratch& buf) {
    memory u = user_mem(a, p);
    if (!a.reordered()) return u;
    memory m(a.prim, eng, buf.get(a.prim.get_size()));
    a.to_prim.execute(strm, u, m);
    return m;
  }
  // Where the primitive writes an output: the user's memory, or `buf` to be reordered after.
  memory output(const Arg& a, float* p, Scratch& buf) {
    return a.reordered() ? memory(a.prim, eng, buf.get(a.prim.get_size())) : user_mem(a, p);
  }
  void finish(const Arg& a, memory& m, float* p) {
    if (!a.reordered()) return;
    memory u = user_mem(a, p);
    a.to_user.execute(strm, m, u);
  }
  memory scratchpad(const memory::desc& d) { return memory(d, eng, pad_buf.get(d.get_size())); }
};

}  // namespace pb::dnnl_plan
