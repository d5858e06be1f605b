// oneDNN bf16 convolutions and linear layers for the CPU backend's autocast path: bf16 sources,
// weights and outputs with fp32 accumulation, weight gradients in fp32. Primitives are created
// once per shape and cached; every call refuses oneDNN's reference (emulated) kernels.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/backend.h"

namespace pb {

// oneDNN's name for an ISA (its dnnl_cpu_isa_t value), as ONEDNN_MAX_CPU_ISA spells it in lower case.
std::string dnnl_isa_name(unsigned isa);
// The ISA oneDNN runs on here (ONEDNN_MAX_CPU_ISA caps it).
unsigned dnnl_effective_isa();
// Why bf16 cannot run natively on `isa` (it needs AVX512-BF16 or AMX-BF16), naming it; empty where it can.
std::string dnnl_bf16_refusal(unsigned isa);

class DnnlBf16 {
 public:
  // threads: the OpenMP team for this instance's calls; its scratch counts as `device`'s workspace.
  // Throws dnnl_bf16_refusal(dnnl_effective_isa()) where that is not empty.
  DnnlBf16(int threads, Device device = cpu());
  ~DnnlBf16();
  // The oneDNN implementations of a shape's three passes, e.g. "forward brg:avx512_core_amx, ...".
  std::string plan(const ConvGeom& g);

  void conv_forward(const ConvGeom& g, const Bf16* x, const Bf16* w, const Bf16* b, Bf16* y);
  void conv_backward_data(const ConvGeom& g, const Bf16* dy, const Bf16* w, Bf16* dx);
  // dx in fp32, not rounded (tp's partial sums); its primitive made at the first call per shape.
  void conv_backward_data_f32(const ConvGeom& g, const Bf16* dy, const Bf16* w, float* dx);
  // y in fp32, not rounded, no bias (tp's partial input gradients of a transposed conv).
  void conv_forward_f32(const ConvGeom& g, const Bf16* x, const Bf16* w, float* y);
  void conv_backward_weights(const ConvGeom& g, const Bf16* x, const Bf16* dy, float* dw, float* db, bool accumulate);
  void linear_forward(int64_t n, int64_t in, int64_t out, const Bf16* x, const Bf16* w, const Bf16* b, Bf16* y);
  void linear_backward_data(int64_t n, int64_t in, int64_t out, const Bf16* dy, const Bf16* w, Bf16* dx);
  void linear_backward_data_f32(int64_t n, int64_t in, int64_t out, const Bf16* dy, const Bf16* w, float* dx);
  // dw only; the backend sums db itself.
  void linear_backward_weights(int64_t n, int64_t in, int64_t out, const Bf16* x, const Bf16* dy, float* dw,
                               bool accumulate);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pb
