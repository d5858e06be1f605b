// GPU placement from PCI bus ids (engine/gpu_placement.h).
#include "engine/gpu_placement.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <numeric>
#include <sstream>

#include <fmt/format.h>

#include "engine/check.h"
#include "engine/device.h"
#include "engine/process.h"
#ifdef PARBENCH_HAVE_CUDA
#include "engine/cuda_module.h"
#endif

namespace pb {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// This process's view, as one string for the gather: "!message" or bus ids joined by ','.
std::string my_view() {
  try {
    std::string out;
#ifdef PARBENCH_HAVE_CUDA
    const int n = cuda_device_count();
    for (int i = 0; i < n; ++i) out += (i ? "," : "") + cuda_module().pci_bus_id(i);
#endif
    return out;
  } catch (const std::exception& e) {
    return std::string("!") + e.what();
  }
}

RankGpus parse_view(const std::string& host, const std::string& view) {
  RankGpus r;
  r.host = host;
  if (!view.empty() && view[0] == '!') {
    r.error = view.substr(1);
    return r;
  }
  std::stringstream ss(view);
  for (std::string id; std::getline(ss, id, ',');)
    if (!id.empty()) r.bus_ids.push_back(id);
  return r;
}

}  // namespace

GpuPlacement place_gpus(const std::vector<RankGpus>& ranks) {
  const int n = static_cast<int>(ranks.size());
  GpuPlacement g;
  g.device.assign(n, -1);
  g.bus_id.assign(n, "");
  g.sharers.assign(n, 0);
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return ranks[a].bus_ids.size() < ranks[b].bus_ids.size(); });
  std::map<std::pair<std::string, std::string>, int> users;  // (host, bus id) -> ranks using it
  for (const int r : order) {
    int best = -1;
    for (int i = 0; i < static_cast<int>(ranks[r].bus_ids.size()); ++i)
      if (best < 0 || users[{ranks[r].host, lower(ranks[r].bus_ids[i])}] <
                          users[{ranks[r].host, lower(ranks[r].bus_ids[best])}])
        best = i;
    if (best < 0) continue;
    g.device[r] = best;
    g.bus_id[r] = lower(ranks[r].bus_ids[best]);
    ++users[{ranks[r].host, g.bus_id[r]}];
  }
  g.nccl = n > 0;
  for (int r = 0; r < n; ++r) {
    if (g.device[r] < 0) {
      g.nccl = false;
      continue;
    }
    g.sharers[r] = users[{ranks[r].host, g.bus_id[r]}];
    if (g.sharers[r] > 1) g.shared = true, g.nccl = false;
  }
  return g;
}

std::string placement_problem(const std::vector<RankGpus>& ranks, const GpuPlacement& g, const std::string& strategy,
                              bool allow_shared) {
  for (std::size_t r = 0; r < ranks.size(); ++r)
    if (!ranks[r].error.empty())
      return fmt::format("{}: rank {} ({}) could not list its GPUs: {}", strategy, r, ranks[r].host, ranks[r].error);
  for (std::size_t r = 0; r < ranks.size(); ++r)
    if (g.device[r] < 0)
      return fmt::format("{}: CUDA workers requested, but rank {} ({}) sees no CUDA device", strategy, r,
                         ranks[r].host);
  if (!g.shared || allow_shared) return "";
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    if (g.sharers[r] < 2) continue;
    std::string same;
    std::vector<std::string> ids;  // every GPU seen on that host
    for (std::size_t q = 0; q < ranks.size(); ++q) {
      if (ranks[q].host != ranks[r].host) continue;
      if (g.bus_id[q] == g.bus_id[r]) same += fmt::format("{}{}", same.empty() ? "" : ", ", q);
      for (const std::string& id : ranks[q].bus_ids) ids.push_back(lower(id));
    }
    std::sort(ids.begin(), ids.end());
    const auto distinct = std::unique(ids.begin(), ids.end()) - ids.begin();
    return fmt::format("{}: ranks {} on {} would share the GPU at PCI bus id {} ({} distinct GPU(s) seen there); "
                       "launch one process per GPU, or pass --oversubscribe",
                       strategy, same, ranks[r].host, g.bus_id[r], distinct);
  }
  return "";
}

const JobGpus& job_gpus() {
  static const JobGpus job = [] {
    const ProcessInfo& p = process();
    const std::vector<std::string> views = world_allgather(my_view());
    PB_CHECK(static_cast<int>(views.size()) == p.size, "gathered {} GPU views for {} ranks", views.size(), p.size);
    JobGpus j;
    for (int r = 0; r < p.size; ++r) j.ranks.push_back(parse_view(p.hosts.at(r), views[r]));
    j.placement = place_gpus(j.ranks);
    return j;
  }();
  return job;
}

}  // namespace pb
