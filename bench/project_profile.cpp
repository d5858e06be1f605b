// A per-layer profile timed through the engine's backend, in the profile.json format, for
// `project --validate` when no --profile is given. Each op is timed alone (steady clock around a
// synchronous call), median of a few calls after one untimed call.
#include "bench/project.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "engine/check.h"
#include "engine/tensor.h"
#include "workloads/workload.h"

namespace pb {

namespace {

template <class F>
double median_seconds(Backend& be, int reps, F&& f) {
  f();
  be.synchronize();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    be.synchronize();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

Tensor filled(int64_t n, uint64_t seed, Device d) {
  return Tensor::from_host({std::max<int64_t>(n, 1)}, synthetic_values(std::max<int64_t>(n, 1), seed), d);
}

}  // namespace

projection::Profile engine_profile(const NetPlan& plan, const std::string& workload, std::vector<int64_t> batches,
                                   int threads, int reps) {
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  PB_CHECK(!batches.empty() && batches.front() >= 1, "profile: no batch sizes");
  BackendOptions bo;
  bo.threads = threads;
  const Device dev = cpu(0);
  auto be = make_backend(dev, bo);
  projection::Profile p;
  p.batches = batches;
  p.threads = threads;
  p.device_kind = "cpu";
  p.context = {{"workload", workload}, {"device_kind", "cpu"}, {"threads", threads},
               {"source", "engine ops timed one by one (parbench project)"}};
  for (const LayerPlan& l : plan.layers) {
    projection::LayerProfile lp;
    lp.index = l.index;
    lp.type = layer_type_name(l.spec.type);
    lp.in = l.in;
    lp.out = l.out;
    lp.params = l.weight_numel + l.bias_numel;
    lp.forward_flops = l.forward_flops;
    lp.activation_bytes_per_sample = static_cast<double>(numel_of(l.out)) * sizeof(float);
    for (int64_t b : batches) {
      const int64_t in = b * numel_of(l.in), out = b * numel_of(l.out);
      Tensor x = filled(in, 1, dev), y = filled(out, 2, dev), dy = filled(out, 3, dev), dx = filled(in, 4, dev);
      Tensor w = filled(lp.params, 5, dev), gw = filled(lp.params, 6, dev);
      double f = 0, bd = 0, bw = 0;
      switch (l.spec.type) {
        case LayerType::Conv2d: {
          ConvGeom g;
          g.n = b, g.c = l.in[0], g.h = l.in[1], g.w = l.in[2];
          g.k = l.spec.out_channels, g.r = l.spec.kernel_h, g.s = l.spec.kernel_w;
          g.stride_h = l.spec.stride_h, g.stride_w = l.spec.stride_w, g.pad_h = l.spec.pad_h, g.pad_w = l.spec.pad_w;
          const float* wb = w.data() + l.weight_numel;
          f = median_seconds(*be, reps, [&] { be->conv2d_forward(g, x.data(), w.data(), wb, y.data()); });
          bw = median_seconds(*be, reps, [&] {
            be->conv2d_backward_weights(g, x.data(), dy.data(), gw.data(), gw.data() + l.weight_numel, false);
          });
          if (l.index > 0) bd = median_seconds(*be, reps, [&] { be->conv2d_backward_data(g, dy.data(), w.data(), dx.data()); });
          break;
        }
        case LayerType::Linear: {
          const int64_t fi = l.in[0], fo = l.out[0];
          f = median_seconds(*be, reps, [&] { be->linear_forward(b, fi, fo, x.data(), w.data(), w.data() + l.weight_numel, y.data()); });
          bw = median_seconds(*be, reps, [&] {
            be->linear_backward_weights(b, fi, fo, x.data(), dy.data(), gw.data(), gw.data() + l.weight_numel, false);
          });
          if (l.index > 0) bd = median_seconds(*be, reps, [&] { be->linear_backward_data(b, fi, fo, dy.data(), w.data(), dx.data()); });
          break;
        }
        case LayerType::ReLU:
          f = median_seconds(*be, reps, [&] { be->relu_forward(out, y.data(), y.data()); });
          if (l.index > 0) bd = median_seconds(*be, reps, [&] { be->relu_backward(out, y.data(), dy.data(), dx.data()); });
          break;
        case LayerType::Flatten:
          break;
      }
      lp.forward_s.push_back(f);
      lp.backward_data_s.push_back(bd);
      lp.backward_weights_s.push_back(bw);
    }
    p.layers.push_back(std::move(lp));
  }
  for (int64_t b : batches) {
    const int64_t out = b * numel_of(plan.output);
    Tensor y = filled(out, 7, dev), t = filled(out, 8, dev), dy = filled(out, 9, dev), loss = filled(1, 10, dev);
    p.loss_s.push_back(median_seconds(*be, reps, [&] { be->mse_loss_grad(out, y.data(), t.data(), 1.0f, dy.data(), loss.data()); }));
  }
  const int64_t n = std::max<int64_t>(plan.param_count, 1);
  Tensor w = filled(n, 11, dev), g = filled(n, 12, dev), m = Tensor::zeros({n}, dev), v = Tensor::zeros({n}, dev);
  AdamParams a;
  int64_t step = 0;
  p.optimizer_s_per_param =
      median_seconds(*be, reps, [&] { be->adam_step(n, w.data(), g.data(), m.data(), v.data(), a, ++step); }) / n;
  return p;
}

}  // namespace pb
