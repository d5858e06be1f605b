// project --validate, action by action: each configuration's traced step (trace-<benchmark>.json
// beside the run's results.json, written by run --trace; every span carries its plan action's id)
// against the actions of its prediction, per action kind and the actions furthest off.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "bench/project.h"
#include "bench/sweep.h"
#include "engine/check.h"
#include "engine/fsutil.h"
#include "engine/json_input.h"

namespace pb {

using nlohmann::json;

namespace {

// Seconds per (worker, action) of a Chrome trace: its spans with an action id, waiting left out.
std::map<std::pair<int, int>, double> traced_actions(const std::string& path) {
  std::map<std::pair<int, int>, double> out;
  const json doc = parse_json_input(read_file(path), path);
  if (!doc.contains("traceEvents") || !doc["traceEvents"].is_array())
    throw UsageError(fmt::format("{}: expected a Chrome trace (traceEvents)", path));
  for (const json& e : doc["traceEvents"]) {
    if (e.value("ph", "") != "X" || !e.contains("args") || !e["args"].contains("action")) continue;
    if (e.value("cat", "") == "idle") continue;  // waiting for a peer or the device: not the action's work
    out[{e.value("pid", 0), e["args"]["action"].get<int>()}] += e.value("dur", 0.0) * 1e-6;
  }
  return out;
}

}  // namespace

std::string per_action_report(const std::string& run_dir, const std::vector<ActionCheck>& checks, json* doc) {
  std::string md;
  for (const ActionCheck& c : checks) {
    const std::filesystem::path trace = std::filesystem::path(run_dir) / trace_file_name(c.name);
    if (!std::filesystem::exists(trace)) continue;
    const auto measured = traced_actions(trace.string());
    std::map<std::pair<int, int>, double> predicted;
    for (const projection::ActionSpan& s : c.predicted) predicted[{s.worker, s.action}] += (s.end - s.start) * c.scale;
    struct Kind {
      double measured = 0, predicted = 0;
    };
    std::map<std::string, Kind> kinds;
    // Both backward passes of a layer run in one call in the engine (Sequential::backward), so the
    // run's spans carry one of their ids or the other: they are compared together.
    auto is_backward = [](ActionKind k) { return k == ActionKind::BackwardWeights || k == ActionKind::BackwardData; };
    struct Off {
      std::string what;
      double measured = 0, predicted = 0;
    };
    std::map<std::tuple<int, int, int, int, int>, Off> offs;  // (worker, id or -1, micro, layers) -> the action(s)
    for (int w = 0; w < c.plan.workers; ++w)
      for (const Action& a : c.plan.actions[w]) {
        const auto m = measured.find({w, a.id});
        const auto p = predicted.find({w, a.id});
        if (m == measured.end() && p == predicted.end()) continue;
        const double ms = m == measured.end() ? 0 : m->second, ps = p == predicted.end() ? 0 : p->second;
        Kind& k = kinds[is_backward(a.kind) ? "backward (weights + data)" : action_kind_name(a.kind)];
        k.measured += ms, k.predicted += ps;
        const bool both = is_backward(a.kind);
        Off& o = offs[{w, both ? -1 : a.id, a.micro, a.layer_begin, a.layer_end}];
        if (o.what.empty())
          o.what = both ? fmt::format("worker {} backward layers [{}, {}){} (actions {}+)", w, a.layer_begin, a.layer_end,
                                      a.micro >= 0 ? fmt::format(" mb {}", a.micro) : "", a.id)
                        : describe(c.plan, w, a.id);
        o.measured += ms, o.predicted += ps;
      }
    if (kinds.empty()) continue;
    std::vector<Off> worst;
    for (const auto& [key, o] : offs) worst.push_back(o);
    std::sort(worst.begin(), worst.end(), [](const Off& a, const Off& b) {
      return std::abs(a.predicted - a.measured) > std::abs(b.predicted - b.measured);
    });
    md += fmt::format("\n### Per action: {} (its traced step, every worker)\n\n"
                      "| action kind | measured ms | predicted ms | error |\n|---|--:|--:|--:|\n", c.name);
    json entry = {{"name", c.name}, {"trace", trace.string()}, {"kinds", json::object()}, {"worst", json::array()}};
    for (const auto& [name, k] : kinds) {
      md += fmt::format("| {} | {:.4g} | {:.4g} | {} |\n", name, k.measured * 1e3, k.predicted * 1e3,
                        k.measured > 0 ? fmt::format("{:+.1f}%", (k.predicted - k.measured) / k.measured * 100) : "-");
      entry["kinds"][name] = {{"measured_s", k.measured}, {"predicted_s", k.predicted}};
    }
    md += "\nFurthest off:\n\n| action | measured ms | predicted ms |\n|---|--:|--:|\n";
    for (std::size_t i = 0; i < worst.size() && i < 5; ++i) {
      const Off& o = worst[i];
      md += fmt::format("| {} | {:.4g} | {:.4g} |\n", o.what, o.measured * 1e3, o.predicted * 1e3);
      entry["worst"].push_back({{"action", o.what}, {"measured_s", o.measured}, {"predicted_s", o.predicted}});
    }
    doc->push_back(std::move(entry));
  }
  return md;
}

}  // namespace pb
