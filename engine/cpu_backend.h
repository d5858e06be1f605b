// CPU backend: convolutions through oneDNN when the build has it, otherwise im2col + a blocked
// GEMM; element-wise ops vectorised and threaded over this worker's share of the cores.
#pragma once

#include <memory>
#include <vector>

#include "engine/backend.h"

namespace pb {

class DnnlConv;     // engine/dnnl/dnnl_conv.h
class Winograd2x3;  // engine/dnnl/winograd.h
class DnnlBf16;     // engine/dnnl/dnnl_bf16.h

class CpuBackend final : public Backend {
 public:
  CpuBackend(Device d, const BackendOptions& opts);
  ~CpuBackend() override;
  Device device() const override { return device_; }
  std::string name() const override;
  int threads() const { return threads_; }
  Precision precision() const override { return precision_; }

  void conv2d_forward(const ConvGeom& g, const float* x, const float* w, const float* b,
                      float* y) override;
  bool conv2d_relu_forward(const ConvGeom& g, const float* x, const float* w, const float* b,
                           float* y) override;
  void conv2d_backward_data(const ConvGeom& g, const float* dy, const float* w, float* dx) override;
  void conv2d_backward_weights(const ConvGeom& g, const float* x, const float* dy, float* dw,
                               float* db, bool accumulate) override;
  // Blocked where oneDNN runs every pass of both convolutions and its kernels read and write that
  // layout, unless turned off (BackendOptions::cpu_blocked, PARBENCH_CPU_BLOCKED).
  bool conv_keeps_blocked(const ConvGeom& a, const ConvGeom& b) override;
  void conv2d_forward_in(const ConvGeom& g, ConvLayouts io, const float* x, const float* w, const float* b,
                         float* y) override;
  bool conv2d_relu_forward_in(const ConvGeom& g, ConvLayouts io, const float* x, const float* w, const float* b,
                              float* y) override;
  void conv2d_backward_data_in(const ConvGeom& g, ConvLayouts io, const float* dy, const float* w,
                               float* dx) override;
  void conv2d_backward_weights_in(const ConvGeom& g, ConvLayouts io, const float* x, const float* dy, float* dw,
                                  float* db, bool accumulate) override;
  void linear_forward(int64_t n, int64_t in, int64_t out, const float* x, const float* w,
                      const float* b, float* y) override;
  void linear_backward_data(int64_t n, int64_t in, int64_t out, const float* dy, const float* w,
                            float* dx) override;
  void linear_backward_weights(int64_t n, int64_t in, int64_t out, const float* x, const float* dy,
                               float* dw, float* db, bool accumulate) override;
  void relu_forward(int64_t n, const float* x, float* y) override;
  void relu_backward(int64_t n, const float* y, const float* dy, float* dx) override;
  // engine/cpu_resample.cpp, fp32 and bf16.
  void add(int64_t n, const float* a, const float* b, float* y) override;
  void max_pool2x2_forward(const Planes& x_shape, const float* x, float* y) override;
  void max_pool2x2_backward(const Planes& x_shape, const float* x, const float* dy, float* dx) override;
  void upsample2x_forward(const Planes& x_shape, const float* x, float* y) override;
  void upsample2x_backward(const Planes& x_shape, const float* dy, float* dx) override;
  void add_channel_bias(int64_t n, int64_t channels, int64_t inner, const float* b, float* y) override;
  void channel_sums(int64_t n, int64_t channels, int64_t inner, const float* dy, float* db, bool accumulate) override;
  void add_bf16(int64_t n, const Bf16* a, const Bf16* b, Bf16* y) override;
  void max_pool2x2_forward_bf16(const Planes& x_shape, const Bf16* x, Bf16* y) override;
  void max_pool2x2_backward_bf16(const Planes& x_shape, const Bf16* x, const Bf16* dy, Bf16* dx) override;
  void upsample2x_forward_bf16(const Planes& x_shape, const Bf16* x, Bf16* y) override;
  void upsample2x_backward_bf16(const Planes& x_shape, const Bf16* dy, Bf16* dx) override;
  void add_channel_bias_bf16(int64_t n, int64_t channels, int64_t inner, const Bf16* b, Bf16* y) override;
  void channel_sums_bf16(int64_t n, int64_t channels, int64_t inner, const Bf16* dy, float* db, bool accumulate) override;
  void mse_loss_grad(int64_t n, const float* y, const float* t, float grad_scale, float* dy,
                     float* loss_sum) override;
  void adam_step(int64_t n, float* p, const float* g, float* m, float* v, const AdamParams& a,
                 int64_t step) override;
  // bf16 (engine/cpu_bf16.cpp): oneDNN's bf16 kernels; the backend refuses bf16 at construction
  // where this CPU has none (dnnl_bf16_refusal) or the build has no oneDNN.
  void conv2d_forward_bf16(const ConvGeom& g, const Bf16* x, const Bf16* w, const Bf16* b, Bf16* y) override;
  void conv2d_backward_data_bf16(const ConvGeom& g, const Bf16* dy, const Bf16* w, Bf16* dx) override;
  void conv2d_backward_weights_bf16(const ConvGeom& g, const Bf16* x, const Bf16* dy, float* dw, float* db,
                                    bool accumulate) override;
  void linear_forward_bf16(int64_t n, int64_t in, int64_t out, const Bf16* x, const Bf16* w, const Bf16* b,
                           Bf16* y) override;
  void linear_backward_data_bf16(int64_t n, int64_t in, int64_t out, const Bf16* dy, const Bf16* w,
                                 Bf16* dx) override;
  void linear_backward_weights_bf16(int64_t n, int64_t in, int64_t out, const Bf16* x, const Bf16* dy, float* dw,
                                    float* db, bool accumulate) override;
  void conv2d_backward_data_bf16_f32(const ConvGeom& g, const Bf16* dy, const Bf16* w, float* dx) override;
  void conv2d_forward_bf16_f32(const ConvGeom& g, const Bf16* x, const Bf16* w, float* y) override;
  void linear_backward_data_bf16_f32(int64_t n, int64_t in, int64_t out, const Bf16* dy, const Bf16* w,
                                     float* dx) override;
  void relu_forward_bf16(int64_t n, const Bf16* x, Bf16* y) override;
  void relu_backward_bf16(int64_t n, const Bf16* y, const Bf16* dy, Bf16* dx) override;
  void to_bf16(int64_t n, const float* src, Bf16* dst) override;
  void from_bf16(int64_t n, const Bf16* src, float* dst) override;
  void copy_2d_bf16(Bf16* dst, int64_t dst_pitch, const Bf16* src, int64_t src_pitch, int64_t width,
                    int64_t rows) override;
  void synchronize() override {}
  void release_workspace() override;
  std::array<std::string, 3> conv_pass_algorithms(const ConvGeom& g, bool bias) override;
  void fill(float* dst, int64_t n, float value, Stream* stream = nullptr) override;
  void fill_normal(float* dst, int64_t n, uint64_t seed, uint64_t offset, float scale,
                   Stream* stream = nullptr) override;
  void copy_2d(float* dst, int64_t dst_pitch, const float* src, int64_t src_pitch, int64_t width, int64_t rows,
               Stream* stream = nullptr) override;
  void copy(Device dst_dev, void* dst, Device src_dev, const void* src, std::size_t bytes,
            Stream* stream = nullptr) override;
  void synchronize(Stream&) override {}
  // Ops run when called: events are host time stamps, and nothing ever waits.
  std::unique_ptr<Stream> create_stream() override;
  std::unique_ptr<Event> create_event() override;
  void record(Event& e, Stream* stream = nullptr) override;
  void wait(Event&, Stream* = nullptr) override {}
  void synchronize(Event&) override {}
  double elapsed_s(Event& start, Event& end) override;

 private:
  float* scratch(std::size_t slot, std::size_t floats);
  // Under bf16 the fp32 convolutions and linear layers refuse: a caller without autocast (tp
  // across workers, for now) must not run fp32 as bf16.
  void fp32_only(const char* op) const;
  // Whether a pass of g runs the engine's own Winograd: where oneDNN has none for this CPU and
  // the layer is wide enough for it to pay.
  bool own_winograd_forward(const ConvGeom& g, bool bias);
  bool own_winograd_backward_data(const ConvGeom& g);
  bool own_winograd_backward_weights(const ConvGeom& g, bool bias);

  Device device_;
  int threads_;
  bool fuse_relu_;
  bool blocked_;
  std::vector<std::vector<float>> scratch_;
  WorkspaceCount scratch_count_;  // scratch_ as this device's workspace
  std::unique_ptr<DnnlConv> dnnl_;
  std::unique_ptr<Winograd2x3> winograd_;
  Precision precision_;
  std::unique_ptr<DnnlBf16> bf16_;  // set under Precision::Bf16 only
};

// The CPU backend's bf16 kernels, or an Error saying why this CPU (or build) has none.
std::unique_ptr<DnnlBf16> make_cpu_bf16(int threads, Device d);

// C[m x n] = A[m x k] * B[k x n] (+ C when accumulate); row-major, threaded.
void cpu_gemm_nn(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c,
                 bool accumulate, int threads);
void cpu_transpose(int64_t rows, int64_t cols, const float* src, float* dst, int threads);

}  // namespace pb
