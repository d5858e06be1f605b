// The span recorder: an event pool on the worker's compute queue, resolved after the step.
#include "engine/trace.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "engine/check.h"

#ifdef PARBENCH_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace pb {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::Forward: return "forward";
    case Phase::Backward: return "backward";
    case Phase::Optimizer: return "optimizer";
    case Phase::Loss: return "loss";
    case Phase::Transfer: return "transfer";
    case Phase::Idle: return "idle";
  }
  return "?";
}

const char* lane_name(Lane l) { return l == Lane::Compute ? "compute" : "comm"; }

Tracer::~Tracer() = default;

Event& Tracer::record() {
  if (used_ == pool_.size()) pool_.push_back(be_->create_event());  // first steps only: the pool is reused
  Event& e = *pool_[used_++];
  be_->record(e);
  return e;
}

void Tracer::begin_step(Backend& be, clock::time_point origin) {
  be_ = &be;
#ifdef PARBENCH_HAVE_NVTX
  nvtx_ = be.device().kind == DeviceKind::Cuda;
#endif
  origin_ = origin;
  action_ = -1;
  spans_opened_ = 0;
  used_ = 0;
  open_ = false;
  pending_.clear();
  spans_.clear();
  totals_.fill(0.0);
  // The host time first, then the origin event: device spans, placed at started_s_ plus their time
  // since that event, then never start before the worker's part began nor end after the host saw
  // its work done (the compute lane's idle spans around them are on the host clock).
  started_ = clock::now();
  started_s_ = std::chrono::duration<double>(started_ - origin_).count();
  origin_event_ = &record();
}

void Tracer::open(Phase p, int micro, std::string name) {
  nvtx_push(name.empty() ? phase_name(p) : name.c_str());
  cur_.phase = p;
  cur_.micro = micro;
  cur_.name = std::move(name);
  cur_.from = &record();
  cur_.suspended = false;
  cur_.action = action_;
  cur_.span = spans_opened_++;
  cur_.flops = cur_.bytes = 0;
  open_ = true;
}

void Tracer::close() {
  if (!cur_.suspended)
    pending_.push_back({cur_.phase, Lane::Compute, cur_.micro, std::move(cur_.name), cur_.from, &record(), {}, {},
                        cur_.action, cur_.span, cur_.flops, cur_.bytes});
  open_ = false;
  nvtx_pop();
}

void Tracer::suspend() {
  if (!be_ || !open_ || cur_.suspended) return;
  pending_.push_back({cur_.phase, Lane::Compute, cur_.micro, cur_.name, cur_.from, &record(), {}, {}, cur_.action,
                      cur_.span});
  cur_.suspended = true;
}

void Tracer::resume() {
  if (!be_ || !open_ || !cur_.suspended) return;
  cur_.from = &record();
  cur_.suspended = false;
}

void Tracer::host_span(Phase p, Lane lane, std::string name, clock::time_point from, clock::time_point to) {
  if (!be_) return;
  pending_.push_back({p, lane, open_ ? cur_.micro : -1, std::move(name), nullptr, nullptr, from, to, action_});
}

void Tracer::device_span(Phase p, Lane lane, std::string name, Event& from, Event& to) {
  if (!be_) return;
  pending_.push_back({p, lane, -1, std::move(name), &from, &to, {}, {}, action_});
}

void Tracer::add(Span s) {
  totals_[static_cast<int>(s.phase)] += s.end_s - s.start_s;
  spans_.push_back(std::move(s));
}

void Tracer::end_step() {
  if (!be_) return;
  PB_CHECK(!open_, "a span is still open at the end of the step");
  // Device spans count from the origin event, recorded when the worker's part began.
  std::map<int, double> busy;  // compute span -> its segments' time; the last segment carries the work
  std::vector<std::pair<Span, int>> resolved;  // with the compute span each is a segment of (-1: none)
  for (Pending& p : pending_) {
    Span s;
    s.phase = p.phase;
    s.lane = p.lane;
    s.micro = p.micro;
    s.action = p.action;
    s.name = std::move(p.name);
    if (p.from) {
      s.start_s = started_s_ + be_->elapsed_s(*origin_event_, *p.from);
      s.end_s = started_s_ + be_->elapsed_s(*origin_event_, *p.to);
    } else {
      s.start_s = std::chrono::duration<double>(p.host_from - origin_).count();
      s.end_s = std::chrono::duration<double>(p.host_to - origin_).count();
    }
    s.flops = p.flops;
    s.bytes = p.bytes;
    if (p.span >= 0) busy[p.span] += std::max(0.0, s.end_s - s.start_s);
    resolved.emplace_back(std::move(s), p.span);
  }
  for (auto& [s, span] : resolved) {
    if (span >= 0 && (s.flops > 0 || s.bytes > 0)) s.busy_s = busy[span];
    if (s.end_s > s.start_s) add(std::move(s));
  }
  pending_.clear();
  be_ = nullptr;
}

double Tracer::exposed_transfer_s() const {
  std::vector<std::pair<double, double>> busy;
  for (const Span& s : spans_)
    if (s.phase != Phase::Transfer && s.phase != Phase::Idle) busy.emplace_back(s.start_s, s.end_s);
  std::sort(busy.begin(), busy.end());
  std::vector<std::pair<double, double>> merged;  // the union of compute intervals
  for (const auto& b : busy) {
    if (!merged.empty() && b.first <= merged.back().second) merged.back().second = std::max(merged.back().second, b.second);
    else merged.push_back(b);
  }
  double exposed = 0;
  for (const Span& s : spans_) {
    if (s.phase != Phase::Transfer) continue;
    double covered = 0;
    for (const auto& m : merged) covered += std::max(0.0, std::min(s.end_s, m.second) - std::max(s.start_s, m.first));
    exposed += (s.end_s - s.start_s) - covered;
  }
  return exposed;
}

void Tracer::nvtx_push(const char* name) {
#ifdef PARBENCH_HAVE_NVTX
  if (nvtx_) nvtxRangePushA(name);
#else
  (void)name;
#endif
}

void Tracer::nvtx_pop() {
#ifdef PARBENCH_HAVE_NVTX
  if (nvtx_) nvtxRangePop();
#endif
}

std::string chrome_trace(const std::vector<std::vector<Span>>& workers, const std::vector<std::string>& process_names,
                         const std::map<std::string, std::string>& meta) {
  using nlohmann::json;
  json events = json::array();
  for (std::size_t w = 0; w < workers.size(); ++w) {
    const int pid = static_cast<int>(w);
    const std::string pname = w < process_names.size() ? process_names[w] : fmt::format("worker {}", w);
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", pname}}}});
    events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"sort_index", pid}}}});
    for (Lane l : {Lane::Compute, Lane::Comm})
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", static_cast<int>(l)},
                        {"args", {{"name", lane_name(l)}}}});
    for (const Span& s : workers[w]) {
      json args = {{"phase", phase_name(s.phase)}};
      if (s.micro >= 0) args["micro_batch"] = s.micro;
      if (s.action >= 0) args["action"] = s.action;
      if (s.flops > 0 || s.bytes > 0) {
        args["flops"] = s.flops;
        args["bytes"] = s.bytes;
        args["busy_us"] = s.busy_s * 1e6;
      }
      if (s.roofline_fraction >= 0) args["roofline_fraction"] = s.roofline_fraction;
      events.push_back({{"name", s.name.empty() ? phase_name(s.phase) : s.name},
                        {"cat", phase_name(s.phase)},
                        {"ph", "X"},
                        {"ts", s.start_s * 1e6},
                        {"dur", (s.end_s - s.start_s) * 1e6},
                        {"pid", pid},
                        {"tid", static_cast<int>(s.lane)},
                        {"args", args}});
    }
  }
  return json({{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", meta}}).dump(1) + "\n";
}

}  // namespace pb
