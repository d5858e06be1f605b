// Table arithmetic: grouping by identity, the derived columns (each formula written next to the
// line computing it and in docs/reports.md). The renderings are in table_render.cpp.
#include "reports/table.h"

#include <algorithm>
#include <limits>
#include <map>
#include <sstream>

#include "engine/check.h"
#include "reports/schema.h"
#include "reports/stats.h"

namespace pb::reports {

namespace {

using schema::kMiB;

bool parse_int(const std::string& s, int64_t& out) {
  if (s.empty()) return false;
  try {
    std::size_t used = 0;
    out = std::stoll(s, &used);
    return used == s.size();
  } catch (const std::exception&) {
    return false;
  }
}


void merge_into(Benchmark& into, const Benchmark& from) {
  if (into.times_s.empty()) into.iterations = from.iterations;
  into.times_s.insert(into.times_s.end(), from.times_s.begin(), from.times_s.end());
  into.iteration_times_s.insert(into.iteration_times_s.end(), from.iteration_times_s.begin(), from.iteration_times_s.end());
  if (into.skip_bytes.empty()) into.skip_bytes = from.skip_bytes;
  for (const auto& [k, v] : from.counters) into.counters[k].insert(into.counters[k].end(), v.begin(), v.end());
  for (const auto& [k, v] : from.aggregates) into.aggregates.emplace(k, v);
  if (into.error_message.empty()) into.error_message = from.error_message;
  into.error = into.times_s.empty() && into.aggregates.empty() && !into.error_message.empty();
}

// A row's relative spread: its CV (over repetitions, or over one repetition's iterations).
double spread(const Row& r) { return r.cv.value_or(0); }

// N devices give at most N times one device's throughput: a speedup above N or an efficiency
// above 100% says the baseline ran slow (a cold start, a disturbance) or is noise.
void mark_implausible(Group& g) {
  const Row* base = nullptr;
  for (const Row& r : g.rows)
    if (r.name == g.baseline) base = &r;
  for (Row& r : g.rows) {
    auto why = [&](const std::string& what, double excess, const Row* against) {
      const double noise = spread(r) + (against ? spread(*against) : 0);
      const std::string base = against ? fmt::format("{} x{}", against->strategy, against->devices) : "the baseline";
      r.implausible += fmt::format("{}{} ({} the two rows' spread, {:.1f}%: {})", r.implausible.empty() ? "" : "; ", what,
                                   excess <= noise ? "within" : "beyond", noise * 100,
                                   excess <= noise ? "noise" : base + " ran slow");
    };
    if (r.speedup && *r.speedup > r.devices)
      why(fmt::format("speedup {:.2f}x on {} device(s) is above {}x", *r.speedup, r.devices, r.devices),
          *r.speedup / r.devices - 1, base);
    if (r.efficiency && *r.efficiency > 1) {
      const Row* eb = nullptr;
      for (const Row& o : g.rows)
        if (o.name == r.efficiency_base) eb = &o;
      why(fmt::format("efficiency {:.1f}% is above 100%", *r.efficiency * 100), *r.efficiency - 1, eb);
    }
  }
}

// Per device count: best only when the fastest is ahead of the runner-up by more than the two
// rows' spread; otherwise every row within its spread of the fastest is tied.
void mark_best(Group& g) {
  std::map<int, std::vector<Row*>> by_devices;
  for (Row& r : g.rows)
    if (r.samples_per_s) by_devices[r.devices].push_back(&r);
  for (auto& [d, rows] : by_devices) {
    std::stable_sort(rows.begin(), rows.end(), [](const Row* a, const Row* b) { return *a->samples_per_s > *b->samples_per_s; });
    const Row& top = *rows.front();
    auto within = [&](const Row& r) { return *top.samples_per_s / *r.samples_per_s - 1 <= spread(top) + spread(r); };
    if (rows.size() == 1 || !within(*rows[1])) {
      rows.front()->best = true;
      continue;
    }
    for (Row* r : rows) r->tied = within(*r);
  }
}

struct GroupBuild {
  Group group;
  std::vector<Benchmark> benches;
  std::map<std::string, std::vector<std::string>> sources;  // benchmark -> the files it came from
};

}  // namespace

std::string BenchName::workload_id() const {
  std::string out = workload;
  for (const std::string& p : workload_params) out += "/" + p;
  return out;
}

std::optional<BenchName> parse_bench_name(const std::string& name) {
  std::vector<std::string> parts;
  std::stringstream ss(name);
  std::string part;
  while (std::getline(ss, part, '/')) parts.push_back(part);
  if (parts.empty() || parts[0].empty() || parts[0].find(':') != std::string::npos) return std::nullopt;
  BenchName b;
  b.workload = parts[0];
  std::size_t i = 1;
  for (; i < parts.size() && parts[i].find(':') != std::string::npos; ++i) b.workload_params.push_back(parts[i]);
  if (i >= parts.size() || parts[i].empty()) return std::nullopt;
  b.strategy = parts[i++];
  bool have_devices = false, have_batch = false;
  for (; i < parts.size(); ++i) {
    int64_t v = 0;
    const std::string& p = parts[i];
    if (p.rfind("devices:", 0) == 0 && parse_int(p.substr(8), v) && v >= 1 && v <= std::numeric_limits<int>::max()) {
      b.devices = static_cast<int>(v);
      have_devices = true;
    } else if (p.rfind("batch:", 0) == 0 && parse_int(p.substr(6), v) && v >= 1) {
      b.batch = v;
      have_batch = true;
    } else if (have_batch && p.find(':') != std::string::npos) {
      b.options.push_back(p);
    } else {
      return std::nullopt;
    }
  }
  if (!have_devices || !have_batch) return std::nullopt;
  return b;
}

std::string bench_name(const BenchName& n) {
  std::string out = fmt::format("{}/{}/devices:{}/batch:{}", n.workload_id(), n.strategy, n.devices, n.batch);
  for (const std::string& o : n.options) out += "/" + o;
  return out;
}

std::string Group::title() const {
  std::string t = workload;
  if (!workload_params.empty()) t += " (" + workload_params + ")";
  t += fmt::format(": batch {} {}, {} scaling{}", batch, scaling == "strong" ? "global" : "per device", scaling,
                   scaling_assumed ? " (assumed: the run did not record it)" : "");
  if (!precision.empty()) t += ", " + precision;
  for (const auto& [key, label] : {std::pair<std::string, std::string>{schema::context::reduce_dtype.name, "reduce"},
                                   {schema::context::param_dtype.name, "params"},
                                   {schema::context::virtual_stages.name, "virtual stages"}})
    if (work.count(key)) t += fmt::format(", {} {}", label, work.at(key));
  if (!device_kind.empty()) t += ", " + device_kind;
  if (!distinction.empty()) t += " [" + distinction + "]";
  return t;
}

namespace {

// The strategies in display order: as the runs recorded it, then any other a benchmark names.
std::vector<std::string> strategy_order(const std::vector<RunFile>& files) {
  std::vector<std::string> order;
  for (const RunFile& f : files)
    for (const std::string& s : split_commas(f.context_value(schema::context::strategy_order.name)))
      if (std::find(order.begin(), order.end(), s) == order.end()) order.push_back(s);
  return order;
}

// The single-device strategy speedups are against: the first a run recorded, else regular.
std::string baseline_strategy_of(const std::vector<RunFile>& files) {
  for (const RunFile& f : files) {
    const auto single = split_commas(f.context_value(schema::context::single_device_strategies.name));
    if (!single.empty()) return single.front();
  }
  return "regular";  // runs that did not record it
}

// Every file's benchmarks in groups of one workload, batch and setting (the context keys that
// must match), a benchmark seen in several files merged; `order` gains strategies it lacked.
std::vector<GroupBuild> group_benchmarks(const std::vector<RunFile>& files, std::vector<std::string>& order) {
  std::vector<GroupBuild> builds;
  for (const RunFile& f : files) {
    std::string scaling = f.context_value(schema::context::scaling.name);
    const bool assumed = scaling.empty();
    if (assumed) scaling = "weak";
    if (scaling != "weak" && scaling != "strong")
      throw UsageError(fmt::format("{}: context \"scaling\" must be weak or strong, got \"{}\"", f.source, scaling));
    const double fwd_flops = [&] {
      try {
        return std::stod(f.context_value(schema::context::forward_flops_per_sample.name, "0"));
      } catch (const std::exception&) {
        return 0.0;
      }
    }();
    std::map<std::string, std::string> work;
    for (const schema::Key& k : schema::kContext)
      if (k.match != schema::Match::No && f.context.count(k.name)) work[k.name] = f.context.at(k.name);
    if (!f.context.count(schema::context::scaling.name)) work[schema::context::scaling.name] = scaling;
    for (Benchmark& b : collect_benchmarks(f)) {
      const auto parsed = parse_bench_name(b.name);
      if (!parsed)
        throw UsageError(fmt::format(
            "{}: benchmark \"{}\" is not a parbench benchmark (expected "
            "workload[/param:value...]/strategy/devices:N/batch:B); use 'parbench compare' for other Google "
            "Benchmark files",
            f.source, b.name));
      for (const std::string& s : {parsed->strategy})
        if (std::find(order.begin(), order.end(), s) == order.end()) order.push_back(s);
      GroupBuild* g = nullptr;
      for (GroupBuild& c : builds)
        if (c.group.workload_id == parsed->workload_id() && c.group.batch == parsed->batch && c.group.work == work) g = &c;
      if (!g) {
        builds.emplace_back();
        g = &builds.back();
        g->group.workload = parsed->workload;
        g->group.workload_id = parsed->workload_id();
        g->group.work = work;
        g->group.scaling = scaling;
        g->group.scaling_assumed = assumed;
        g->group.batch = parsed->batch;
        g->group.precision = f.context_value(schema::context::precision.name);
        g->group.device_kind = f.context_value(schema::context::device_kind.name);
        g->group.workload_params = f.context_value(schema::context::workload_params.name);
        g->group.hosts = split_commas(f.context_value(schema::context::hosts.name));
        if (g->group.workload_params.empty())
          for (const std::string& p : parsed->workload_params)
            g->group.workload_params += (g->group.workload_params.empty() ? "" : ", ") + p;
      }
      // Throughput needs FLOPs per sample from the file that ran it: keep it as a counter.
      if (fwd_flops > 0 && !b.counters.count(schema::context::forward_flops_per_sample.name))
        b.counters[schema::context::forward_flops_per_sample.name] = std::vector<double>(b.times_s.size(), fwd_flops);
      auto same = std::find_if(g->benches.begin(), g->benches.end(), [&](const Benchmark& o) { return o.name == b.name; });
      if (same != g->benches.end()) merge_into(*same, b);
      else g->benches.push_back(b);
      std::vector<std::string>& from = g->sources[b.name];
      if (std::find(from.begin(), from.end(), f.source) == from.end()) from.push_back(f.source);
    }
  }
  return builds;
}

// Groups with the same title name what sets them apart (a bucket size, a thread count, ...).
void name_distinctions(std::vector<GroupBuild>& builds) {
  std::vector<std::string> titles;
  for (const GroupBuild& g : builds) titles.push_back(g.group.title());
  for (std::size_t i = 0; i < builds.size(); ++i)
    for (std::size_t j = 0; j < builds.size(); ++j) {
      GroupBuild& g = builds[i];
      const GroupBuild& o = builds[j];
      if (i == j || titles[i] != titles[j]) continue;
      for (const auto& [k, v] : g.group.work) {
        auto it = o.group.work.find(k);
        const std::string entry = k + " " + v;
        if ((it == o.group.work.end() || it->second != v) && g.group.distinction.find(entry) == std::string::npos)
          g.group.distinction += (g.group.distinction.empty() ? "" : ", ") + entry;
      }
    }
}

// One benchmark's row: its time, spread, throughput, MFU, memory, where its step went, its
// bubble and bus bandwidths, and its spread across ranks.
Row row_of(const Benchmark& b, const std::vector<std::string>& runs, const Group& g) {
  const BenchName n = *parse_bench_name(b.name);
  Row r;
  r.name = b.name;
  r.runs = runs;
  r.strategy = n.strategy;
  r.devices = n.devices;
  r.repetitions = b.repetitions();
  r.error = b.error;
  r.error_message = b.error_message;
  const auto med = b.median_s();
  if (!r.error && med && *med > 0) {
    r.median_ms = *med * 1e3;
    if (b.times_s.size() >= 2) {
      r.cv = coefficient_of_variation(b.times_s);
    } else if (auto c = b.counter_median(schema::counter::iter_cv.name)) {
      r.cv = *c;
      r.cv_within_run = true;
    }
    // Samples per iteration: the run's own count, else what the scaling mode implies.
    double samples = static_cast<double>(g.scaling == "weak" ? n.batch * n.devices : n.batch);
    if (auto s = b.counter_median(schema::counter::global_batch.name)) samples = *s;
    r.samples_per_iteration = samples;
    r.samples_per_s = samples / *med;  // throughput = samples per iteration / seconds per iteration
    if (auto fwd = b.counter_median(schema::context::forward_flops_per_sample.name); fwd && *fwd > 0)
      r.flop_per_s = 3 * *fwd * samples / *med;  // backward ~ 2x forward
    else if (auto fl = b.counter_median(schema::counter::flop_per_s.name))
      r.flop_per_s = *fl;
    r.mfu = b.counter_median(schema::counter::mfu.name);
    r.warmup_s = b.counter_median(schema::counter::warmup_s.name);
    if (auto p = b.counter_max(schema::counter::peak_bytes_max.name)) r.peak_mib_max = *p / kMiB;
    if (auto p = b.counter_max(schema::counter::peak_bytes_dev0.name)) r.peak_mib_dev0 = *p / kMiB;
    if (auto it = b.counters.find(schema::counter::device_peak_bytes.name); it != b.counters.end() && !it->second.empty()) {
      // The parts from the repetition with the largest total, so that they add up to it.
      const std::vector<double>& total = it->second;
      const std::size_t at = static_cast<std::size_t>(std::max_element(total.begin(), total.end()) - total.begin());
      r.device_peak_mib = total[at] / kMiB;
      auto part = [&](const schema::Key& k) -> std::optional<double> {
        auto p = b.counters.find(k.name);
        if (p == b.counters.end() || p->second.size() != total.size()) return std::nullopt;
        return p->second[at] / kMiB;
      };
      r.tensor_mib = part(schema::counter::tensor_bytes);
      r.workspace_mib = part(schema::counter::workspace_bytes);
      r.runtime_mib = part(schema::counter::runtime_bytes);
    }
    namespace k = schema::counter;
    r.compute_share = b.counter_median(k::compute_share.name);
    r.transfer_share = b.counter_median(k::transfer_share.name);
    r.idle_share = b.counter_median(k::idle_share.name);
    r.other_share = b.counter_median(k::other_share.name);
    if (auto c = b.counter_median(k::exposed_comm_s.name)) r.exposed_comm_share = *c / *med;
    if (auto c = b.counter_median(k::bytes_sent_per_iter.name)) r.comm_mib_per_iteration = *c / kMiB;
    for (double bytes : b.skip_bytes) r.stage_skip_mib.push_back(bytes / kMiB);
    r.measured_bubble = b.counter_median(k::measured_bubble.name);
    for (const schema::Key& key : schema::kCounters) {
      const std::string name = key.name;
      if (name.rfind("algbw_", 0) == 0 || name.rfind("busbw_", 0) == 0)
        if (auto v = b.counter_median(name)) (name[0] == 'a' ? r.algbw : r.busbw)[name.substr(6)] = *v;
    }
    if (auto bub = b.counter_median(k::bubble_fraction.name); bub && (*bub > 0 || b.counter_median(k::micro_batches.name).value_or(0) > 1))
      r.bubble = *bub;
    if (auto w = b.counter_median(schema::counter::workers_used.name)) r.workers_used = *w;
    if (auto o = b.counter_max(schema::counter::oversubscribed.name)) r.oversubscribed = *o;
    r.threads = b.counter_median(k::worker_threads.name);
    if (auto p = b.counter_max(k::predicted_bytes.name)) r.predicted_mib = *p / kMiB;
    if (auto a = b.counter_max(k::allocated_bytes.name)) r.allocated_mib = *a / kMiB;
    // Spread and stragglers (reports/straggler.h).
    if (auto p = b.counter_median(k::iter_p50_s.name)) r.iter_p50_ms = *p * 1e3;
    if (auto p = b.counter_median(k::iter_p99_s.name)) r.iter_p99_ms = *p * 1e3;
    r.straggler_ratio = b.counter_max(k::straggler_ratio.name);
    if (auto st = b.counter_median(k::straggler_rank.name)) {
      const int rank = static_cast<int>(*st);
      const std::string host = g.hosts.empty() ? "?" : g.hosts[std::min<std::size_t>(rank, g.hosts.size() - 1)];
      r.straggler = fmt::format("rank {} ({}, {}({}))", rank, host, g.device_kind, rank);
    }
  }
  return r;
}

// Speedup and scaling efficiency against the one-device rows, and the ideal line's base.
void rate_against_one_device(Group& g, const std::string& baseline_strategy) {
  auto one_device = [&](const std::string& strategy) -> const Row* {
    for (const Row& r : g.rows)
      if (r.strategy == strategy && r.devices == 1 && r.samples_per_s) return &r;
    return nullptr;
  };
  const Row* base = one_device(baseline_strategy);
  if (base) {
    g.baseline = base->name;
    g.ideal_base_samples_per_s = base->samples_per_s;
  }
  for (Row& r : g.rows) {
    if (!r.samples_per_s) continue;
    // Speedup: throughput over regular's on one device (under strong scaling the same as
    // T_regular(1) / T(N), the global batch being equal).
    if (base) r.speedup = *r.samples_per_s / *base->samples_per_s;
    const Row* eb = one_device(r.strategy);
    if (!eb) {
      eb = base;
      r.efficiency_from_regular = true;
    }
    if (!eb) continue;
    r.efficiency_base = eb->name;
    if (g.scaling == "weak")
      r.efficiency = *r.samples_per_s / (r.devices * *eb->samples_per_s);  // thr(N) / (N thr(1))
    else
      r.efficiency = *eb->median_ms / (r.devices * *r.median_ms);  // T(1) / (N T(N))
  }
  if (!g.ideal_base_samples_per_s)
    for (const Row& r : g.rows)
      if (r.devices == 1 && r.samples_per_s) {
        g.ideal_base_samples_per_s = r.samples_per_s;
        break;
      }
}

}  // namespace

Report build_report(const std::vector<RunFile>& files) {
  Report report;
  for (const RunFile& f : files) report.sources.push_back(f.source);
  std::vector<std::string> order = strategy_order(files);
  const std::string baseline_strategy = baseline_strategy_of(files);
  std::vector<GroupBuild> builds = group_benchmarks(files, order);
  name_distinctions(builds);
  auto strategy_rank = [&](const std::string& s) {
    return static_cast<int>(std::find(order.begin(), order.end(), s) - order.begin());
  };
  for (GroupBuild& gb : builds) {
    Group& g = gb.group;
    for (const Benchmark& b : gb.benches) g.rows.push_back(row_of(b, gb.sources[b.name], g));
    std::stable_sort(g.rows.begin(), g.rows.end(), [&](const Row& a, const Row& b) {
      if (a.devices != b.devices) return a.devices < b.devices;
      return strategy_rank(a.strategy) < strategy_rank(b.strategy);
    });
    rate_against_one_device(g, baseline_strategy);
    mark_implausible(g);
    mark_best(g);
    report.groups.push_back(std::move(g));
  }
  return report;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace pb::reports
