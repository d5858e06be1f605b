// Slow, obviously-right double-precision reference ops, used only by tests.
#pragma once

#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/net.h"

namespace pb::ref {

using Vec = std::vector<double>;

Vec conv2d_forward(const ConvGeom& g, const Vec& x, const Vec& w, const Vec& b);
Vec conv2d_backward_data(const ConvGeom& g, const Vec& dy, const Vec& w);
void conv2d_backward_weights(const ConvGeom& g, const Vec& x, const Vec& dy, Vec& dw, Vec& db);
Vec linear_forward(int64_t n, int64_t in, int64_t out, const Vec& x, const Vec& w, const Vec& b);
Vec linear_backward_data(int64_t n, int64_t in, int64_t out, const Vec& dy, const Vec& w);
void linear_backward_weights(int64_t n, int64_t in, int64_t out, const Vec& x, const Vec& dy, Vec& dw, Vec& db);
Vec relu(const Vec& x);
// 2x2 max pooling of stride 2 over x [n, c, h, w] (an odd last row or column left out), and its
// backward: each window's dy to its first largest x in row-major order.
Vec max_pool2x2(const Planes& s, const Vec& x);
Vec max_pool2x2_backward(const Planes& s, const Vec& x, const Vec& dy);
// Nearest 2x upsampling of x [n, c, h, w], and its backward (each x the sum of its four dy).
Vec upsample2x(const Planes& s, const Vec& x);
Vec upsample2x_backward(const Planes& s, const Vec& dy);
// The transposed convolution of conv g (x [n, g.k, p, q] -> y [n, g.c, g.h, g.w], w [g.k, g.c,
// g.r, g.s]) by scattering each x value into y, and its gradients by the same index map.
struct ConvTranspose {
  Vec y, dx, dw, db;
};
ConvTranspose conv_transpose2d(const ConvGeom& g, const Vec& x, const Vec& w, const Vec& b, const Vec& dy);
// Loss = mean (y - t)^2 and its gradient w.r.t. y.
double mse(const Vec& y, const Vec& t, Vec* dy = nullptr);
void adam(Vec& p, const Vec& g, Vec& m, Vec& v, const AdamParams& a, int64_t step);

// A whole net in double: loss of a batch, and its gradient w.r.t. the flat parameters (and the
// input, when dx is given; with grad only).
double net_loss(const NetPlan& plan, const Vec& params, const Vec& x, const Vec& t, int64_t batch,
                Vec* grad = nullptr, Vec* dx = nullptr);

Vec to_double(const std::vector<float>& v);

// Largest |a - b| - (atol + rtol * |b|); <= 0 means within tolerance. `where` gets the index.
struct Mismatch {
  double excess = 0, got = 0, want = 0;
  std::size_t index = 0;
};
Mismatch worst(const std::vector<float>& got, const Vec& want, double atol, double rtol);
std::string describe(const Mismatch& m);

}  // namespace pb::ref
