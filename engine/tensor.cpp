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

std::string bytes_str(double bytes) {
  if (bytes < 1024) return fmt::format("{:.0f} B", bytes);
  if (bytes < 1024.0 * 1024) return fmt::format("{:.3g} KiB", bytes / 1024);
  if (bytes < 1024.0 * 1024 * 1024) return fmt::format("{:.3g} MiB", bytes / (1024.0 * 1024));
  return fmt::format("{:.3g} GiB", bytes / (1024.0 * 1024 * 1024));
}

std::string shape_str(const Shape& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) {
    out += std::to_string(s[i]);
    if (s.size() == 1 || i + 1 < s.size()) out += s.size() == 1 ? "," : ", ";
  }
  return out + ")";
}

const char* dtype_name(DType t) { return t == DType::F32 ? "float32" : "bfloat16"; }
const char* dtype_label(DType t) { return t == DType::F32 ? "fp32" : "bf16"; }

DType parse_dtype_label(const std::string& s, const std::string& what) {
  if (s == "fp32") return DType::F32;
  if (s == "bf16") return DType::Bf16;
  throw UsageError(fmt::format("{}: unknown dtype '{}': expected fp32 or bf16", what, s));
}

Buffer::Buffer(Device dev, std::size_t bytes, MemoryPool pool)
    : dev_(dev), bytes_(bytes), pool_(pool), ptr_(allocator_for(dev).allocate(bytes, pool)) {}

Buffer::~Buffer() { allocator_for(dev_).release(ptr_, bytes_, pool_); }

Tensor Tensor::empty(const Shape& shape, Device dev, DType dtype) {
  Tensor t;
  for (int64_t d : shape) PB_CHECK(d >= 0, "negative dimension in {}", shape_str(shape));
  t.buf_ = std::make_shared<Buffer>(dev, static_cast<std::size_t>(numel_of(shape)) * dtype_size(dtype));
  t.shape_ = shape;
  t.dtype_ = dtype;
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

void* Tensor::raw() const {
  return buf_ ? static_cast<char*>(buf_->data()) + static_cast<std::size_t>(offset_) * dtype_size(dtype_) : nullptr;
}

float* Tensor::data() const {
  PB_CHECK(dtype_ == DType::F32, "float data of a {} tensor", dtype_name(dtype_));
  return static_cast<float*>(raw());
}

Bf16* Tensor::data_bf16() const {
  PB_CHECK(dtype_ == DType::Bf16, "bf16 data of a {} tensor", dtype_name(dtype_));
  return static_cast<Bf16*>(raw());
}

Device Tensor::device() const { return buf_ ? buf_->device() : Device{}; }

Tensor Tensor::view(int64_t offset, const Shape& shape) const {
  PB_CHECK(buf_ != nullptr, "view of an undefined tensor");
  PB_CHECK(offset >= 0 && static_cast<std::size_t>(offset_ + offset + numel_of(shape)) * dtype_size(dtype_) <=
                              buf_->bytes(),
           "view {} at offset {} exceeds storage of {} bytes", shape_str(shape), offset, buf_->bytes());
  Tensor t;
  t.buf_ = buf_;
  t.offset_ = offset_ + offset;
  t.shape_ = shape;
  t.dtype_ = dtype_;
  return t;
}

std::vector<float> Tensor::to_host() const {
  std::vector<float> out(static_cast<std::size_t>(numel()));
  if (dtype_ == DType::F32) {
    copy_bytes(cpu(), out.data(), device(), data(), bytes());
    return out;
  }
  std::vector<Bf16> b(out.size());
  copy_bytes(cpu(), b.data(), device(), raw(), bytes());
  for (std::size_t i = 0; i < b.size(); ++i) out[i] = from_bf16(b[i]);
  return out;
}

void Tensor::copy_from_host(const float* src, int64_t n, int64_t offset) {
  PB_CHECK(offset >= 0 && offset + n <= numel(), "host copy of {} at {} into {} elements", n, offset,
           numel());
  copy_bytes(device(), data() + offset, cpu(), src, static_cast<std::size_t>(n) * sizeof(float));
}

void Tensor::copy_from(const Tensor& src) {
  PB_CHECK(src.numel() == numel(), "copy of {} elements into {}", src.numel(), numel());
  PB_CHECK(src.dtype_ == dtype_, "copy of a {} tensor into a {} one", dtype_name(src.dtype_), dtype_name(dtype_));
  copy_bytes(device(), raw(), src.device(), src.raw(), bytes());
}

}  // namespace pb
