// oneDNN convolutions for the CPU backend: primitives created once per shape and cached.
#pragma once

#include <memory>

#include "engine/backend.h"

namespace pb {

class DnnlConv {
 public:
  explicit DnnlConv(int threads);
  ~DnnlConv();
  void forward(const ConvGeom& g, const float* x, const float* w, const float* b, float* y);
  void backward_data(const ConvGeom& g, const float* dy, const float* w, float* dx);
  // dw, db overwritten, or added to when accumulate.
  void backward_weights(const ConvGeom& g, const float* x, const float* dy, float* dw, float* db,
                        bool accumulate);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pb
