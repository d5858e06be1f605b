// Tensors: float32, NCHW (or N x features), over an owning device buffer. A tensor may be a
// view into a larger buffer (parameters of one layer inside a model's flat parameter buffer).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/device.h"

namespace pb {

class Backend;

using Shape = std::vector<int64_t>;

int64_t numel_of(const Shape& s);
std::string shape_str(const Shape& s);

class Buffer {
 public:
  Buffer(Device dev, std::size_t bytes, MemoryPool pool = MemoryPool::Tensors);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* data() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return dev_; }

 private:
  Device dev_;
  std::size_t bytes_;
  MemoryPool pool_;
  void* ptr_;
};

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(const Shape& shape, Device dev);
  // Zeros on the host's clock: a memset on the CPU, a copy from a host buffer on a GPU (setup only).
  static Tensor zeros(const Shape& shape, Device dev);
  // Zeros by a fill queued on be's compute queue, on be's device: no host buffer, no round trip.
  static Tensor zeros(const Shape& shape, Backend& be);
  static Tensor from_host(const Shape& shape, const std::vector<float>& values, Device dev);

  bool defined() const { return buf_ != nullptr; }
  float* data() const;
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return numel_of(shape_); }
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * sizeof(float); }
  Device device() const;

  // A view of `shape` starting `offset` elements into this tensor's storage.
  Tensor view(int64_t offset, const Shape& shape) const;
  Tensor reshaped(const Shape& shape) const { return view(0, shape); }

  std::vector<float> to_host() const;
  void copy_from_host(const float* src, int64_t n, int64_t offset = 0);
  void copy_from(const Tensor& src);  // any device to any device, same numel

 private:
  std::shared_ptr<Buffer> buf_;
  int64_t offset_ = 0;
  Shape shape_;
};

}  // namespace pb
