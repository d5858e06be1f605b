// The per-layer profiler: a Sequential over the whole net with an observer that records a pair
// of backend events around every layer call.
#include "engine/layer_profile.h"

#include <algorithm>

#include "engine/check.h"
#include "engine/model.h"
#include "engine/model_detail.h"

namespace pb {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

constexpr int kPasses = 3;

std::vector<float> normal_values(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = rng.normal();
  return v;
}

class EventTimer final : public LayerObserver {
 public:
  EventTimer(Backend& be, int layers, const std::function<void()>& sync)
      : be_(be), sync_(sync), events_(static_cast<std::size_t>(layers) * kPasses * 2),
        hit_(static_cast<std::size_t>(layers) * kPasses, 0) {}
  void before(int layer, LayerPass pass) override {
    if (sync_) sync_();
    record(slot(layer, pass) * 2);
  }
  void after(int layer, LayerPass pass) override {
    record(slot(layer, pass) * 2 + 1);
    hit_[slot(layer, pass)] = 1;
  }
  void clear() { std::fill(hit_.begin(), hit_.end(), 0); }
  // After the backend is synchronized: the seconds of that call, 0 when it made none.
  double seconds(int layer, LayerPass pass) {
    const std::size_t k = slot(layer, pass);
    return hit_[k] ? be_.elapsed_s(*events_[2 * k], *events_[2 * k + 1]) : 0.0;
  }

 private:
  static std::size_t slot(int layer, LayerPass pass) { return static_cast<std::size_t>(layer) * kPasses + static_cast<int>(pass); }
  void record(std::size_t e) {
    if (!events_[e]) events_[e] = be_.create_event();
    be_.record(*events_[e]);
  }
  Backend& be_;
  const std::function<void()>& sync_;
  std::vector<std::unique_ptr<Event>> events_;
  std::vector<char> hit_;
};

}  // namespace

NetProfile profile_net(const NetPlan& plan, Backend& be, const ProfileOptions& o) {
  PB_CHECK(o.batch >= 1 && o.repetitions >= 1 && o.warmup >= 0, "profile: batch {}, repetitions {}, warm-up {}",
           o.batch, o.repetitions, o.warmup);
  const int L = static_cast<int>(plan.layers.size());
  const Device dev = be.device();
  Sequential net(plan, 0, L, be);
  net.load_params(init_params(plan, o.seed));
  const int64_t in_n = o.batch * numel_of(plan.input), out_n = o.batch * numel_of(plan.output);
  const Tensor x = Tensor::from_host({in_n}, normal_values(in_n, o.seed + 1), dev);
  const Tensor t = Tensor::from_host({out_n}, normal_values(out_n, o.seed + 2), dev);
  Tensor dy = Tensor::empty({out_n}, dev), loss = Tensor::zeros({1}, dev);
  Adam adam(be, net.params().numel(), AdamParams{});
  const float scale = 2.0f / static_cast<float>(out_n);

  auto e = [&] { return be.create_event(); };
  std::unique_ptr<Event> ev[5] = {e(), e(), e(), e(), e()};
  auto step = [&](bool timed) {
    if (timed) be.record(*ev[0]);
    const float* y = net.forward(x.data(), o.batch);
    if (timed) be.record(*ev[1]);
    be.mse_loss_grad(out_n, y, t.data(), scale, dy.data(), loss.data());
    if (timed) be.record(*ev[2]);
    net.backward(dy.data(), nullptr, false);
    if (timed) be.record(*ev[3]);
    adam.step(net.params(), net.grads());
    if (timed) be.record(*ev[4]);
    be.synchronize();
  };
  for (int i = 0; i < o.warmup; ++i) step(false);

  std::vector<double> fwd, loss_s, bwd, opt;
  std::vector<std::vector<double>> per(static_cast<std::size_t>(L) * kPasses);
  EventTimer timer(be, L, o.sync);
  for (int r = 0; r < o.repetitions; ++r) {
    if (o.sync) o.sync();
    step(true);
    fwd.push_back(be.elapsed_s(*ev[0], *ev[1]));
    loss_s.push_back(be.elapsed_s(*ev[1], *ev[2]));
    bwd.push_back(be.elapsed_s(*ev[2], *ev[3]));
    opt.push_back(be.elapsed_s(*ev[3], *ev[4]));
    // The same pass with an event pair around every layer call.
    timer.clear();
    net.set_observer(&timer);
    const float* y = net.forward(x.data(), o.batch);
    be.mse_loss_grad(out_n, y, t.data(), scale, dy.data(), loss.data());
    net.backward(dy.data(), nullptr, false);
    net.set_observer(nullptr);
    be.synchronize();
    for (int i = 0; i < L; ++i)
      for (int p = 0; p < kPasses; ++p) per[static_cast<std::size_t>(i) * kPasses + p].push_back(timer.seconds(i, static_cast<LayerPass>(p)));
  }
  auto stat = [&](const std::vector<double>& v) {
    if (!o.mean) return median(v);
    double sum = 0;
    for (double x : v) sum += x;
    return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
  };
  NetProfile out;
  out.batch = o.batch;
  out.forward_s = stat(fwd);
  out.loss_s = stat(loss_s);
  out.backward_s = stat(bwd);
  out.optimizer_s = stat(opt);
  for (int i = 0; i < L; ++i) {
    const std::size_t k = static_cast<std::size_t>(i) * kPasses;
    out.layers.push_back({stat(per[k]), stat(per[k + 1]), stat(per[k + 2])});
  }
  return out;
}

std::vector<LayerConvChoice> layer_conv_choices(const NetPlan& plan, int64_t batch,
                                                const std::function<std::unique_ptr<Backend>()>& make) {
  std::vector<LayerConvChoice> out;
  const int L = static_cast<int>(plan.layers.size());
  const std::vector<float> params = init_params(plan, 0);
  for (int i = 0; i < L; ++i) {
    const LayerPlan& l = plan.layers[i];
    if (l.spec.type == LayerType::Flatten) {
      out.emplace_back();
      continue;
    }
    std::unique_ptr<Backend> be = make();
    Allocator& a = allocator_for(be->device());
    const std::size_t before = a.current_bytes(MemoryPool::Workspace);
    LayerConvChoice c;
    {
      Sequential layer(plan, i, i + 1, *be);
      layer.load_params(params);
      const int64_t in_n = batch * numel_of(l.in), out_n = batch * numel_of(l.out);
      const Tensor x = Tensor::from_host({in_n}, normal_values(in_n, 1), be->device());
      const Tensor dy = Tensor::from_host({out_n}, normal_values(out_n, 2), be->device());
      Tensor dx = Tensor::empty({in_n}, be->device());
      layer.forward(x.data(), batch);
      layer.backward(dy.data(), i > 0 ? dx.data() : nullptr, false);
      be->synchronize();
      if (l.spec.type == LayerType::Conv2d) c.algorithms = be->conv_algorithms(model_detail::geom(l, batch));
    }
    const std::size_t after = a.current_bytes(MemoryPool::Workspace);
    c.workspace_bytes = after > before ? after - before : 0;
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<std::size_t> layer_workspace_bytes(const NetPlan& plan, int64_t batch,
                                               const std::function<std::unique_ptr<Backend>()>& make) {
  std::vector<std::size_t> out;
  for (const LayerConvChoice& c : layer_conv_choices(plan, batch, make)) out.push_back(c.workspace_bytes);
  return out;
}

NetProfile at_slowest_pace(const std::vector<NetProfile>& workers, double* factor) {
  PB_CHECK(!workers.empty(), "profile: no worker timed");
  const double k = static_cast<double>(workers.size());
  NetProfile out = workers.front();
  double mean_total = 0, max_total = 0;
  for (const NetProfile& w : workers) {
    PB_CHECK(w.layers.size() == out.layers.size(), "profile: workers timed different nets");
    double total = w.loss_s + w.optimizer_s;
    for (const LayerTimes& l : w.layers) total += l.total_s();
    mean_total += total / k;
    max_total = std::max(max_total, total);
  }
  const double s = mean_total > 0 ? max_total / mean_total : 1;
  auto pace = [&](auto get) {
    double sum = 0;
    for (const NetProfile& w : workers) sum += get(w);
    return sum / k * s;
  };
  for (std::size_t i = 0; i < out.layers.size(); ++i) {
    out.layers[i].forward_s = pace([&](const NetProfile& w) { return w.layers[i].forward_s; });
    out.layers[i].backward_data_s = pace([&](const NetProfile& w) { return w.layers[i].backward_data_s; });
    out.layers[i].backward_weights_s = pace([&](const NetProfile& w) { return w.layers[i].backward_weights_s; });
  }
  out.forward_s = pace([](const NetProfile& w) { return w.forward_s; });
  out.backward_s = pace([](const NetProfile& w) { return w.backward_s; });
  out.loss_s = pace([](const NetProfile& w) { return w.loss_s; });
  out.optimizer_s = pace([](const NetProfile& w) { return w.optimizer_s; });
  if (factor) *factor = s;
  return out;
}

}  // namespace pb
