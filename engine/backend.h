// The op interface every backend implements (CPU now, CUDA beside it). Models and strategies
// call these through a Backend reference and never branch on the device kind.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "engine/bf16.h"
#include "engine/device.h"

namespace pb {

// A batch of image planes, [n, c, h, w]: the input of pooling and upsampling.
struct Planes {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t numel() const { return n * c * h * w; }
};

struct ConvGeom {
  int64_t n = 0, c = 0, h = 0, w = 0;  // input NCHW
  int64_t k = 0, r = 0, s = 0;         // output channels, kernel height, kernel width
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  int64_t p() const { return (h + 2 * pad_h - r) / stride_h + 1; }
  int64_t q() const { return (w + 2 * pad_w - s) / stride_w + 1; }
};

// Hyper-parameters in double, as torch.optim.Adam keeps them; scalars derived per step are
// computed in double and rounded to float once, as PyTorch does.
struct AdamParams {
  double lr = 1e-4;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

// The float scalars of one torch.optim.Adam step, derived in double and rounded once as PyTorch
// does; every backend's Adam kernel uses these, in the same order of float operations.
struct AdamStepScalars {
  float step_size, bc2_sqrt, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay;
};
AdamStepScalars adam_step_scalars(const AdamParams& a, int64_t step);

// How an activation (or its gradient) lies in memory. Plain is NCHW: what every op, strategy and
// communicator sees. Blocked is a backend's own convolution layout (oneDNN's nChw16c or nChw8c on
// CPU, NHWC on CUDA with BackendOptions::cuda_nhwc), kept between consecutive convolutions inside
// one Sequential stage and never seen outside it; it takes exactly as many values as Plain (the
// CPU backend blocks only channel counts that fill whole blocks).
enum class ActLayout { Plain, Blocked };
struct ConvLayouts {
  ActLayout x = ActLayout::Plain;  // the input and its gradient
  ActLayout y = ActLayout::Plain;  // the output and its gradient
  bool plain() const { return x == ActLayout::Plain && y == ActLayout::Plain; }
};

// Bf16: autocast (docs/bf16.md): fp32 master parameters, Adam and loss; convolutions and linear
// layers in bf16 with fp32 accumulation, bf16 activations between layers, fp32 weight gradients.
enum class Precision { Fp32, Tf32, Bf16 };
const char* precision_name(Precision p);
Precision parse_precision(const std::string& s);  // "fp32" | "tf32" | "bf16", UsageError otherwise

struct BackendOptions {
  int threads = 0;                 // CPU: threads for this worker's ops; 0 = all cores
  bool cpu_reference_conv = false;  // CPU: use the im2col path even when oneDNN is present
  // CPU with oneDNN: Winograd F(4x4,3x3) for 3x3 stride-1 convs with >= 32 channels in and out
  // (fp32, ~10x direct's rounding error, about half its time). The environment variable
  // PARBENCH_CPU_WINOGRAD=0 or =1 overrides this, for A/B runs against direct-only kernels.
  bool cpu_winograd = true;
  // CPU with oneDNN: a convolution followed by a ReLU writes max(y, 0) in its own pass (a oneDNN
  // eltwise post-op, or the engine's Winograd output transform) instead of a second pass over y.
  // Same values either way; PARBENCH_CPU_FUSE_RELU=0 or =1 overrides this, for A/B runs.
  bool cpu_fuse_relu = true;
  // CPU with oneDNN: the activation between two consecutive convolutions (a ReLU between them
  // included) stays in oneDNN's blocked layout instead of going to NCHW and back, in forward and
  // backward. Same values either way; PARBENCH_CPU_BLOCKED=0 or =1 overrides this, for A/B runs.
  bool cpu_blocked = true;
  // CUDA (--layout nhwc): the activation between two consecutive convolutions of a stage, and its
  // gradient, stay NHWC (channels_last, the layout tensor-core kernels prefer: the backend's
  // Blocked), the filters go KRSC for each call. Same values up to the engines' rounding.
  bool cuda_nhwc = false;
  Precision precision = Precision::Fp32;
  bool exhaustive_conv_search = false;  // CUDA: timed algorithm search, cached per shape
  // CUDA: the most workspace a convolution algorithm may use (--conv-workspace-mib); none: the
  // fastest algorithm whose workspace the allocator can give (engine/conv_policy.h).
  std::optional<std::size_t> conv_workspace_cap_bytes;
  double memory_limit_bytes = 0;  // memory a configuration may use per GPU / in all on CPU; 0 = what the device has
};

// A queue of device work besides a backend's own compute queue (a communicator's). native() is
// the cudaStream_t on CUDA; CPU work runs when issued, so a CPU stream is no queue at all (null).
class Stream {
 public:
  virtual ~Stream() = default;
  virtual void* native() const = 0;
};

// A point in a queue: what was queued there before record(). CPU events are complete when
// recorded and keep the host time, so elapsed_s works on both.
class Event {
 public:
  virtual ~Event() = default;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;
  // The algorithms this backend chose for a convolution shape already run, for failure
  // messages; empty where a backend does not choose (CPU).
  virtual std::string conv_algorithms(const ConvGeom&) const { return {}; }
  // The same per pass of a convolution shape already run -- forward, backward-data,
  // backward-weights: the library's algorithm or engine and its workspace or scratch bytes (a
  // profile's table and JSON); empty where a backend does not say.
  virtual std::array<std::string, 3> conv_pass_algorithms(const ConvGeom&, bool /*bias*/) { return {}; }
  // The precision this backend was made for; a Sequential runs its bf16 path under Bf16.
  virtual Precision precision() const { return Precision::Fp32; }

  // y[n,k,p,q] = sum w[k,c,r,s] * x[n,c,p*sh+r-ph,q*sw+s-pw] + b[k]
  virtual void conv2d_forward(const ConvGeom& g, const float* x, const float* w, const float* b,
                              float* y) = 0;
  // y = max(conv2d_forward's y, 0) in one pass where the backend fuses the ReLU into the
  // convolution for this shape; returns false, having done nothing, where it does not.
  virtual bool conv2d_relu_forward(const ConvGeom&, const float* /*x*/, const float* /*w*/, const float* /*b*/,
                                   float* /*y*/) {
    return false;
  }
  // Whether the tensor between two consecutive convolutions of a stage (a's output, b's input;
  // a ReLU may sit between them) should stay Blocked, in the calls of this backend's precision
  // (the fp32 ones, or under Bf16 the bf16 ones). Both have a bias. Never, by default.
  virtual bool conv_keeps_blocked(const ConvGeom& /*a*/, const ConvGeom& /*b*/) { return false; }
  // The convolution calls with x/dx and y/dy in the layouts io; io all Plain is the plain calls.
  // A backend with no Blocked layout takes Plain only; by default the fused one fuses only Plain.
  virtual void conv2d_forward_in(const ConvGeom& g, ConvLayouts io, const float* x, const float* w, const float* b,
                                 float* y);
  virtual bool conv2d_relu_forward_in(const ConvGeom& g, ConvLayouts io, const float* x, const float* w,
                                      const float* b, float* y);
  virtual void conv2d_backward_data_in(const ConvGeom& g, ConvLayouts io, const float* dy, const float* w,
                                       float* dx);
  virtual void conv2d_backward_weights_in(const ConvGeom& g, ConvLayouts io, const float* x, const float* dy,
                                          float* dw, float* db, bool accumulate);
  // dx = conv_transpose(dy, w); dx is overwritten.
  virtual void conv2d_backward_data(const ConvGeom& g, const float* dy, const float* w,
                                    float* dx) = 0;
  // dw, db overwritten, or added to when accumulate (micro-batches).
  virtual void conv2d_backward_weights(const ConvGeom& g, const float* x, const float* dy,
                                       float* dw, float* db, bool accumulate) = 0;

  // x: [n, in], w: [out, in] (PyTorch layout), y: [n, out]
  virtual void linear_forward(int64_t n, int64_t in, int64_t out, const float* x, const float* w,
                              const float* b, float* y) = 0;
  virtual void linear_backward_data(int64_t n, int64_t in, int64_t out, const float* dy,
                                    const float* w, float* dx) = 0;
  virtual void linear_backward_weights(int64_t n, int64_t in, int64_t out, const float* x,
                                       const float* dy, float* dw, float* db, bool accumulate) = 0;

  virtual void relu_forward(int64_t n, const float* x, float* y) = 0;  // may be in place
  // dx = dy * (y > 0); may be in place (dx == dy).
  virtual void relu_backward(int64_t n, const float* y, const float* dy, float* dx) = 0;

  // y = a + b over n values (a residual add; y may be a or b). Its backward is dy to each input.
  virtual void add(int64_t n, const float* a, const float* b, float* y) = 0;
  // 2x2 max pooling of stride 2 (torch.nn.MaxPool2d(2)): x [n, c, h, w] -> y [n, c, h/2, w/2], an
  // odd last row or column left out.
  virtual void max_pool2x2_forward(const Planes& x_shape, const float* x, float* y) = 0;
  // dx [n, c, h, w]: each window's dy at its first largest x in row-major order (PyTorch's choice
  // among equal values), 0 elsewhere.
  virtual void max_pool2x2_backward(const Planes& x_shape, const float* x, const float* dy, float* dx) = 0;
  // Nearest 2x upsampling (torch.nn.Upsample(scale_factor=2)): x [n, c, h, w] -> y [n, c, 2h, 2w].
  virtual void upsample2x_forward(const Planes& x_shape, const float* x, float* y) = 0;
  // dx [n, c, h, w]: the sum of the four dy each x value went to.
  virtual void upsample2x_backward(const Planes& x_shape, const float* dy, float* dx) = 0;
  // y[i, c, j] += b[c] for i < n, c < channels, j < inner: a bias over NCHW values.
  virtual void add_channel_bias(int64_t n, int64_t channels, int64_t inner, const float* b, float* y) = 0;
  // db[c] (+)= the sum over i < n, j < inner of dy[i, c, j] (added to db when accumulate).
  virtual void channel_sums(int64_t n, int64_t channels, int64_t inner, const float* dy, float* db, bool accumulate) = 0;

  // A 2-D transposed convolution (torch.nn.ConvTranspose2d, no output padding or dilation): the
  // adjoint of the convolution `g`, so x is g's output shape [n, g.k, p, q], y its input shape
  // [n, g.c, g.h, g.w], the weights [g.k, g.c, g.r, g.s] (ConvTranspose2d's [in, out, kH, kW])
  // and the bias [g.c]. Made of the convolution's own passes: forward is g's backward-data (plus
  // the bias), backward-data g's forward, backward-weights g's with x and dy in each other's place.
  void conv_transpose2d_forward(const ConvGeom& g, const float* x, const float* w, const float* b, float* y);
  void conv_transpose2d_backward_data(const ConvGeom& g, const float* dy, const float* w, float* dx);
  void conv_transpose2d_backward_weights(const ConvGeom& g, const float* x, const float* dy, float* dw, float* db,
                                         bool accumulate);

  // loss_sum[0] = sum (y - t)^2 over n elements (device scalar);
  // dy = grad_scale * (y - t), with grad_scale = 2 / (elements of the global batch).
  virtual void mse_loss_grad(int64_t n, const float* y, const float* t, float grad_scale,
                             float* dy, float* loss_sum) = 0;

  // torch.optim.Adam on a flat buffer; step counts from 1.
  virtual void adam_step(int64_t n, float* p, const float* g, float* m, float* v,
                         const AdamParams& a, int64_t step) = 0;

  // bf16 ops (Precision::Bf16 only; the defaults refuse, naming the backend). Convolutions and
  // linear layers read bf16 and accumulate in fp32; forward and backward-data round their output
  // to bf16 once, backward-weights writes fp32 dw and db (overwritten, or added to when
  // accumulate). Shapes as in the fp32 calls above; activations Plain but in the _in calls, whose
  // layouts are as the fp32 ones'. A null b (db) is no bias (no bias gradient).
  virtual void conv2d_forward_bf16(const ConvGeom& g, const Bf16* x, const Bf16* w, const Bf16* b, Bf16* y);
  virtual void conv2d_backward_data_bf16(const ConvGeom& g, const Bf16* dy, const Bf16* w, Bf16* dx);
  virtual void conv2d_backward_weights_bf16(const ConvGeom& g, const Bf16* x, const Bf16* dy, float* dw, float* db,
                                            bool accumulate);
  virtual void conv2d_forward_bf16_in(const ConvGeom& g, ConvLayouts io, const Bf16* x, const Bf16* w, const Bf16* b,
                                      Bf16* y);
  virtual void conv2d_backward_data_bf16_in(const ConvGeom& g, ConvLayouts io, const Bf16* dy, const Bf16* w,
                                            Bf16* dx);
  virtual void conv2d_backward_weights_bf16_in(const ConvGeom& g, ConvLayouts io, const Bf16* x, const Bf16* dy,
                                               float* dw, float* db, bool accumulate);
  virtual void linear_forward_bf16(int64_t n, int64_t in, int64_t out, const Bf16* x, const Bf16* w, const Bf16* b,
                                   Bf16* y);
  virtual void linear_backward_data_bf16(int64_t n, int64_t in, int64_t out, const Bf16* dy, const Bf16* w, Bf16* dx);
  virtual void linear_backward_weights_bf16(int64_t n, int64_t in, int64_t out, const Bf16* x, const Bf16* dy,
                                            float* dw, float* db, bool accumulate);
  // Backward-data over bf16 dy and w with dx written in fp32, unrounded: tp's partial input
  // gradients over channel slices, summed across workers in fp32 and rounded once (docs/bf16.md).
  virtual void conv2d_backward_data_bf16_f32(const ConvGeom& g, const Bf16* dy, const Bf16* w, float* dx);
  // Forward likewise (no bias): a split transposed conv's partial input gradient
  // (conv_transpose2d_backward_data_bf16_f32).
  virtual void conv2d_forward_bf16_f32(const ConvGeom& g, const Bf16* x, const Bf16* w, float* y);
  virtual void linear_backward_data_bf16_f32(int64_t n, int64_t in, int64_t out, const Bf16* dy, const Bf16* w,
                                             float* dx);
  virtual void relu_forward_bf16(int64_t n, const Bf16* x, Bf16* y);                   // may be in place
  virtual void relu_backward_bf16(int64_t n, const Bf16* y, const Bf16* dy, Bf16* dx);  // may be in place
  // The ops above in bf16, each value computed in fp32 and rounded once (as PyTorch's bf16 kernels).
  virtual void add_bf16(int64_t n, const Bf16* a, const Bf16* b, Bf16* y);
  virtual void max_pool2x2_forward_bf16(const Planes& x_shape, const Bf16* x, Bf16* y);
  virtual void max_pool2x2_backward_bf16(const Planes& x_shape, const Bf16* x, const Bf16* dy, Bf16* dx);
  virtual void upsample2x_forward_bf16(const Planes& x_shape, const Bf16* x, Bf16* y);
  virtual void upsample2x_backward_bf16(const Planes& x_shape, const Bf16* dy, Bf16* dx);
  virtual void add_channel_bias_bf16(int64_t n, int64_t channels, int64_t inner, const Bf16* b, Bf16* y);
  // db in fp32, as the convolutions' bias gradients.
  virtual void channel_sums_bf16(int64_t n, int64_t channels, int64_t inner, const Bf16* dy, float* db, bool accumulate);
  // conv_transpose2d_* in bf16 (weights and bias bf16, weight gradients fp32), made the same way.
  void conv_transpose2d_forward_bf16(const ConvGeom& g, const Bf16* x, const Bf16* w, const Bf16* b, Bf16* y);
  void conv_transpose2d_backward_data_bf16(const ConvGeom& g, const Bf16* dy, const Bf16* w, Bf16* dx);
  void conv_transpose2d_backward_data_bf16_f32(const ConvGeom& g, const Bf16* dy, const Bf16* w, float* dx);
  void conv_transpose2d_backward_weights_bf16(const ConvGeom& g, const Bf16* x, const Bf16* dy, float* dw, float* db,
                                              bool accumulate);
  // dst = src rounded to nearest even (NaN stays NaN); the reverse is exact.
  virtual void to_bf16(int64_t n, const float* src, Bf16* dst);
  virtual void from_bf16(int64_t n, const Bf16* src, float* dst);
  // copy_2d's rows of bf16 values (pitches and width in values), on the compute queue.
  virtual void copy_2d_bf16(Bf16* dst, int64_t dst_pitch, const Bf16* src, int64_t src_pitch, int64_t width,
                            int64_t rows);

  // Blocks until all work queued on this backend is done (timing points, host reads).
  virtual void synchronize() = 0;
  // Waits for the queued work, then frees the library workspace this backend keeps for reuse (the
  // next call that needs some allocates it again): the growth of the device's workspace count
  // around the next call is then that call's own need (parbench profile). None kept: nothing.
  virtual void release_workspace() {}

  // Data movement queued like the ops (`stream` null: the compute queue), so a step needs no host
  // round trip for it; on CPU it runs when called.
  // dst[0, n) = value, on this device.
  virtual void fill(float* dst, int64_t n, float value, Stream* stream = nullptr) = 0;
  // dst[i] = hashed_normal(seed, offset + i, scale) for i in [0, n) (engine/random_fill.h): the
  // same values on every backend, made on this device. The default makes them on the host and
  // copies them over, then waits for the copy.
  virtual void fill_normal(float* dst, int64_t n, uint64_t seed, uint64_t offset, float scale,
                           Stream* stream = nullptr);
  // rows x width floats on this device: dst[r * dst_pitch + i] = src[r * src_pitch + i] (pitches
  // in floats, at least width; the ranges do not overlap).
  virtual void copy_2d(float* dst, int64_t dst_pitch, const float* src, int64_t src_pitch, int64_t width,
                       int64_t rows, Stream* stream = nullptr) = 0;
  // bytes from src on src_dev to dst on dst_dev, one of them this device (the other the host,
  // this device or another); done once the stream's work is (synchronize(Stream&)).
  virtual void copy(Device dst_dev, void* dst, Device src_dev, const void* src, std::size_t bytes,
                    Stream* stream = nullptr) = 0;
  // The host waits for the work queued on `stream` alone.
  virtual void synchronize(Stream& stream) = 0;

  // Ordering between queues without blocking the host. `stream` null means this backend's
  // compute queue. A communicator records an event on the compute queue and makes its own
  // stream wait for it before a transfer, then the reverse after, so neither side stalls the host.
  virtual std::unique_ptr<Stream> create_stream() = 0;
  virtual std::unique_ptr<Event> create_event() = 0;
  virtual void record(Event& e, Stream* stream = nullptr) = 0;
  virtual void wait(Event& e, Stream* stream = nullptr) = 0;  // later work on stream waits for e
  virtual void synchronize(Event& e) = 0;                     // the host waits for e
  // Seconds between two recorded events, both complete (after synchronize).
  virtual double elapsed_s(Event& start, Event& end) = 0;
};

std::unique_ptr<Backend> make_backend(Device d, const BackendOptions& opts = {});

// Why a CUDA GPU of compute capability major.minor cannot run precision bf16 (cuDNN's bf16
// convolutions need 8.0), naming it; empty where it can. The CUDA backend refuses at construction.
std::string cuda_bf16_refusal(int cc_major, int cc_minor, const std::string& gpu_name);

}  // namespace pb
