// profile.json read, written and scaled to another image size; a layer's time at any batch.
#include "projection/profile.h"

#include <algorithm>
#include <limits>

#include "engine/check.h"
#include "engine/fsutil.h"
#include "engine/json_input.h"
#include "engine/net.h"
#include "projection/strict_json.h"

namespace pb::projection {

using nlohmann::json;

namespace {

// Linear in b between measured batches, extrapolated along the first two below them. Beyond the
// largest, along the last two but never below its time per sample: a noisy pair of points (the
// larger batch timed faster) would otherwise make a sample cheaper the larger the batch, without
// end, and tp or weak scaling "superlinear".
double interpolate(const std::vector<int64_t>& xs, const std::vector<double>& ys, double b) {
  if (b <= 0 || ys.empty()) return 0;
  const double last = static_cast<double>(xs.back());
  if (xs.size() == 1) return ys[0] * b / last;
  std::size_t i = 1;
  while (i + 1 < xs.size() && b > static_cast<double>(xs[i])) ++i;
  const double x0 = static_cast<double>(xs[i - 1]), x1 = static_cast<double>(xs[i]);
  const double y = ys[i - 1] + (ys[i] - ys[i - 1]) * (b - x0) / (x1 - x0);
  if (b > last) return std::max({0.0, y, ys.back() * b / last});
  return std::max(0.0, y);
}

}  // namespace

int64_t Profile::param_count() const {
  int64_t n = 0;
  for (const LayerProfile& l : layers) n += l.params;
  return n;
}
double Profile::forward_flops() const {
  double f = 0;
  for (const LayerProfile& l : layers) f += l.forward_flops;
  return f;
}
double Profile::input_bytes_per_sample() const { return layers.empty() ? 0 : numel(layers.front().in) * kFloat; }
double Profile::output_bytes_per_sample() const { return layers.empty() ? 0 : numel(layers.back().out) * kFloat; }
double Profile::forward(int l, double b) const { return interpolate(batches, layers.at(l).forward_s, b); }
double Profile::backward_data(int l, double b) const { return interpolate(batches, layers.at(l).backward_data_s, b); }
double Profile::backward_weights(int l, double b) const { return interpolate(batches, layers.at(l).backward_weights_s, b); }
double Profile::loss(double b) const { return interpolate(batches, loss_s, b); }
double Profile::best_forward_flops_per_s() const {
  double best = 0;
  for (const LayerProfile& l : layers)
    for (std::size_t i = 0; i < batches.size(); ++i)
      if (l.forward_flops > 0 && l.forward_s[i] > 0) best = std::max(best, l.forward_flops * batches[i] / l.forward_s[i]);
  return best;
}

Profile parse_profile(const std::string& text, const std::string& source) {
  const json doc = parse_json_input(text, source);
  Obj top(doc, source, "");
  Profile p;
  p.source = source;
  if (top.integer("parbench_profile", 1) != 1) top.fail("parbench_profile", "1 (the format version this program reads)");
  const json& ctx = top.raw("context");
  if (!ctx.is_object()) top.fail("context", "an object");
  p.context = ctx;
  if (ctx.contains("threads") && ctx["threads"].is_number_integer() && ctx["threads"].get<int64_t>() >= 0 &&
      ctx["threads"].get<int64_t>() <= std::numeric_limits<int>::max())
    p.threads = static_cast<int>(ctx["threads"].get<int64_t>());
  if (ctx.contains("threads") && ctx["threads"].is_string()) {
    try {
      p.threads = std::stoi(ctx["threads"].get<std::string>());
    } catch (const std::exception&) {
      p.threads = 0;
    }
  }
  if (ctx.contains("concurrent_workers")) p.concurrent = Obj(ctx, source, "context").small_integer("concurrent_workers", 1);
  for (const char* k : {"device_kind", "device"})
    if (p.device_kind.empty() && ctx.contains(k) && ctx[k].is_string()) p.device_kind = ctx[k].get<std::string>();
  if (ctx.contains("precision")) {
    const std::string prec = Obj(ctx, source, "context").str("precision");
    if (prec != "fp32" && prec != "tf32" && prec != "bf16")
      throw UsageError(fmt::format("{}: context.precision: expected fp32, tf32 or bf16, got '{}'", source, prec));
    p.precision = prec;
  }
  p.batches = top.ints("batches", 1);
  if (p.batches.empty()) top.fail("batches", "at least one batch size");
  for (std::size_t i = 1; i < p.batches.size(); ++i)
    if (p.batches[i] <= p.batches[i - 1]) top.fail(fmt::format("batches[{}]", i), "batch sizes in ascending order");
  const std::size_t nb = p.batches.size();
  const json& layers = top.raw("layers");
  if (!layers.is_array() || layers.empty()) top.fail("layers", "a non-empty array, one entry per layer");
  for (std::size_t i = 0; i < layers.size(); ++i) {
    Obj l(layers[i], source, fmt::format("layers[{}]", i));
    LayerProfile lp;
    lp.index = l.small_integer("index", 0);
    if (lp.index != static_cast<int>(i)) l.fail(l.at_path("index"), fmt::format("{} (layers in order)", i));
    lp.type = l.str("type");
    LayerType type;
    if (!parse_layer_type(lp.type, &type)) l.fail(l.at_path("type"), layer_type_names());
    lp.in = l.ints("in", 1);
    lp.out = l.ints("out", 1);
    if (lp.in.empty() || lp.out.empty()) l.fail(l.at_path(lp.in.empty() ? "in" : "out"), "a per-sample shape");
    if (l.has("inputs")) {  // a net with skips (profiles since graphs): the layers it reads
      const std::vector<int64_t> inputs = l.ints("inputs", kNetInput);
      if (inputs.empty()) l.fail(l.at_path("inputs"), "a non-empty array of earlier layers' indices (-1: the net's input)");
      for (int64_t src : inputs) {
        if (src >= static_cast<int64_t>(i))
          l.fail(l.at_path("inputs"), fmt::format("earlier layers' indices (-1: the net's input), got {}", src));
        lp.inputs.push_back(static_cast<int>(src));
      }
    }
    lp.params = l.integer("params", 0);
    lp.forward_flops = l.number("forward_flops", 0);
    lp.forward_s = l.numbers("forward_s", nb, 0);
    lp.backward_data_s = l.numbers("backward_data_s", nb, 0);
    lp.backward_weights_s = l.numbers("backward_weights_s", nb, 0);
    lp.activation_bytes_per_sample = l.number("activation_bytes_per_sample", 0);
    lp.workspace_bytes = l.number_or("workspace_bytes", 0, 0);
    if (l.has("workspace_bytes_per_batch") && l.ints("workspace_bytes_per_batch", 0).size() != nb)
      l.fail(l.at_path("workspace_bytes_per_batch"), fmt::format("an array of {} integer(s), one per entry of \"batches\"", nb));
    // Per pass (profiles since first-call times): checked, not used (the flat times above are).
    if (l.has("passes")) {
      Obj passes(l.raw("passes"), source, l.at_path("passes"));
      for (const char* name : {"forward", "backward_data", "backward_weights"}) {
        Obj r(passes.raw(name), source, passes.at_path(name));
        r.numbers("s", nb, 0);
        r.numbers("first_call_s", nb, 0);
        if (r.ints("workspace_bytes", 0).size() != nb)
          r.fail(r.at_path("workspace_bytes"), fmt::format("an array of {} integer(s), one per entry of \"batches\"", nb));
        const json& a = r.raw("algorithm");
        if (!a.is_array() || a.size() != nb || !std::all_of(a.begin(), a.end(), [](const json& v) { return v.is_string(); }))
          r.fail(r.at_path("algorithm"), fmt::format("an array of {} string(s), one per entry of \"batches\"", nb));
        r.number("flops_per_sample", 0);
        // Work and roofline fractions (profiles since rooflines): checked, not used.
        if (r.has("flops")) r.numbers("flops", nb, 0);
        if (r.has("bytes")) r.numbers("bytes", nb, 0);
        if (r.has("roofline_fraction")) {
          const json& f = r.raw("roofline_fraction");
          if (!f.is_array() || f.size() != nb ||
              !std::all_of(f.begin(), f.end(), [](const json& v) { return v.is_null() || (v.is_number() && v.get<double>() >= 0); }))
            r.fail(r.at_path("roofline_fraction"), fmt::format("an array of {} number(s) >= 0 or null, one per entry of \"batches\"", nb));
        }
        r.done();
      }
      passes.done();
    }
    l.done();
    // Its input is the first layer it reads (the one before it where "inputs" is absent).
    const int from = lp.inputs.empty() ? static_cast<int>(i) - 1 : lp.inputs.front();
    if (from >= 0 && numel(lp.in) != numel(p.layers[from].out))
      l.fail(l.at_path("in"), fmt::format("{}'s output ({} values per sample)",
                                          lp.inputs.empty() ? std::string("the previous layer") : fmt::format("layer {}", from),
                                          numel(p.layers[from].out)));
    p.layers.push_back(std::move(lp));
  }
  p.loss_s = top.numbers("loss_s", nb, 0);
  p.optimizer_s_per_param = top.number("optimizer_s_per_param", 0);
  // `parbench profile`'s whole-pass times: checked, not used (the layers are what the model sums).
  for (const char* k : {"forward_total_s", "backward_total_s"})
    if (top.has(k)) top.numbers(k, nb, 0);
  top.done();
  return p;
}

Profile load_profile(const std::string& path) { return parse_profile(read_file(path), path); }
json profile_json(const Profile& p) {
  json doc;
  doc["parbench_profile"] = 1;
  doc["context"] = p.context;
  doc["batches"] = p.batches;
  doc["layers"] = json::array();
  for (const LayerProfile& l : p.layers) {
    doc["layers"].push_back({{"index", l.index},
                             {"type", l.type},
                             {"in", l.in},
                             {"out", l.out},
                             {"params", l.params},
                             {"forward_flops", l.forward_flops},
                             {"forward_s", l.forward_s},
                             {"backward_data_s", l.backward_data_s},
                             {"backward_weights_s", l.backward_weights_s},
                             {"activation_bytes_per_sample", l.activation_bytes_per_sample},
                             {"workspace_bytes", l.workspace_bytes}});
    if (!l.inputs.empty()) doc["layers"].back()["inputs"] = l.inputs;
  }
  doc["loss_s"] = p.loss_s;
  doc["optimizer_s_per_param"] = p.optimizer_s_per_param;
  return doc;
}

Profile scale_image(const Profile& p, int64_t from, int64_t to) {
  if (from < 1 || to < 1) throw UsageError(fmt::format("image sizes must be at least 1, got {} and {}", from, to));
  const double area = static_cast<double>(to) * to / (static_cast<double>(from) * from);
  Profile q = p;
  auto shape = [&](std::vector<int64_t>& s, const LayerProfile& l) {
    if (s.size() != 3) throw UsageError(fmt::format("{}: layer {} ({}) has no image shape to scale", p.source, l.index, l.type));
    s[1] = s[1] * to / from, s[2] = s[2] * to / from;
  };
  for (LayerProfile& l : q.layers) {
    if (l.type == "linear" || l.type == "flatten")
      throw UsageError(fmt::format("{}: layer {} ({}): a net with {} layers cannot be scaled to another image size", p.source,
                                   l.index, l.type, l.type));
    shape(l.in, l), shape(l.out, l);
    l.forward_flops *= area;
    l.activation_bytes_per_sample *= area;
    l.workspace_bytes *= area;
    for (auto* v : {&l.forward_s, &l.backward_data_s, &l.backward_weights_s})
      for (double& t : *v) t *= area;
  }
  for (double& t : q.loss_s) t *= area;
  if (q.context.contains("workload_params") && q.context["workload_params"].is_string()) {
    const std::string w = q.context["workload_params"].get<std::string>(), was = fmt::format("image {},", from);
    if (w.rfind(was, 0) == 0) q.context["workload_params"] = fmt::format("image {},{}", to, w.substr(was.size()));
  }
  q.context["scaled_image"] = fmt::format("{} -> {} pixels: times, FLOPs and activations x{:g}", from, to, area);
  return q;
}
}  // namespace pb::projection
