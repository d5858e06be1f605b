// The bf16 ops' defaults: a backend without a bf16 path refuses by name, never computes in fp32
// and calls that bf16.
#include "engine/backend.h"
#include "engine/check.h"

namespace pb {

namespace {
[[noreturn]] void no_bf16(const Backend& be, const char* op) {
  throw Error(fmt::format("{} has no bf16 {} (precision bf16 needs a backend with bf16 kernels)", be.name(), op));
}
}  // namespace

void Backend::conv2d_forward_bf16(const ConvGeom&, const Bf16*, const Bf16*, const Bf16*, Bf16*) {
  no_bf16(*this, "convolution");
}
void Backend::conv2d_backward_data_bf16(const ConvGeom&, const Bf16*, const Bf16*, Bf16*) {
  no_bf16(*this, "convolution");
}
void Backend::conv2d_backward_weights_bf16(const ConvGeom&, const Bf16*, const Bf16*, float*, float*, bool) {
  no_bf16(*this, "convolution");
}
void Backend::linear_forward_bf16(int64_t, int64_t, int64_t, const Bf16*, const Bf16*, const Bf16*, Bf16*) {
  no_bf16(*this, "linear layer");
}
void Backend::linear_backward_data_bf16(int64_t, int64_t, int64_t, const Bf16*, const Bf16*, Bf16*) {
  no_bf16(*this, "linear layer");
}
void Backend::linear_backward_weights_bf16(int64_t, int64_t, int64_t, const Bf16*, const Bf16*, float*, float*,
                                           bool) {
  no_bf16(*this, "linear layer");
}
void Backend::conv2d_backward_data_bf16_f32(const ConvGeom&, const Bf16*, const Bf16*, float*) {
  no_bf16(*this, "convolution with an fp32 input gradient");
}
void Backend::conv2d_forward_bf16_f32(const ConvGeom&, const Bf16*, const Bf16*, float*) {
  no_bf16(*this, "convolution with an fp32 output");
}
void Backend::linear_backward_data_bf16_f32(int64_t, int64_t, int64_t, const Bf16*, const Bf16*, float*) {
  no_bf16(*this, "linear layer with an fp32 input gradient");
}
void Backend::relu_forward_bf16(int64_t, const Bf16*, Bf16*) { no_bf16(*this, "ReLU"); }
void Backend::relu_backward_bf16(int64_t, const Bf16*, const Bf16*, Bf16*) { no_bf16(*this, "ReLU"); }
void Backend::add_bf16(int64_t, const Bf16*, const Bf16*, Bf16*) { no_bf16(*this, "add"); }
void Backend::max_pool2x2_forward_bf16(const Planes&, const Bf16*, Bf16*) { no_bf16(*this, "max pooling"); }
void Backend::max_pool2x2_backward_bf16(const Planes&, const Bf16*, const Bf16*, Bf16*) { no_bf16(*this, "max pooling"); }
void Backend::upsample2x_forward_bf16(const Planes&, const Bf16*, Bf16*) { no_bf16(*this, "upsampling"); }
void Backend::upsample2x_backward_bf16(const Planes&, const Bf16*, Bf16*) { no_bf16(*this, "upsampling"); }
void Backend::add_channel_bias_bf16(int64_t, int64_t, int64_t, const Bf16*, Bf16*) { no_bf16(*this, "bias"); }
void Backend::channel_sums_bf16(int64_t, int64_t, int64_t, const Bf16*, float*, bool) { no_bf16(*this, "bias gradient"); }

// As the fp32 ones (device.cpp). The forward rounds twice, the convolution's output and then its sum
// with the bias, as PyTorch's cuDNN path does (oneDNN's rounds once: a half-ulp apart at most).
void Backend::conv_transpose2d_forward_bf16(const ConvGeom& g, const Bf16* x, const Bf16* w, const Bf16* b, Bf16* y) {
  conv2d_backward_data_bf16(g, x, w, y);
  if (b) add_channel_bias_bf16(g.n, g.c, g.h * g.w, b, y);
}
void Backend::conv_transpose2d_backward_data_bf16(const ConvGeom& g, const Bf16* dy, const Bf16* w, Bf16* dx) {
  conv2d_forward_bf16(g, dy, w, nullptr, dx);
}
void Backend::conv_transpose2d_backward_data_bf16_f32(const ConvGeom& g, const Bf16* dy, const Bf16* w, float* dx) {
  conv2d_forward_bf16_f32(g, dy, w, dx);
}
void Backend::conv_transpose2d_backward_weights_bf16(const ConvGeom& g, const Bf16* x, const Bf16* dy, float* dw,
                                                     float* db, bool accumulate) {
  conv2d_backward_weights_bf16(g, dy, x, dw, nullptr, accumulate);
  if (db) channel_sums_bf16(g.n, g.c, g.h * g.w, dy, db, accumulate);
}
void Backend::to_bf16(int64_t, const float*, Bf16*) { no_bf16(*this, "conversion"); }
void Backend::from_bf16(int64_t, const Bf16*, float*) { no_bf16(*this, "conversion"); }
void Backend::copy_2d_bf16(Bf16*, int64_t, const Bf16*, int64_t, int64_t, int64_t) { no_bf16(*this, "copy"); }

std::string cuda_bf16_refusal(int cc_major, int cc_minor, const std::string& gpu_name) {
  if (cc_major < 8)
    return fmt::format("precision bf16 on CUDA needs compute capability 8.0 or newer (bf16 tensor cores); {} has {}.{}",
                       gpu_name, cc_major, cc_minor);
  return {};
}

}  // namespace pb
