// oneDNN convolutions for the CPU backend: primitives created once per shape and cached.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <string>

#include "engine/backend.h"

namespace pb {

class DnnlConv {
 public:
  // Winograd keeps transformed tensors and per-thread weight-gradient copies in a scratch that
  // grows with channels^2 and threads (great_net at 64x64, full width, 2 threads: 195 MB forward,
  // 348 MB backward weights for its 512<->1024 layers). Above this cap a layer runs as 2, 4 or 8
  // channel slices that each fit, so peak memory stays below PyTorch's (docs/PERFORMANCE.md).
  static constexpr std::size_t kWinogradScratchCap = std::size_t(256) << 20;

  // threads: the OpenMP team oneDNN uses for this instance's calls. winograd: allow Winograd
  // F(4x4, 3x3) for the 3x3 stride-1 layers where it pays (see dnnl_conv.cpp), its scratch per
  // call capped at winograd_scratch_cap bytes. Its buffers count as `device`'s workspace.
  DnnlConv(int threads, bool winograd, std::size_t winograd_scratch_cap = kWinogradScratchCap, Device device = cpu());
  ~DnnlConv();
  bool winograd() const;
  // Frees the buffers the calls share (sized again by the next call).
  void release_scratch();
  // How this instance runs the three passes of a shape: oneDNN implementation, channel slices and
  // scratch bytes of each, e.g. "forward jit_wino_4x3:avx512_core x2 (1234 B scratch), ...".
  std::string plan(const ConvGeom& g, bool bias);
  // The same per pass: "jit:avx512_core x1 (1234 B scratch)" for forward, backward data and
  // backward weights.
  std::array<std::string, 3> pass_plans(const ConvGeom& g, bool bias);
  // Whether this instance runs that pass of g with oneDNN's Winograd.
  bool forward_is_winograd(const ConvGeom& g, bool bias);
  bool backward_data_is_winograd(const ConvGeom& g);
  bool backward_weights_is_winograd(const ConvGeom& g, bool bias);
  // Whether the tensor between convolutions a and b (both with bias) is best kept Blocked: its
  // channels fill whole blocks, and a's forward writes it and b's forward reads it blocked.
  bool keeps_blocked(const ConvGeom& a, const ConvGeom& b);
  // io: the layouts of x/dx and y/dy (Blocked: this CPU's nChw16c or nChw8c; the channels must
  // fill whole blocks).
  void forward(const ConvGeom& g, const float* x, const float* w, const float* b, float* y, ConvLayouts io = {});
  // y = max(forward's y, 0) with oneDNN's ReLU post-op, where oneDNN has the plain forward's
  // kernel with that post-op; false, having done nothing, where it has not.
  bool forward_relu(const ConvGeom& g, const float* x, const float* w, const float* b, float* y,
                    ConvLayouts io = {});
  void backward_data(const ConvGeom& g, const float* dy, const float* w, float* dx, ConvLayouts io = {});
  // dw, db overwritten, or added to when accumulate.
  void backward_weights(const ConvGeom& g, const float* x, const float* dy, float* dw, float* db,
                        bool accumulate, ConvLayouts io = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pb
