// Projection: profile and machine files, the alpha-beta link model, the event simulator and one
// program per strategy (each mirrors the order of operations in strategies/<name>.cpp).
#include "reports/projection.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>

#include <fmt/ranges.h>

#include "engine/check.h"
#include "engine/fsutil.h"
#include "engine/json_input.h"
#include "engine/net.h"
#include "strategies/batch.h"
#include "strategies/stages.h"
#include "strategies/strategy.h"

namespace pb::projection {

using nlohmann::json;

namespace {

constexpr double kFloat = sizeof(float);

// A JSON object read strictly: every field typed and checked, unknown fields refused; errors
// name the file and the field's path.
class Obj {
 public:
  Obj(const json& j, std::string source, std::string path) : j_(j), source_(std::move(source)), path_(std::move(path)) {
    if (!j_.is_object()) fail(path_.empty() ? "the top level" : path_, "an object");
  }
  [[noreturn]] void fail(const std::string& field, const std::string& expected) const {
    throw UsageError(fmt::format("{}: {}: expected {}", source_, field, expected));
  }
  std::string at_path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  bool has(const std::string& key) const { return j_.contains(key); }
  const json& raw(const std::string& key) {
    seen_.insert(key);
    if (!j_.contains(key)) fail(at_path(key), "a value (the field is missing)");
    return j_.at(key);
  }
  double number(const std::string& key, double lo = -std::numeric_limits<double>::infinity(), bool positive = false) {
    const json& v = raw(key);
    if (!v.is_number() || !std::isfinite(v.get<double>())) fail(at_path(key), "a finite number");
    const double x = v.get<double>();
    if (positive && !(x > 0)) fail(at_path(key), fmt::format("a number > 0, got {}", x));
    if (x < lo) fail(at_path(key), fmt::format("a number >= {}, got {}", lo, x));
    return x;
  }
  double number_or(const std::string& key, double fallback, double lo = 0) {
    return has(key) ? number(key, lo) : (seen_.insert(key), fallback);
  }
  int64_t integer(const std::string& key, int64_t lo) {
    const json& v = raw(key);
    if (!v.is_number_integer() || v.get<int64_t>() < lo) fail(at_path(key), fmt::format("an integer >= {}", lo));
    return v.get<int64_t>();
  }
  // An integer an int holds (counts, indices): larger ones are bad input, not wrapped.
  int small_integer(const std::string& key, int64_t lo) {
    const int64_t n = integer(key, lo);
    if (n > std::numeric_limits<int>::max()) fail(at_path(key), fmt::format("an integer from {} to {}", lo, std::numeric_limits<int>::max()));
    return static_cast<int>(n);
  }
  std::string str(const std::string& key) {
    const json& v = raw(key);
    if (!v.is_string()) fail(at_path(key), "a string");
    return v.get<std::string>();
  }
  std::string str_or(const std::string& key, const std::string& fallback) { return has(key) ? str(key) : (seen_.insert(key), fallback); }
  bool boolean(const std::string& key) {
    const json& v = raw(key);
    if (!v.is_boolean()) fail(at_path(key), "true or false");
    return v.get<bool>();
  }
  std::vector<double> numbers(const std::string& key, std::size_t size, double lo) {
    const json& v = raw(key);
    if (!v.is_array() || v.size() != size)
      fail(at_path(key), fmt::format("an array of {} number(s), one per entry of \"batches\"", size));
    std::vector<double> out;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_number() || !std::isfinite(v[i].get<double>()) || v[i].get<double>() < lo)
        fail(fmt::format("{}[{}]", at_path(key), i), fmt::format("a finite number >= {}", lo));
      out.push_back(v[i].get<double>());
    }
    return out;
  }
  std::vector<int64_t> ints(const std::string& key, int64_t lo) {
    const json& v = raw(key);
    if (!v.is_array()) fail(at_path(key), "an array of integers");
    std::vector<int64_t> out;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_number_integer() || v[i].get<int64_t>() < lo)
        fail(fmt::format("{}[{}]", at_path(key), i), fmt::format("an integer >= {}", lo));
      out.push_back(v[i].get<int64_t>());
    }
    return out;
  }
  // Unknown fields are mistakes (a misspelt key would silently keep its default).
  void done() const {
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!seen_.count(it.key())) fail(at_path(it.key()), "no such field (unknown)");
  }
  const json& json_value() const { return j_; }
  const std::string& source() const { return source_; }

 private:
  const json& j_;
  std::string source_, path_;
  std::set<std::string> seen_;
};

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

double numel(const std::vector<int64_t>& s) {
  double n = 1;
  for (int64_t d : s) n *= static_cast<double>(d);
  return n;
}

const std::vector<std::pair<Coll, std::string>>& coll_names() {
  static const std::vector<std::pair<Coll, std::string>> v = {
      {Coll::AllReduce, "all_reduce"}, {Coll::Broadcast, "broadcast"},           {Coll::Reduce, "reduce"},
      {Coll::AllGather, "all_gather"}, {Coll::ReduceScatter, "reduce_scatter"}, {Coll::SendRecv, "send_recv"}};
  return v;
}

const std::set<std::string> kAlgorithms = {"ring", "tree", "direct"};

}  // namespace

// ---- profile -----------------------------------------------------------------------------------

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
    if (lp.type != "conv2d" && lp.type != "relu" && lp.type != "linear" && lp.type != "flatten")
      l.fail(l.at_path("type"), "conv2d, relu, linear or flatten");
    lp.in = l.ints("in", 1);
    lp.out = l.ints("out", 1);
    if (lp.in.empty() || lp.out.empty()) l.fail(l.at_path(lp.in.empty() ? "in" : "out"), "a per-sample shape");
    lp.params = l.integer("params", 0);
    lp.forward_flops = l.number("forward_flops", 0);
    lp.forward_s = l.numbers("forward_s", nb, 0);
    lp.backward_data_s = l.numbers("backward_data_s", nb, 0);
    lp.backward_weights_s = l.numbers("backward_weights_s", nb, 0);
    lp.activation_bytes_per_sample = l.number("activation_bytes_per_sample", 0);
    lp.workspace_bytes = l.number_or("workspace_bytes", 0, 0);
    if (l.has("workspace_bytes_per_batch") && l.ints("workspace_bytes_per_batch", 0).size() != nb)
      l.fail(l.at_path("workspace_bytes_per_batch"), fmt::format("an array of {} integer(s), one per entry of \"batches\"", nb));
    l.done();
    if (i > 0 && numel(lp.in) != numel(p.layers.back().out))
      l.fail(l.at_path("in"), fmt::format("the previous layer's output ({} values per sample)", numel(p.layers.back().out)));
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

Validation parse_validation(const std::string& text, const std::string& source) {
  const json doc = parse_json_input(text, source);
  Obj top(doc, source, "");
  if (top.integer("parbench_validation", 1) != 1) top.fail("parbench_validation", "1 (the format version this program reads)");
  Validation v;
  v.source = source;
  for (const char* k : {"run", "machine"})  // where it came from: not needed to pool it
    if (top.has(k)) top.str(k);
  const json& rows = top.raw("rows");
  if (!rows.is_array()) top.fail("rows", "an array, one entry per configuration");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    Obj r(rows[i], source, fmt::format("rows[{}]", i));
    ValidationRow row;
    row.name = r.str("name");
    row.measured_s = r.number("measured_s", 0, true);
    row.predicted_s = r.number("predicted_s", 0, true);
    r.number("error");
    row.threads = r.has("threads") ? r.small_integer("threads", 1) : 0;
    row.compute_s = r.number_or("compute_s", 0);
    row.exposed_comm_s = r.number_or("exposed_comm_s", 0);
    row.idle_s = r.number_or("idle_s", 0);
    if (r.has("measured_times_s")) {
      const json& reps = r.raw("measured_times_s");
      if (!reps.is_array() || reps.empty()) r.fail(r.at_path("measured_times_s"), "a non-empty array of seconds");
      for (std::size_t k = 0; k < reps.size(); ++k) {
        if (!reps[k].is_number() || !(reps[k].get<double>() > 0) || !std::isfinite(reps[k].get<double>()))
          r.fail(fmt::format("{}[{}]", r.at_path("measured_times_s"), k), "a finite number > 0");
        row.measured_times_s.push_back(reps[k].get<double>());
      }
    } else {
      row.measured_times_s = {row.measured_s};
    }
    r.done();
    v.rows.push_back(std::move(row));
  }
  // Written alongside the rows; not needed to pool them.
  for (const char* k : {"mean_abs_error", "worst_abs_error", "anchor_scale", "one_device_spread"})
    if (top.has(k)) top.number(k);
  for (const char* k : {"combined", "rounds"})
    if (top.has(k)) top.raw(k);
  top.done();
  return v;
}

Validation load_validation(const std::string& path) { return parse_validation(read_file(path), path); }

json profile_json(const Profile& p) {
  json doc;
  doc["parbench_profile"] = 1;
  doc["context"] = p.context;
  doc["batches"] = p.batches;
  doc["layers"] = json::array();
  for (const LayerProfile& l : p.layers)
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

// ---- machine -----------------------------------------------------------------------------------

const char* coll_name(Coll c) {
  for (const auto& [k, n] : coll_names())
    if (k == c) return n.c_str();
  return "?";
}

double bus_factor(Coll c, int n) {
  if (n <= 1) return 0;
  switch (c) {
    case Coll::AllReduce: return 2.0 * (n - 1) / n;
    case Coll::AllGather:
    case Coll::ReduceScatter: return static_cast<double>(n - 1) / n;
    default: return 1;
  }
}

double latency_steps(Coll c, const std::string& algorithm, int n) {
  if (n <= 1) return 0;
  if (c == Coll::SendRecv) return 1;
  const double log_n = std::ceil(std::log2(static_cast<double>(n)));
  const bool tree = algorithm == "tree";
  switch (c) {
    case Coll::AllReduce: return tree ? 2 * log_n : 2.0 * (n - 1);  // reduce-scatter + all-gather, or up and down a tree
    case Coll::AllGather:
    case Coll::ReduceScatter: return tree ? log_n : n - 1.0;
    default: return tree ? log_n : n - 1.0;  // broadcast, reduce: a pipelined chain or a tree
  }
}

namespace {
// A key of a per-worker-count table (`ranks`, `worker_overhead_at_s`): 2 or more.
int worker_count_key(const Obj& table, const std::string& key) {
  char* end = nullptr;
  const long n = std::strtol(key.c_str(), &end, 10);
  if (key.empty() || *end != '\0' || n < 2 || n > (1 << 20)) table.fail(table.at_path(key), "a worker count of 2 or more as the key");
  return static_cast<int>(n);
}

// "G of N stride S" as layout_key writes it (no sign, no leading zero, nothing else), a layout
// that fits: G >= 2 of N > G workers, the last member (G - 1) x S after the first.
std::optional<AlphaBeta::Layout> parse_layout_key(const std::string& key) {
  AlphaBeta::Layout l;
  const char* p = key.c_str();
  auto number = [&](int& out) {
    if (!std::isdigit(static_cast<unsigned char>(*p))) return false;
    char* end = nullptr;
    const long v = std::strtol(p, &end, 10);
    if (v > (1 << 20)) return false;
    out = static_cast<int>(v), p = end;
    return true;
  };
  auto word = [&](const char* w) {
    const std::size_t n = std::strlen(w);
    if (std::strncmp(p, w, n) != 0) return false;
    p += n;
    return true;
  };
  if (!(number(l.size) && word(" of ") && number(l.workers) && word(" stride ") && number(l.stride) && *p == '\0'))
    return std::nullopt;
  if (layout_key(l) != key || l.size < 2 || l.workers <= l.size || l.stride < 1 || (l.size - 1) * l.stride >= l.workers)
    return std::nullopt;
  return l;
}

LinkCosts parse_links(const json& j, const std::string& source, const std::string& path) {
  Obj o(j, source, path);
  LinkCosts out;
  for (const auto& [c, name] : coll_names()) {
    if (!o.has(name)) continue;
    Obj algs(o.raw(name), source, o.at_path(name));
    for (auto it = algs.json_value().begin(); it != algs.json_value().end(); ++it) {
      if (!kAlgorithms.count(it.key())) algs.fail(algs.at_path(it.key()), "an algorithm: ring, tree or direct");
      Obj ab(algs.raw(it.key()), source, algs.at_path(it.key()));
      AlphaBeta v;
      v.alpha_s = ab.number("alpha_s", 0);
      v.bus_bytes_per_s = ab.number("bus_bytes_per_s", 0, /*positive=*/true);
      auto fit = [&](Obj& table, const std::string& key) {
        Obj one(table.raw(key), source, table.at_path(key));
        AlphaBeta::AtRanks f;
        f.alpha_s = one.number("alpha_s", 0);
        f.bus_bytes_per_s = one.number("bus_bytes_per_s", 0, /*positive=*/true);
        for (const char* key : {"points", "late_points"}) {
          if (!one.has(key)) continue;
          auto& out = std::string(key) == "points" ? f.points : f.late_points;
          const json& pts = one.raw(key);
          const std::string where = one.at_path(key);
          if (!pts.is_array() || pts.empty()) one.fail(where, "a non-empty array of [bytes, seconds] pairs");
          for (std::size_t i = 0; i < pts.size(); ++i) {
            const json& q = pts[i];
            const bool pair = q.is_array() && q.size() == 2 && q[0].is_number() && q[1].is_number();
            const double b = pair ? q[0].get<double>() : 0, t = pair ? q[1].get<double>() : 0;
            if (!pair || !(b > 0) || !(t > 0) || !std::isfinite(b) || !std::isfinite(t))
              one.fail(fmt::format("{}[{}]", where, i), "a pair [bytes, seconds] of finite numbers > 0");
            if (i > 0 && !(b > out.back().first))
              one.fail(fmt::format("{}[{}]", where, i), fmt::format("bytes above the previous pair's {:g}", out.back().first));
            out.push_back({b, t});
          }
        }
        one.done();
        return f;
      };
      if (ab.has("ranks")) {
        Obj at(ab.raw("ranks"), source, ab.at_path("ranks"));
        for (auto r = at.json_value().begin(); r != at.json_value().end(); ++r)
          v.at_ranks[worker_count_key(at, r.key())] = fit(at, r.key());
        at.done();
      }
      if (ab.has("groups")) {
        Obj gs(ab.raw("groups"), source, ab.at_path("groups"));
        for (auto g = gs.json_value().begin(); g != gs.json_value().end(); ++g) {
          const std::optional<AlphaBeta::Layout> l = parse_layout_key(g.key());
          if (!l) gs.fail(gs.at_path(g.key()), "a key \"G of N stride S\": groups of G >= 2 of N > G workers, ranks S >= 1 apart, (G - 1) x S < N");
          v.in_groups[*l] = fit(gs, g.key());
        }
        gs.done();
      }
      ab.done();
      out[name][it.key()] = v;
    }
    algs.done();
    if (out[name].empty()) o.fail(o.at_path(name), "at least one algorithm (ring, tree, direct)");
  }
  o.done();
  return out;
}

json links_json(const LinkCosts& l) {
  json j = json::object();
  for (const auto& [c, algs] : l)
    for (const auto& [a, v] : algs) {
      j[c][a] = {{"alpha_s", v.alpha_s}, {"bus_bytes_per_s", v.bus_bytes_per_s}};
      auto fit = [](const AlphaBeta::AtRanks& f) {
        json o = {{"alpha_s", f.alpha_s}, {"bus_bytes_per_s", f.bus_bytes_per_s}};
        for (const auto& [key, pts] : {std::make_pair("points", &f.points), std::make_pair("late_points", &f.late_points)}) {
          if (pts->empty()) continue;
          o[key] = json::array();
          for (const auto& [b, t] : *pts) o[key].push_back({b, t});
        }
        return o;
      };
      for (const auto& [n, f] : v.at_ranks) j[c][a]["ranks"][std::to_string(n)] = fit(f);
      for (const auto& [l, f] : v.in_groups) j[c][a]["groups"][layout_key(l)] = fit(f);
    }
  return j;
}
}  // namespace

Machine parse_machine(const std::string& text, const std::string& source) {
  const json doc = parse_json_input(text, source);
  Obj top(doc, source, "");
  Machine m;
  m.source = source;
  if (top.integer("parbench_machine", 1) != 1) top.fail("parbench_machine", "1 (the format version this program reads)");
  m.name = top.str("name");
  m.description = top.str_or("description", "");
  Obj dev(top.raw("device"), source, "device");
  m.kind = dev.str("kind");
  if (m.kind != "cpu" && m.kind != "cuda") dev.fail("device.kind", "cpu or cuda");
  m.model = dev.str("model");
  m.peak_flops = dev.number("peak_flops", 0, true);
  m.memory_bytes = dev.number("memory_bytes", 0, true);
  m.shared_cores = dev.has("shared_cores") ? dev.small_integer("shared_cores", 0) : (dev.number_or("shared_cores", 0), 0);
  m.parallel_threads = dev.number_or("parallel_threads", 0, 0);
  dev.done();
  m.devices_per_node = top.small_integer("devices_per_node", 1);
  m.nodes = top.small_integer("nodes", 1);
  m.overlap = top.boolean("overlap");
  m.step_overhead_s = top.number_or("step_overhead_s", 0, 0);
  m.worker_overhead_s = top.number_or("worker_overhead_s", 0, 0);
  if (top.has("worker_overhead_at_s")) {
    Obj at(top.raw("worker_overhead_at_s"), source, "worker_overhead_at_s");
    for (auto r = at.json_value().begin(); r != at.json_value().end(); ++r)
      m.worker_overhead_at_s[worker_count_key(at, r.key())] = at.number(r.key(), 0);
    at.done();
  }
  if (top.has("worker_start_at_s")) {
    Obj at(top.raw("worker_start_at_s"), source, "worker_start_at_s");
    for (auto r = at.json_value().begin(); r != at.json_value().end(); ++r)
      m.worker_start_at_s[worker_count_key(at, r.key())] = at.number(r.key(), 0);
    at.done();
  }
  m.late_arrival_gap_s = top.number_or("late_arrival_gap_s", m.late_arrival_gap_s, 0);
  m.sender_trails_s = top.number_or("sender_trails_s", m.sender_trails_s, 0);
  if (top.has("unit_overhead_s")) {
    Obj u(top.raw("unit_overhead_s"), source, "unit_overhead_s");
    for (const char* k : {"fsdp", "zero2"})
      if (u.has(k)) m.unit_overhead_s[k] = u.number(k, 0);
    u.done();
  }
  Obj links(top.raw("links"), source, "links");
  m.intra_node = parse_links(links.raw("intra_node"), source, "links.intra_node");
  if (links.has("inter_node")) m.inter_node = parse_links(links.raw("inter_node"), source, "links.inter_node");
  links.done();
  if (m.nodes > 1 && m.inter_node.empty()) top.fail("links.inter_node", "link costs between nodes (nodes > 1)");
  if (!m.intra_node.count("send_recv")) top.fail("links.intra_node.send_recv", "the point-to-point cost (direct)");
  if (top.has("calibration")) m.calibration = top.raw("calibration");
  top.done();
  return m;
}

double Machine::workers_overhead_s(int local) const {
  if (local <= 1) return 0;
  if (worker_overhead_at_s.empty()) return worker_overhead_s * (local - 1);
  const auto hi = worker_overhead_at_s.lower_bound(local);
  if (hi == worker_overhead_at_s.end()) {
    const auto& [n, t] = *worker_overhead_at_s.rbegin();
    return t + worker_overhead_s * (local - n);
  }
  if (hi->first == local) return hi->second;
  const int n0 = hi == worker_overhead_at_s.begin() ? 1 : std::prev(hi)->first;
  const double t0 = hi == worker_overhead_at_s.begin() ? 0 : std::prev(hi)->second;
  return t0 + (hi->second - t0) * (local - n0) / (hi->first - n0);
}

Machine load_machine(const std::string& path) { return parse_machine(read_file(path), path); }

json machine_json(const Machine& m) {
  json j;
  j["parbench_machine"] = 1;
  j["name"] = m.name;
  if (!m.description.empty()) j["description"] = m.description;
  j["device"] = {{"kind", m.kind}, {"model", m.model}, {"peak_flops", m.peak_flops}, {"memory_bytes", m.memory_bytes}};
  if (m.shared_cores > 0) j["device"]["shared_cores"] = m.shared_cores;
  if (m.parallel_threads > 0) j["device"]["parallel_threads"] = m.parallel_threads;
  j["devices_per_node"] = m.devices_per_node;
  j["nodes"] = m.nodes;
  j["overlap"] = m.overlap;
  j["step_overhead_s"] = m.step_overhead_s;
  j["worker_overhead_s"] = m.worker_overhead_s;
  for (const auto& [n, v] : m.worker_overhead_at_s) j["worker_overhead_at_s"][std::to_string(n)] = v;
  for (const auto& [n, v] : m.worker_start_at_s) j["worker_start_at_s"][std::to_string(n)] = v;
  j["late_arrival_gap_s"] = m.late_arrival_gap_s;
  j["sender_trails_s"] = m.sender_trails_s;
  for (const auto& [k, v] : m.unit_overhead_s) j["unit_overhead_s"][k] = v;
  j["links"]["intra_node"] = links_json(m.intra_node);
  if (!m.inter_node.empty()) j["links"]["inter_node"] = links_json(m.inter_node);
  if (!m.calibration.is_null()) j["calibration"] = m.calibration;
  return j;
}

std::string layout_key(const AlphaBeta::Layout& l) { return fmt::format("{} of {} stride {}", l.size, l.workers, l.stride); }

namespace {
// AtRanks::points at `bytes`; beyond the last, seconds_per_byte for each byte more.
double read_points(const std::vector<std::pair<double, double>>& p, double bytes, double seconds_per_byte) {
  if (bytes <= p.front().first) return p.front().second;
  if (bytes >= p.back().first) return p.back().second + (bytes - p.back().first) * seconds_per_byte;
  const auto hi = std::lower_bound(p.begin(), p.end(), bytes, [](const auto& q, double b) { return q.first < b; });
  const auto lo = hi - 1;
  return lo->second + (hi->second - lo->second) * (bytes - lo->first) / (hi->first - lo->first);
}
}  // namespace

std::vector<std::pair<double, double>> monotone_points(std::vector<Sample> samples) {
  std::sort(samples.begin(), samples.end(), [](const Sample& a, const Sample& b) { return a.bytes < b.bytes; });
  // Pool adjacent violators; samples of one size are pooled from the start.
  struct Block {
    double sum, n;
    std::size_t first, last;
  };
  std::vector<Block> blocks;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (!blocks.empty() && samples[blocks.back().last].bytes == samples[i].bytes) {
      blocks.back().sum += samples[i].seconds, blocks.back().n += 1, blocks.back().last = i;
    } else {
      blocks.push_back({samples[i].seconds, 1, i, i});
    }
    while (blocks.size() >= 2 && blocks[blocks.size() - 2].sum / blocks[blocks.size() - 2].n > blocks.back().sum / blocks.back().n) {
      Block b = blocks.back();
      blocks.pop_back();
      blocks.back().sum += b.sum, blocks.back().n += b.n, blocks.back().last = b.last;
    }
  }
  std::vector<std::pair<double, double>> out;
  for (const Block& b : blocks)
    for (std::size_t i = b.first; i <= b.last; ++i)
      if (out.empty() || out.back().first != samples[i].bytes) out.push_back({samples[i].bytes, b.sum / b.n});
  return out;
}

CollCost collective_cost(const Machine& m, Coll c, double bytes, int ranks, bool spans_nodes, int fit_ranks,
                         const AlphaBeta::Layout* layout, bool late) {
  CollCost best;
  if (ranks <= 1) return best;
  const LinkCosts& level = spans_nodes ? m.inter_node : m.intra_node;
  const auto it = level.find(coll_name(c));
  if (it == level.end())
    throw UsageError(fmt::format("{}: links.{}.{}: needed by this configuration, but the machine lists no cost for it",
                                 m.source, spans_nodes ? "inter_node" : "intra_node", coll_name(c)));
  best.seconds = std::numeric_limits<double>::infinity();
  for (const auto& [alg, ab] : it->second) {
    const auto at = ab.at_ranks.find(fit_ranks > 0 ? fit_ranks : ranks);
    const auto in = layout ? ab.in_groups.find(*layout) : ab.in_groups.end();
    const AlphaBeta::AtRanks* f = in != ab.in_groups.end() ? &in->second : at != ab.at_ranks.end() ? &at->second : nullptr;
    const double alpha = f ? f->alpha_s : ab.alpha_s;
    const double bus = f ? f->bus_bytes_per_s : ab.bus_bytes_per_s;
    // Measured times apply to the very meeting they timed: this group's layout, or all `ranks`.
    const bool measured = f && !f->points.empty() && (in != ab.in_groups.end() || fit_ranks <= 0 || fit_ranks == ranks);
    const bool late_measured = measured && late && !f->late_points.empty() && bytes <= f->late_points.back().first;
    const double t = late_measured ? read_points(f->late_points, bytes, 0)
                     : measured    ? read_points(f->points, bytes, bus_factor(c, ranks) / bus)
                                   : alpha * latency_steps(c, alg, ranks) + bytes * bus_factor(c, ranks) / bus;
    if (t < best.seconds) best = {t, alg};
  }
  return best;
}

AlphaBeta fit_alpha_beta(Coll c, const std::string& algorithm, const std::vector<Sample>& samples) {
  // t = a * x1 + g * x2 with x1 = latency steps, x2 = bytes * factor; g = 1 / bandwidth. Least
  // squares weighted by 1/t, so small and large messages count alike (relative error).
  double s11 = 0, s12 = 0, s22 = 0, s1t = 0, s2t = 0;
  for (const Sample& s : samples) {
    const double w = 1.0 / (s.seconds * s.seconds);
    const double x1 = latency_steps(c, algorithm, s.ranks), x2 = s.bytes * bus_factor(c, s.ranks);
    s11 += w * x1 * x1, s12 += w * x1 * x2, s22 += w * x2 * x2, s1t += w * x1 * s.seconds, s2t += w * x2 * s.seconds;
  }
  const double det = s11 * s22 - s12 * s12;
  PB_CHECK(det > 0, "calibration of {}: the samples do not determine alpha and bandwidth", coll_name(c));
  double a = (s1t * s22 - s2t * s12) / det, g = (s11 * s2t - s12 * s1t) / det;
  if (a < 0) a = 0, g = s2t / s22;  // a negative latency is noise: refit the slope alone
  if (g <= 0) g = 1e-15, a = s1t / s11;
  AlphaBeta out;
  out.alpha_s = a, out.bus_bytes_per_s = 1.0 / g;
  return out;
}

// ---- configurations ------------------------------------------------------------------------------

std::optional<std::pair<int, int>> hybrid_shape(const std::string& s) {
  int d = 0, pp = 0;
  Schedule schedule = Schedule::GPipe;
  bool recompute = false;
  if (!parse_hybrid_name(s, &d, &pp, &schedule, &recompute) || schedule != Schedule::GPipe || recompute)
    return std::nullopt;
  return std::make_pair(d, pp);
}

std::optional<std::pair<int, int>> dptp_shape(const std::string& s) {
  int d = 0, t = 0;
  if (!parse_dptp_name(s, &d, &t)) return std::nullopt;
  return std::make_pair(d, t);
}

std::string Config::label() const {
  if (strategy == "pipeline")
    return fmt::format("pipeline (M={}{}{})", micro_batches, schedule == "1f1b" ? ", 1f1b" : "", recompute ? ", recompute" : "");
  if (hybrid_shape(strategy)) return fmt::format("{} (M={})", strategy, micro_batches);
  if (strategy == "ddp") return fmt::format("ddp ({:g} MiB buckets)", bucket_bytes / (1 << 20));
  return strategy;
}

std::vector<std::string> Config::options() const {
  std::vector<std::string> o;
  if (strategy == "pipeline" || hybrid_shape(strategy)) {
    o.push_back(fmt::format("micro_batches:{}", micro_batches));
    if (schedule != "gpipe") o.push_back("schedule:" + schedule);
    if (recompute) o.push_back("recompute:1");
  }
  if (strategy == "ddp") o.push_back(fmt::format("bucket_mb:{:g}", bucket_bytes / (1 << 20)));
  return o;
}

// ---- the simulator --------------------------------------------------------------------------------

namespace {

struct Op {
  enum Kind { Compute, Send, Recv, Coll, Signal, Wait, Delay } kind = Compute;
  double s = 0;       // seconds: compute at full speed, the transfer (Send, Coll), or a start's lag (Delay)
  int peer = -1;      // Send/Recv: the other actor
  int tag = 0;        // Coll: the collective instance; Signal/Wait: the event
  int count = 0;      // Coll: participants
  bool eager = false; // Send/Recv: the sender goes on once its data is out (a buffer per message)
  double late = -1;   // Coll: its seconds when the last participant arrives late (< 0: s)
};

// A collective's seconds: its participants arriving together, or the last one late (its peers
// already waiting).
struct CollTime {
  double s = 0, late = 0;
};
Op coll_op(const CollTime& t, int tag, int count) {
  Op o{Op::Coll, t.s, -1, tag, count};
  o.late = t.late;
  return o;
}

struct Actor {
  int worker = 0;
  bool uses_cores = true;  // false: a communication stream
  std::vector<Op> ops;
};

struct SimResult {
  double end = 0;
  std::vector<double> compute, exposed;  // per worker
};

// Plays the actors' programs. Send/Recv pairs meet (rendezvous) unless eager, the receiver going
// on sender_trails_s before the sender; a Coll starts when
// all its participants arrived; compute on a node whose CPU cores are shared runs at each busy
// thread's share of the cores, min(1, C / busy threads), relative to the share it had while the
// profile was timed (`timed_busy` workers of `threads` threads each).
// One-thread CPU workers of a node beyond its cores are bound to them round robin
// (strategies/pool.cpp): local worker i on core i mod C.
bool bound_round_robin(const Machine& m, int threads, int workers) {
  return m.shared_cores > 0 && threads == 1 && std::min(workers, m.devices_per_node) > m.shared_cores;
}

SimResult simulate(const std::vector<Actor>& actors, int workers, const Machine& m, int threads, int timed_busy,
                   const std::vector<double>& busy_seconds) {
  enum St { Ready, Computing, Moving, Blocked, Done, Lagging };
  const int A = static_cast<int>(actors.size());
  std::vector<std::size_t> pc(A, 0);
  std::vector<St> st(A, Ready);
  std::vector<double> remaining(A, 0), end(A, 0);
  std::set<int> signaled;
  std::map<int, std::vector<int>> arrived;
  std::map<int, std::vector<double>> arrived_at;
  std::vector<char> in_coll(A, 0);
  std::map<std::pair<int, int>, std::vector<double>> mail;  // eager messages: (from, to) -> ready times
  SimResult r;
  r.compute.assign(workers, 0);
  r.exposed.assign(workers, 0);
  double now = 0;
  const double eps = 1e-15;
  const bool bound = bound_round_robin(m, threads, workers);
  auto core_of = [&](int w) { return std::make_pair(w / m.devices_per_node, (w % m.devices_per_node) % m.shared_cores); };
  for (;;) {
    bool progress = true;
    while (progress) {
      progress = false;
      for (int a = 0; a < A; ++a) {
        if (st[a] != Ready && st[a] != Blocked) continue;
        if (pc[a] == actors[a].ops.size()) {
          st[a] = Done;
          continue;
        }
        const Op& op = actors[a].ops[pc[a]];
        switch (op.kind) {
          case Op::Compute:
            if (op.s <= 0) ++pc[a], st[a] = Ready;
            else st[a] = Computing, remaining[a] = op.s;
            progress = true;
            break;
          case Op::Signal:
            signaled.insert(op.tag), ++pc[a], st[a] = Ready, progress = true;
            break;
          case Op::Delay:
            st[a] = Lagging, end[a] = now + op.s, progress = true;
            break;
          case Op::Wait:
            if (signaled.count(op.tag)) ++pc[a], st[a] = Ready, progress = true;
            else st[a] = Blocked;
            break;
          case Op::Send:
          case Op::Recv: {
            if (op.eager) {
              if (op.kind == Op::Send) {  // busy while its data goes out, then free
                mail[{a, op.peer}].push_back(now + op.s);
                st[a] = Moving, end[a] = now + op.s, progress = true;
              } else {
                auto& box = mail[{op.peer, a}];
                if (box.empty()) {
                  st[a] = Blocked;
                } else {
                  st[a] = Moving, end[a] = std::max(now, box.front()), progress = true;
                  box.erase(box.begin());
                }
              }
              break;
            }
            const int b = op.peer;
            const bool b_waiting = (st[b] == Blocked || st[b] == Ready) && pc[b] < actors[b].ops.size();
            const Op* bo = b_waiting ? &actors[b].ops[pc[b]] : nullptr;
            const Op::Kind want = op.kind == Op::Send ? Op::Recv : Op::Send;
            if (bo && bo->kind == want && bo->peer == a && !bo->eager) {
              const double d = op.kind == Op::Send ? op.s : bo->s;
              st[a] = st[b] = Moving;
              end[a] = end[b] = now + d;
              end[op.kind == Op::Recv ? a : b] = now + std::max(0.0, d - m.sender_trails_s);  // the receiver goes on first
              progress = true;
            } else {
              st[a] = Blocked;
            }
            break;
          }
          case Op::Coll: {
            if (!in_coll[a]) in_coll[a] = 1, arrived[op.tag].push_back(a), arrived_at[op.tag].push_back(now);
            st[a] = Blocked;
            auto& who = arrived[op.tag];
            if (static_cast<int>(who.size()) == op.count) {
              // The last arrival finds its peers waiting (or not) -- calibrate timed both.
              const std::vector<double>& at = arrived_at[op.tag];
              const bool late = op.count >= 2 && at[at.size() - 1] - at[at.size() - 2] >= m.late_arrival_gap_s - eps;
              double d = 0;
              for (int x : who) {
                const Op& o = actors[x].ops[pc[x]];
                d = std::max(d, late && o.late >= 0 ? o.late : o.s);
              }
              for (int x : who) st[x] = Moving, end[x] = now + d;
              arrived.erase(op.tag);
              arrived_at.erase(op.tag);
              progress = true;
            }
            break;
          }
        }
      }
    }
    bool all_done = true;
    for (int a = 0; a < A; ++a) all_done = all_done && st[a] == Done;
    if (all_done) break;
    // Compute speed: busy threads against the node's cores.
    std::map<int, int> busy;  // node -> busy compute actors
    std::map<std::pair<int, int>, int> on_core;  // bound workers: (node, core) -> busy compute actors
    for (int a = 0; a < A; ++a)
      if (st[a] == Computing && actors[a].uses_cores) {
        ++busy[actors[a].worker / m.devices_per_node];
        if (bound) ++on_core[core_of(actors[a].worker)];
      }
    const double cores = m.parallel_threads > 0 ? m.parallel_threads : m.shared_cores;
    auto seconds_at = [&](int b) {  // measured; in proportion to b beyond the last
      const int K = static_cast<int>(busy_seconds.size());
      return b <= K ? busy_seconds[b - 1] : busy_seconds[K - 1] * b / K;
    };
    auto speed = [&](int a) {
      if (m.shared_cores <= 0 || !actors[a].uses_cores) return 1.0;
      if (bound) {  // the busy workers of its core take turns; the node's busy cores slow each other
        const std::pair<int, int> mine = core_of(actors[a].worker);
        int active = 0;
        for (const auto& [c, n] : on_core) active += c.first == mine.first && n > 0;
        const double each = !busy_seconds.empty() ? seconds_at(timed_busy) / seconds_at(active)
                                                  : std::min(1.0, cores / active) / std::min(1.0, cores / timed_busy);
        return each / on_core[mine];
      }
      if (!busy_seconds.empty()) return seconds_at(timed_busy) / seconds_at(std::max(1, busy[actors[a].worker / m.devices_per_node]));
      const double demand = static_cast<double>(busy[actors[a].worker / m.devices_per_node]) * threads;
      return std::min(1.0, cores / demand) / std::min(1.0, cores / (static_cast<double>(timed_busy) * threads));
    };
    double next = std::numeric_limits<double>::infinity();
    for (int a = 0; a < A; ++a) {
      if (st[a] == Computing) next = std::min(next, now + remaining[a] / speed(a));
      if (st[a] == Moving || st[a] == Lagging) next = std::min(next, end[a]);
    }
    PB_CHECK(std::isfinite(next), "projection: the simulated schedule deadlocks at t = {} s", now);
    const double dt = next - now;
    std::vector<char> computing(workers, 0), moving(workers, 0);
    for (int a = 0; a < A; ++a) {
      if (st[a] == Computing) computing[actors[a].worker] = 1, remaining[a] -= dt * speed(a);
      if (st[a] == Moving) moving[actors[a].worker] = 1;
    }
    for (int w = 0; w < workers; ++w) {
      if (computing[w]) r.compute[w] += dt;
      else if (moving[w]) r.exposed[w] += dt;
    }
    now = next;
    for (int a = 0; a < A; ++a) {
      if (st[a] == Computing && remaining[a] <= eps * std::max(1.0, now)) ++pc[a], st[a] = Ready;
      if ((st[a] == Moving || st[a] == Lagging) && end[a] <= now + eps) ++pc[a], st[a] = Ready, in_coll[a] = 0;
    }
  }
  r.end = now;
  return r;
}

// What every strategy program needs: the profile's times at a batch, scaled, and link costs.
class Builder {
 public:
  Builder(const Profile& p, const Machine& m, const Config& c, const Options& o, int threads)
      : p_(p), m_(m), c_(c), o_(o), bound_(bound_round_robin(m, threads, c.devices)) {}

  double fwd(int b, int e, double n) const {
    double t = 0;
    for (int i = b; i < e; ++i) t += p_.forward(i, n);
    return t * o_.compute_scale;
  }
  double bw(int i, double n) const { return p_.backward_weights(i, n) * o_.compute_scale; }
  double bd(int i, double n) const { return p_.backward_data(i, n) * o_.compute_scale; }
  double loss(double n) const { return p_.loss(n) * o_.compute_scale; }
  double opt(double params) const { return p_.optimizer_s_per_param * params * o_.compute_scale; }
  int64_t params(int b, int e) const {
    int64_t n = 0;
    for (int i = b; i < e; ++i) n += p_.layers[i].params;
    return n;
  }
  // Backward of layers [b, e) in the order Sequential::backward runs them; the first layer's
  // input gradient only when the stage has a predecessor.
  void backward(std::vector<Op>& ops, int b, int e, double n, bool need_dx) const {
    for (int i = e - 1; i >= b; --i) {
      ops.push_back({Op::Compute, bw(i, n)});
      if (i > b || need_dx) ops.push_back({Op::Compute, bd(i, n)});
    }
  }
  int node(int device) const { return device / m_.devices_per_node; }
  bool spans(const std::vector<int>& devices) const {
    for (int d : devices)
      if (node(d) != node(devices.front())) return true;
    return false;
  }
  // On a CPU whose workers share the cores, a collective among some of them takes the fit of all
  // the workers of the node: their number on the cores, not the group's, sets how long a meeting
  // of threads takes (dp2xtp2's pairs of 4 workers on 2 cores met 2.5x slower than 2 workers alone).
  CollTime coll(Coll c, double bytes, const std::vector<int>& devices) {
    comm_bytes += bytes * static_cast<double>(devices.size() > 1 ? devices.size() : 0);
    const int g = static_cast<int>(devices.size());
    const int fit = m_.shared_cores > 0 ? std::max(g, std::min(c_.devices, m_.devices_per_node)) : 0;
    const std::optional<AlphaBeta::Layout> l = layout(devices);
    auto cost = [&](bool late) { return collective_cost(m_, c, bytes, g, spans(devices), fit, l ? &*l : nullptr, late).seconds; };
    return {cost(false), cost(true)};
  }
  double p2p(double bytes, int from, int to) {
    comm_bytes += bytes;
    const std::optional<AlphaBeta::Layout> l = layout({std::min(from, to), std::max(from, to)});
    return collective_cost(m_, Coll::SendRecv, bytes, 2, node(from) != node(to), 0, l ? &*l : nullptr).seconds;
  }
  // With one-thread workers outnumbering the cores (run binds them round robin), a group of some
  // of them, evenly spaced (a message's pair too), takes calibrate's fit of that layout where it
  // timed one: a pair on one core, or of neighbours, meets more slowly than either count's fit says.
  std::optional<AlphaBeta::Layout> layout(const std::vector<int>& devices) const {
    const int g = static_cast<int>(devices.size()), local = std::min(c_.devices, m_.devices_per_node);
    if (!bound_ || g < 2 || g >= local || spans(devices)) return std::nullopt;
    const AlphaBeta::Layout l{g, local, devices[1] - devices[0]};
    for (int k = 1; k < g; ++k)
      if (devices[k] - devices[k - 1] != l.stride) return std::nullopt;
    return l;
  }
  static std::vector<int> range(int n, int first = 0, int stride = 1) {
    std::vector<int> v;
    for (int i = 0; i < n; ++i) v.push_back(first + i * stride);
    return v;
  }

  const Profile& p_;
  const Machine& m_;
  const Config& c_;
  const Options& o_;
  const bool bound_;  // one-thread workers beyond the cores, bound round robin
  double comm_bytes = 0;
};

// ddp's buckets as make_buckets in strategies/ddp.cpp: from the last layer back, a bucket closes
// once it holds at least `bytes`; returns per layer the bucket closing after its weight gradient
// (or -1) and each bucket's size in bytes.
std::pair<std::vector<int>, std::vector<double>> buckets(const Profile& p, double bytes) {
  std::vector<int> closes(p.layers.size(), -1);
  std::vector<double> sizes;
  double cur = 0;
  int last = -1;
  for (int i = static_cast<int>(p.layers.size()) - 1; i >= 0; --i) {
    if (p.layers[i].params == 0) continue;
    cur += static_cast<double>(p.layers[i].params) * kFloat;
    last = i;
    if (cur >= bytes) closes[i] = static_cast<int>(sizes.size()), sizes.push_back(cur), cur = 0, last = -1;
  }
  if (last >= 0) closes[last] = static_cast<int>(sizes.size()), sizes.push_back(cur);
  return {closes, sizes};
}

NetPlan flops_plan(const Profile& p) {
  NetPlan plan;
  for (const LayerProfile& l : p.layers) {
    LayerPlan lp;
    lp.index = l.index;
    lp.forward_flops = l.forward_flops;
    plan.layers.push_back(lp);
  }
  return plan;
}

}  // namespace

namespace {
Prediction predict_impl(const Profile& p, const Machine& m, const Config& named, const Options& o) {
  Prediction r;
  r.config = named;
  Config c = named;  // the registered pipeline variants: pipeline with their schedule and recompute
  if (c.strategy.rfind("pipeline-", 0) == 0) {
    const std::string v = c.strategy.substr(9);
    if (v != "1f1b" && v != "recompute" && v != "1f1b-recompute") {
      r.feasible = false;
      r.reason = fmt::format("no projection model for strategy {}", c.strategy);
      return r;
    }
    c.strategy = "pipeline";
    c.schedule = v.rfind("1f1b", 0) == 0 ? "1f1b" : "gpipe";
    c.recompute = v.find("recompute") != std::string::npos;
  }
  const int N = c.devices, L = static_cast<int>(p.layers.size());
  const int64_t B = c.global_batch;
  auto refuse = [&](std::string why) {
    r.feasible = false;
    r.reason = std::move(why);
    return r;
  };
  if (N < 1 || B < 1) return refuse("needs at least one device and one sample");
  // dp<D>xpp<P>: the pipeline program below, D replicas of P stages (GPipe).
  const std::optional<std::pair<int, int>> hybrid = hybrid_shape(c.strategy);
  if (hybrid && hybrid->first * hybrid->second != N)
    return refuse(fmt::format("{} needs {} devices", c.strategy, hybrid->first * hybrid->second));
  if (hybrid) c.schedule = "gpipe", c.recompute = false;
  const std::optional<std::pair<int, int>> dptp = dptp_shape(c.strategy);
  if (dptp && dptp->first * dptp->second != N)
    return refuse(fmt::format("{} needs {} devices", c.strategy, dptp->first * dptp->second));
  if (N > m.total_devices())
    return refuse(fmt::format("{} has {} device(s)", m.name, m.total_devices()));
  if (c.strategy == "regular" && N != 1) return refuse("runs on one device");
  if (c.strategy == "dp" && N > m.devices_per_node) return refuse("dp runs in one process: one node's devices at most");
  const int threads = m.shared_cores > 0
                          ? (o.threads_per_worker > 0 ? o.threads_per_worker
                                                      : std::max(1, m.shared_cores / std::max(1, std::min(N, m.devices_per_node))))
                          : 1;
  const double in_b = p.input_bytes_per_sample(), out_b = p.output_bytes_per_sample();
  const double P = static_cast<double>(p.param_count());
  Builder bl(p, m, c, o, threads);
  std::vector<Actor> actors;
  std::vector<std::pair<int, int>> stages;  // mp, pipeline, dp x pp: each stage's layers
  int sim_workers = N;
  double bookkeeping = 0;  // per step, on every worker at once: fsdp / zero2's units

  if (c.strategy == "regular") {
    Actor a;
    a.ops.push_back({Op::Compute, bl.fwd(0, L, B) + bl.loss(B)});
    bl.backward(a.ops, 0, L, B, false);
    a.ops.push_back({Op::Compute, bl.opt(P)});
    actors.push_back(a);
  } else if (c.strategy == "dp") {
    // strategies/dp.cpp: broadcast, scatter (root sends in turn), forward, gather, loss on the
    // root, the output gradients sent back, backward, reduce to the root, Adam on the root.
    const std::vector<int64_t> ch = chunk_sizes(B, N);
    const int used = static_cast<int>(ch.size());
    const std::vector<int> group = Builder::range(used);
    const CollTime bcast = bl.coll(Coll::Broadcast, P * kFloat, group), reduce = bl.coll(Coll::Reduce, P * kFloat, group);
    for (int i = 0; i < used; ++i) {
      Actor a;
      a.worker = i;
      a.ops.push_back(coll_op(bcast, 1, used));
      if (i == 0) {
        for (int j = 1; j < used; ++j) a.ops.push_back({Op::Send, bl.p2p(in_b * ch[j], 0, j), j});
        a.ops.push_back({Op::Compute, bl.fwd(0, L, ch[0])});
        for (int j = 1; j < used; ++j) a.ops.push_back({Op::Recv, 0, j});
        a.ops.push_back({Op::Compute, bl.loss(B)});
        for (int j = 1; j < used; ++j) a.ops.push_back({Op::Send, bl.p2p(out_b * ch[j], 0, j), j});
      } else {
        a.ops.push_back({Op::Recv, 0, 0});
        a.ops.push_back({Op::Compute, bl.fwd(0, L, ch[i])});
        a.ops.push_back({Op::Send, bl.p2p(out_b * ch[i], i, 0), 0});
        a.ops.push_back({Op::Recv, 0, 0});
      }
      bl.backward(a.ops, 0, L, ch[i], false);
      a.ops.push_back(coll_op(reduce, 2, used));
      if (i == 0) a.ops.push_back({Op::Compute, bl.opt(P)});
      actors.push_back(a);
    }
  } else if (c.strategy == "ddp") {
    // strategies/ddp.cpp: buckets all-reduced as backward finishes them; overlapped on a machine
    // whose collectives run beside compute, else each one on the critical path.
    const std::vector<int64_t> ch = chunk_sizes(B, N);
    const int used = static_cast<int>(ch.size());
    const std::vector<int> group = Builder::range(used);
    const auto [closes, sizes] = buckets(p, c.bucket_bytes);
    std::vector<CollTime> cost;
    for (double s : sizes) cost.push_back(bl.coll(Coll::AllReduce, s, group));
    for (int i = 0; i < used; ++i) {
      Actor a, comm;
      a.worker = comm.worker = i;
      comm.uses_cores = false;
      a.ops.push_back({Op::Compute, bl.fwd(0, L, ch[i]) + bl.loss(ch[i])});
      for (int l = L - 1; l >= 0; --l) {
        a.ops.push_back({Op::Compute, bl.bw(l, ch[i])});
        if (closes[l] >= 0 && used > 1) {
          const int b = closes[l];
          if (m.overlap) {
            a.ops.push_back({Op::Signal, 0, -1, 1000000 + i * 1000 + b});
            comm.ops.push_back({Op::Wait, 0, -1, 1000000 + i * 1000 + b});
            comm.ops.push_back(coll_op(cost[b], 100 + b, used));
          } else {
            a.ops.push_back(coll_op(cost[b], 100 + b, used));
          }
        }
        if (l > 0) a.ops.push_back({Op::Compute, bl.bd(l, ch[i])});
      }
      if (m.overlap && used > 1) {
        comm.ops.push_back({Op::Signal, 0, -1, 2000000 + i});
        a.ops.push_back({Op::Wait, 0, -1, 2000000 + i});
      }
      a.ops.push_back({Op::Compute, bl.opt(P)});
      actors.push_back(a);
      if (!comm.ops.empty()) actors.push_back(comm);
    }
  } else if (c.strategy == "mp" || c.strategy == "pipeline" || hybrid) {
    // strategies/pipeline.cpp: stages split by forward FLOPs, micro-batches in GPipe fill-drain
    // (every forward, then every backward in reverse) or 1F1B (PipeDream-flush); stages send
    // without waiting (non-blocking sends, a buffer per message) and receive blocking. With
    // recompute a stage keeps only its inputs and runs its forward again before each backward,
    // except for the micro-batch whose activations are still in its slot. dp<D>xpp<P>: D
    // replicas of the pipeline (rank r: replica r / P, stage r % P), each on its torch.chunk of
    // the batch; after the drain each stage's gradients all-reduced over its D replicas.
    const int D = hybrid ? hybrid->first : 1;
    const int S = N / D;
    const int M = c.strategy == "mp" ? 1 : c.micro_batches;
    if (S > L) return refuse(fmt::format("{} stages but the net has {} layers", S, L));
    const std::vector<int64_t> rep = chunk_sizes(B, D);
    if (static_cast<int>(rep.size()) < D) return refuse(fmt::format("a batch of {} gives fewer than {} replica chunks", B, D));
    if (M < 1 || (!hybrid && M > rep.back()))
      return refuse(fmt::format("{} micro-batches but a replica has {} sample(s)", M, rep.back()));
    const auto ranges = split_stages(flops_plan(p), S, {}, c.strategy);
    stages = ranges;
    const bool eager = true;
    for (int d = 0; d < D; ++d) {
      const std::vector<int64_t> mb = chunk_sizes(rep[d], M);
      const int Mr = static_cast<int>(mb.size());
      for (int s = 0; s < S; ++s) {
        const int dev = d * S + s;
        const int b = ranges[s].first, e = ranges[s].second;  // not a structured binding: lambdas capture them
        const double sin = numel(p.layers[b].in) * kFloat, sout = numel(p.layers[e - 1].out) * kFloat;
        Actor a;
        a.worker = dev;
        auto F = [&](int k) {
          if (s > 0) a.ops.push_back({Op::Recv, 0, dev - 1, 0, 0, eager});
          a.ops.push_back({Op::Compute, bl.fwd(b, e, mb[k]) + (s == S - 1 ? bl.loss(mb[k]) : 0)});
          if (s < S - 1) a.ops.push_back({Op::Send, bl.p2p(sout * mb[k], dev, dev + 1), dev + 1, 0, 0, eager});
        };
        auto Bk = [&](int k) {
          if (s < S - 1) a.ops.push_back({Op::Recv, 0, dev + 1, 0, 0, eager});
          const bool fresh = c.schedule == "1f1b" ? s == S - 1 : k == Mr - 1;
          if (c.recompute && !fresh) a.ops.push_back({Op::Compute, bl.fwd(b, e, mb[k])});
          bl.backward(a.ops, b, e, mb[k], s > 0);
          if (s > 0) a.ops.push_back({Op::Send, bl.p2p(sin * mb[k], dev, dev - 1), dev - 1, 0, 0, eager});
        };
        if (c.schedule == "1f1b") {
          const int warm = std::min(S - s - 1, Mr);
          int nf = 0, nb = 0;
          for (; nf < warm; ++nf) F(nf);
          while (nf < Mr) F(nf++), Bk(nb++);
          while (nb < Mr) Bk(nb++);
        } else {
          for (int k = 0; k < Mr; ++k) F(k);
          for (int k = Mr - 1; k >= 0; --k) Bk(k);
        }
        const double sp = static_cast<double>(bl.params(b, e));
        if (D > 1) {
          const std::vector<int> group = Builder::range(D, s, S);
          a.ops.push_back(coll_op(bl.coll(Coll::AllReduce, sp * kFloat, group), 500 + s, D));
        }
        a.ops.push_back({Op::Compute, bl.opt(sp)});
        actors.push_back(a);
      }
    }
  } else if (c.strategy == "fsdp" || c.strategy == "zero2") {
    // strategies/fsdp.cpp: units of a layer with parameters and the parameterless layers after it;
    // each unit's parameters (padded to N equal shards) all-gathered before its forward, and for
    // fsdp (ZeRO-3) again before its backward (zero2 keeps them from forward to backward); its
    // gradients reduce-scattered after its backward; each worker steps its 1/N shard. Every
    // worker takes part, also one without a chunk.
    const bool reshard = c.strategy == "fsdp";
    const std::vector<int64_t> ch = [&] {
      std::vector<int64_t> v = chunk_sizes(B, N);
      v.resize(N, 0);
      return v;
    }();
    const std::vector<int> group = Builder::range(N);
    std::vector<std::pair<int, int>> units;  // layers [first, second)
    std::vector<double> unit_bytes;          // padded: N x ceil(params / N) floats
    for (int l = 0; l < L; ++l) {
      const int64_t n = p.layers[l].params;
      if (units.empty() || (n > 0 && unit_bytes.back() > 0)) {
        units.push_back({l, l + 1});
        unit_bytes.push_back(static_cast<double>((n + N - 1) / N) * N * kFloat);
      } else {
        units.back().second = l + 1;
        if (n > 0) unit_bytes.back() = static_cast<double>((n + N - 1) / N) * N * kFloat;
      }
    }
    const int U = static_cast<int>(units.size());
    if (const auto it = m.unit_overhead_s.find(c.strategy); it != m.unit_overhead_s.end()) bookkeeping = U * it->second;
    std::vector<CollTime> ag(U), rs(U);
    double shard = 0;
    for (int u = 0; u < U; ++u) {
      shard += unit_bytes[u] / N / kFloat;
      ag[u] = unit_bytes[u] > 0 ? bl.coll(Coll::AllGather, unit_bytes[u], group) : CollTime{};
      if (reshard && unit_bytes[u] > 0) bl.comm_bytes += unit_bytes[u] * N;  // gathered again in backward
      rs[u] = unit_bytes[u] > 0 ? bl.coll(Coll::ReduceScatter, unit_bytes[u], group) : CollTime{};
    }
    for (int i = 0; i < N; ++i) {
      Actor a;
      a.worker = i;
      int t = 3000;
      for (int u = 0; u < U; ++u) {
        if (ag[u].s > 0) a.ops.push_back(coll_op(ag[u], t, N));
        ++t;
        a.ops.push_back({Op::Compute, bl.fwd(units[u].first, units[u].second, ch[i])});
      }
      a.ops.push_back({Op::Compute, bl.loss(ch[i])});
      for (int u = U - 1; u >= 0; --u) {
        if (reshard && ag[u].s > 0) a.ops.push_back(coll_op(ag[u], t, N));
        ++t;
        bl.backward(a.ops, units[u].first, units[u].second, ch[i], u > 0);
        if (rs[u].s > 0) a.ops.push_back(coll_op(rs[u], t, N));
        ++t;
      }
      a.ops.push_back({Op::Compute, bl.opt(shard)});
      actors.push_back(a);
    }
  } else if (c.strategy == "tp" || dptp) {
    // strategies/tp.cpp: every worker has the whole batch and a slice of each conv / linear
    // layer's output channels (the first K % N workers one more; layers with fewer than N
    // channels whole on every worker). A split layer's forward computes its channels (time taken
    // as the layer's x k / K) and all-gathers the activation (N pieces of ceil(K / N) channels);
    // backward computes its slice's weight and input gradients and all-reduces the input
    // gradient. ReLUs run whole on every worker; Adam steps the worker's slices. dp<D>xtp<T>: D
    // replicas of a T-way tp group (rank r: replica r / T, tp rank r % T), each on its
    // torch.chunk of the batch, then each tp rank's slice gradients all-reduced over its D workers.
    const int D = dptp ? dptp->first : 1, T = N / D;
    const std::vector<int64_t> rep = chunk_sizes(B, D);
    if (static_cast<int>(rep.size()) < D) return refuse(fmt::format("a batch of {} gives fewer than {} replica chunks", B, D));
    std::vector<char> split(L, 0);
    std::vector<double> gather_per_sample(L, 0), reduce_per_sample(L, 0);
    bool any = T == 1;
    for (int l = 0; l < L; ++l) {
      const LayerProfile& lp = p.layers[l];
      if (lp.type != "conv2d" && lp.type != "linear") continue;
      const int64_t K = lp.out.front();
      split[l] = K >= T;
      any = any || split[l];
      if (!split[l] || T == 1) continue;
      const double per_channel = numel(lp.out) / static_cast<double>(K);
      gather_per_sample[l] = static_cast<double>((K + T - 1) / T) * T * per_channel * kFloat;
      reduce_per_sample[l] = numel(lp.in) * kFloat;
    }
    if (!any) return refuse(fmt::format("no layer has {} or more output channels to split", T));
    std::vector<double> slice_params(T, 0);  // per tp rank
    std::vector<std::vector<double>> share(T, std::vector<double>(L, 1.0));  // its fraction of each layer's channels
    for (int i = 0; i < T; ++i)
      for (int l = 0; l < L; ++l) {
        const LayerProfile& lp = p.layers[l];
        if (split[l]) {
          const int64_t K = lp.out.front(), k = K / T + (i < K % T ? 1 : 0);
          share[i][l] = static_cast<double>(k) / static_cast<double>(K);
        }
        slice_params[i] += static_cast<double>(lp.params) * share[i][l];
      }
    for (int d = 0; d < D; ++d) {
      const int64_t b = rep[d];
      std::vector<int> group;  // the replica's tp group
      for (int i = 0; i < T; ++i) group.push_back(d * T + i);
      std::vector<CollTime> ag(L), ar(L);
      for (int l = 0; l < L; ++l) {
        if (gather_per_sample[l] > 0) ag[l] = bl.coll(Coll::AllGather, gather_per_sample[l] * b, group);
        if (reduce_per_sample[l] > 0 && l > 0) ar[l] = bl.coll(Coll::AllReduce, reduce_per_sample[l] * b, group);
      }
      for (int i = 0; i < T; ++i) {
        Actor a;
        a.worker = d * T + i;
        int t = 4000 + d * 2 * (L + 1);  // the replica's own collective instances
        for (int l = 0; l < L; ++l) {
          a.ops.push_back({Op::Compute, bl.fwd(l, l + 1, b) * share[i][l]});
          if (ag[l].s > 0) a.ops.push_back(coll_op(ag[l], t, T));
          ++t;
        }
        a.ops.push_back({Op::Compute, bl.loss(b)});
        for (int l = L - 1; l >= 0; --l) {
          a.ops.push_back({Op::Compute, bl.bw(l, b) * share[i][l]});
          if (l > 0) a.ops.push_back({Op::Compute, bl.bd(l, b) * share[i][l]});
          if (ar[l].s > 0) a.ops.push_back(coll_op(ar[l], t, T));
          ++t;
        }
        if (D > 1) {  // the tp rank's slices over the replicas
          std::vector<int> ranks;
          for (int e = 0; e < D; ++e) ranks.push_back(e * T + i);
          a.ops.push_back(coll_op(bl.coll(Coll::AllReduce, slice_params[i] * kFloat, ranks), 1000000 + i, D));
        }
        a.ops.push_back({Op::Compute, bl.opt(slice_params[i])});
        actors.push_back(a);
      }
    }
  } else {
    return refuse(fmt::format("no projection model for strategy {}", c.strategy));
  }

  const int local = m.shared_cores > 0 || m.kind == "cpu" ? std::min(N, m.devices_per_node) : 1;
  // In-process workers each on a core of their own start a little after worker 0 (the caller), so
  // arrive that much later at the step's first collective. Bound workers sharing a core start as
  // the core's turns give them, which the simulation plays itself.
  double lag = 0;
  if (const auto it = m.worker_start_at_s.find(local); it != m.worker_start_at_s.end() && local > 1 &&
                                                        !bound_round_robin(m, threads, c.devices))
    lag = std::min(it->second, m.workers_overhead_s(local));
  if (lag > 0)
    for (Actor& a : actors)
      if (a.worker % m.devices_per_node != 0) a.ops.insert(a.ops.begin(), Op{Op::Delay, lag});
  const SimResult sim = simulate(actors, sim_workers, m, threads, std::max(1, p.concurrent), o.busy_seconds);
  int busiest = 0;
  for (int w = 0; w < sim_workers; ++w)
    if (sim.compute[w] > sim.compute[busiest]) busiest = w;
  const double overhead = m.step_overhead_s + m.workers_overhead_s(local) - lag + bookkeeping;
  r.step_s = sim.end + overhead;
  r.compute_s = sim.compute[busiest];
  r.exposed_comm_s = sim.exposed[busiest];
  r.idle_s = std::max(0.0, r.step_s - r.compute_s - r.exposed_comm_s);
  r.peak_bytes = memory_peak(p, c, stages);
  r.fits = r.peak_bytes <= m.memory_bytes / (m.shared_cores > 0 ? std::min(N, m.devices_per_node) : 1);
  r.comm_bytes = bl.comm_bytes;
  r.samples_per_s = static_cast<double>(B) / r.step_s;
  return r;
}
}  // namespace

Prediction predict(const Profile& p, const Machine& m, const Config& c, const Options& o) {
  try {
    return predict_impl(p, m, c, o);
  } catch (const UsageError& e) {  // a collective the machine has no cost for, a split that does not fit
    Prediction r;
    r.config = c;
    r.feasible = false;
    r.reason = e.what();
    return r;
  }
}

}  // namespace pb::projection
