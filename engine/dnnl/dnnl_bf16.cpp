// oneDNN bf16 primitives: plain NCHW/OIHW (or row-major) user tensors, the primitive's preferred
// layouts inside, with reorders through scratch buffers where the two differ.
#include "engine/dnnl/dnnl_bf16.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <unordered_map>
#include <tuple>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "engine/check.h"
#include "engine/dnnl/dnnl_conv_plan.h"
#include "engine/dnnl/omp_threads.h"

namespace pb {

namespace {
using dnnl::memory;
using Dt = memory::data_type;
using Tag = memory::format_tag;

// dnnl_cpu_isa_t values are bit sets, each ISA holding the bits of those it extends.
constexpr unsigned kIsaBf16 = dnnl_cpu_isa_avx512_core_bf16;
}  // namespace

std::string dnnl_isa_name(unsigned isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    default: return fmt::format("isa 0x{:x}", isa);
  }
}

unsigned dnnl_effective_isa() { return static_cast<unsigned>(dnnl_get_effective_cpu_isa()); }

std::string dnnl_bf16_refusal(unsigned isa) {
  if ((isa & kIsaBf16) == kIsaBf16) return {};
  return fmt::format("precision bf16 on CPU needs oneDNN's bf16 kernels (AVX512-BF16 or AMX-BF16); oneDNN runs "
                     "{} on this CPU, where bf16 would be emulated",
                     dnnl_isa_name(isa));
}

namespace {

memory::desc plain(const memory::dims& d, Dt t) {
  return memory::desc(d, t, d.size() == 4 ? Tag::abcd : d.size() == 2 ? Tag::ab : Tag::a);
}
memory::desc any(const memory::dims& d, Dt t) { return memory::desc(d, t, Tag::any); }
// Plain NCHW / OIHW `d` inside a tensor whose dimension 1 has `full1` entries.
memory::desc view(const memory::dims& d, Dt t, int64_t full1) {
  return memory::desc(d, t, memory::dims{full1 * d[2] * d[3], d[2] * d[3], d[3], 1});
}

// The primitive's implementation name; oneDNN's reference kernels emulate bf16, slowly: refused.
template <class Pd>
std::string native_impl(const Pd& pd, const char* what) {
  std::string impl = pd.impl_info_str();
  if (impl.rfind("ref", 0) == 0)
    throw Error(fmt::format("oneDNN has only its reference kernel ({}) for this bf16 {} on {}: refusing emulated bf16",
                            impl, what, dnnl_isa_name(dnnl_effective_isa())));
  return impl;
}

struct ConvPlan {
  dnnl::convolution_forward::primitive_desc fpd;
  dnnl::convolution_backward_data::primitive_desc dpd;
  dnnl::convolution_backward_weights::primitive_desc wpd;
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights bwd_weights;
  memory::desc x, w, b, y, dw, db;  // the user's
  // Set where the weight gradient runs on zero-padded channels (see conv()): the user's x, dy and
  // dw as views into the padded plain buffers.
  bool padded = false;
  memory::desc x_view, y_view, dw_view;
  std::string impl[3];
};

// Backward-data writing fp32 (tp's partial input gradients), made per shape at its first use.
struct DataF32Plan {
  dnnl::convolution_backward_data::primitive_desc pd;
  dnnl::convolution_backward_data prim;
  memory::desc dx;  // the user's, fp32 NCHW
};

struct FwdF32Plan {
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
  memory::desc y;  // the user's, fp32 NCHW
};

struct MatPlan {
  dnnl::matmul prim;
  memory::desc src, wei, bias, dst, pad;
};

}  // namespace

struct DnnlBf16::Impl {
  Impl(int t, Device d) : threads(t), eng(dnnl::engine::kind::cpu, 0), strm(eng), s{dnnl_plan::Scratch(d), dnnl_plan::Scratch(d), dnnl_plan::Scratch(d)}, pad(d) {}
  int threads;
  dnnl::engine eng;
  dnnl::stream strm;
  std::array<dnnl_plan::Scratch, 3> s;
  // The primitives' scratchpad, ours: oneDNN's own is per creating thread and outlives a primitive
  // destroyed on another thread (a leak with workers >= 2).
  dnnl_plan::Scratch pad;
  std::vector<float> db_tmp;
  std::vector<Bf16> zero_bias;  // a forward without bias (a transposed convolution's backward data)
  std::map<dnnl_plan::Key, ConvPlan> convs;
  std::map<dnnl_plan::Key, DataF32Plan> data_f32;
  std::map<dnnl_plan::Key, FwdF32Plan> fwd_f32;
  std::map<std::tuple<int, int64_t, int64_t, int64_t, bool>, MatPlan> mats;

  const ConvPlan& conv(const ConvGeom& g) {
    const dnnl_plan::Key key = dnnl_plan::key_of(g, true);
    auto it = convs.find(key);
    if (it != convs.end()) return it->second;
    const dnnl_plan::Dims d = dnnl_plan::dims(g);
    ConvPlan p;
    p.x = plain(d.src, Dt::bf16), p.w = plain(d.wei, Dt::bf16), p.b = plain(d.bias, Dt::bf16);
    p.y = plain(d.dst, Dt::bf16), p.dw = plain(d.wei, Dt::f32), p.db = plain(d.bias, Dt::f32);
    const auto alg = dnnl::algorithm::convolution_direct;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::convolution_forward::primitive_desc fpd(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, any(d.src, Dt::bf16),
                                        any(d.wei, Dt::bf16), p.b, any(d.dst, Dt::bf16), d.strides, d.pad, d.pad),
        attr, eng);
    dnnl::convolution_backward_data::primitive_desc dpd(
        dnnl::convolution_backward_data::desc(alg, any(d.src, Dt::bf16), any(d.wei, Dt::bf16), any(d.dst, Dt::bf16),
                                              d.strides, d.pad, d.pad),
        attr, eng, fpd);
    // oneDNN 2.6's AMX bf16 weight gradient is wrong where the input is narrower than the stride
    // (an input 1 wide at stride 2: a tap's gradient read from outside the input). With plain
    // layouts and at least two input and output channels oneDNN takes another kernel; with one
    // it has only its reference kernel or keeps AMX, so such channels are padded with zeros
    // (docs/bf16.md, "oneDNN").
    const bool narrow = g.stride_w > g.w || g.stride_h > g.h;
    dnnl::convolution_backward_weights::primitive_desc wpd;
    if (!narrow) {
      wpd = {dnnl::convolution_backward_weights::desc(alg, any(d.src, Dt::bf16), any(d.wei, Dt::f32), p.db,
                                                      any(d.dst, Dt::bf16), d.strides, d.pad, d.pad),
             attr, eng, fpd};
    } else {
      ConvGeom gp = g;
      gp.c = std::max<int64_t>(g.c, 2), gp.k = std::max<int64_t>(g.k, 2);
      const dnnl_plan::Dims dp = dnnl_plan::dims(gp);
      p.padded = gp.c != g.c || gp.k != g.k;
      p.x_view = view(d.src, Dt::bf16, gp.c), p.y_view = view(d.dst, Dt::bf16, gp.k);
      p.dw_view = view(d.wei, Dt::f32, gp.c);
      const dnnl::convolution_forward::primitive_desc hint(
          dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, plain(dp.src, Dt::bf16),
                                          plain(dp.wei, Dt::bf16), plain(dp.bias, Dt::bf16), plain(dp.dst, Dt::bf16),
                                          dp.strides, dp.pad, dp.pad),
          attr, eng);
      wpd = {dnnl::convolution_backward_weights::desc(alg, plain(dp.src, Dt::bf16), plain(dp.wei, Dt::f32),
                                                      plain(dp.bias, Dt::f32), plain(dp.dst, Dt::bf16), dp.strides,
                                                      dp.pad, dp.pad),
             attr, eng, hint};
    }
    p.impl[0] = native_impl(fpd, "convolution forward");
    p.impl[1] = native_impl(dpd, "convolution backward data");
    p.impl[2] = native_impl(wpd, "convolution backward weights");
    p.fpd = fpd, p.dpd = dpd, p.wpd = wpd;
    p.fwd = dnnl::convolution_forward(fpd);
    p.bwd_data = dnnl::convolution_backward_data(dpd);
    p.bwd_weights = dnnl::convolution_backward_weights(wpd);
    return convs.emplace(key, std::move(p)).first->second;
  }

  const DataF32Plan& conv_data_f32(const ConvGeom& g) {
    const dnnl_plan::Key key = dnnl_plan::key_of(g, true);
    auto it = data_f32.find(key);
    if (it != data_f32.end()) return it->second;
    const ConvPlan& c = conv(g);  // its forward is the hint
    const dnnl_plan::Dims d = dnnl_plan::dims(g);
    DataF32Plan p;
    p.dx = plain(d.src, Dt::f32);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    p.pd = dnnl::convolution_backward_data::primitive_desc(
        dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, any(d.src, Dt::f32),
                                              any(d.wei, Dt::bf16), any(d.dst, Dt::bf16), d.strides, d.pad, d.pad),
        attr, eng, c.fpd);
    native_impl(p.pd, "convolution backward data (fp32 output)");
    p.prim = dnnl::convolution_backward_data(p.pd);
    return data_f32.emplace(key, std::move(p)).first->second;
  }

  const FwdF32Plan& conv_fwd_f32(const ConvGeom& g) {
    const dnnl_plan::Key key = dnnl_plan::key_of(g, true);
    auto it = fwd_f32.find(key);
    if (it != fwd_f32.end()) return it->second;
    const dnnl_plan::Dims d = dnnl_plan::dims(g);
    FwdF32Plan p;
    p.y = plain(d.dst, Dt::f32);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    p.pd = dnnl::convolution_forward::primitive_desc(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                        any(d.src, Dt::bf16), any(d.wei, Dt::bf16), any(d.dst, Dt::f32), d.strides, d.pad,
                                        d.pad),
        attr, eng);
    native_impl(p.pd, "convolution forward (fp32 output)");
    p.prim = dnnl::convolution_forward(p.pd);
    return fwd_f32.emplace(key, std::move(p)).first->second;
  }

  // `user` at p in the layout `prim`: the user's memory itself, or a reorder of it into scratch i.
  memory in(const memory::desc& prim, const memory::desc& user, const void* p, int i) {
    memory u(user, eng, const_cast<void*>(p));
    if (prim == user) return u;
    memory m(prim, eng, s[i].get(prim.get_size()));
    dnnl::reorder(u, m).execute(strm, u, m);
    return m;
  }
  // `user` at p copied into zeroed scratch i of layout `prim`, where `view` places it.
  memory in_padded(const memory::desc& prim, const memory::desc& view, const memory::desc& user, const void* p, int i) {
    void* buf = s[i].get(prim.get_size());
    std::memset(buf, 0, prim.get_size());
    memory u(user, eng, const_cast<void*>(p)), v(view, eng, buf);
    dnnl::reorder(u, v).execute(strm, u, v);
    return memory(prim, eng, buf);
  }
  // Where a primitive writes an output meant for `user` at p: there, or scratch i (see out_done).
  memory out(const memory::desc& prim, const memory::desc& user, void* p, int i) {
    if (prim == user) return memory(user, eng, p);
    return memory(prim, eng, s[i].get(prim.get_size()));
  }
  memory scratchpad(const memory::desc& d) { return memory(d, eng, pad.get(d.get_size())); }
  // Moves an output written to scratch into the user's buffer, adding to it when sum.
  void out_done(memory m, const memory::desc& user, void* p, bool sum) {
    memory u(user, eng, p);
    if (m.get_data_handle() == p && !sum) return;
    dnnl::primitive_attr a;
    if (sum) {
      dnnl::post_ops po;
      po.append_sum(1.0f);
      a.set_post_ops(po);
    }
    dnnl::reorder(dnnl::reorder::primitive_desc(eng, m.get_desc(), eng, user, a)).execute(strm, m, u);
  }

  const MatPlan& mat(int kind, int64_t n, int64_t in, int64_t out, bool sum) {
    const auto key = std::make_tuple(kind, n, in, out, sum);
    auto it = mats.find(key);
    if (it != mats.end()) return it->second;
    MatPlan p;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (kind == 0) {  // y[n,out] = x[n,in] w[out,in]^T + b
      p.src = plain({n, in}, Dt::bf16), p.wei = memory::desc({in, out}, Dt::bf16, memory::dims{1, in});
      p.bias = plain({1, out}, Dt::bf16), p.dst = plain({n, out}, Dt::bf16);
    } else if (kind == 1 || kind == 3) {  // dx[n,in] = dy[n,out] w[out,in]; 3: dx in fp32
      p.src = plain({n, out}, Dt::bf16), p.wei = plain({out, in}, Dt::bf16);
      p.dst = plain({n, in}, kind == 3 ? Dt::f32 : Dt::bf16);
    } else {  // dw[out,in] (+)= dy[n,out]^T x[n,in]
      p.src = memory::desc({out, n}, Dt::bf16, memory::dims{1, out}), p.wei = plain({n, in}, Dt::bf16);
      p.dst = plain({out, in}, Dt::f32);
      if (sum) {
        dnnl::post_ops po;
        po.append_sum(1.0f);
        attr.set_post_ops(po);
      }
    }
    const dnnl::matmul::desc md = kind == 0 ? dnnl::matmul::desc(p.src, p.wei, p.bias, p.dst) : dnnl::matmul::desc(p.src, p.wei, p.dst);
    dnnl::matmul::primitive_desc pd(md, attr, eng);
    const int64_t reduced = kind == 0 ? in : kind == 2 ? n : out;
    // oneDNN 2.6's AMX bf16 matmul over a reduced dimension of exactly 63 computes wrong values or
    // dies of SIGILL (docs/bf16.md, "oneDNN"); the next implementation it offers is right. (The
    // descriptor is made in place: a copied primitive_desc cannot iterate.)
    if (reduced == 63)
      while (std::string(pd.impl_info_str()).find("amx") != std::string::npos && pd.next_impl()) {
      }
    native_impl(pd, "linear layer");
    p.pad = pd.scratchpad_desc();
    p.prim = dnnl::matmul(pd);
    return mats.emplace(key, std::move(p)).first->second;
  }
  void run_mat(const MatPlan& p, const void* src, const void* wei, const void* bias, void* dst) {
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(p.src, eng, const_cast<void*>(src))},
                                         {DNNL_ARG_WEIGHTS, memory(p.wei, eng, const_cast<void*>(wei))},
                                         {DNNL_ARG_DST, memory(p.dst, eng, dst)}};
    if (bias) args.emplace(DNNL_ARG_BIAS, memory(p.bias, eng, const_cast<void*>(bias)));
    args.emplace(DNNL_ARG_SCRATCHPAD, scratchpad(p.pad));
    p.prim.execute(strm, args);
    strm.wait();
  }
};

namespace {
template <class Body>
void call(const char* what, Body&& body) {
  try {
    body();
  } catch (const dnnl::error& e) {
    throw Error(fmt::format("oneDNN bf16 {}: {} (status {})", what, e.what(), static_cast<int>(e.status)));
  }
}
}  // namespace

DnnlBf16::DnnlBf16(int threads, Device device) {
  const std::string refusal = dnnl_bf16_refusal(dnnl_effective_isa());
  if (!refusal.empty()) throw Error(refusal);
  impl_ = std::make_unique<Impl>(threads, device);
}
DnnlBf16::~DnnlBf16() = default;

std::string DnnlBf16::plan(const ConvGeom& g) {
  OmpThreads omp(impl_->threads);
  std::string s;
  call("convolution plan", [&] {
    const ConvPlan& p = impl_->conv(g);
    s = fmt::format("forward {}, backward data {}, backward weights {}", p.impl[0], p.impl[1], p.impl[2]);
  });
  return s;
}

void DnnlBf16::conv_forward(const ConvGeom& g, const Bf16* x, const Bf16* w, const Bf16* b, Bf16* y) {
  Impl& I = *impl_;
  OmpThreads omp(I.threads);
  call("convolution forward", [&] {
    const ConvPlan& p = I.conv(g);
    const auto& fpd = p.fpd;
    memory mx = I.in(fpd.src_desc(), p.x, x, 0), mw = I.in(fpd.weights_desc(), p.w, w, 1);
    memory my = I.out(fpd.dst_desc(), p.y, y, 2);
    if (!b) {
      I.zero_bias.assign(static_cast<std::size_t>(g.k), Bf16{});
      b = I.zero_bias.data();
    }
    p.fwd.execute(I.strm, {{DNNL_ARG_SRC, mx}, {DNNL_ARG_WEIGHTS, mw},
                           {DNNL_ARG_BIAS, memory(p.b, I.eng, const_cast<Bf16*>(b))}, {DNNL_ARG_DST, my},
                           {DNNL_ARG_SCRATCHPAD, I.scratchpad(fpd.scratchpad_desc())}});
    I.out_done(my, p.y, y, false);
    I.strm.wait();
  });
}

void DnnlBf16::conv_backward_data(const ConvGeom& g, const Bf16* dy, const Bf16* w, Bf16* dx) {
  Impl& I = *impl_;
  OmpThreads omp(I.threads);
  call("convolution backward data", [&] {
    const ConvPlan& p = I.conv(g);
    const auto& pd = p.dpd;
    memory mdy = I.in(pd.diff_dst_desc(), p.y, dy, 0), mw = I.in(pd.weights_desc(), p.w, w, 1);
    memory mdx = I.out(pd.diff_src_desc(), p.x, dx, 2);
    p.bwd_data.execute(I.strm, {{DNNL_ARG_DIFF_DST, mdy}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DIFF_SRC, mdx},
                                {DNNL_ARG_SCRATCHPAD, I.scratchpad(pd.scratchpad_desc())}});
    I.out_done(mdx, p.x, dx, false);
    I.strm.wait();
  });
}

void DnnlBf16::conv_backward_data_f32(const ConvGeom& g, const Bf16* dy, const Bf16* w, float* dx) {
  Impl& I = *impl_;
  OmpThreads omp(I.threads);
  call("convolution backward data (fp32 output)", [&] {
    const DataF32Plan& p = I.conv_data_f32(g);
    const ConvPlan& c = I.conv(g);
    memory mdy = I.in(p.pd.diff_dst_desc(), c.y, dy, 0), mw = I.in(p.pd.weights_desc(), c.w, w, 1);
    memory mdx = I.out(p.pd.diff_src_desc(), p.dx, dx, 2);
    p.prim.execute(I.strm, {{DNNL_ARG_DIFF_DST, mdy}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DIFF_SRC, mdx},
                            {DNNL_ARG_SCRATCHPAD, I.scratchpad(p.pd.scratchpad_desc())}});
    I.out_done(mdx, p.dx, dx, false);
    I.strm.wait();
  });
}

void DnnlBf16::conv_forward_f32(const ConvGeom& g, const Bf16* x, const Bf16* w, float* y) {
  Impl& I = *impl_;
  OmpThreads omp(I.threads);
  call("convolution forward (fp32 output)", [&] {
    const FwdF32Plan& p = I.conv_fwd_f32(g);
    const ConvPlan& c = I.conv(g);
    memory mx = I.in(p.pd.src_desc(), c.x, x, 0), mw = I.in(p.pd.weights_desc(), c.w, w, 1);
    memory my = I.out(p.pd.dst_desc(), p.y, y, 2);
    p.prim.execute(I.strm, {{DNNL_ARG_SRC, mx}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, my},
                            {DNNL_ARG_SCRATCHPAD, I.scratchpad(p.pd.scratchpad_desc())}});
    I.out_done(my, p.y, y, false);
    I.strm.wait();
  });
}

void DnnlBf16::conv_backward_weights(const ConvGeom& g, const Bf16* x, const Bf16* dy, float* dw, float* db,
                                     bool accumulate) {
  Impl& I = *impl_;
  OmpThreads omp(I.threads);
  call("convolution backward weights", [&] {
    const ConvPlan& p = I.conv(g);
    const auto& pd = p.wpd;
    memory mx = p.padded ? I.in_padded(pd.src_desc(), p.x_view, p.x, x, 0) : I.in(pd.src_desc(), p.x, x, 0);
    memory mdy = p.padded ? I.in_padded(pd.diff_dst_desc(), p.y_view, p.y, dy, 1) : I.in(pd.diff_dst_desc(), p.y, dy, 1);
    // Added to or padded: the primitive overwrites its whole output, so it writes to scratch and a
    // (summing) reorder of the user's part finishes.
    const auto& dwd = pd.diff_weights_desc();
    memory mdw = accumulate || p.padded ? memory(dwd, I.eng, I.s[2].get(dwd.get_size())) : I.out(dwd, p.dw, dw, 2);
    float* dbp = db;
    if (accumulate || p.padded || !db) {  // no db: written to scratch and dropped
      I.db_tmp.resize(static_cast<std::size_t>(pd.diff_bias_desc().dims()[0]));
      dbp = I.db_tmp.data();
    }
    p.bwd_weights.execute(I.strm, {{DNNL_ARG_SRC, mx}, {DNNL_ARG_DIFF_DST, mdy}, {DNNL_ARG_DIFF_WEIGHTS, mdw},
                                   {DNNL_ARG_DIFF_BIAS, memory(pd.diff_bias_desc(), I.eng, dbp)},
                                   {DNNL_ARG_SCRATCHPAD, I.scratchpad(pd.scratchpad_desc())}});
    I.out_done(p.padded ? memory(p.dw_view, I.eng, mdw.get_data_handle()) : mdw, p.dw, dw, accumulate);
    I.strm.wait();
    if (db && dbp != db)
      for (int64_t k = 0; k < g.k; ++k) db[k] = accumulate ? db[k] + dbp[k] : dbp[k];
  });
}

void DnnlBf16::linear_forward(int64_t n, int64_t in, int64_t out, const Bf16* x, const Bf16* w, const Bf16* b,
                              Bf16* y) {
  OmpThreads omp(impl_->threads);
  call("linear forward", [&] { impl_->run_mat(impl_->mat(0, n, in, out, false), x, w, b, y); });
}

void DnnlBf16::linear_backward_data(int64_t n, int64_t in, int64_t out, const Bf16* dy, const Bf16* w, Bf16* dx) {
  OmpThreads omp(impl_->threads);
  call("linear backward data", [&] { impl_->run_mat(impl_->mat(1, n, in, out, false), dy, w, nullptr, dx); });
}

void DnnlBf16::linear_backward_data_f32(int64_t n, int64_t in, int64_t out, const Bf16* dy, const Bf16* w,
                                        float* dx) {
  OmpThreads omp(impl_->threads);
  call("linear backward data (fp32 output)", [&] { impl_->run_mat(impl_->mat(3, n, in, out, false), dy, w, nullptr, dx); });
}

void DnnlBf16::linear_backward_weights(int64_t n, int64_t in, int64_t out, const Bf16* x, const Bf16* dy, float* dw,
                                       bool accumulate) {
  OmpThreads omp(impl_->threads);
  call("linear backward weights",
       [&] { impl_->run_mat(impl_->mat(2, n, in, out, accumulate), dy, x, nullptr, dw); });
}

}  // namespace pb
