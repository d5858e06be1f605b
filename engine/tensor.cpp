// Tensor storage, views and host/device transfers.
#include "engine/tensor.h"

#include <cstring>

#include "engine/backend.h"
#include "engine/check.h"

namespace pb {

int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) {
    out += std::to_string(s[i]);
    if (s.size() == 1 || i + 1 < s.size()) out += s.size() == 1 ? "," : ", ";
  }
  return out + ")";
}

Buffer::Buffer(Device dev, std::size_t bytes, MemoryPool pool)
    : dev_(dev), bytes_(bytes), pool_(pool), ptr_(allocator_for(dev).allocate(bytes, pool)) {}

Buffer::~Buffer() { allocator_for(dev_).release(ptr_, bytes_, pool_); }

Tensor Tensor::empty(const Shape& shape, Device dev) {
  Tensor t;
  for (int64_t d : shape) PB_CHECK(d >= 0, "negative dimension in {}", shape_str(shape));
  t.buf_ = std::make_shared<Buffer>(dev, static_cast<std::size_t>(numel_of(shape)) * sizeof(float));
  t.shape_ = shape;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, Device dev) {
  Tensor t = empty(shape, dev);
  if (dev.kind == DeviceKind::Cpu) {
    if (t.numel() > 0) std::memset(t.data(), 0, t.bytes());
    return t;
  }
  std::vector<float> z(static_cast<std::size_t>(t.numel()), 0.0f);
  t.copy_from_host(z.data(), t.numel());
  return t;
}

Tensor Tensor::zeros(const Shape& shape, Backend& be) {
  Tensor t = empty(shape, be.device());
  be.fill(t.data(), t.numel(), 0.0f);
  return t;
}

Tensor Tensor::from_host(const Shape& shape, const std::vector<float>& values, Device dev) {
  PB_CHECK(numel_of(shape) == static_cast<int64_t>(values.size()), "{} values for shape {}",
           values.size(), shape_str(shape));
  Tensor t = empty(shape, dev);
  t.copy_from_host(values.data(), t.numel());
  return t;
}

float* Tensor::data() const {
  return buf_ ? static_cast<float*>(buf_->data()) + offset_ : nullptr;
}

Device Tensor::device() const { return buf_ ? buf_->device() : Device{}; }

Tensor Tensor::view(int64_t offset, const Shape& shape) const {
  PB_CHECK(buf_ != nullptr, "view of an undefined tensor");
  PB_CHECK(offset >= 0 && static_cast<std::size_t>(offset_ + offset + numel_of(shape)) * sizeof(float) <=
                              buf_->bytes(),
           "view {} at offset {} exceeds storage of {} bytes", shape_str(shape), offset, buf_->bytes());
  Tensor t;
  t.buf_ = buf_;
  t.offset_ = offset_ + offset;
  t.shape_ = shape;
  return t;
}

std::vector<float> Tensor::to_host() const {
  std::vector<float> out(static_cast<std::size_t>(numel()));
  copy_bytes(cpu(), out.data(), device(), data(), bytes());
  return out;
}

void Tensor::copy_from_host(const float* src, int64_t n, int64_t offset) {
  PB_CHECK(offset >= 0 && offset + n <= numel(), "host copy of {} at {} into {} elements", n, offset,
           numel());
  copy_bytes(device(), data() + offset, cpu(), src, static_cast<std::size_t>(n) * sizeof(float));
}

void Tensor::copy_from(const Tensor& src) {
  PB_CHECK(src.numel() == numel(), "copy of {} elements into {}", src.numel(), numel());
  copy_bytes(device(), data(), src.device(), src.data(), bytes());
}

}  // namespace pb
