// CUDA backend: convolutions through cuDNN (cuda_conv.cpp), Linear through cuBLAS, everything
// else through parbench's own kernels (cuda_kernels.cu). One stream per backend carries all of
// its work; a backend is driven by one host thread at a time.
#include "engine/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "engine/check.h"
#include "engine/cuda/cuda_bf16.h"
#include "engine/cuda/cuda_conv.h"
#include "engine/cuda/cudnn_graph.h"
#include "engine/cuda/cuda_kernels.h"
#include "engine/cuda/cuda_random_fill.h"
#include "engine/cuda/cuda_resample.h"
#include "engine/cuda/cuda_util.h"
#include "engine/tensor.h"

namespace pb {

namespace {

constexpr float kOne = 1.0f, kZero = 0.0f;

using cu::to_int;

// Timed or heuristic algorithm choice: PARBENCH_CONV_SEARCH, when set, overrides the option for
// the whole process (so a benchmark can match torch.backends.cudnn.benchmark without a flag).
bool exhaustive_search(const BackendOptions& opts) {
  const char* env = std::getenv("PARBENCH_CONV_SEARCH");
  if (env == nullptr || *env == '\0') return opts.exhaustive_conv_search;
  const std::string v = env;
  if (v == "exhaustive") return true;
  if (v == "heuristic") return false;
  throw UsageError(fmt::format("PARBENCH_CONV_SEARCH must be 'exhaustive' or 'heuristic', got '{}'", v));
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, const BackendOptions& options)
      : device_(device), opts_(options), exhaustive_(exhaustive_search(opts_)),
        set_device_(device),
        convs_(Device{DeviceKind::Cuda, device}, opts_, exhaustive_, cudnn_) {
    const BackendOptions& opts = opts_;
    CUDNN_CHECK(cudnnSetStream(cudnn_, stream_));
    CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    // fp32: cuBLAS's default math never uses TF32 for sgemm (TF32 has fewer mantissa bits than
    // asked for), as torch.backends.cuda.matmul.allow_tf32=False. tf32: opt in explicitly.
    CUBLAS_CHECK(cublasSetMathMode(cublas_, opts.precision == Precision::Fp32 ? CUBLAS_DEFAULT_MATH
                                                                              : CUBLAS_TF32_TENSOR_OP_MATH));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    gpu_name_ = prop.name;
    if (opts.precision == Precision::Bf16) {
      const std::string why = cuda_bf16_refusal(prop.major, prop.minor, gpu_name_);
      if (!why.empty()) throw Error(why);
      bf16_ = std::make_unique<cu::CudaBf16>(dev(), cudnn_, cublas_, stream_, opts.conv_workspace_cap_bytes,
                                             exhaustive_);
      bf16_->use_partials(&partials_);
    }
    // MSE scratch: partial sums, then the completion counter, which starts at zero.
    mse_scratch_ = std::make_unique<Buffer>(dev(), cu::kMseMaxBlocks * sizeof(double) + sizeof(unsigned int));
    CUDA_CHECK(cudaMemsetAsync(mse_scratch_->data(), 0, mse_scratch_->bytes(), stream_));
  }

  ~CudaBackend() override {
    // The members' destructors free handles and buffers that belong to this device; let queued
    // work finish first. Errors are ignored: this may run during unwinding or at exit.
    if (cudaSetDevice(device_) != cudaSuccess || cudaStreamSynchronize(stream_) != cudaSuccess)
      (void)cudaGetLastError();
  }

  Device device() const override { return dev(); }
  std::string name() const override {
    return fmt::format("{} {} ({}{}, conv algorithms: cuDNN {} API, {})", dev().str(), gpu_name_,
                       precision_name(opts_.precision),
                       opts_.cuda_nhwc ? ", NHWC between convolutions" : "",
                       cu::use_graph_api() ? "graph" : "legacy",
                       exhaustive_ ? "exhaustive search" : "heuristics");
  }

  void conv2d_forward(const ConvGeom& g, const float* x, const float* w, const float* b, float* y) override {
    fp32_only("convolution");
    cu::use_device(device_);
    convs_.forward(g, x, w, b, y);
  }
  void conv2d_backward_data(const ConvGeom& g, const float* dy, const float* w, float* dx) override {
    fp32_only("convolution");
    cu::use_device(device_);
    convs_.backward_data(g, dy, w, dx);
  }
  void conv2d_backward_weights(const ConvGeom& g, const float* x, const float* dy, float* dw, float* db,
                               bool accumulate) override {
    fp32_only("convolution");
    cu::use_device(device_);
    convs_.backward_weights(g, x, dy, dw, db, accumulate);
  }
  // The ReLU after a convolution goes into its bias's pass: one read and write of y fewer, the same
  // values (the sum rounds as cudnnAddTensor's, max(v, 0) as relu_forward's).
  bool conv2d_relu_forward(const ConvGeom& g, const float* x, const float* w, const float* b, float* y) override {
    return conv2d_relu_forward_in(g, {}, x, w, b, y);
  }
  bool conv2d_relu_forward_in(const ConvGeom& g, ConvLayouts io, const float* x, const float* w, const float* b,
                              float* y) override {
    fp32_only("convolution");
    cu::use_device(device_);
    convs_.forward(g, io, x, w, b, y, /*relu=*/true);
    return true;
  }
  // --layout nhwc: Blocked is NHWC (CudnnConv; under bf16, CudaBf16).
  bool conv_keeps_blocked(const ConvGeom&, const ConvGeom&) override { return opts_.cuda_nhwc; }
  void conv2d_forward_in(const ConvGeom& g, ConvLayouts io, const float* x, const float* w, const float* b,
                         float* y) override {
    fp32_only("convolution");
    cu::use_device(device_);
    convs_.forward(g, io, x, w, b, y);
  }
  void conv2d_backward_data_in(const ConvGeom& g, ConvLayouts io, const float* dy, const float* w,
                               float* dx) override {
    fp32_only("convolution");
    cu::use_device(device_);
    convs_.backward_data(g, io, dy, w, dx);
  }
  void conv2d_backward_weights_in(const ConvGeom& g, ConvLayouts io, const float* x, const float* dy, float* dw,
                                  float* db, bool accumulate) override {
    fp32_only("convolution");
    cu::use_device(device_);
    convs_.backward_weights(g, io, x, dy, dw, db, accumulate);
  }
  std::string conv_algorithms(const ConvGeom& g) const override {
    return bf16_ ? bf16_->algorithms(g) : convs_.algorithms(g);
  }
  std::array<std::string, 3> conv_pass_algorithms(const ConvGeom& g, bool) override { return convs_.pass_algorithms(g); }

  // Row-major PyTorch layouts seen as column-major: x[n,in] is X'[in,n], w[out,in] is
  // W'[in,out], y[n,out] is Y'[out,n]. So y = x w^T is Y' = W'^T X'.
  void linear_forward(int64_t n, int64_t in, int64_t out, const float* x, const float* w, const float* b,
                      float* y) override {
    fp32_only("linear layer");
    cu::use_device(device_);
    const int N = to_int(n, "batch"), I = to_int(in, "in_features"), O = to_int(out, "out_features");
    if (b) cu::launch_broadcast_rows(stream_, n, out, b, y);
    CUBLAS_CHECK(cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, O, N, I, &kOne, w, I, x, I, b ? &kOne : &kZero, y, O));
  }

  // dx = dy w: dX'[in,n] = W'[in,out] dY'[out,n].
  void linear_backward_data(int64_t n, int64_t in, int64_t out, const float* dy, const float* w,
                            float* dx) override {
    fp32_only("linear layer");
    cu::use_device(device_);
    const int N = to_int(n, "batch"), I = to_int(in, "in_features"), O = to_int(out, "out_features");
    CUBLAS_CHECK(cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, I, N, O, &kOne, w, I, dy, O, &kZero, dx, I));
  }

  // dw = dy^T x: dW'[in,out] = X'[in,n] dY'^T[n,out].
  void linear_backward_weights(int64_t n, int64_t in, int64_t out, const float* x, const float* dy, float* dw,
                               float* db, bool accumulate) override {
    fp32_only("linear layer");
    cu::use_device(device_);
    const int N = to_int(n, "batch"), I = to_int(in, "in_features"), O = to_int(out, "out_features");
    CUBLAS_CHECK(cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_T, I, O, N, &kOne, x, I, dy, O,
                             accumulate ? &kOne : &kZero, dw, I));
    if (db) cu::launch_column_sums(stream_, n, out, dy, db, accumulate, partials_);
  }

  // Under bf16 the fp32 convolutions and linear layers refuse: a caller without autocast (tp
  // across workers, for now) must not run fp32 as bf16.
  void fp32_only(const char* op) const {
    if (opts_.precision == Precision::Bf16)
      throw Error(fmt::format("{}: an fp32 {} on a backend made for bf16 (this caller has no autocast path yet)",
                              name(), op));
  }
  // bf16 (engine/cuda/cuda_bf16.cpp), on backends made for Precision::Bf16.
  cu::CudaBf16& bf16() {
    PB_CHECK(bf16_ != nullptr, "{}: a bf16 op on a backend made for {}", name(), precision_name(opts_.precision));
    cu::use_device(device_);
    return *bf16_;
  }
  void conv2d_forward_bf16(const ConvGeom& g, const Bf16* x, const Bf16* w, const Bf16* b, Bf16* y) override {
    bf16().conv_forward(g, x, w, b, y);
  }
  void conv2d_backward_data_bf16(const ConvGeom& g, const Bf16* dy, const Bf16* w, Bf16* dx) override {
    bf16().conv_backward_data(g, dy, w, dx);
  }
  void conv2d_backward_weights_bf16(const ConvGeom& g, const Bf16* x, const Bf16* dy, float* dw, float* db,
                                    bool accumulate) override {
    bf16().conv_backward_weights(g, x, dy, dw, db, accumulate);
  }
  void conv2d_forward_bf16_in(const ConvGeom& g, ConvLayouts io, const Bf16* x, const Bf16* w, const Bf16* b,
                              Bf16* y) override {
    bf16().conv_forward(g, io, x, w, b, y);
  }
  void conv2d_backward_data_bf16_in(const ConvGeom& g, ConvLayouts io, const Bf16* dy, const Bf16* w,
                                    Bf16* dx) override {
    bf16().conv_backward_data(g, io, dy, w, dx);
  }
  void conv2d_backward_weights_bf16_in(const ConvGeom& g, ConvLayouts io, const Bf16* x, const Bf16* dy, float* dw,
                                       float* db, bool accumulate) override {
    bf16().conv_backward_weights(g, io, x, dy, dw, db, accumulate);
  }
  // cuDNN's bf16 convolutions write bf16: dy and w are widened (exactly) and the fp32 convolution
  // runs instead. Its inputs hold bf16 values, which TF32 (allowed under bf16) keeps exactly, so it
  // sums the same products in fp32.
  void conv2d_backward_data_bf16_f32(const ConvGeom& g, const Bf16* dy, const Bf16* w, float* dx) override {
    bf16();
    const int64_t dn = g.n * g.k * g.p() * g.q(), wn = g.k * g.c * g.r * g.s;
    float* dy32 = widened(0, dn);
    float* w32 = widened(1, wn);
    cu::launch_from_bf16(stream_, dn, dy, dy32);
    cu::launch_from_bf16(stream_, wn, w, w32);
    convs_.backward_data(g, dy32, w32, dx);
  }
  void conv2d_forward_bf16_f32(const ConvGeom& g, const Bf16* x, const Bf16* w, float* y) override {
    bf16();
    const int64_t xn = g.n * g.c * g.h * g.w, wn = g.k * g.c * g.r * g.s;
    float* x32 = widened(0, xn);
    float* w32 = widened(1, wn);
    cu::launch_from_bf16(stream_, xn, x, x32);
    cu::launch_from_bf16(stream_, wn, w, w32);
    convs_.forward(g, x32, w32, nullptr, y);
  }
  void linear_backward_data_bf16_f32(int64_t n, int64_t in, int64_t out, const Bf16* dy, const Bf16* w,
                                     float* dx) override {
    bf16().linear_backward_data_f32(n, in, out, dy, w, dx);
  }
  // Grow-only fp32 scratch; an outgrown one is kept, as queued work may still read it.
  float* widened(int i, int64_t n) {
    std::unique_ptr<Buffer>& b = widened_[i];
    if (!b || b->bytes() < static_cast<std::size_t>(n) * sizeof(float)) {
      if (b) outgrown_.push_back(std::move(b));
      b = std::make_unique<Buffer>(dev(), static_cast<std::size_t>(n) * sizeof(float), MemoryPool::Workspace);
    }
    return static_cast<float*>(b->data());
  }
  void linear_forward_bf16(int64_t n, int64_t in, int64_t out, const Bf16* x, const Bf16* w, const Bf16* b,
                           Bf16* y) override {
    bf16().linear_forward(n, in, out, x, w, b, y);
  }
  void linear_backward_data_bf16(int64_t n, int64_t in, int64_t out, const Bf16* dy, const Bf16* w,
                                 Bf16* dx) override {
    bf16().linear_backward_data(n, in, out, dy, w, dx);
  }
  void linear_backward_weights_bf16(int64_t n, int64_t in, int64_t out, const Bf16* x, const Bf16* dy, float* dw,
                                    float* db, bool accumulate) override {
    bf16().linear_backward_weights(n, in, out, x, dy, dw, db, accumulate);
  }
  void relu_forward_bf16(int64_t n, const Bf16* x, Bf16* y) override {
    cu::use_device(device_);
    cu::launch_relu_bf16(stream_, n, x, y);
  }
  void relu_backward_bf16(int64_t n, const Bf16* y, const Bf16* dy, Bf16* dx) override {
    cu::use_device(device_);
    cu::launch_relu_backward_bf16(stream_, n, y, dy, dx);
  }
  void to_bf16(int64_t n, const float* src, Bf16* dst) override {
    cu::use_device(device_);
    cu::launch_to_bf16(stream_, n, src, dst);
  }
  void from_bf16(int64_t n, const Bf16* src, float* dst) override {
    cu::use_device(device_);
    cu::launch_from_bf16(stream_, n, src, dst);
  }
  Precision precision() const override { return opts_.precision; }

  void relu_forward(int64_t n, const float* x, float* y) override {
    cu::use_device(device_);
    cu::launch_relu_forward(stream_, n, x, y);
  }

  void relu_backward(int64_t n, const float* y, const float* dy, float* dx) override {
    cu::use_device(device_);
    cu::launch_relu_backward(stream_, n, y, dy, dx);
  }

  // The ops of nets with skips (engine/cuda/cuda_resample.cu), fp32 and bf16.
  void add(int64_t n, const float* a, const float* b, float* y) override {
    cu::use_device(device_);
    cu::launch_add(stream_, n, a, b, y);
  }
  void max_pool2x2_forward(const Planes& s, const float* x, float* y) override {
    cu::use_device(device_);
    cu::launch_max_pool2x2_forward(stream_, s, x, y);
  }
  void max_pool2x2_backward(const Planes& s, const float* x, const float* dy, float* dx) override {
    cu::use_device(device_);
    cu::launch_max_pool2x2_backward(stream_, s, x, dy, dx);
  }
  void upsample2x_forward(const Planes& s, const float* x, float* y) override {
    cu::use_device(device_);
    cu::launch_upsample2x_forward(stream_, s, x, y);
  }
  void upsample2x_backward(const Planes& s, const float* dy, float* dx) override {
    cu::use_device(device_);
    cu::launch_upsample2x_backward(stream_, s, dy, dx);
  }
  void add_channel_bias(int64_t n, int64_t channels, int64_t inner, const float* b, float* y) override {
    cu::use_device(device_);
    cu::launch_add_channel_bias(stream_, n, channels, inner, b, y);
  }
  void channel_sums(int64_t n, int64_t channels, int64_t inner, const float* dy, float* db, bool accumulate) override {
    cu::use_device(device_);
    cu::launch_channel_sums(stream_, n, channels, inner, dy, db, accumulate, partials_);
  }
  void add_bf16(int64_t n, const Bf16* a, const Bf16* b, Bf16* y) override {
    cu::use_device(device_);
    cu::launch_add(stream_, n, a, b, y);
  }
  void max_pool2x2_forward_bf16(const Planes& s, const Bf16* x, Bf16* y) override {
    cu::use_device(device_);
    cu::launch_max_pool2x2_forward(stream_, s, x, y);
  }
  void max_pool2x2_backward_bf16(const Planes& s, const Bf16* x, const Bf16* dy, Bf16* dx) override {
    cu::use_device(device_);
    cu::launch_max_pool2x2_backward(stream_, s, x, dy, dx);
  }
  void upsample2x_forward_bf16(const Planes& s, const Bf16* x, Bf16* y) override {
    cu::use_device(device_);
    cu::launch_upsample2x_forward(stream_, s, x, y);
  }
  void upsample2x_backward_bf16(const Planes& s, const Bf16* dy, Bf16* dx) override {
    cu::use_device(device_);
    cu::launch_upsample2x_backward(stream_, s, dy, dx);
  }
  void add_channel_bias_bf16(int64_t n, int64_t channels, int64_t inner, const Bf16* b, Bf16* y) override {
    cu::use_device(device_);
    cu::launch_add_channel_bias(stream_, n, channels, inner, b, y);
  }
  void channel_sums_bf16(int64_t n, int64_t channels, int64_t inner, const Bf16* dy, float* db, bool accumulate) override {
    cu::use_device(device_);
    cu::launch_channel_sums_bf16(stream_, n, channels, inner, dy, db, accumulate, partials_);
  }

  void mse_loss_grad(int64_t n, const float* y, const float* t, float grad_scale, float* dy,
                     float* loss_sum) override {
    cu::use_device(device_);
    auto* base = static_cast<unsigned char*>(mse_scratch_->data());
    cu::MseScratch s{reinterpret_cast<double*>(base),
                     reinterpret_cast<unsigned int*>(base + cu::kMseMaxBlocks * sizeof(double))};
    cu::launch_mse_loss_grad(stream_, n, y, t, grad_scale, dy, loss_sum, s);
  }

  void adam_step(int64_t n, float* p, const float* g, float* m, float* v, const AdamParams& a,
                 int64_t step) override {
    cu::use_device(device_);
    const AdamStepScalars s = adam_step_scalars(a, step);
    cu::launch_adam(stream_, n, p, g, m, v, s);
  }

  void synchronize() override {
    cu::use_device(device_);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    // Only this stream's convolutions and reductions use the workspaces, and they are done: an
    // outgrown one can go.
    convs_.release_outgrown();
    partials_.release_outgrown();
  }
  // cuDNN's convolution workspace; bf16's own (cu::CudaBf16) stays.
  void release_workspace() override {
    synchronize();
    convs_.release_workspace();
  }

  // A memset where it can be one (all-zero bits are 0.0f), on the given queue like every op.
  void fill(float* dst, int64_t n, float value, Stream* s) override {
    if (n <= 0) return;
    cu::use_device(device_);
    if (value == 0.0f && !std::signbit(value))
      CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<std::size_t>(n) * sizeof(float), queue(s)));
    else
      cu::launch_fill(queue(s), n, value, dst);
  }
  void fill_normal(float* dst, int64_t n, uint64_t seed, uint64_t offset, float scale, Stream* s) override {
    if (n <= 0) return;
    cu::use_device(device_);
    cu::launch_fill_normal(queue(s), n, seed, offset, scale, dst);
  }
  void copy_2d(float* dst, int64_t dst_pitch, const float* src, int64_t src_pitch, int64_t width, int64_t rows,
               Stream* s) override {
    rows_copy(dst, dst_pitch, src, src_pitch, width, rows, sizeof(float), queue(s));
  }
  void copy_2d_bf16(Bf16* dst, int64_t dst_pitch, const Bf16* src, int64_t src_pitch, int64_t width,
                    int64_t rows) override {
    bf16();
    rows_copy(dst, dst_pitch, src, src_pitch, width, rows, sizeof(Bf16), queue(nullptr));
  }
  // rows x width values of `size` bytes (pitches in values), one cudaMemcpy2DAsync.
  void rows_copy(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t width, int64_t rows,
                 std::size_t size, cudaStream_t q) {
    if (width <= 0 || rows <= 0) return;
    cu::use_device(device_);
    auto b = [size](int64_t values) { return static_cast<std::size_t>(values) * size; };
    CUDA_CHECK(cudaMemcpy2DAsync(dst, b(dst_pitch), src, b(src_pitch), b(width), static_cast<std::size_t>(rows),
                                 cudaMemcpyDeviceToDevice, q));
  }
  void copy(Device dst_dev, void* dst, Device src_dev, const void* src, std::size_t bytes, Stream* s) override {
    cu::use_device(device_);
    cuda_copy_async(dst_dev, dst, src_dev, src, bytes, queue(s));
  }
  void synchronize(Stream& s) override {
    cu::use_device(device_);
    CUDA_CHECK(cudaStreamSynchronize(queue(&s)));
  }

  std::unique_ptr<Stream> create_stream() override {
    cu::use_device(device_);
    return std::make_unique<CudaStream>();
  }
  std::unique_ptr<Event> create_event() override {
    cu::use_device(device_);
    return std::make_unique<CudaEvent>();
  }
  void record(Event& e, Stream* s) override {
    cu::use_device(device_);
    CUDA_CHECK(cudaEventRecord(static_cast<CudaEvent&>(e).event, queue(s)));
  }
  void wait(Event& e, Stream* s) override {
    cu::use_device(device_);
    CUDA_CHECK(cudaStreamWaitEvent(queue(s), static_cast<CudaEvent&>(e).event, 0));
  }
  void synchronize(Event& e) override {
    cu::use_device(device_);
    CUDA_CHECK(cudaEventSynchronize(static_cast<CudaEvent&>(e).event));
  }
  double elapsed_s(Event& start, Event& end) override {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<CudaEvent&>(start).event, static_cast<CudaEvent&>(end).event));
    return ms * 1e-3;
  }

 private:
  // Constructed before the stream and handles, so they are created on this device.
  struct SetDevice {
    explicit SetDevice(int d) { cu::use_device(d); }
  };

  Device dev() const { return Device{DeviceKind::Cuda, device_}; }

  // Non-blocking: a communicator's transfers never wait on unrelated legacy-stream work, and
  // overlap the compute stream (ddp buckets during backward).
  struct CudaStream final : Stream {
    cu::Stream stream{cudaStreamNonBlocking};
    void* native() const override { return stream.get(); }
  };
  struct CudaEvent final : Event {
    cu::Event event;
  };
  cudaStream_t queue(Stream* s) const { return s ? static_cast<cudaStream_t>(s->native()) : stream_.get(); }

  int device_;
  BackendOptions opts_;
  bool exhaustive_;
  SetDevice set_device_;
  cu::Stream stream_;
  cu::CudnnHandle cudnn_;
  cu::CublasHandle cublas_;
  // The bias gradients' partial sums (fp32 Linear and bf16), in the workspace pool.
  cu::PartialsScratch partials_{Device{DeviceKind::Cuda, device_}};
  std::unique_ptr<cu::CudaBf16> bf16_;  // Precision::Bf16 only; declared after the handles it uses
  std::string gpu_name_;
  cu::CudnnConv convs_;
  std::unique_ptr<Buffer> mse_scratch_;
  std::unique_ptr<Buffer> widened_[2];  // conv2d_*_bf16_f32's bf16 operands in fp32
  std::vector<std::unique_ptr<Buffer>> outgrown_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device, const BackendOptions& opts) {
  const int n = cuda_count_devices();
  if (device < 0 || device >= n)
    throw Error(fmt::format("cuda:{} requested, but this machine has {} CUDA device(s)", device, n));
  // The allocator first: its baseline (memory in use before this process's) is read before the
  // backend's handles take any.
  (void)allocator_for(Device{DeviceKind::Cuda, device});
  return std::make_unique<CudaBackend>(device, opts);
}

}  // namespace pb
