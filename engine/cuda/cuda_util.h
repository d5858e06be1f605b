// RAII owners for CUDA, cuDNN and cuBLAS handles, one small class per kind. Creation is
// checked (throws); destruction never throws, because it runs during unwinding and at exit,
// when the runtime may already be shutting down. Also the checked narrowing to their ints.
#pragma once

#include <cstdint>
#include <limits>
#include <utility>

#include "engine/check.h"

namespace pb::cu {

// Makes `device` current for the calling thread. Every public CUDA entry point calls it first,
// because one host thread may drive several GPUs and the current device is per thread.
inline void use_device(int device) { CUDA_CHECK(cudaSetDevice(device)); }

inline int to_int(int64_t v, const char* what) {
  PB_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "{} = {} does not fit the int a CUDA library takes",
           what, v);
  return static_cast<int>(v);
}

// A move-only owner of one handle: Traits supply create/destroy for the handle type.
template <typename Traits>
class Handle {
 public:
  using T = typename Traits::type;
  template <typename... Args>
  explicit Handle(Args&&... args) : h_(Traits::create(std::forward<Args>(args)...)) {}
  ~Handle() { reset(); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& o) noexcept : h_(std::exchange(o.h_, T{})) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, T{});
    }
    return *this;
  }
  T get() const { return h_; }
  operator T() const { return h_; }  // NOLINT: handles pass straight into library calls

 private:
  void reset() noexcept {
    if (h_ != T{}) Traits::destroy(h_);
    h_ = T{};
  }
  T h_{};
};

struct StreamTraits {
  using type = cudaStream_t;
  // Blocking by default (not cudaStreamNonBlocking) on purpose: copies that device.cpp issues on
  // the legacy default stream then order after this stream's kernels, and vice versa. That stream
  // waits for every blocking stream of the device, other workers' included, so copies between
  // workers go on non-blocking streams instead (Backend::create_stream, Backend::copy).
  static cudaStream_t create(unsigned flags = cudaStreamDefault) {
    cudaStream_t s = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, flags));
    return s;
  }
  static void destroy(cudaStream_t s) noexcept { (void)cudaStreamDestroy(s); }
};

struct EventTraits {
  using type = cudaEvent_t;
  static cudaEvent_t create(unsigned flags = cudaEventDefault) {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, flags));
    return e;
  }
  static void destroy(cudaEvent_t e) noexcept { (void)cudaEventDestroy(e); }
};

struct CudnnTraits {
  using type = cudnnHandle_t;
  static cudnnHandle_t create() {
    cudnnHandle_t h = nullptr;
    CUDNN_CHECK(cudnnCreate(&h));
    return h;
  }
  static void destroy(cudnnHandle_t h) noexcept { (void)cudnnDestroy(h); }
};

struct CublasTraits {
  using type = cublasHandle_t;
  static cublasHandle_t create() {
    cublasHandle_t h = nullptr;
    CUBLAS_CHECK(cublasCreate(&h));
    return h;
  }
  static void destroy(cublasHandle_t h) noexcept { (void)cublasDestroy(h); }
};

struct TensorDescTraits {
  using type = cudnnTensorDescriptor_t;
  static cudnnTensorDescriptor_t create() {
    cudnnTensorDescriptor_t d = nullptr;
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
    return d;
  }
  static void destroy(cudnnTensorDescriptor_t d) noexcept { (void)cudnnDestroyTensorDescriptor(d); }
};

struct FilterDescTraits {
  using type = cudnnFilterDescriptor_t;
  static cudnnFilterDescriptor_t create() {
    cudnnFilterDescriptor_t d = nullptr;
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&d));
    return d;
  }
  static void destroy(cudnnFilterDescriptor_t d) noexcept { (void)cudnnDestroyFilterDescriptor(d); }
};

struct ConvDescTraits {
  using type = cudnnConvolutionDescriptor_t;
  static cudnnConvolutionDescriptor_t create() {
    cudnnConvolutionDescriptor_t d = nullptr;
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d));
    return d;
  }
  static void destroy(cudnnConvolutionDescriptor_t d) noexcept {
    (void)cudnnDestroyConvolutionDescriptor(d);
  }
};

using Stream = Handle<StreamTraits>;
using Event = Handle<EventTraits>;
using CudnnHandle = Handle<CudnnTraits>;
using CublasHandle = Handle<CublasTraits>;
using TensorDesc = Handle<TensorDescTraits>;
using FilterDesc = Handle<FilterDescTraits>;
using ConvDesc = Handle<ConvDescTraits>;

}  // namespace pb::cu
