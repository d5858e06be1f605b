// The per-layer profiler: a Sequential over the whole net with an observer that records a pair
// of backend events around every layer call; its first step apart, each call's workspace measured.
#include "engine/layer_profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "engine/check.h"
#include "engine/graph_stage.h"
#include "engine/model.h"
#include "engine/model_detail.h"
#include "engine/tensor.h"

namespace pb {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

constexpr int kPasses = 3;

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

// The first step's observer: the library workspace released before every call, so the growth of
// the workspace count around it is that call's own need; the call timed by `timer`.
class FirstCall final : public LayerObserver {
 public:
  FirstCall(Backend& be, EventTimer& timer, bool workspace, std::vector<PerPass<std::size_t>>& bytes)
      : be_(be), alloc_(allocator_for(be.device())), timer_(timer), workspace_(workspace), bytes_(bytes) {}
  void before(int layer, LayerPass pass) override {
    if (workspace_) {
      be_.release_workspace();
      at_ = alloc_.current_bytes(MemoryPool::Workspace);
    }
    timer_.before(layer, pass);
  }
  void after(int layer, LayerPass pass) override {
    timer_.after(layer, pass);
    if (!workspace_) return;
    const std::size_t now = alloc_.current_bytes(MemoryPool::Workspace);
    std::size_t& b = bytes_[static_cast<std::size_t>(layer)][static_cast<std::size_t>(pass)];
    b = std::max(b, now > at_ ? now - at_ : 0);
  }

 private:
  Backend& be_;
  Allocator& alloc_;
  EventTimer& timer_;
  bool workspace_;
  std::vector<PerPass<std::size_t>>& bytes_;
  std::size_t at_ = 0;
};

}  // namespace

void fill_timing_params(const NetPlan& plan, Sequential& stage, uint64_t seed) {
  Backend& be = stage.backend();
  float* p = stage.params().data();
  for (int i = stage.begin(); i < stage.end(); ++i) {
    const LayerPlan& l = plan.layers[static_cast<std::size_t>(i)];
    const auto [lo, hi] = stage.layer_grad_range(i);
    if (hi <= lo) continue;
    const int64_t fan_out = l.out.empty() ? 1 : l.out[0];  // output channels or features
    const double fan_in = std::max<double>(1.0, static_cast<double>(l.weight_numel) / static_cast<double>(fan_out));
    const uint64_t first = static_cast<uint64_t>(l.param_offset);
    be.fill_normal(p + lo, hi - lo, seed, first, static_cast<float>(1.0 / std::sqrt(3.0 * fan_in)));
  }
}

std::vector<std::size_t> layer_workspace_bytes(const NetProfile& p) {
  std::vector<std::size_t> out;
  for (const PerPass<std::size_t>& w : p.workspace_bytes) out.push_back(*std::max_element(w.begin(), w.end()));
  return out;
}

NetProfile profile_net(const NetPlan& plan, Backend& be, const ProfileOptions& o) {
  PB_CHECK(o.batch >= 1 && o.repetitions >= 1 && o.warmup >= 0, "profile: batch {}, repetitions {}, warm-up {}",
           o.batch, o.repetitions, o.warmup);
  const auto setup_start = std::chrono::steady_clock::now();
  const int L = static_cast<int>(plan.layers.size());
  const Device dev = be.device();
  Sequential net(plan, 0, L, be);
  fill_timing_params(plan, net, o.seed);
  const int64_t in_n = o.batch * numel_of(plan.input), out_n = o.batch * numel_of(plan.output);
  Tensor x = Tensor::empty({in_n}, dev), t = Tensor::empty({out_n}, dev);
  be.fill_normal(x.data(), in_n, o.seed + 1, 0, 1.0f);
  be.fill_normal(t.data(), out_n, o.seed + 2, 0, 1.0f);
  Tensor dy = Tensor::empty({out_n}, dev), loss = Tensor::zeros({1}, dev);
  Adam adam(be, net.params().numel(), AdamParams{});
  const float scale = 2.0f / static_cast<float>(out_n);
  be.synchronize();
  NetProfile out;
  out.setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - setup_start).count();

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
  auto per_layer = [&](EventTimer& timer, std::vector<LayerTimes>& into) {
    into.assign(static_cast<std::size_t>(L), LayerTimes{});
    for (int i = 0; i < L; ++i) {
      LayerTimes& lt = into[static_cast<std::size_t>(i)];
      lt.forward_s = timer.seconds(i, LayerPass::Forward);
      lt.backward_data_s = timer.seconds(i, LayerPass::BackwardData);
      lt.backward_weights_s = timer.seconds(i, LayerPass::BackwardWeights);
    }
  };

  EventTimer timer(be, L, o.sync);
  // Forward, loss gradient and backward with `observer` around every layer call.
  auto observed_pass = [&](LayerObserver* observer) {
    net.set_observer(observer);
    const float* y = net.forward(x.data(), o.batch);
    be.mse_loss_grad(out_n, y, t.data(), scale, dy.data(), loss.data());
    net.backward(dy.data(), nullptr, false);
    net.set_observer(nullptr);
  };
  // The first step, every call timed: plans, algorithm searches and workspace growth happen here.
  // It is the first of the warm-up steps (run even with none).
  const auto first_start = std::chrono::steady_clock::now();
  {
    out.workspace_bytes.assign(static_cast<std::size_t>(L), PerPass<std::size_t>{});
    FirstCall first(be, timer, o.workspace, out.workspace_bytes);
    timer.clear();
    observed_pass(&first);
    adam.step(net.params(), net.grads());
    be.synchronize();
    per_layer(timer, out.first_call);
    out.algorithms.assign(static_cast<std::size_t>(L), PerPass<std::string>{});
    for (int i = 0; i < L; ++i)
      if (plan.layers[static_cast<std::size_t>(i)].spec.type == LayerType::Conv2d)
        out.algorithms[static_cast<std::size_t>(i)] =
            be.conv_pass_algorithms(model_detail::geom(plan.layers[static_cast<std::size_t>(i)], o.batch), true);
  }
  out.first_step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - first_start).count();
  for (int i = 1; i < o.warmup; ++i) step(false);

  std::vector<double> fwd, loss_s, bwd, opt;
  std::vector<std::vector<double>> per(static_cast<std::size_t>(L) * kPasses);
  for (int r = 0; r < o.repetitions; ++r) {
    if (o.sync) o.sync();
    step(true);
    fwd.push_back(be.elapsed_s(*ev[0], *ev[1]));
    loss_s.push_back(be.elapsed_s(*ev[1], *ev[2]));
    bwd.push_back(be.elapsed_s(*ev[2], *ev[3]));
    opt.push_back(be.elapsed_s(*ev[3], *ev[4]));
    // The same pass with an event pair around every layer call.
    timer.clear();
    observed_pass(&timer);
    be.synchronize();
    for (int i = 0; i < L; ++i)
      for (int p = 0; p < kPasses; ++p) per[static_cast<std::size_t>(i) * kPasses + p].push_back(timer.seconds(i, static_cast<LayerPass>(p)));
  }
  auto stat = [&](const std::vector<double>& v) {
    if (!o.mean) return median(v);
    double sum = 0;
    for (double v_i : v) sum += v_i;
    return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
  };
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
  for (int i = 0; i < L; ++i) {
    const LayerPlan& l = plan.layers[i];
    // No library call to choose for: a flatten, or a join of several values (an add, a concat).
    if (l.spec.type == LayerType::Flatten || stage_boundary(plan, i, i + 1).entries.size() > 1) {
      out.emplace_back();
      continue;
    }
    std::unique_ptr<Backend> be = make();
    Allocator& a = allocator_for(be->device());
    const std::size_t before = a.current_bytes(MemoryPool::Workspace);
    LayerConvChoice c;
    {
      Sequential layer(plan, i, i + 1, *be);
      fill_timing_params(plan, layer, 0);
      const int64_t in_n = batch * numel_of(l.in), out_n = batch * numel_of(l.out);
      Tensor x = Tensor::empty({in_n}, be->device()), dy = Tensor::empty({out_n}, be->device());
      be->fill_normal(x.data(), in_n, 1, 0, 1.0f);
      be->fill_normal(dy.data(), out_n, 2, 0, 1.0f);
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
