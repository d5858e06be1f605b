// The CUDA backend's bf16 (autocast) path: cuDNN convolutions on bf16 tensors with fp32 compute
// (tensor-op math), cuBLAS GemmEx for linear layers (bf16 in, fp32 compute), and parbench's own
// kernels (cuda_bf16_kernels.cu) for the rest. Convolutions through cuDNN's graph API unless
// PARBENCH_CUDNN_API=legacy (engine/cuda/cudnn_graph.h).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <optional>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "engine/backend.h"
#include "engine/cuda/cuda_kernels.h"
#include "engine/cuda/cuda_util.h"
#include "engine/cuda/cudnn_graph.h"
#include "engine/tensor.h"

namespace pb::cu {

void launch_to_bf16(cudaStream_t s, int64_t n, const float* x, Bf16* y);
void launch_from_bf16(cudaStream_t s, int64_t n, const Bf16* x, float* y);
void launch_relu_bf16(cudaStream_t s, int64_t n, const Bf16* x, Bf16* y);
void launch_relu_backward_bf16(cudaStream_t s, int64_t n, const Bf16* y, const Bf16* dy, Bf16* dx);
// y[i] = b[(i / inner) % channels] for i < n.
void launch_broadcast_bf16(cudaStream_t s, int64_t n, int64_t channels, int64_t inner, const Bf16* b, Bf16* y);
// db[c] (+)= sum of dy[o, c, i] over o < outer, i < inner, in fp32; deterministic
// (engine/cuda/cuda_channel_sums.cu).
void launch_channel_sums_bf16(cudaStream_t s, int64_t outer, int64_t channels, int64_t inner, const Bf16* dy,
                              float* db, bool accumulate, PartialsScratch& scratch);
// y (+)= x widened to fp32.
void launch_widen_bf16(cudaStream_t s, int64_t n, const Bf16* x, float* y, bool accumulate);

class CudaBf16 {
 public:
  // workspace_cap: the most workspace a convolution algorithm may use; none: any that can be had.
  CudaBf16(Device dev, cudnnHandle_t cudnn, cublasHandle_t cublas, cudaStream_t stream,
           std::optional<std::size_t> workspace_cap, bool exhaustive);
  ~CudaBf16();
  // Every tensor NCHW, filters KCRS.
  void conv_forward(const ConvGeom& g, const Bf16* x, const Bf16* w, const Bf16* b, Bf16* y);
  void conv_backward_data(const ConvGeom& g, const Bf16* dy, const Bf16* w, Bf16* dx);
  void conv_backward_weights(const ConvGeom& g, const Bf16* x, const Bf16* dy, float* dw, float* db, bool accumulate);
  // x/dx and y/dy in the layouts io, Blocked being NHWC (--layout nhwc): a call with an NHWC side
  // runs all in NHWC with the filter in KRSC; a Plain side and the filter (its gradient) pass
  // through scratch, converted by launch_transpose. dw and db stay fp32 in PyTorch's layouts.
  void conv_forward(const ConvGeom& g, ConvLayouts io, const Bf16* x, const Bf16* w, const Bf16* b, Bf16* y);
  void conv_backward_data(const ConvGeom& g, ConvLayouts io, const Bf16* dy, const Bf16* w, Bf16* dx);
  void conv_backward_weights(const ConvGeom& g, ConvLayouts io, const Bf16* x, const Bf16* dy, float* dw, float* db,
                             bool accumulate);
  // What each direction of `g` runs so far (Backend::conv_algorithms).
  std::string algorithms(const ConvGeom& g) const;
  void linear_forward(int64_t n, int64_t in, int64_t out, const Bf16* x, const Bf16* w, const Bf16* b, Bf16* y);
  void linear_backward_data(int64_t n, int64_t in, int64_t out, const Bf16* dy, const Bf16* w, Bf16* dx);
  void linear_backward_data_f32(int64_t n, int64_t in, int64_t out, const Bf16* dy, const Bf16* w, float* dx);
  void linear_backward_weights(int64_t n, int64_t in, int64_t out, const Bf16* x, const Bf16* dy, float* dw,
                               float* db, bool accumulate);
  // The backend's scratch for the bias gradients' partial sums; set before any backward op.
  void use_partials(PartialsScratch* p) { partials_ = p; }

 private:
  struct Plan;
  Plan& plan(const ConvGeom& g, bool nhwc);
  // One call, every tensor NCHW (filters KCRS) or, with nhwc, NHWC (filters KRSC).
  void forward(const ConvGeom& g, bool nhwc, const Bf16* x, const Bf16* w, const Bf16* b, Bf16* y);
  void backward_data(const ConvGeom& g, bool nhwc, const Bf16* dy, const Bf16* w, Bf16* dx);
  void backward_weights(const ConvGeom& g, bool nhwc, const Bf16* x, const Bf16* dy, float* dw, float* db,
                        bool accumulate);
  // Grow-only scratch: the filter gradient as cuDNN writes it (bf16), before it is widened; and for
  // the NHWC calls a Plain side in NHWC and the filter (or its gradient) moved.
  enum ScratchSlot { kWeightGrad, kActivation, kFilter, kScratchSlots };
  Bf16* scratch(ScratchSlot slot, int64_t n);
  // v ([n][c][hw]) in NHWC: v itself when its side is Blocked, else a copy in the activation scratch.
  const Bf16* as_nhwc(ActLayout layout, int64_t n, int64_t c, int64_t hw, const Bf16* v);
  // w (KCRS) as KRSC, in the filter scratch.
  const Bf16* krsc(const ConvGeom& g, const Bf16* w);
  template <class Perf>
  const Perf& pick(const Perf* perf, int count, const char* what, const ConvGeom& g);
  void* workspace(std::size_t bytes);

  Device dev_;
  cudnnHandle_t cudnn_;
  cublasHandle_t cublas_;
  cudaStream_t stream_;
  std::optional<std::size_t> cap_;
  std::unique_ptr<Buffer> workspace_;
  PartialsScratch* partials_ = nullptr;
  std::vector<std::unique_ptr<Buffer>> outgrown_;  // kept until destruction: queued work may read them
  std::unique_ptr<Buffer> scratch_[kScratchSlots];
  std::map<std::array<int64_t, 12>, std::unique_ptr<Plan>> plans_;
  bool graph_api_;
  GraphConv graph_;
};

}  // namespace pb::cu
