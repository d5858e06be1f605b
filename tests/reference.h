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
// Loss = mean (y - t)^2 and its gradient w.r.t. y.
double mse(const Vec& y, const Vec& t, Vec* dy = nullptr);
void adam(Vec& p, const Vec& g, Vec& m, Vec& v, const AdamParams& a, int64_t step);

// A whole net in double: loss of a batch, and its gradient w.r.t. the flat parameters.
double net_loss(const NetPlan& plan, const Vec& params, const Vec& x, const Vec& t, int64_t batch,
                Vec* grad = nullptr);

Vec to_double(const std::vector<float>& v);

// Largest |a - b| - (atol + rtol * |b|); <= 0 means within tolerance. `where` gets the index.
struct Mismatch {
  double excess = 0, got = 0, want = 0;
  std::size_t index = 0;
};
Mismatch worst(const std::vector<float>& got, const Vec& want, double atol, double rtol);
std::string describe(const Mismatch& m);

}  // namespace pb::ref
