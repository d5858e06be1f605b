// cuDNN convolutions for the CUDA backend: per-shape descriptors, algorithm choice by cuDNN's
// heuristics or a timed search, the grow-only workspace, and sub-batches for huge batches.
#include "engine/cuda/cuda_conv.h"

#include <algorithm>
#include <optional>

#include "engine/batch_split.h"
#include "engine/check.h"
#include "engine/conv_policy.h"
#include "engine/cuda/cuda_kernels.h"

namespace pb::cu {

// The algorithm chosen for one direction of one convolution shape.
struct AlgoChoice {
  int algo = -1;
  cudnnMathType_t math = CUDNN_FMA_MATH;
  std::size_t workspace = 0;
};


// Descriptors for one convolution shape, built once, and the algorithms chosen for it.
struct ConvPlan {
  cu::TensorDesc x, y, bias, w_as_tensor;
  cu::FilterDesc w;
  cu::ConvDesc conv;
  std::optional<AlgoChoice> fwd, bwd_data, bwd_filter;
  std::string graph_fwd, graph_bwd_data, graph_bwd_filter;  // the graph API's choice, when it ran
  bool nhwc = false;  // x, y NHWC and w KRSC (CudnnConv's NHWC calls)
};


namespace {

constexpr float kOne = 1.0f, kZero = 0.0f;

std::string geom_str(const ConvGeom& g) {
  return fmt::format("conv x[{},{},{},{}] w[{},{},{},{}] stride {}x{} pad {}x{}", g.n, g.c, g.h, g.w, g.k, g.c, g.r,
                     g.s, g.stride_h, g.stride_w, g.pad_h, g.pad_w);
}

// Which cuDNN math modes a precision allows. fp32: FMA kernels only (CUDNN_DEFAULT_MATH would
// let cuDNN 8+ pick TF32 tensor-core kernels on Ampere and later). tf32: tensor cores with
// TF32, but never CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, which rounds inputs to fp16.
cudnnMathType_t base_math(Precision p) { return p == Precision::Fp32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH; }


const char* math_name(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH: return "default math";
    case CUDNN_TENSOR_OP_MATH: return "tensor-op math";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor-op math with conversion";
    case CUDNN_FMA_MATH: return "FMA math";
  }
  return "unknown math";
}

// e.g. "forward IMPLICIT_PRECOMP_GEMM (1), tensor-op math, 0 B workspace"
std::string choice_str(const char* direction, const std::optional<AlgoChoice>& c) {
  static const char* const kFwd[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
                                     "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static const char* const kBwdData[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static const char* const kBwdFilter[] = {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED",
                                           "FFT_TILING"};
  if (!c) return fmt::format("{} not run", direction);
  const std::string d = direction;
  const char* const* names = d == "forward" ? kFwd : d == "backward-data" ? kBwdData : kBwdFilter;
  const int count = d == "forward" ? 8 : d == "backward-data" ? 6 : 7;
  return fmt::format("{} {} ({}), {}, {} B workspace", direction,
                     c->algo >= 0 && c->algo < count ? names[c->algo] : "?", c->algo, math_name(c->math),
                     c->workspace);
}


// The three directions differ only in their cuDNN entry points; these adapters let one
// search routine serve all three.
struct FwdOps {
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  using Algo = cudnnConvolutionFwdAlgo_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  static constexpr const char* kName = "forward";
  static cudnnStatus_t heuristics(cudnnHandle_t h, ConvPlan& p, int n, int* got, Perf* out) {
    return cudnnGetConvolutionForwardAlgorithm_v7(h, p.x, p.w, p.conv, p.y, n, got, out);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, ConvPlan& p, Algo a, std::size_t* bytes) {
    return cudnnGetConvolutionForwardWorkspaceSize(h, p.x, p.w, p.conv, p.y, a, bytes);
  }
  // a = x, b = w, out = y
  static cudnnStatus_t find(cudnnHandle_t h, ConvPlan& p, const float* a, const float* b, float* out, int n,
                            int* got, Perf* perf, void* ws, std::size_t ws_bytes) {
    return cudnnFindConvolutionForwardAlgorithmEx(h, p.x, a, p.w, b, p.conv, p.y, out, n, got, perf, ws, ws_bytes);
  }
};

struct BwdDataOps {
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  using Algo = cudnnConvolutionBwdDataAlgo_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  static constexpr const char* kName = "backward-data";
  static cudnnStatus_t heuristics(cudnnHandle_t h, ConvPlan& p, int n, int* got, Perf* out) {
    return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w, p.y, p.conv, p.x, n, got, out);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, ConvPlan& p, Algo a, std::size_t* bytes) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w, p.y, p.conv, p.x, a, bytes);
  }
  // a = w, b = dy, out = dx
  static cudnnStatus_t find(cudnnHandle_t h, ConvPlan& p, const float* a, const float* b, float* out, int n,
                            int* got, Perf* perf, void* ws, std::size_t ws_bytes) {
    return cudnnFindConvolutionBackwardDataAlgorithmEx(h, p.w, a, p.y, b, p.conv, p.x, out, n, got, perf, ws,
                                                       ws_bytes);
  }
};

struct BwdFilterOps {
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  using Algo = cudnnConvolutionBwdFilterAlgo_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  static constexpr const char* kName = "backward-filter";
  static cudnnStatus_t heuristics(cudnnHandle_t h, ConvPlan& p, int n, int* got, Perf* out) {
    return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p.x, p.y, p.conv, p.w, n, got, out);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, ConvPlan& p, Algo a, std::size_t* bytes) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x, p.y, p.conv, p.w, a, bytes);
  }
  // a = x, b = dy, out = dw
  static cudnnStatus_t find(cudnnHandle_t h, ConvPlan& p, const float* a, const float* b, float* out, int n,
                            int* got, Perf* perf, void* ws, std::size_t ws_bytes) {
    return cudnnFindConvolutionBackwardFilterAlgorithmEx(h, p.x, a, p.y, b, p.conv, p.w, out, n, got, perf, ws,
                                                         ws_bytes);
  }
};

}  // namespace

CudnnConv::CudnnConv(Device dev, const BackendOptions& opts, bool exhaustive, cudnnHandle_t cudnn)
    : dev_(dev), opts_(opts), exhaustive_(exhaustive), cudnn_(cudnn), graph_api_(use_graph_api()),
      graph_(dev, cudnn, exhaustive, opts.conv_workspace_cap_bytes) {}

bool CudnnConv::run_graph(const GraphConvCall& c, std::string& tag) {
  if (!graph_api_) return false;
  const auto ws = [this](std::size_t bytes) { return workspace(bytes); };
  const bool ok = graph_.prepare(c, ws);
  if (tag.empty()) tag = graph_.describe(c);
  if (ok) graph_.run(c, ws);
  return ok;
}


CudnnConv::~CudnnConv() = default;

void CudnnConv::forward(const ConvGeom& g, const float* x, const float* w, const float* b, float* y, bool relu) {
  for (const BatchPart& part : conv_batch_parts(g)) {
    const ConvGeom gp = sub_batch(g, part.n);
    forward_part(gp, false, x + part.offset * in_per_image(g), w, b, y + part.offset * out_per_image(g), relu);
  }
}

void CudnnConv::backward_data(const ConvGeom& g, const float* dy, const float* w, float* dx) {
  for (const BatchPart& part : conv_batch_parts(g)) {
    const ConvGeom gp = sub_batch(g, part.n);
    backward_data_part(gp, false, dy + part.offset * out_per_image(g), w, dx + part.offset * in_per_image(g));
  }
}

void CudnnConv::backward_weights(const ConvGeom& g, const float* x, const float* dy, float* dw, float* db,
                                 bool accumulate) {
  bool add = accumulate;
  for (const BatchPart& part : conv_batch_parts(g)) {
    const ConvGeom gp = sub_batch(g, part.n);
    backward_weights_part(gp, false, x + part.offset * in_per_image(g), dy + part.offset * out_per_image(g), dw, db,
                          add);
    add = true;
  }
}

float* CudnnConv::scratch(ScratchSlot slot, int64_t floats) {
  const std::size_t bytes = static_cast<std::size_t>(floats) * sizeof(float);
  std::unique_ptr<Buffer>& b = scratch_[slot];
  if (!b || b->bytes() < bytes) {
    if (b) outgrown_.push_back(std::move(b));  // queued calls may still read it (see workspace())
    b = std::make_unique<Buffer>(dev_, bytes, MemoryPool::Workspace);
  }
  return static_cast<float*>(b->data());
}

const float* CudnnConv::krsc_filter(const ConvGeom& g, const float* w) {
  const ConvGeom g1 = sub_batch(g, 1);  // a filter's descriptors do not depend on the batch
  float* out = scratch(kFilter, g.k * g.c * g.r * g.s);
  CUDNN_CHECK(cudnnTransformTensor(cudnn_, &kOne, plan_for(g1, false).w_as_tensor, w, &kZero,
                                   plan_for(g1, true).w_as_tensor, out));
  return out;
}

// Of the two operands on the input (x) and output (y) side, at most one is Plain here: both
// Plain is the plain call. It is converted into the activation scratch on its way in or out.
float* CudnnConv::as_nhwc(ActLayout layout, cudnnTensorDescriptor_t plain, cudnnTensorDescriptor_t nhwc,
                          const float* v, int64_t floats) {
  if (layout == ActLayout::Blocked) return const_cast<float*>(v);
  float* s = scratch(kActivation, floats);
  CUDNN_CHECK(cudnnTransformTensor(cudnn_, &kOne, plain, v, &kZero, nhwc, s));
  return s;
}

void CudnnConv::forward(const ConvGeom& g, ConvLayouts io, const float* x, const float* w, const float* b, float* y,
                        bool relu) {
  if (io.plain()) return forward(g, x, w, b, y, relu);
  const bool y_nhwc = io.y == ActLayout::Blocked;
  const float* wk = krsc_filter(g, w);
  for (const BatchPart& part : conv_batch_parts(g)) {
    const ConvGeom gp = sub_batch(g, part.n);
    float* yp = y + part.offset * out_per_image(g);
    ConvPlan &pc = plan_for(gp, false), &pn = plan_for(gp, true);
    const float* xn = as_nhwc(io.x, pc.x, pn.x, x + part.offset * in_per_image(g), part.n * in_per_image(g));
    float* yn = y_nhwc ? yp : scratch(kActivation, part.n * out_per_image(g));
    forward_part(gp, true, xn, wk, b, yn, relu);
    if (!y_nhwc) CUDNN_CHECK(cudnnTransformTensor(cudnn_, &kOne, pn.y, yn, &kZero, pc.y, yp));
  }
}

void CudnnConv::backward_data(const ConvGeom& g, ConvLayouts io, const float* dy, const float* w, float* dx) {
  if (io.plain()) return backward_data(g, dy, w, dx);
  const bool x_nhwc = io.x == ActLayout::Blocked;
  const float* wk = krsc_filter(g, w);
  for (const BatchPart& part : conv_batch_parts(g)) {
    const ConvGeom gp = sub_batch(g, part.n);
    float* dxp = dx + part.offset * in_per_image(g);
    ConvPlan &pc = plan_for(gp, false), &pn = plan_for(gp, true);
    const float* dyn = as_nhwc(io.y, pc.y, pn.y, dy + part.offset * out_per_image(g), part.n * out_per_image(g));
    float* dxn = x_nhwc ? dxp : scratch(kActivation, part.n * in_per_image(g));
    backward_data_part(gp, true, dyn, wk, dxn);
    if (!x_nhwc) CUDNN_CHECK(cudnnTransformTensor(cudnn_, &kOne, pn.x, dxn, &kZero, pc.x, dxp));
  }
}

// The filter gradient gathers in KRSC scratch over the sub-batches and is converted into dw once,
// added to it when accumulating; the bias gradient goes straight to db.
void CudnnConv::backward_weights(const ConvGeom& g, ConvLayouts io, const float* x, const float* dy, float* dw,
                                 float* db, bool accumulate) {
  if (io.plain()) return backward_weights(g, x, dy, dw, db, accumulate);
  float* dwk = scratch(kFilter, g.k * g.c * g.r * g.s);
  bool later = false;
  for (const BatchPart& part : conv_batch_parts(g)) {
    const ConvGeom gp = sub_batch(g, part.n);
    ConvPlan &pc = plan_for(gp, false), &pn = plan_for(gp, true);
    const float* xn = as_nhwc(io.x, pc.x, pn.x, x + part.offset * in_per_image(g), part.n * in_per_image(g));
    const float* dyn = as_nhwc(io.y, pc.y, pn.y, dy + part.offset * out_per_image(g), part.n * out_per_image(g));
    backward_weights_part(gp, true, xn, dyn, dwk, nullptr, later);
    if (db) CUDNN_CHECK(cudnnConvolutionBackwardBias(cudnn_, &kOne, pn.y, dyn, accumulate || later ? &kOne : &kZero,
                                                     pn.bias, db));
    later = true;
  }
  const ConvGeom g1 = sub_batch(g, 1);
  CUDNN_CHECK(cudnnTransformTensor(cudnn_, &kOne, plan_for(g1, true).w_as_tensor, dwk, accumulate ? &kOne : &kZero,
                                   plan_for(g1, false).w_as_tensor, dw));
}

std::string CudnnConv::algorithms(const ConvGeom& g) const {
  std::string out;
  for (const BatchPart& part : conv_batch_parts(g)) {
    const ConvPlan* found = planned(sub_batch(g, part.n));
    if (!out.empty()) out += "; ";
    out += fmt::format("batch {}..{}: ", part.offset, part.offset + part.n - 1);
    if (!found) {
      out += "not planned";
      continue;
    }
    const ConvPlan& p = *found;
    if (p.nhwc) out += "NHWC ";
    const auto pick = [](const char* dir, const std::string& graph, const std::optional<AlgoChoice>& legacy) {
      return legacy || graph.empty() ? choice_str(dir, legacy) : fmt::format("{} {}", dir, graph);
    };
    out += fmt::format("{}; {}; {}", pick("forward", p.graph_fwd, p.fwd),
                       pick("backward-data", p.graph_bwd_data, p.bwd_data),
                       pick("backward-filter", p.graph_bwd_filter, p.bwd_filter));
  }
  return fmt::format("{} on {}: {}", geom_str(g), dev_.str(), out);
}

std::array<std::string, 3> CudnnConv::pass_algorithms(const ConvGeom& g) const {
  std::array<std::string, 3> out;
  const auto parts = conv_batch_parts(g);
  for (const BatchPart& part : parts) {
    const ConvPlan* found = planned(sub_batch(g, part.n));
    const std::string at = parts.size() > 1 ? fmt::format("batch {}..{}: ", part.offset, part.offset + part.n - 1) : "";
    const char* dirs[3] = {"forward", "backward-data", "backward-filter"};
    for (int d = 0; d < 3; ++d) {
      std::string s = "not planned";
      if (found) {
        const ConvPlan& p = *found;
        const std::string& graph = d == 0 ? p.graph_fwd : d == 1 ? p.graph_bwd_data : p.graph_bwd_filter;
        const std::optional<AlgoChoice>& legacy = d == 0 ? p.fwd : d == 1 ? p.bwd_data : p.bwd_filter;
        s = legacy || graph.empty() ? choice_str(dirs[d], legacy).substr(std::string(dirs[d]).size() + 1) : graph;
        if (p.nhwc) s = "NHWC " + s;
      }
      if (!out[d].empty()) out[d] += "; ";
      out[d] += at + s;
    }
  }
  return out;
}

// The NCHW plan answers when it has run something; else the NHWC one.
const ConvPlan* CudnnConv::planned(const ConvGeom& g) const {
  const ConvPlan* nhwc = nullptr;
  for (bool layout : {false, true}) {
    const auto it = plans_.find(key_of(g, layout));
    if (it == plans_.end()) continue;
    const ConvPlan& p = *it->second;
    const bool ran = p.fwd || p.bwd_data || p.bwd_filter || !p.graph_fwd.empty() || !p.graph_bwd_data.empty() ||
                     !p.graph_bwd_filter.empty();
    if (ran && !layout) return &p;
    if (ran) nhwc = &p;
  }
  return nhwc;
}

ConvPlan& CudnnConv::plan_for(const ConvGeom& g, bool nhwc) {
  const Key key = key_of(g, nhwc);
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  auto p = std::make_unique<ConvPlan>();
  const int N = to_int(g.n, "batch"), C = to_int(g.c, "channels"), H = to_int(g.h, "height"),
            W = to_int(g.w, "width"), K = to_int(g.k, "output channels");
  const int P = to_int(g.p(), "output height"), Q = to_int(g.q(), "output width");
  p->nhwc = nhwc;
  const cudnnTensorFormat_t format = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;  // filters: KRSC or KCRS
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->x, format, CUDNN_DATA_FLOAT, N, C, H, W));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->y, format, CUDNN_DATA_FLOAT, N, K, P, Q));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, K, 1, 1));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->w_as_tensor, format, CUDNN_DATA_FLOAT, K, C,
                                         to_int(g.r, "kernel height"), to_int(g.s, "kernel width")));
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, format, K, C,
                                         to_int(g.r, "kernel height"), to_int(g.s, "kernel width")));
  // PyTorch's Conv2d is a cross-correlation (no kernel flip).
  CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p->conv, to_int(g.pad_h, "pad"), to_int(g.pad_w, "pad"),
                                              to_int(g.stride_h, "stride"), to_int(g.stride_w, "stride"), 1, 1,
                                              CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, base_math(opts_.precision)));
  int on = 0, ok = 0, op = 0, oq = 0;
  CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->w, &on, &ok, &op, &oq));
  PB_CHECK(on == N && ok == K && op == P && oq == Q, "{}: cuDNN output [{},{},{},{}], expected [{},{},{},{}]",
           geom_str(g), on, ok, op, oq, N, K, P, Q);
  return *plans_.emplace(key, std::move(p)).first->second;
}

// Grow-only workspace shared by all convolutions of this backend. An outgrown buffer may still
// be read by convolutions queued on the stream, so it is not freed here (cudaFree would also
// stall every other stream of the device mid-step) but at release_outgrown(), once the stream is
// idle; the peak is then at most the last two sizes, not the sum of all. Growth happens during
// the first steps only (the search asks for the most up front).
void* CudnnConv::workspace(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  if (!workspace_ || workspace_->bytes() < bytes) {
    if (workspace_) outgrown_.push_back(std::move(workspace_));
    workspace_ = std::make_unique<Buffer>(dev_, bytes, MemoryPool::Workspace);
  }
  return workspace_->data();
}

void CudnnConv::release_outgrown() noexcept { outgrown_.clear(); }
void CudnnConv::release_workspace() noexcept {
  outgrown_.clear();
  workspace_.reset();
  for (auto& b : scratch_) b.reset();
}

// The most workspace a timed search (cudnnFind*Ex) may use: the cap where one is set, and no more
// than the current buffer or what is free on the device (a larger buffer is allocated beside the
// current one), so a search never fails for memory a slower algorithm would not need.
std::size_t CudnnConv::workspace_limit() const {
  std::size_t free_bytes = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  const std::size_t pool = workspace_ ? workspace_->bytes() : 0;
  const std::size_t reserve = std::size_t(64) << 20;  // room for cuDNN's own small allocations
  const std::size_t usable = std::max(pool, free_bytes > reserve ? free_bytes - reserve : std::size_t(0));
  return opts_.conv_workspace_cap_bytes ? std::min(*opts_.conv_workspace_cap_bytes, usable) : usable;
}

// Heuristics (cudnnGet*_v7, ranked by expected speed) or, with exhaustive search, timed runs
// of every algorithm (cudnnFind*Ex, as torch.backends.cudnn.benchmark), ranked by time. Either
// way engine/conv_policy.h picks: the first the precision allows whose workspace can be had.
template <typename Ops>
AlgoChoice CudnnConv::choose(ConvPlan& p, const ConvGeom& g, const float* a, const float* b, float* out) {
  using Perf = typename Ops::Perf;
  const Precision prec = opts_.precision;
  std::array<Perf, Ops::kCount> perfs{};
  int got = 0;
  std::size_t search_ws = 0;
  CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, base_math(prec)));
  if (exhaustive_) {
    // Give the search as much workspace as the hungriest algorithm wants, within the limit.
    const std::size_t limit = workspace_limit();
    for (int i = 0; i < Ops::kCount; ++i) {
      std::size_t bytes = 0;
      if (Ops::workspace(cudnn_, p, static_cast<typename Ops::Algo>(i), &bytes) == CUDNN_STATUS_SUCCESS &&
          bytes <= limit)
        search_ws = std::max(search_ws, bytes);
    }
    void* ws = workspace(search_ws);
    CUDNN_CHECK(Ops::find(cudnn_, p, a, b, out, Ops::kCount, &got, perfs.data(), ws, search_ws));
  } else {
    CUDNN_CHECK(Ops::heuristics(cudnn_, p, Ops::kCount, &got, perfs.data()));
  }
  std::vector<ConvCandidate> ranked;
  std::vector<AlgoChoice> choices;
  for (int i = 0; i < got; ++i) {
    const Perf& perf = perfs[i];
    if (perf.status != CUDNN_STATUS_SUCCESS) continue;
    // The workspace an algorithm needs depends on the math mode it runs with.
    CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, perf.mathType));
    std::size_t bytes = 0;
    const cudnnStatus_t st = Ops::workspace(cudnn_, p, perf.algo, &bytes);
    CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, base_math(prec)));
    if (st != CUDNN_STATUS_SUCCESS) continue;
    bytes = std::max(bytes, perf.memory);
    ranked.push_back({fmt::format("algorithm {}, {}", static_cast<int>(perf.algo), math_name(perf.mathType)), bytes,
                      legacy_math_notes(perf.mathType)});
    choices.push_back({static_cast<int>(perf.algo), perf.mathType, bytes});
  }
  const auto get_workspace = [&](std::size_t bytes) {
    try {
      workspace(bytes);
      return true;
    } catch (const OutOfMemory&) {
      return false;
    }
  };
  const ConvPick pick = pick_conv_algorithm(ranked, {prec, opts_.conv_workspace_cap_bytes}, get_workspace, nullptr,
                                            fmt::format("{} on {}: cuDNN {}", geom_str(g), dev_.str(), Ops::kName));
  return choices[static_cast<std::size_t>(pick.index)];
}

void CudnnConv::bias_epilogue(const ConvPlan& p, const ConvGeom& g, bool nhwc, const float* b, float* y, bool relu) {
  if (!relu) {
    if (b) CUDNN_CHECK(cudnnAddTensor(cudnn_, &kOne, p.bias, b, &kOne, p.y, y));
    return;
  }
  cudaStream_t stream = nullptr;
  CUDNN_CHECK(cudnnGetStream(cudnn_, &stream));
  const int64_t n = g.n * out_per_image(g);
  if (b) launch_bias_relu(stream, n, g.k, nhwc ? 1 : g.p() * g.q(), b, y);
  else launch_relu_forward(stream, n, y, y);
}

void CudnnConv::forward_part(const ConvGeom& g, bool nhwc, const float* x, const float* w, const float* b, float* y,
                             bool relu) {
  ConvPlan& p = plan_for(g, nhwc);
  if (!p.fwd &&
      run_graph({ConvDir::Forward, g, CUDNN_DATA_FLOAT, opts_.precision, 0.0f, x, w, y, nhwc}, p.graph_fwd)) {
    bias_epilogue(p, g, nhwc, b, y, relu);
    return;
  }
  if (!p.fwd) p.fwd = choose<FwdOps>(p, g, x, w, y);
  void* ws = workspace(p.fwd->workspace);
  CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, p.fwd->math));
  CUDNN_CHECK(cudnnConvolutionForward(cudnn_, &kOne, p.x, x, p.w, w, p.conv,
                                      static_cast<cudnnConvolutionFwdAlgo_t>(p.fwd->algo), ws, p.fwd->workspace,
                                      &kZero, p.y, y));
  bias_epilogue(p, g, nhwc, b, y, relu);
}

void CudnnConv::backward_data_part(const ConvGeom& g, bool nhwc, const float* dy, const float* w, float* dx) {
  ConvPlan& p = plan_for(g, nhwc);
  if (!p.bwd_data &&
      run_graph({ConvDir::BackwardData, g, CUDNN_DATA_FLOAT, opts_.precision, 0.0f, dy, w, dx, nhwc}, p.graph_bwd_data))
    return;
  if (!p.bwd_data) p.bwd_data = choose<BwdDataOps>(p, g, w, dy, dx);
  void* ws = workspace(p.bwd_data->workspace);
  CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, p.bwd_data->math));
  CUDNN_CHECK(cudnnConvolutionBackwardData(cudnn_, &kOne, p.w, w, p.y, dy, p.conv,
                                           static_cast<cudnnConvolutionBwdDataAlgo_t>(p.bwd_data->algo), ws,
                                           p.bwd_data->workspace, &kZero, p.x, dx));
}

void CudnnConv::backward_weights_part(const ConvGeom& g, bool nhwc, const float* x, const float* dy, float* dw,
                                      float* db, bool accumulate) {
  ConvPlan& p = plan_for(g, nhwc);
  // The graph API overwrites (beta = 0, so a timed search can run on the real output); to
  // accumulate, it writes a scratch gradient that is then added to dw.
  if (!p.bwd_filter && graph_api_) {
    float* out = accumulate ? scratch(kWeightGrad, g.k * g.c * g.r * g.s) : dw;
    if (run_graph({ConvDir::BackwardFilter, g, CUDNN_DATA_FLOAT, opts_.precision, 0.0f, x, dy, out, nhwc},
                  p.graph_bwd_filter)) {
      if (accumulate) CUDNN_CHECK(cudnnAddTensor(cudnn_, &kOne, p.w_as_tensor, out, &kOne, p.w_as_tensor, dw));
      if (db) CUDNN_CHECK(cudnnConvolutionBackwardBias(cudnn_, &kOne, p.y, dy, accumulate ? &kOne : &kZero, p.bias, db));
      return;
    }
  }
  if (!p.bwd_filter) {
    // The timed search writes its output: search into scratch, so gradients being
    // accumulated in dw survive it.
    std::unique_ptr<Buffer> search_out;
    if (exhaustive_)
      search_out = std::make_unique<Buffer>(dev_, static_cast<std::size_t>(g.k * g.c * g.r * g.s) * sizeof(float));
    p.bwd_filter = choose<BwdFilterOps>(p, g, x, dy, search_out ? static_cast<float*>(search_out->data()) : dw);
  }
  void* ws = workspace(p.bwd_filter->workspace);
  const float* beta = accumulate ? &kOne : &kZero;
  CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, p.bwd_filter->math));
  CUDNN_CHECK(cudnnConvolutionBackwardFilter(cudnn_, &kOne, p.x, x, p.y, dy, p.conv,
                                             static_cast<cudnnConvolutionBwdFilterAlgo_t>(p.bwd_filter->algo), ws,
                                             p.bwd_filter->workspace, beta, p.w, dw));
  if (db) CUDNN_CHECK(cudnnConvolutionBackwardBias(cudnn_, &kOne, p.y, dy, beta, p.bias, db));
}

}  // namespace pb::cu
