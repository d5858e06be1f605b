// cuDNN convolutions for the CUDA backend: descriptors built once per shape, the algorithm of
// each direction (cuDNN's heuristics or a timed search), and the workspace they share.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/cuda/cuda_util.h"
#include "engine/cuda/cudnn_graph.h"
#include "engine/device.h"
#include "engine/tensor.h"

namespace pb::cu {

struct AlgoChoice;
struct ConvPlan;

// One backend's convolutions, run on the stream its cuDNN handle is bound to. The caller makes
// the device current before each call; calls never overlap.
class CudnnConv {
 public:
  CudnnConv(Device dev, const BackendOptions& opts, bool exhaustive, cudnnHandle_t cudnn);
  ~CudnnConv();
  CudnnConv(const CudnnConv&) = delete;
  CudnnConv& operator=(const CudnnConv&) = delete;

  // cuDNN takes no tensor of 2^31 elements or more: larger batches run as consecutive
  // sub-batches (conv_batch_parts), each with its own plan; weight and bias gradients of the
  // later parts add to the first's (beta = 1), as PyTorch does. With relu, y = max(y, 0) too, in the
  // bias's pass (launch_bias_relu).
  void forward(const ConvGeom& g, const float* x, const float* w, const float* b, float* y, bool relu = false);
  void backward_data(const ConvGeom& g, const float* dy, const float* w, float* dx);
  void backward_weights(const ConvGeom& g, const float* x, const float* dy, float* dw, float* db, bool accumulate);
  // The same with x/dx and y/dy in the layouts io, Blocked being NHWC (BackendOptions::cuda_nhwc). A
  // call with an NHWC operand runs all in NHWC with the filter (and its gradient) in KRSC: a Plain
  // operand and the filter pass through scratch, converted by cudnnTransformTensor.
  void forward(const ConvGeom& g, ConvLayouts io, const float* x, const float* w, const float* b, float* y,
               bool relu = false);
  void backward_data(const ConvGeom& g, ConvLayouts io, const float* dy, const float* w, float* dx);
  void backward_weights(const ConvGeom& g, ConvLayouts io, const float* x, const float* dy, float* dw, float* db,
                        bool accumulate);
  // The algorithms chosen so far for each sub-batch of `g` (Backend::conv_algorithms).
  std::string algorithms(const ConvGeom& g) const;
  // The same per direction (forward, backward-data, backward-filter), without its name.
  std::array<std::string, 3> pass_algorithms(const ConvGeom& g) const;
  // Frees the workspaces outgrown so far; only when no queued convolution can still use them
  // (the backend's stream is idle).
  void release_outgrown() noexcept;
  // Frees the workspace and the accumulating backward-weights scratch too (the stream idle, as for
  // release_outgrown).
  void release_workspace() noexcept;

 private:
  using Key = std::array<int64_t, 12>;

  static ConvGeom sub_batch(ConvGeom g, int64_t n) {
    g.n = n;
    return g;
  }
  static int64_t in_per_image(const ConvGeom& g) { return g.c * g.h * g.w; }
  static int64_t out_per_image(const ConvGeom& g) { return g.k * g.p() * g.q(); }
  static Key key_of(const ConvGeom& g, bool nhwc) {
    return Key{g.n, g.c, g.h, g.w, g.k, g.r, g.s, g.stride_h, g.stride_w, g.pad_h, g.pad_w, nhwc ? 1 : 0};
  }

  // One sub-batch, every tensor NCHW (filters KCRS) or, with nhwc, NHWC (filters KRSC).
  void forward_part(const ConvGeom& g, bool nhwc, const float* x, const float* w, const float* b, float* y, bool relu);
  // y += b (per channel), then y = max(y, 0) with relu: cuDNN's bias add alone, or one fused pass.
  void bias_epilogue(const ConvPlan& p, const ConvGeom& g, bool nhwc, const float* b, float* y, bool relu);
  void backward_data_part(const ConvGeom& g, bool nhwc, const float* dy, const float* w, float* dx);
  void backward_weights_part(const ConvGeom& g, bool nhwc, const float* x, const float* dy, float* dw, float* db,
                             bool accumulate);
  ConvPlan& plan_for(const ConvGeom& g, bool nhwc);
  // The found plan of one sub-batch shape, NCHW's first; null when neither ran.
  const ConvPlan* planned(const ConvGeom& g) const;
  // Grow-only scratch: kWeightGrad a filter gradient the graph API adds to dw (accumulate); for the
  // NHWC calls kActivation a Plain operand in NHWC, kFilter the filter or its gradient in KRSC.
  enum ScratchSlot { kWeightGrad, kActivation, kFilter, kScratchSlots };
  float* scratch(ScratchSlot slot, int64_t floats);
  // One sub-batch's side v in NHWC: v itself when Blocked, else converted from the plain descriptor
  // to the NHWC one into the activation scratch.
  float* as_nhwc(ActLayout layout, cudnnTensorDescriptor_t plain, cudnnTensorDescriptor_t nhwc, const float* v,
                 int64_t floats);
  // w (KCRS) copied to KRSC in the filter scratch.
  const float* krsc_filter(const ConvGeom& g, const float* w);
  void* workspace(std::size_t bytes);
  std::size_t workspace_limit() const;
  template <typename Ops>
  AlgoChoice choose(ConvPlan& p, const ConvGeom& g, const float* a, const float* b, float* out);
  // Runs c through the graph API when it is on and has an engine for c; false: use the legacy API.
  // `tag` keeps what was chosen, for algorithms().
  bool run_graph(const GraphConvCall& c, std::string& tag);

  Device dev_;
  BackendOptions opts_;
  bool exhaustive_;
  cudnnHandle_t cudnn_;
  std::unique_ptr<Buffer> workspace_;
  std::vector<std::unique_ptr<Buffer>> outgrown_;  // earlier workspaces, until release_outgrown()
  std::map<Key, std::unique_ptr<ConvPlan>> plans_;
  bool graph_api_;
  GraphConv graph_;
  std::unique_ptr<Buffer> scratch_[kScratchSlots];
};

}  // namespace pb::cu
