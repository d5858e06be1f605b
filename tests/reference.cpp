// Double-precision reference implementations: direct loops over the definitions.
#include "reference.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

namespace pb::ref {

Vec conv2d_forward(const ConvGeom& g, const Vec& x, const Vec& w, const Vec& b) {
  const int64_t P = g.p(), Q = g.q();
  Vec y(static_cast<std::size_t>(g.n * g.k * P * Q));
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t k = 0; k < g.k; ++k)
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q) {
          double s = b.empty() ? 0.0 : b[k];
          for (int64_t c = 0; c < g.c; ++c)
            for (int64_t r = 0; r < g.r; ++r)
              for (int64_t t = 0; t < g.s; ++t) {
                const int64_t ih = p * g.stride_h + r - g.pad_h, iw = q * g.stride_w + t - g.pad_w;
                if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                s += w[((k * g.c + c) * g.r + r) * g.s + t] * x[((n * g.c + c) * g.h + ih) * g.w + iw];
              }
          y[((n * g.k + k) * P + p) * Q + q] = s;
        }
  return y;
}

Vec conv2d_backward_data(const ConvGeom& g, const Vec& dy, const Vec& w) {
  const int64_t P = g.p(), Q = g.q();
  Vec dx(static_cast<std::size_t>(g.n * g.c * g.h * g.w), 0.0);
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t k = 0; k < g.k; ++k)
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q)
          for (int64_t c = 0; c < g.c; ++c)
            for (int64_t r = 0; r < g.r; ++r)
              for (int64_t t = 0; t < g.s; ++t) {
                const int64_t ih = p * g.stride_h + r - g.pad_h, iw = q * g.stride_w + t - g.pad_w;
                if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                dx[((n * g.c + c) * g.h + ih) * g.w + iw] +=
                    w[((k * g.c + c) * g.r + r) * g.s + t] * dy[((n * g.k + k) * P + p) * Q + q];
              }
  return dx;
}

void conv2d_backward_weights(const ConvGeom& g, const Vec& x, const Vec& dy, Vec& dw, Vec& db) {
  const int64_t P = g.p(), Q = g.q();
  dw.assign(static_cast<std::size_t>(g.k * g.c * g.r * g.s), 0.0);
  db.assign(static_cast<std::size_t>(g.k), 0.0);
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t k = 0; k < g.k; ++k)
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q) {
          const double d = dy[((n * g.k + k) * P + p) * Q + q];
          db[k] += d;
          for (int64_t c = 0; c < g.c; ++c)
            for (int64_t r = 0; r < g.r; ++r)
              for (int64_t t = 0; t < g.s; ++t) {
                const int64_t ih = p * g.stride_h + r - g.pad_h, iw = q * g.stride_w + t - g.pad_w;
                if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                dw[((k * g.c + c) * g.r + r) * g.s + t] += d * x[((n * g.c + c) * g.h + ih) * g.w + iw];
              }
        }
}

Vec linear_forward(int64_t n, int64_t in, int64_t out, const Vec& x, const Vec& w, const Vec& b) {
  Vec y(static_cast<std::size_t>(n * out));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < out; ++o) {
      double s = b[o];
      for (int64_t j = 0; j < in; ++j) s += w[o * in + j] * x[i * in + j];
      y[i * out + o] = s;
    }
  return y;
}

Vec linear_backward_data(int64_t n, int64_t in, int64_t out, const Vec& dy, const Vec& w) {
  Vec dx(static_cast<std::size_t>(n * in), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t j = 0; j < in; ++j) dx[i * in + j] += dy[i * out + o] * w[o * in + j];
  return dx;
}

void linear_backward_weights(int64_t n, int64_t in, int64_t out, const Vec& x, const Vec& dy, Vec& dw, Vec& db) {
  dw.assign(static_cast<std::size_t>(out * in), 0.0);
  db.assign(static_cast<std::size_t>(out), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < out; ++o) {
      db[o] += dy[i * out + o];
      for (int64_t j = 0; j < in; ++j) dw[o * in + j] += dy[i * out + o] * x[i * in + j];
    }
}

Vec max_pool2x2(const Planes& s, const Vec& x) {
  const int64_t ho = s.h / 2, wo = s.w / 2;
  Vec y;
  for (int64_t p = 0; p < s.n * s.c; ++p)
    for (int64_t i = 0; i < ho; ++i)
      for (int64_t j = 0; j < wo; ++j) {
        double m = x[(p * s.h + 2 * i) * s.w + 2 * j];
        for (int64_t a = 0; a < 2; ++a)
          for (int64_t b = 0; b < 2; ++b) m = std::max(m, x[(p * s.h + 2 * i + a) * s.w + 2 * j + b]);
        y.push_back(m);
      }
  return y;
}

Vec max_pool2x2_backward(const Planes& s, const Vec& x, const Vec& dy) {
  const int64_t ho = s.h / 2, wo = s.w / 2;
  Vec dx(static_cast<std::size_t>(s.numel()), 0.0);
  for (int64_t p = 0; p < s.n * s.c; ++p)
    for (int64_t i = 0; i < ho; ++i)
      for (int64_t j = 0; j < wo; ++j) {
        int64_t best = (p * s.h + 2 * i) * s.w + 2 * j;
        for (int64_t a = 0; a < 2; ++a)
          for (int64_t b = 0; b < 2; ++b) {
            const int64_t at = (p * s.h + 2 * i + a) * s.w + 2 * j + b;
            if (x[at] > x[best]) best = at;  // strictly larger: the first of equal ones stays
          }
        dx[best] += dy[(p * ho + i) * wo + j];
      }
  return dx;
}

Vec upsample2x(const Planes& s, const Vec& x) {
  Vec y;
  for (int64_t p = 0; p < s.n * s.c; ++p)
    for (int64_t i = 0; i < 2 * s.h; ++i)
      for (int64_t j = 0; j < 2 * s.w; ++j) y.push_back(x[(p * s.h + i / 2) * s.w + j / 2]);
  return y;
}

Vec upsample2x_backward(const Planes& s, const Vec& dy) {
  Vec dx(static_cast<std::size_t>(s.numel()), 0.0);
  for (int64_t p = 0; p < s.n * s.c; ++p)
    for (int64_t i = 0; i < 2 * s.h; ++i)
      for (int64_t j = 0; j < 2 * s.w; ++j) dx[(p * s.h + i / 2) * s.w + j / 2] += dy[(p * 2 * s.h + i) * 2 * s.w + j];
  return dx;
}

ConvTranspose conv_transpose2d(const ConvGeom& g, const Vec& x, const Vec& w, const Vec& b, const Vec& dy) {
  const int64_t P = g.p(), Q = g.q();
  ConvTranspose t;
  t.y.assign(static_cast<std::size_t>(g.n * g.c * g.h * g.w), 0.0);
  t.dx.assign(x.size(), 0.0);
  t.dw.assign(w.size(), 0.0);
  t.db.assign(static_cast<std::size_t>(g.c), 0.0);
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t ci = 0; ci < g.k; ++ci)
      for (int64_t i = 0; i < P; ++i)
        for (int64_t j = 0; j < Q; ++j) {
          const int64_t xi = ((n * g.k + ci) * P + i) * Q + j;
          for (int64_t co = 0; co < g.c; ++co)
            for (int64_t r = 0; r < g.r; ++r)
              for (int64_t s = 0; s < g.s; ++s) {
                const int64_t hh = i * g.stride_h + r - g.pad_h, ww = j * g.stride_w + s - g.pad_w;
                if (hh < 0 || hh >= g.h || ww < 0 || ww >= g.w) continue;
                const int64_t yi = ((n * g.c + co) * g.h + hh) * g.w + ww, wi = ((ci * g.c + co) * g.r + r) * g.s + s;
                t.y[yi] += x[xi] * w[wi];
                t.dx[xi] += dy[yi] * w[wi];
                t.dw[wi] += x[xi] * dy[yi];
              }
        }
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t co = 0; co < g.c; ++co)
      for (int64_t e = 0; e < g.h * g.w; ++e) {
        t.y[(n * g.c + co) * g.h * g.w + e] += b[co];
        t.db[co] += dy[(n * g.c + co) * g.h * g.w + e];
      }
  return t;
}

Vec relu(const Vec& x) {
  Vec y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] > 0 ? x[i] : 0.0;
  return y;
}

double mse(const Vec& y, const Vec& t, Vec* dy) {
  double s = 0;
  if (dy) dy->assign(y.size(), 0.0);
  for (std::size_t i = 0; i < y.size(); ++i) {
    s += (y[i] - t[i]) * (y[i] - t[i]);
    if (dy) (*dy)[i] = 2.0 * (y[i] - t[i]) / static_cast<double>(y.size());
  }
  return s / static_cast<double>(y.size());
}

void adam(Vec& p, const Vec& g, Vec& m, Vec& v, const AdamParams& a, int64_t step) {
  const double bc1 = 1 - std::pow(a.beta1, static_cast<double>(step));
  const double bc2 = 1 - std::pow(a.beta2, static_cast<double>(step));
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double gi = g[i] + a.weight_decay * p[i];
    m[i] = a.beta1 * m[i] + (1 - a.beta1) * gi;
    v[i] = a.beta2 * v[i] + (1 - a.beta2) * gi * gi;
    p[i] -= a.lr / bc1 * m[i] / (std::sqrt(v[i] / bc2) + a.eps);
  }
}

namespace {
ConvGeom geom_of(const LayerPlan& l, int64_t batch) {
  ConvGeom g;
  g.n = batch, g.c = l.in[0], g.h = l.in[1], g.w = l.in[2];
  g.k = l.spec.out_channels, g.r = l.spec.kernel_h, g.s = l.spec.kernel_w;
  g.stride_h = l.spec.stride_h, g.stride_w = l.spec.stride_w, g.pad_h = l.spec.pad_h, g.pad_w = l.spec.pad_w;
  return g;
}
// A conv_transpose2d layer as the convolution it is the adjoint of (x and y swap places).
ConvGeom transposed_geom_of(const LayerPlan& l, int64_t batch) {
  ConvGeom g;
  g.n = batch, g.c = l.out[0], g.h = l.out[1], g.w = l.out[2];
  g.k = l.in[0], g.r = l.spec.kernel_h, g.s = l.spec.kernel_w;
  g.stride_h = l.spec.stride_h, g.stride_w = l.spec.stride_w, g.pad_h = l.spec.pad_h, g.pad_w = l.spec.pad_w;
  return g;
}
Vec slice(const Vec& v, int64_t off, int64_t n) { return Vec(v.begin() + off, v.begin() + off + n); }
}  // namespace

// Layer by layer, each reading the outputs its inputs name; backward sums each output's gradient
// over every layer that read it.
double net_loss(const NetPlan& plan, const Vec& params, const Vec& x, const Vec& t, int64_t batch, Vec* grad,
                Vec* dx_out) {
  const int n = static_cast<int>(plan.layers.size());
  std::vector<Vec> acts;  // acts[i + 1]: layer i's output; acts[0] the input
  acts.push_back(x);
  auto act = [&](int src) -> const Vec& { return acts[static_cast<std::size_t>(src + 1)]; };
  auto numel = [&](int src) { return batch * numel_of(src == kNetInput ? plan.input : plan.layers[src].out); };
  for (const LayerPlan& l : plan.layers) {
    const Vec& in = act(l.inputs[0]);
    const Vec w = slice(params, l.param_offset, l.weight_numel);
    const Vec b = slice(params, l.param_offset + l.weight_numel, l.bias_numel);
    switch (l.spec.type) {
      case LayerType::Conv2d: acts.push_back(conv2d_forward(geom_of(l, batch), in, w, b)); break;
      case LayerType::Linear: acts.push_back(linear_forward(batch, l.in[0], l.out[0], in, w, b)); break;
      case LayerType::ReLU: acts.push_back(relu(in)); break;
      case LayerType::Flatten: acts.push_back(in); break;
      case LayerType::MaxPool2d: acts.push_back(max_pool2x2({batch, l.in[0], l.in[1], l.in[2]}, in)); break;
      case LayerType::Upsample: acts.push_back(upsample2x({batch, l.in[0], l.in[1], l.in[2]}, in)); break;
      case LayerType::ConvTranspose2d: {
        const Vec no_dy(static_cast<std::size_t>(batch * numel_of(l.out)), 0.0);
        acts.push_back(conv_transpose2d(transposed_geom_of(l, batch), in, w, b, no_dy).y);
        break;
      }
      case LayerType::Add: {
        Vec y = in;
        for (std::size_t k = 0; k < y.size(); ++k) y[k] += act(l.inputs[1])[k];
        acts.push_back(std::move(y));
        break;
      }
      case LayerType::Concat: {  // sample by sample, each input's values in turn
        Vec y;
        for (int64_t s = 0; s < batch; ++s)
          for (int src : l.inputs) {
            const int64_t per = numel(src) / batch;
            y.insert(y.end(), act(src).begin() + s * per, act(src).begin() + (s + 1) * per);
          }
        acts.push_back(std::move(y));
        break;
      }
    }
  }
  std::vector<Vec> grads(acts.size());  // the gradient of each output, summed over its readers
  const double loss = mse(acts.back(), t, grad ? &grads.back() : nullptr);
  if (!grad) return loss;
  grad->assign(params.size(), 0.0);
  auto add_to = [&](int src, const Vec& g) {
    Vec& d = grads[static_cast<std::size_t>(src + 1)];
    if (d.empty()) d.assign(g.size(), 0.0);
    for (std::size_t k = 0; k < g.size(); ++k) d[k] += g[k];
  };
  for (int i = n - 1; i >= 0; --i) {
    const LayerPlan& l = plan.layers[i];
    const Vec& in = act(l.inputs[0]);
    const Vec& dy = grads[static_cast<std::size_t>(i + 1)];
    const Vec w = slice(params, l.param_offset, l.weight_numel);
    Vec dw, db, dx;
    switch (l.spec.type) {
      case LayerType::Conv2d:
        conv2d_backward_weights(geom_of(l, batch), in, dy, dw, db);
        dx = conv2d_backward_data(geom_of(l, batch), dy, w);
        break;
      case LayerType::Linear:
        linear_backward_weights(batch, l.in[0], l.out[0], in, dy, dw, db);
        dx = linear_backward_data(batch, l.in[0], l.out[0], dy, w);
        break;
      case LayerType::ReLU:
        dx = dy;
        for (std::size_t k = 0; k < dx.size(); ++k) dx[k] = act(i)[k] > 0 ? dy[k] : 0.0;
        break;
      case LayerType::Flatten: dx = dy; break;
      case LayerType::MaxPool2d: dx = max_pool2x2_backward({batch, l.in[0], l.in[1], l.in[2]}, in, dy); break;
      case LayerType::Upsample: dx = upsample2x_backward({batch, l.in[0], l.in[1], l.in[2]}, dy); break;
      case LayerType::ConvTranspose2d: {
        ConvTranspose t = conv_transpose2d(transposed_geom_of(l, batch), in, w,
                                           slice(params, l.param_offset + l.weight_numel, l.bias_numel), dy);
        dx = std::move(t.dx), dw = std::move(t.dw), db = std::move(t.db);
        break;
      }
      case LayerType::Add:
        add_to(l.inputs[1], dy);
        dx = dy;
        break;
      case LayerType::Concat: {
        int64_t at = 0;
        const int64_t out_per = numel_of(l.out);
        for (int src : l.inputs) {
          const int64_t per = numel(src) / batch;
          Vec g;
          for (int64_t s = 0; s < batch; ++s) g.insert(g.end(), dy.begin() + s * out_per + at, dy.begin() + s * out_per + at + per);
          if (src == l.inputs[0] && at == 0) dx = g;
          else add_to(src, g);
          at += per;
        }
        break;
      }
    }
    std::copy(dw.begin(), dw.end(), grad->begin() + l.param_offset);
    std::copy(db.begin(), db.end(), grad->begin() + l.param_offset + l.weight_numel);
    add_to(l.inputs[0], dx);
  }
  if (dx_out) *dx_out = grads[0];
  return loss;
}

Vec to_double(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

Mismatch worst(const std::vector<float>& got, const Vec& want, double atol, double rtol) {
  Mismatch m;
  m.excess = -std::numeric_limits<double>::infinity();
  if (got.size() != want.size()) {
    m.excess = std::numeric_limits<double>::infinity();
    return m;
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double e = std::isfinite(got[i]) ? std::abs(got[i] - want[i]) - (atol + rtol * std::abs(want[i]))
                                           : std::numeric_limits<double>::infinity();
    if (e > m.excess) m = {e, got[i], want[i], i};
  }
  return m;
}

std::string describe(const Mismatch& m) {
  return fmt::format("worst element {}: got {:.9g}, want {:.9g} (excess over tolerance {:.3g})", m.index, m.got,
                     m.want, m.excess);
}

}  // namespace pb::ref
