// cuDNN and cuBLAS calls of the CUDA backend's bf16 path. Convolutions: cuDNN's graph API
// (cudnn_graph.h), or the legacy API's heuristics (engine/conv_policy.h: the first algorithm
// whose workspace can be had, within the cap where one is set). Bias added by the convolution
// itself (y filled with the bias, then beta = 1), so the output rounds once.
#include "engine/cuda/cuda_bf16.h"

#include "engine/check.h"
#include "engine/conv_policy.h"

namespace pb::cu {

namespace {
constexpr float kOne = 1.0f, kZero = 0.0f;
}  // namespace

struct CudaBf16::Plan {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  std::size_t ws_fwd = 0, ws_data = 0, ws_filter = 0;
};

CudaBf16::CudaBf16(Device dev, cudnnHandle_t cudnn, cublasHandle_t cublas, cudaStream_t stream,
                   std::optional<std::size_t> cap, bool exhaustive)
    : dev_(dev), cudnn_(cudnn), cublas_(cublas), stream_(stream), cap_(cap), graph_api_(use_graph_api()),
      graph_(dev, cudnn, exhaustive, cap) {}
CudaBf16::~CudaBf16() = default;

// The first ranked algorithm cuDNN says runs whose workspace can be had (engine/conv_policy.h).
template <class Perf>
const Perf& CudaBf16::pick(const Perf* perf, int count, const char* what, const ConvGeom& g) {
  std::vector<ConvCandidate> ranked;
  std::vector<int> at;
  for (int i = 0; i < count; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS) {
      ranked.push_back({fmt::format("algorithm {}", static_cast<int>(perf[i].algo)), perf[i].memory,
                        legacy_math_notes(perf[i].mathType)});
      at.push_back(i);
    }
  const auto get_workspace = [this](std::size_t bytes) {
    try {
      workspace(bytes);
      return true;
    } catch (const OutOfMemory&) {
      return false;
    }
  };
  const ConvPick p = pick_conv_algorithm(
      ranked, {Precision::Bf16, cap_}, get_workspace, nullptr,
      fmt::format("bf16 conv x[{},{},{},{}] w[{},{},{},{}] {} (legacy API)", g.n, g.c, g.h, g.w, g.k, g.c, g.r, g.s, what));
  return perf[at[static_cast<std::size_t>(p.index)]];
}

CudaBf16::Plan& CudaBf16::plan(const ConvGeom& g, bool nhwc) {
  const std::array<int64_t, 12> key{g.n, g.c, g.h, g.w, g.k, g.r, g.s, g.stride_h, g.stride_w, g.pad_h, g.pad_w, nhwc};
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  auto p = std::make_unique<Plan>();
  const int N = to_int(g.n, "batch"), C = to_int(g.c, "channels"), H = to_int(g.h, "height"),
            W = to_int(g.w, "width"), K = to_int(g.k, "output channels");
  const cudnnTensorFormat_t format = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;  // filters: KRSC or KCRS
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->x, format, CUDNN_DATA_BFLOAT16, N, C, H, W));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->y, format, CUDNN_DATA_BFLOAT16, N, K,
                                         to_int(g.p(), "output height"), to_int(g.q(), "output width")));
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_BFLOAT16, format, K, C,
                                         to_int(g.r, "kernel height"), to_int(g.s, "kernel width")));
  // bf16 data, fp32 accumulation (the compute type), on tensor cores.
  CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p->conv, to_int(g.pad_h, "pad"), to_int(g.pad_w, "pad"),
                                              to_int(g.stride_h, "stride"), to_int(g.stride_w, "stride"), 1, 1,
                                              CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, CUDNN_TENSOR_OP_MATH));
  constexpr int kMax = 16;
  int n = 0;
  cudnnConvolutionFwdAlgoPerf_t fp[kMax];
  CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(cudnn_, p->x, p->w, p->conv, p->y, kMax, &n, fp));
  const auto& f = pick(fp, n, "forward", g);
  p->fwd = f.algo, p->ws_fwd = f.memory;
  cudnnConvolutionBwdDataAlgoPerf_t dp[kMax];
  CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnn_, p->w, p->y, p->conv, p->x, kMax, &n, dp));
  const auto& d = pick(dp, n, "backward data", g);
  p->bwd_data = d.algo, p->ws_data = d.memory;
  cudnnConvolutionBwdFilterAlgoPerf_t wp[kMax];
  CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnn_, p->x, p->y, p->conv, p->w, kMax, &n, wp));
  const auto& w = pick(wp, n, "backward weights", g);
  p->bwd_filter = w.algo, p->ws_filter = w.memory;
  return *plans_.emplace(key, std::move(p)).first->second;
}

void* CudaBf16::workspace(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  if (!workspace_ || workspace_->bytes() < bytes) {
    if (workspace_) outgrown_.push_back(std::move(workspace_));
    workspace_ = std::make_unique<Buffer>(dev_, bytes, MemoryPool::Workspace);
  }
  return workspace_->data();
}

Bf16* CudaBf16::scratch(ScratchSlot slot, int64_t n) {
  const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(Bf16);
  std::unique_ptr<Buffer>& b = scratch_[slot];
  if (!b || b->bytes() < bytes) {
    if (b) outgrown_.push_back(std::move(b));
    b = std::make_unique<Buffer>(dev_, bytes, MemoryPool::Workspace);
  }
  return static_cast<Bf16*>(b->data());
}

void CudaBf16::conv_forward(const ConvGeom& g, const Bf16* x, const Bf16* w, const Bf16* b, Bf16* y) {
  forward(g, false, x, w, b, y);
}
void CudaBf16::conv_backward_data(const ConvGeom& g, const Bf16* dy, const Bf16* w, Bf16* dx) {
  backward_data(g, false, dy, w, dx);
}
void CudaBf16::conv_backward_weights(const ConvGeom& g, const Bf16* x, const Bf16* dy, float* dw, float* db,
                                     bool accumulate) {
  backward_weights(g, false, x, dy, dw, db, accumulate);
}

// Of the input (x) and output (y) sides at most one is Plain here (both Plain is the plain call):
// it goes through the activation scratch, NCHW (N, C, HW) <-> NHWC (N, HW, C).
const Bf16* CudaBf16::as_nhwc(ActLayout layout, int64_t n, int64_t c, int64_t hw, const Bf16* v) {
  if (layout == ActLayout::Blocked) return v;
  Bf16* s = scratch(kActivation, n * c * hw);
  launch_transpose(stream_, n, c, hw, v, s, 2);
  return s;
}

const Bf16* CudaBf16::krsc(const ConvGeom& g, const Bf16* w) {
  Bf16* s = scratch(kFilter, g.k * g.c * g.r * g.s);
  launch_transpose(stream_, g.k, g.c, g.r * g.s, w, s, 2);
  return s;
}

void CudaBf16::conv_forward(const ConvGeom& g, ConvLayouts io, const Bf16* x, const Bf16* w, const Bf16* b, Bf16* y) {
  if (io.plain()) return forward(g, false, x, w, b, y);
  const int64_t pq = g.p() * g.q();
  const bool y_plain = io.y == ActLayout::Plain;
  Bf16* yn = y_plain ? scratch(kActivation, g.n * g.k * pq) : y;
  forward(g, true, as_nhwc(io.x, g.n, g.c, g.h * g.w, x), krsc(g, w), b, yn);
  if (y_plain) launch_transpose(stream_, g.n, pq, g.k, yn, y, 2);
}

void CudaBf16::conv_backward_data(const ConvGeom& g, ConvLayouts io, const Bf16* dy, const Bf16* w, Bf16* dx) {
  if (io.plain()) return backward_data(g, false, dy, w, dx);
  const int64_t hw = g.h * g.w;
  const bool x_plain = io.x == ActLayout::Plain;
  Bf16* dxn = x_plain ? scratch(kActivation, g.n * g.c * hw) : dx;
  backward_data(g, true, as_nhwc(io.y, g.n, g.k, g.p() * g.q(), dy), krsc(g, w), dxn);
  if (x_plain) launch_transpose(stream_, g.n, hw, g.c, dxn, dx, 2);
}

void CudaBf16::conv_backward_weights(const ConvGeom& g, ConvLayouts io, const Bf16* x, const Bf16* dy, float* dw,
                                     float* db, bool accumulate) {
  if (io.plain()) return backward_weights(g, false, x, dy, dw, db, accumulate);
  backward_weights(g, true, as_nhwc(io.x, g.n, g.c, g.h * g.w, x), as_nhwc(io.y, g.n, g.k, g.p() * g.q(), dy), dw, db,
                   accumulate);
}

void CudaBf16::forward(const ConvGeom& g, bool nhwc, const Bf16* x, const Bf16* w, const Bf16* b, Bf16* y) {
  const int64_t pq = g.p() * g.q();
  const auto ws = [this](std::size_t bytes) { return workspace(bytes); };
  const GraphConvCall c{ConvDir::Forward, g, CUDNN_DATA_BFLOAT16, Precision::Bf16, 1.0f, x, w, y, nhwc};
  // A timed search writes y: the bias (or, with none, zeros) goes in after it. NHWC: channel fastest.
  const auto start = [&] {
    if (b) launch_broadcast_bf16(stream_, g.n * g.k * pq, g.k, nhwc ? 1 : pq, b, y);
    else CUDA_CHECK(cudaMemsetAsync(y, 0, static_cast<std::size_t>(g.n * g.k * pq) * sizeof(Bf16), stream_));
  };
  if (graph_api_ && graph_.prepare(c, ws)) {
    start();
    graph_.run(c, ws);
    return;
  }
  Plan& p = plan(g, nhwc);
  start();
  CUDNN_CHECK(cudnnConvolutionForward(cudnn_, &kOne, p.x, x, p.w, w, p.conv, p.fwd, workspace(p.ws_fwd), p.ws_fwd,
                                      &kOne, p.y, y));
}

void CudaBf16::backward_data(const ConvGeom& g, bool nhwc, const Bf16* dy, const Bf16* w, Bf16* dx) {
  const auto ws = [this](std::size_t bytes) { return workspace(bytes); };
  const GraphConvCall c{ConvDir::BackwardData, g, CUDNN_DATA_BFLOAT16, Precision::Bf16, 0.0f, dy, w, dx, nhwc};
  if (graph_api_ && graph_.prepare(c, ws)) return graph_.run(c, ws);
  Plan& p = plan(g, nhwc);
  CUDNN_CHECK(cudnnConvolutionBackwardData(cudnn_, &kOne, p.w, w, p.y, dy, p.conv, p.bwd_data, workspace(p.ws_data),
                                           p.ws_data, &kZero, p.x, dx));
}

void CudaBf16::backward_weights(const ConvGeom& g, bool nhwc, const Bf16* x, const Bf16* dy, float* dw, float* db,
                                bool accumulate) {
  // cuDNN writes the filter gradient in the filter's dtype (bf16, as PyTorch's autocast gets it);
  // it is widened into the fp32 gradient, added there when accumulating. NHWC: written KRSC, moved
  // to KCRS first.
  const int64_t wn = g.k * g.c * g.r * g.s, pq = g.p() * g.q();
  Bf16* d16 = scratch(kWeightGrad, wn);
  const auto ws = [this](std::size_t bytes) { return workspace(bytes); };
  const GraphConvCall c{ConvDir::BackwardFilter, g, CUDNN_DATA_BFLOAT16, Precision::Bf16, 0.0f, x, dy, d16, nhwc};
  if (graph_api_ && graph_.prepare(c, ws)) {
    graph_.run(c, ws);
  } else {
    Plan& p = plan(g, nhwc);
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(cudnn_, &kOne, p.x, x, p.y, dy, p.conv, p.bwd_filter,
                                               workspace(p.ws_filter), p.ws_filter, &kZero, p.w, d16));
  }
  const Bf16* kcrs = d16;
  if (nhwc) {
    Bf16* s = scratch(kFilter, wn);
    launch_transpose(stream_, g.k, g.r * g.s, g.c, d16, s, 2);
    kcrs = s;
  }
  launch_widen_bf16(stream_, wn, kcrs, dw, accumulate);
  // NHWC: dy is rows of K channels (outer N*P*Q, inner 1).
  if (db) launch_channel_sums_bf16(stream_, nhwc ? g.n * pq : g.n, g.k, nhwc ? 1 : pq, dy, db, accumulate, *partials_);
}

std::string CudaBf16::algorithms(const ConvGeom& g) const {
  const std::array<int64_t, 12> key{g.n, g.c, g.h, g.w, g.k, g.r, g.s, g.stride_h, g.stride_w, g.pad_h, g.pad_w, 0};
  const auto it = plans_.find(key);
  const Plan* p = it == plans_.end() ? nullptr : it->second.get();
  // The graph API's choice where it planned the direction (the forward adds to the bias: beta 1),
  // else the legacy algorithm if planned.
  const auto one = [&](const char* dir, ConvDir d, int legacy, std::size_t ws) {
    for (bool nhwc : {false, true}) {
      const std::string graph = graph_.describe(
          {d, g, CUDNN_DATA_BFLOAT16, Precision::Bf16, d == ConvDir::Forward ? 1.0f : 0.0f, nullptr, nullptr, nullptr, nhwc});
      if (!graph.empty() && graph.rfind("graph API:", 0) != 0) return fmt::format("{} {}{}", dir, nhwc ? "NHWC " : "", graph);
    }
    if (p) return fmt::format("{} legacy algorithm {}, {} B workspace", dir, legacy, ws);
    return fmt::format("{} not run", dir);
  };
  return fmt::format("bf16 conv x[{},{},{},{}] w[{},{},{},{}] on {}: {}; {}; {}", g.n, g.c, g.h, g.w, g.k, g.c, g.r, g.s,
                     dev_.str(), one("forward", ConvDir::Forward, p ? p->fwd : -1, p ? p->ws_fwd : 0),
                     one("backward-data", ConvDir::BackwardData, p ? p->bwd_data : -1, p ? p->ws_data : 0),
                     one("backward-filter", ConvDir::BackwardFilter, p ? p->bwd_filter : -1, p ? p->ws_filter : 0));
}

void CudaBf16::linear_forward(int64_t n, int64_t in, int64_t out, const Bf16* x, const Bf16* w, const Bf16* b,
                              Bf16* y) {
  const int N = to_int(n, "batch"), I = to_int(in, "in features"), O = to_int(out, "out features");
  launch_broadcast_bf16(stream_, n * out, out, 1, b, y);
  // Column-major view: y^T[O x N] = w^T... as the fp32 path: op(w) = w^T of the [I x O] column-major w.
  CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, O, N, I, &kOne, w, CUDA_R_16BF, I, x, CUDA_R_16BF, I,
                            &kOne, y, CUDA_R_16BF, O, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void CudaBf16::linear_backward_data(int64_t n, int64_t in, int64_t out, const Bf16* dy, const Bf16* w, Bf16* dx) {
  const int N = to_int(n, "batch"), I = to_int(in, "in features"), O = to_int(out, "out features");
  CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, I, N, O, &kOne, w, CUDA_R_16BF, I, dy, CUDA_R_16BF, O,
                            &kZero, dx, CUDA_R_16BF, I, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void CudaBf16::linear_backward_data_f32(int64_t n, int64_t in, int64_t out, const Bf16* dy, const Bf16* w,
                                        float* dx) {
  const int N = to_int(n, "batch"), I = to_int(in, "in features"), O = to_int(out, "out features");
  CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, I, N, O, &kOne, w, CUDA_R_16BF, I, dy, CUDA_R_16BF, O,
                            &kZero, dx, CUDA_R_32F, I, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void CudaBf16::linear_backward_weights(int64_t n, int64_t in, int64_t out, const Bf16* x, const Bf16* dy, float* dw,
                                       float* db, bool accumulate) {
  const int N = to_int(n, "batch"), I = to_int(in, "in features"), O = to_int(out, "out features");
  // bf16 inputs, fp32 output and accumulation (beta = 1 adds to the fp32 gradient).
  CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_N, CUBLAS_OP_T, I, O, N, &kOne, x, CUDA_R_16BF, I, dy, CUDA_R_16BF, O,
                            accumulate ? &kOne : &kZero, dw, CUDA_R_32F, I, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  launch_channel_sums_bf16(stream_, n, out, 1, dy, db, accumulate, *partials_);
}

}  // namespace pb::cu
