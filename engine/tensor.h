// Tensors: float32 (or bf16, for autocast's activations), NCHW (or N x features), over an owning
// device buffer. A tensor may be a view into a larger buffer (parameters of one layer inside a
// model's flat parameter buffer).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/bf16.h"
#include "engine/device.h"

namespace pb {

class Backend;

using Shape = std::vector<int64_t>;

int64_t numel_of(const Shape& s);
std::string shape_str(const Shape& s);
// A size for names and messages: "640 B", "64 KiB", "3.2 MiB", "1.5 GiB" (three significant digits).
std::string bytes_str(double bytes);

enum class DType { F32, Bf16 };
const char* dtype_name(DType t);
// The words flags, plans and reports use: "fp32", "bf16" (--reduce-dtype, --param-dtype).
const char* dtype_label(DType t);
DType parse_dtype_label(const std::string& s, const std::string& what);  // UsageError naming `what`
inline std::size_t dtype_size(DType t) { return t == DType::F32 ? sizeof(float) : sizeof(Bf16); }

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
  static Tensor empty(const Shape& shape, Device dev, DType dtype = DType::F32);
  // Zeros on the host's clock: a memset on the CPU, a copy from a host buffer on a GPU (setup only).
  static Tensor zeros(const Shape& shape, Device dev);
  // Zeros by a fill queued on be's compute queue, on be's device: no host buffer, no round trip.
  static Tensor zeros(const Shape& shape, Backend& be);
  static Tensor from_host(const Shape& shape, const std::vector<float>& values, Device dev);

  bool defined() const { return buf_ != nullptr; }
  float* data() const;      // F32 tensors only
  Bf16* data_bf16() const;  // Bf16 tensors only
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return numel_of(shape_); }
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  Device device() const;

  // A view of `shape` starting `offset` elements into this tensor's storage.
  Tensor view(int64_t offset, const Shape& shape) const;
  Tensor reshaped(const Shape& shape) const { return view(0, shape); }

  std::vector<float> to_host() const;  // bf16 values widened (exactly) to float
  void copy_from_host(const float* src, int64_t n, int64_t offset = 0);  // F32 only
  void copy_from(const Tensor& src);  // any device to any device, same numel and dtype

 private:
  std::shared_ptr<Buffer> buf_;
  int64_t offset_ = 0;  // in elements of dtype_
  Shape shape_;
  DType dtype_ = DType::F32;
  void* raw() const;
};

}  // namespace pb
