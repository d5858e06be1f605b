// Helpers shared by the op tests: a seeded random source and random convolution shapes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/backend.h"
#include "engine/net.h"

namespace pb::test {

// A random source seeded from the system, or from PARBENCH_TEST_SEED where set: tests print
// `seed`, so that a failure can be replayed with it.
struct Rand {
  std::mt19937_64 gen;
  uint64_t seed;
  Rand() : seed(initial_seed()) { gen.seed(seed); }
  static uint64_t initial_seed() {
    const char* s = std::getenv("PARBENCH_TEST_SEED");
    return s && *s ? std::strtoull(s, nullptr, 10) : std::random_device{}();
  }
  int64_t i(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen); }
  bool coin() { return i(0, 1) == 1; }
  std::vector<float> vec(int64_t n) {  // standard normal
    std::normal_distribution<float> d;
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float& x : v) x = d(gen);
    return v;
  }
};

// Upper bounds of a random convolution: batch, channels in and out, image height and width.
struct GeomLimits {
  int64_t batch = 3, channels = 12, size = 13;
};

// Stride 1-2, padding 0-2, kernel 1-5 (non-square), odd sizes; never an empty output.
inline ConvGeom random_geom(std::mt19937_64& gen, const GeomLimits& l = {}) {
  auto i = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen); };
  ConvGeom g;
  g.n = i(1, l.batch), g.c = i(1, l.channels), g.k = i(1, l.channels);
  g.r = i(1, 5), g.s = i(1, 5);
  g.stride_h = i(1, 2), g.stride_w = i(1, 2), g.pad_h = i(0, 2), g.pad_w = i(0, 2);
  g.h = i(std::max<int64_t>(1, g.r - 2 * g.pad_h), l.size);
  g.w = i(std::max<int64_t>(1, g.s - 2 * g.pad_w), l.size);
  return g;
}
inline ConvGeom random_geom(Rand& r, const GeomLimits& l = {}) { return random_geom(r.gen, l); }

// [n][a][b] -> [n][b][a]: NCHW values to NHWC (a = C, b = H*W) and back (a = H*W, b = C).
template <class T>
std::vector<T> swap_inner(const std::vector<T>& v, int64_t n, int64_t a, int64_t b) {
  std::vector<T> out(v.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < a; ++p)
      for (int64_t q = 0; q < b; ++q)
        out[static_cast<std::size_t>((i * b + q) * a + p)] = v[static_cast<std::size_t>((i * a + p) * b + q)];
  return out;
}

inline std::string geom_str(const ConvGeom& g) {
  return fmt::format("n{} c{} {}x{} k{} kernel {}x{} stride {}x{} pad {}x{}", g.n, g.c, g.h, g.w, g.k, g.r, g.s,
                     g.stride_h, g.stride_w, g.pad_h, g.pad_w);
}

// Sets an environment variable for a scope, restoring what it was.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() { old_ ? (void)::setenv(name_, old_->c_str(), 1) : (void)::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// `pairs` equal Linear(width) + ReLU pairs on an input of `width`: stages of equal work.
inline NetSpec linear_relu_pairs(const std::string& name, int64_t width, int pairs) {
  NetSpec net;
  net.name = name;
  net.input = {width};
  for (int i = 0; i < pairs; ++i) {
    LayerSpec l;
    l.type = LayerType::Linear;
    l.out_features = width;
    net.layers.push_back(l);
    LayerSpec relu;
    relu.type = LayerType::ReLU;
    net.layers.push_back(relu);
  }
  return net;
}


}  // namespace pb::test
