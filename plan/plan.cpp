// The plan IR's names, builder, writers (text, CSV, JSON) and JSON reader.
#include "plan/plan.h"

#include <algorithm>
#include <limits>
#include <map>
#include <ostream>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "engine/check.h"
#include "engine/fsutil.h"
#include "engine/json_input.h"

namespace pb {

namespace {
constexpr const char* kKindNames[kActionKinds] = {"forward", "recompute", "backward_data", "backward_weights", "loss",
                                                  "send", "recv", "collective", "wait", "group_start", "group_end",
                                                  "copy", "free", "optimizer"};
constexpr const char* kLaneNames[kPlanLanes] = {"compute", "send_up", "send_down", "coll"};
constexpr const char* kRoleNames[kBufferRoles] = {"x",    "in",   "t",      "y",    "dy",           "dy_local",
                                                  "dx",   "loss", "acts",   "keep", "params",       "grads",
                                                  "adam", "shard_params", "shard_grads", "unit_grads", "gathered",
                                                  "scratch", "params16", "staging"};
}  // namespace

const char* buffer_role_name(BufferRole r) { return kRoleNames[static_cast<int>(r)]; }

BufferRole parse_buffer_role(const std::string& name, const std::string& what) {
  for (int i = 0; i < kBufferRoles; ++i)
    if (name == kRoleNames[i]) return static_cast<BufferRole>(i);
  throw UsageError(fmt::format("{}: unknown buffer role '{}': expected one of {}", what, name, fmt::join(kRoleNames, ", ")));
}

std::string buffer_label(const PlanBuffer& b) {
  std::string s = b.chunk > 0 ? fmt::format("c{}/", b.chunk) : "";
  s += buffer_role_name(b.role);
  if (b.index >= 0) s += fmt::format("[{}]", b.index);
  return s;
}

const char* action_kind_name(ActionKind k) { return kKindNames[static_cast<int>(k)]; }
const char* lane_name(PlanLane l) { return kLaneNames[static_cast<int>(l)]; }

ActionKind parse_action_kind(const std::string& name, const std::string& what) {
  for (int i = 0; i < kActionKinds; ++i)
    if (name == kKindNames[i]) return static_cast<ActionKind>(i);
  throw UsageError(fmt::format("{}: unknown action kind '{}': expected one of {}", what, name,
                               fmt::join(kKindNames, ", ")));
}

PlanLane parse_lane(const std::string& name, const std::string& what) {
  for (int i = 0; i < kPlanLanes; ++i)
    if (name == kLaneNames[i]) return static_cast<PlanLane>(i);
  throw UsageError(fmt::format("{}: unknown lane '{}': expected one of {}", what, name, fmt::join(kLaneNames, ", ")));
}

CollKind parse_coll_kind(const std::string& name, const std::string& what) {
  std::vector<std::string> names;
  for (int i = 0; i < kCollKinds; ++i) {
    names.emplace_back(coll_kind_name(static_cast<CollKind>(i)));
    if (name == names.back()) return static_cast<CollKind>(i);
  }
  throw UsageError(fmt::format("{}: unknown collective '{}': expected one of {}", what, name, fmt::join(names, ", ")));
}

PlanBuilder::PlanBuilder(std::string strategy, int workers, int64_t batch, int micro_batches) {
  plan_.strategy = std::move(strategy);
  plan_.workers = workers;
  plan_.batch = batch;
  plan_.micro_batches = micro_batches;
  plan_.actions.resize(workers);
  plan_.replica.assign(workers, -1);
  samples_.assign(workers, 0);
}

int PlanBuilder::group(const std::string& name, const std::vector<int>& members) {
  for (std::size_t g = 0; g < plan_.groups.size(); ++g)
    if (plan_.groups[g].name == name) return static_cast<int>(g);
  plan_.groups.push_back({name, members});
  return static_cast<int>(plan_.groups.size()) - 1;
}

int PlanBuilder::buffer(int worker, BufferRole role, int index, int64_t bytes, DType dtype, int chunk) {
  const PlanBuffer key{worker, role, index, chunk, bytes, dtype};
  for (std::size_t b = 0; b < plan_.buffers.size(); ++b)
    if (same_buffer(plan_.buffers[b], key)) return static_cast<int>(b);
  plan_.buffers.push_back(key);
  return static_cast<int>(plan_.buffers.size()) - 1;
}

Action& PlanBuilder::add(int worker, ActionKind kind, PlanLane lane) {
  auto& list = plan_.actions.at(worker);
  Action a;
  a.id = static_cast<int>(list.size());
  a.kind = kind;
  a.lane = lane;
  list.push_back(std::move(a));
  return list.back();
}

Action& PlanBuilder::p2p(int worker, ActionKind kind, int group, int peer, int64_t count, int buf, bool async) {
  Action& a = add(worker, kind, peer > worker ? PlanLane::SendUp : PlanLane::SendDown);
  a.group = group, a.peer = peer, a.count = count, a.async = async, a.coll = CollKind::SendRecv;
  a.bytes = kind == ActionKind::Send ? count * static_cast<int64_t>(sizeof(float)) : 0;  // as CommStats books it
  (kind == ActionKind::Send ? a.reads : a.writes).push_back(buf);
  return a;
}

Action& PlanBuilder::collective(int worker, CollKind coll, int group, int64_t count, int64_t bytes, bool async) {
  Action& a = add(worker, ActionKind::Collective, PlanLane::Coll);
  a.coll = coll, a.group = group, a.count = count, a.bytes = bytes, a.async = async;
  return a;
}

Action& PlanBuilder::wait(int worker, std::vector<int> ids) {
  Action& a = add(worker, ActionKind::Wait, PlanLane::Compute);
  a.waits = std::move(ids);
  return a;
}

Action& PlanBuilder::compute(int worker, ActionKind kind, int layer_begin, int layer_end, int micro,
                             std::vector<int> reads, std::vector<int> writes) {
  Action& a = add(worker, kind, PlanLane::Compute);
  a.layer_begin = layer_begin, a.layer_end = layer_end, a.micro = micro;
  a.reads = std::move(reads), a.writes = std::move(writes);
  if (kind != ActionKind::Optimizer && kind != ActionKind::Free) a.samples = samples_.at(worker);  // Adam: every parameter
  return a;
}

namespace {

std::string buffer_names(const Plan& p, const std::vector<int>& ids) {
  std::vector<std::string> names;
  for (int b : ids) names.push_back(b >= 0 && b < static_cast<int>(p.buffers.size()) ? buffer_label(p.buffers[b]) : "?");
  return fmt::format("{}", fmt::join(names, "|"));
}

std::string what(const Plan& p, const Action& a) {
  std::string s = action_kind_name(a.kind);
  const bool p2p = a.kind == ActionKind::Send || a.kind == ActionKind::Recv;
  if (a.layer_begin >= 0 && p2p) s += fmt::format(" layer {}", a.layer_begin);  // its value or gradient (a skip)
  else if (a.layer_begin >= 0) s += fmt::format(" layers [{}, {})", a.layer_begin, a.layer_end);
  if (a.micro >= 0) s += fmt::format(" mb {}", a.micro);
  if (a.samples) s += fmt::format(" x{}", a.samples);
  if (a.part != 1) s += fmt::format(" part {:.4g}", a.part);
  if (a.kind == ActionKind::Send) s += fmt::format(" to {}", a.peer);
  if (a.kind == ActionKind::Recv) s += fmt::format(" from {}", a.peer);
  if (p2p && a.group > 0 && a.group < static_cast<int>(p.groups.size())) s += fmt::format(" on '{}'", p.groups[a.group].name);
  if (a.kind == ActionKind::Collective) {
    s += fmt::format(" {} over {}", coll_kind_name(a.coll), a.group >= 0 ? p.groups.at(a.group).name : "?");
    if (a.root >= 0) s += fmt::format(" root {}", a.root);
  }
  if (a.count) s += fmt::format(" {} values", a.count);
  if (a.dtype != DType::F32) s += fmt::format(" {}", dtype_label(a.dtype));
  if (a.async) s += " (start)";
  if (!a.waits.empty()) s += fmt::format(" for {}", fmt::join(a.waits, ","));
  if (a.bytes) s += fmt::format(", {} B", a.bytes);
  return s;
}

}  // namespace

std::string describe(const Plan& p, int worker, int id) {
  const auto& list = p.actions.at(worker);
  if (id < 0 || id >= static_cast<int>(list.size())) return fmt::format("worker {} action {}", worker, id);
  return fmt::format("worker {} action {} ({})", worker, id, what(p, list[id]));
}

void write_plan_text(std::ostream& os, const Plan& p) {
  os << fmt::format("plan of {}: {} worker(s), batch {}, {} micro-batch(es)\n", p.strategy, p.workers, p.batch,
                    p.micro_batches);
  for (std::size_t g = 0; g < p.groups.size(); ++g)
    os << fmt::format("group {} '{}': workers {}\n", g, p.groups[g].name, fmt::join(p.groups[g].members, ","));
  for (int w = 0; w < p.workers; ++w) {
    os << fmt::format("worker {} (replica {}):\n", w, p.replica[w]);
    std::vector<std::string> kept;  // its buffers, as large as it allocates them
    for (const PlanBuffer& b : p.buffers)
      if (b.worker == w) kept.push_back(fmt::format("{} {}", buffer_label(b), bytes_str(static_cast<double>(b.bytes))));
    if (!kept.empty()) os << fmt::format("  keeps {}\n", fmt::join(kept, ", "));
    for (const Action& a : p.actions[w]) {
      os << fmt::format("  {:4} {:<9} {}", a.id, lane_name(a.lane), what(p, a));
      if (!a.reads.empty()) os << " reads " << buffer_names(p, a.reads);
      if (!a.writes.empty()) os << " writes " << buffer_names(p, a.writes);
      os << "\n";
    }
  }
}

void write_plan_csv(std::ostream& os, const Plan& p) {
  os << "worker,id,kind,lane,layer_begin,layer_end,micro,peer,group,coll,root,count,bytes,async,waits,reads,writes,"
        "samples,part,dtype\n";
  for (int w = 0; w < p.workers; ++w)
    for (const Action& a : p.actions[w])
      os << fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:g},{}\n", w, a.id, action_kind_name(a.kind),
                        lane_name(a.lane), a.layer_begin, a.layer_end, a.micro, a.peer,
                        a.group >= 0 ? p.groups[a.group].name : "",
                        a.kind == ActionKind::Collective ? coll_kind_name(a.coll) : "", a.root, a.count, a.bytes,
                        a.async ? 1 : 0, fmt::join(a.waits, " "), buffer_names(p, a.reads),
                        buffer_names(p, a.writes), a.samples, a.part, a.coll != CollKind::Other ? dtype_label(a.dtype) : "");
}

std::string plan_to_json(const Plan& p) {
  nlohmann::json j;
  j["strategy"] = p.strategy;
  j["workers"] = p.workers;
  j["batch"] = p.batch;
  j["micro_batches"] = p.micro_batches;
  if (!p.identity.empty()) {
    j["identity"] = nlohmann::json::object();
    for (const auto& [k, v] : p.identity) j["identity"][k] = v;
  }
  j["layer_params"] = p.layer_params;
  j["replica"] = p.replica;
  j["groups"] = nlohmann::json::array();
  for (const PlanGroup& g : p.groups) j["groups"].push_back({{"name", g.name}, {"members", g.members}});
  j["buffers"] = nlohmann::json::array();
  for (const PlanBuffer& b : p.buffers) {
    nlohmann::json o = {{"worker", b.worker}, {"role", buffer_role_name(b.role)}};
    if (b.index >= 0) o["index"] = b.index;
    if (b.chunk > 0) o["chunk"] = b.chunk;
    o["bytes"] = b.bytes;
    if (b.dtype != DType::F32) o["dtype"] = dtype_label(b.dtype);
    j["buffers"].push_back(std::move(o));
  }
  j["actions"] = nlohmann::json::array();
  for (int w = 0; w < p.workers; ++w)
    for (const Action& a : p.actions[w]) {
      nlohmann::json r = {{"worker", w}, {"id", a.id}, {"kind", action_kind_name(a.kind)}, {"lane", lane_name(a.lane)}};
      if (a.layer_begin >= 0) r["layers"] = {a.layer_begin, a.layer_end};
      if (a.micro >= 0) r["micro"] = a.micro;
      if (a.peer >= 0) r["peer"] = a.peer;
      if (a.group >= 0) r["group"] = a.group;
      if (a.kind == ActionKind::Collective || a.coll != CollKind::Other) r["coll"] = coll_kind_name(a.coll);
      if (a.root >= 0) r["root"] = a.root;
      r["count"] = a.count;
      r["bytes"] = a.bytes;
      if (a.dtype != DType::F32) r["dtype"] = dtype_label(a.dtype);
      if (a.samples) r["samples"] = a.samples;
      if (a.part != 1) r["part"] = a.part;
      if (a.async) r["async"] = true;
      if (!a.waits.empty()) r["waits"] = a.waits;
      r["reads"] = a.reads;
      r["writes"] = a.writes;
      j["actions"].push_back(std::move(r));
    }
  return j.dump(1) + "\n";
}

namespace {

template <class T>
T field(const nlohmann::json& j, const char* key, const std::string& where, T fallback, bool required = false) {
  if (!j.contains(key)) {
    if (required) throw UsageError(fmt::format("{}: missing field '{}'", where, key));
    return fallback;
  }
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw UsageError(fmt::format("{}: field '{}' has the wrong type ({})", where, key, j.at(key).dump()));
  }
}

}  // namespace

namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxBytes = int64_t{1} << 53;  // any count or size a double holds exactly

// An integer field through json_integer (range-checked once, never narrowed); `fallback` when absent.
int64_t int_field(const nlohmann::json& j, const char* key, const std::string& where, int64_t fallback, int64_t lo,
                  int64_t hi, bool required = false) {
  if (!j.contains(key)) {
    if (required) throw UsageError(fmt::format("{}: missing field '{}'", where, key));
    return fallback;
  }
  return json_integer(j.at(key), fmt::format("{}: field '{}'", where, key), lo, hi);
}

template <class T>
std::vector<T> int_list(const nlohmann::json& j, const char* key, const std::string& where, int64_t lo, int64_t hi,
                        bool required = false) {
  std::vector<T> out;
  if (!j.contains(key)) {
    if (required) throw UsageError(fmt::format("{}: missing field '{}'", where, key));
    return out;
  }
  const nlohmann::json& v = j.at(key);
  if (!v.is_array()) throw UsageError(fmt::format("{}: field '{}' must be a list of integers, got {}", where, key, v.dump()));
  for (std::size_t i = 0; i < v.size(); ++i)
    out.push_back(static_cast<T>(json_integer(v[i], fmt::format("{}: field '{}' entry {}", where, key, i), lo, hi)));
  return out;
}

}  // namespace

Plan plan_from_json(const std::string& text, const std::string& source) {
  const nlohmann::json j = parse_json_input(text, source);
  if (!j.is_object()) throw UsageError(fmt::format("{}: a plan is a JSON object", source));
  Plan p;
  p.strategy = field<std::string>(j, "strategy", source, "", true);
  p.workers = static_cast<int>(int_field(j, "workers", source, 0, 1, 1 << 16, true));
  p.batch = int_field(j, "batch", source, 0, 1, kMaxInt, true);
  p.micro_batches = static_cast<int>(int_field(j, "micro_batches", source, 1, 1, kMaxInt));
  if (p.micro_batches > p.batch)
    throw UsageError(fmt::format("{}: field 'micro_batches' is {}, more than the batch ({})", source, p.micro_batches, p.batch));
  if (j.contains("identity")) {
    const nlohmann::json& id = j.at("identity");
    if (!id.is_object()) throw UsageError(fmt::format("{}: field 'identity' must be an object of names to values", source));
    for (const auto& [k, v] : id.items()) {
      if (!v.is_string()) throw UsageError(fmt::format("{}: identity field '{}' must be a string, got {}", source, k, v.dump()));
      p.identity.emplace_back(k, v.get<std::string>());
    }
  }
  p.layer_params = int_list<int64_t>(j, "layer_params", source, 0, kMaxBytes);
  p.replica = j.contains("replica") ? int_list<int>(j, "replica", source, -1, p.workers - 1) : std::vector<int>(p.workers, 0);
  if (static_cast<int>(p.replica.size()) != p.workers)
    throw UsageError(fmt::format("{}: field 'replica' has {} entries for {} workers", source, p.replica.size(), p.workers));
  const nlohmann::json groups = field<nlohmann::json>(j, "groups", source, nlohmann::json::array());
  const nlohmann::json buffer_list = field<nlohmann::json>(j, "buffers", source, nlohmann::json::array());
  const nlohmann::json action_list = field<nlohmann::json>(j, "actions", source, nlohmann::json::array());
  for (const auto* list : {&groups, &buffer_list, &action_list})
    if (!list->is_array()) throw UsageError(fmt::format("{}: 'groups', 'buffers' and 'actions' are lists", source));
  for (const auto& g : groups) {
    const std::string where = fmt::format("{}: group {}", source, p.groups.size());
    PlanGroup pg{field<std::string>(g, "name", where, "", true), int_list<int>(g, "members", where, 0, p.workers - 1, true)};
    p.groups.push_back(std::move(pg));
  }
  std::map<BufferKey, int> seen;  // a buffer twice would alias its memory
  for (const auto& b : buffer_list) {
    const std::string where = fmt::format("{}: buffer {}", source, p.buffers.size());
    if (b.is_object() && !b.contains("role") && b.contains("name"))
      throw UsageError(fmt::format("{}: has a 'name' and no 'role': buffers say their role, index and chunk since "
                                   "plans were typed; make the plan again with `parbench plan --format json`",
                                   where));
    PlanBuffer pb;
    pb.worker = static_cast<int>(int_field(b, "worker", where, 0, 0, p.workers - 1, true));
    pb.role = parse_buffer_role(field<std::string>(b, "role", where, "", true), where + ": 'role'");
    pb.index = static_cast<int>(int_field(b, "index", where, -1, -1, kMaxInt));
    pb.chunk = static_cast<int>(int_field(b, "chunk", where, 0, 0, kMaxInt));
    pb.bytes = int_field(b, "bytes", where, 0, 0, kMaxBytes);
    pb.dtype = parse_dtype_label(field<std::string>(b, "dtype", where, "fp32"), where + ": 'dtype'");
    const auto [at, fresh] = seen.emplace(buffer_key(pb), static_cast<int>(p.buffers.size()));
    if (!fresh)
      throw UsageError(fmt::format("{}: worker {}'s {} again (buffer {})", where, pb.worker, buffer_label(pb), at->second));
    p.buffers.push_back(pb);
  }
  p.actions.resize(p.workers);
  const int buffers = static_cast<int>(p.buffers.size());
  const int64_t group_count = static_cast<int64_t>(p.groups.size());
  for (const auto& r : action_list) {
    const int w = static_cast<int>(int_field(r, "worker", source + ": an action", 0, 0, p.workers - 1, true));
    const std::string where = fmt::format("{}: worker {} action {}", source, w, p.actions[w].size());
    Action a;
    a.id = static_cast<int>(int_field(r, "id", where, 0, 0, kMaxInt, true));
    if (a.id != static_cast<int>(p.actions[w].size()))
      throw UsageError(fmt::format("{}: id {} out of order (expected {})", where, a.id, p.actions[w].size()));
    a.kind = parse_action_kind(field<std::string>(r, "kind", where, "", true), where);
    a.lane = parse_lane(field<std::string>(r, "lane", where, "compute"), where);
    if (r.contains("layers")) {
      const auto l = int_list<int>(r, "layers", where, 0, kMaxInt);
      if (l.size() != 2 || l[1] < l[0]) throw UsageError(fmt::format("{}: 'layers' must be [begin, end)", where));
      a.layer_begin = l[0], a.layer_end = l[1];
    }
    a.micro = static_cast<int>(int_field(r, "micro", where, -1, -1, kMaxInt));
    a.peer = static_cast<int>(int_field(r, "peer", where, -1, -1, p.workers - 1));
    a.group = static_cast<int>(int_field(r, "group", where, -1, -1, group_count - 1));
    if (r.contains("coll")) a.coll = parse_coll_kind(field<std::string>(r, "coll", where, ""), where);
    a.root = static_cast<int>(int_field(r, "root", where, -1, -1, 1 << 16));
    a.count = int_field(r, "count", where, 0, 0, kMaxBytes);
    a.bytes = int_field(r, "bytes", where, 0, 0, kMaxBytes);
    a.dtype = parse_dtype_label(field<std::string>(r, "dtype", where, "fp32"), where + ": 'dtype'");
    a.samples = int_field(r, "samples", where, 0, 0, kMaxInt);
    a.part = field<double>(r, "part", where, 1.0);
    if (!(a.part > 0 && a.part <= 1)) throw UsageError(fmt::format("{}: 'part' must be in (0, 1], got {}", where, a.part));
    a.async = field<bool>(r, "async", where, false);
    a.waits = int_list<int>(r, "waits", where, 0, std::max(a.id - 1, 0));
    for (int id : a.waits)
      if (id >= a.id) throw UsageError(fmt::format("{}: waits for {}, not an earlier action", where, id));
    a.reads = int_list<int>(r, "reads", where, 0, std::max(buffers - 1, 0));
    a.writes = int_list<int>(r, "writes", where, 0, std::max(buffers - 1, 0));
    if (buffers == 0 && !(a.reads.empty() && a.writes.empty()))
      throw UsageError(fmt::format("{}: reads or writes a buffer, and the plan has none", where));
    p.actions[w].push_back(std::move(a));
  }
  return p;
}

Plan read_plan_file(const std::string& path) { return plan_from_json(read_file(path, kPlanFileLimit, "plan"), path); }

}  // namespace pb
