// machines/*.json read strictly and written back; the in-process workers' overhead per count.
#include "projection/machine.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>

#include "engine/check.h"
#include "engine/fsutil.h"
#include "engine/json_input.h"
#include "projection/links.h"
#include "projection/strict_json.h"

namespace pb::projection {

using nlohmann::json;

namespace {
// The collectives a machine file may list costs for, in the order they are read.
constexpr CollKind kLinkCollectives[] = {CollKind::AllReduce, CollKind::Broadcast,     CollKind::Reduce,
                                         CollKind::AllGather, CollKind::ReduceScatter, CollKind::SendRecv};
const std::set<std::string> kAlgorithms = {"ring", "tree", "direct"};
}  // namespace

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
  for (const CollKind c : kLinkCollectives) {
    const std::string name = coll_kind_name(c);
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

Machine parse_machine(const std::string& text, const std::string& source, const std::vector<std::string>& unit_classes) {
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
  if (dev.has("peak_flops_by_precision")) {
    Obj by(dev.raw("peak_flops_by_precision"), source, "device.peak_flops_by_precision");
    for (const char* k : {"tf32", "bf16"})
      if (by.has(k)) m.peak_flops_by_precision[k] = by.number(k, 0, true);
    by.done();
  }
  m.memory_bytes = dev.number("memory_bytes", 0, true);
  m.shared_cores = dev.has("shared_cores") ? dev.small_integer("shared_cores", 0) : (dev.number_or("shared_cores", 0), 0);
  m.parallel_threads = dev.number_or("parallel_threads", 0, 0);
  m.copy_bytes_per_s = dev.number_or("copy_bytes_per_s", 0, 0);
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
  m.action_overhead_s = top.number_or("action_overhead_s", 0, 0);
  if (top.has("unit_overhead_s")) {
    Obj u(top.raw("unit_overhead_s"), source, "unit_overhead_s");
    for (const std::string& k : unit_classes)
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

double Machine::peak(const std::string& precision) const {
  if (precision == "fp32") return peak_flops;
  const auto it = peak_flops_by_precision.find(precision);
  if (it == peak_flops_by_precision.end())
    throw UsageError(fmt::format("{}: device.peak_flops_by_precision.{}: missing (the device's {} rate, FLOP/s, to price {} compute)",
                                 source, precision, precision, precision));
  return it->second;
}

int Machine::threads_per_worker(int devices, int fixed) const {
  if (shared_cores <= 0) return 1;
  return fixed > 0 ? fixed : std::max(1, shared_cores / std::max(1, std::min(devices, devices_per_node)));
}

Machine load_machine(const std::string& path, const std::vector<std::string>& unit_classes) {
  return parse_machine(read_file(path), path, unit_classes);
}

json machine_json(const Machine& m) {
  json j;
  j["parbench_machine"] = 1;
  j["name"] = m.name;
  if (!m.description.empty()) j["description"] = m.description;
  j["device"] = {{"kind", m.kind}, {"model", m.model}, {"peak_flops", m.peak_flops}, {"memory_bytes", m.memory_bytes}};
  if (!m.peak_flops_by_precision.empty()) j["device"]["peak_flops_by_precision"] = m.peak_flops_by_precision;
  if (m.shared_cores > 0) j["device"]["shared_cores"] = m.shared_cores;
  if (m.parallel_threads > 0) j["device"]["parallel_threads"] = m.parallel_threads;
  if (m.copy_bytes_per_s > 0) j["device"]["copy_bytes_per_s"] = m.copy_bytes_per_s;
  j["devices_per_node"] = m.devices_per_node;
  j["nodes"] = m.nodes;
  j["overlap"] = m.overlap;
  j["step_overhead_s"] = m.step_overhead_s;
  j["worker_overhead_s"] = m.worker_overhead_s;
  for (const auto& [n, v] : m.worker_overhead_at_s) j["worker_overhead_at_s"][std::to_string(n)] = v;
  for (const auto& [n, v] : m.worker_start_at_s) j["worker_start_at_s"][std::to_string(n)] = v;
  j["late_arrival_gap_s"] = m.late_arrival_gap_s;
  j["sender_trails_s"] = m.sender_trails_s;
  if (m.action_overhead_s > 0) j["action_overhead_s"] = m.action_overhead_s;
  for (const auto& [k, v] : m.unit_overhead_s) j["unit_overhead_s"][k] = v;
  j["links"]["intra_node"] = links_json(m.intra_node);
  if (!m.inter_node.empty()) j["links"]["inter_node"] = links_json(m.inter_node);
  if (!m.calibration.is_null()) j["calibration"] = m.calibration;
  return j;
}

std::string layout_key(const AlphaBeta::Layout& l) { return fmt::format("{} of {} stride {}", l.size, l.workers, l.stride); }

}  // namespace pb::projection
