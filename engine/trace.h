// Where one worker's step went: spans (forward, backward, optimizer, loss, transfer, idle) on the
// device's own clock -- CPU: the steady clock around synchronous calls; CUDA: events recorded on
// the queue the work runs on, resolved after the step's synchronize. On GPUs the same spans are
// NVTX ranges, so nsys shows them.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"

namespace pb {

enum class Phase : uint8_t { Forward, Backward, Optimizer, Loss, Transfer, Idle };
inline constexpr int kPhases = 6;
const char* phase_name(Phase p);

// The queue a span ran on: the backend's compute queue, or the communicator's.
enum class Lane : uint8_t { Compute, Comm };
const char* lane_name(Lane l);

struct Span {
  Phase phase = Phase::Idle;
  Lane lane = Lane::Compute;
  int micro = -1;        // micro-batch (pipeline slot); -1 when the span has none
  std::string name;      // "L3 conv2d", "all_reduce 4 MiB", "wait for peer"; empty unless named
  double start_s = 0;    // seconds since the group's step started
  double end_s = 0;
  int action = -1;       // the id of the plan action it ran for (strategies/executor.h); -1: none
  // A traced step's layer spans: the work of the computation (engine/model.h layer_work), and its
  // own time -- the span's segments summed where a host-side communicator call cut it open (the
  // segment that ends the computation carries the work; the others carry none). 0: not known.
  double flops = 0, bytes = 0, busy_s = 0;
  // Set by the writer of a trace (bench/roofline.h): roofline time / busy_s; < 0: none.
  double roofline_fraction = -1;
};

// One per worker, driven by that worker's thread only. Cheap when detail is off: one span per
// model call (forward, backward, the loss, Adam) and per communicator call, two clock reads or
// event records each, unnamed. With detail on (a traced step) spans are per layer and named.
class Tracer {
 public:
  using clock = std::chrono::steady_clock;

  Tracer() = default;
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;
  ~Tracer();

  void set_detail(bool on) { detail_ = on; }
  bool detail() const { return detail_; }
  bool named() const { return detail_ || nvtx_; }
  bool active() const { return be_ != nullptr; }
  // The plan action the spans from now on belong to (a compute span: the one current at its start).
  void set_action(int id) { action_ = id; }
  int action() const { return action_; }

  // Starts a step on be's compute queue; `origin` is the host time the whole group's step began.
  void begin_step(Backend& be, clock::time_point origin);
  // After the backend's synchronize: resolves every event into spans. Inactive afterwards.
  void end_step();
  // No spans and zero totals: a step that recorded nothing.
  void clear() {
    spans_.clear();
    totals_.fill(0.0);
  }

  // RAII: a compute-queue span from construction to destruction.
  class Scope {
   public:
    Scope() = default;
    explicit Scope(Tracer* t) : t_(t) {}
    Scope(Scope&& o) noexcept : t_(o.t_) { o.t_ = nullptr; }
    Scope& operator=(Scope&&) = delete;
    ~Scope() {
      if (!t_) return;
      try {
        t_->close();
      } catch (...) {  // a failing device: the step's own error is the one to report
      }
    }

   private:
    Tracer* t_ = nullptr;
  };
  // A span of phase p on the compute queue. name() is called only when spans are named. Inside an
  // open span (or while inactive) it records nothing: spans of one queue never nest.
  template <class NameFn>
  Scope compute(Phase p, int micro, NameFn&& name) {
    if (!be_ || open_) return Scope{};
    open(p, micro, named() ? name() : std::string());
    return Scope(this);
  }

  // Adds work (FLOPs, bytes moved) to the open compute span; nothing when none is open.
  void add_work(double flops, double bytes) {
    if (!open_) return;
    cur_.flops += flops;
    cur_.bytes += bytes;
  }

  // A host-side communicator call (it blocks this thread): the open compute span's segment ends
  // at suspend() -- on a GPU, when the work queued before it ends -- and goes on after resume().
  void suspend();
  void resume();
  // Spans timed on the host clock (host-side communicators: transfers and waits).
  void host_span(Phase p, Lane lane, std::string name, clock::time_point from, clock::time_point to);
  // Spans timed with events the caller recorded on another queue (an event-ordered
  // communicator's stream); both must be complete at end_step and outlive it.
  void device_span(Phase p, Lane lane, std::string name, Event& from, Event& to);
  // An already resolved span (the group's idle before and after a worker's own part).
  void add(Span s);

  void nvtx_push(const char* name);
  void nvtx_pop();

  // The last step's spans (resolved), in the order recorded, and their totals.
  const std::vector<Span>& spans() const { return spans_; }
  double total(Phase p) const { return totals_[static_cast<int>(p)]; }
  // Transfer time not overlapped by compute-phase spans of the same worker: on a host-side
  // communicator all of it (the worker's thread does the transfer), on streams only the part no
  // forward/backward/loss/optimizer ran beside.
  double exposed_transfer_s() const;
  // Host time the worker's part started, relative to the step origin.
  double started_s() const { return started_s_; }

 private:
  struct Pending {
    Phase phase;
    Lane lane;
    int micro;
    std::string name;
    Event* from;  // events on a queue, or
    Event* to;
    clock::time_point host_from, host_to;  // host times when from == nullptr
    int action;
    int span = -1;  // the compute span this is a segment of (its segments share it)
    double flops = 0, bytes = 0;
  };
  void open(Phase p, int micro, std::string name);
  void close();
  Event& record();  // an event from the pool, recorded on the compute queue

  Backend* be_ = nullptr;
  bool detail_ = false, nvtx_ = false;
  int action_ = -1;
  clock::time_point origin_, started_;
  double started_s_ = 0;
  Event* origin_event_ = nullptr;
  std::vector<std::unique_ptr<Event>> pool_;
  std::size_t used_ = 0;
  struct Open {
    Phase phase;
    int micro;
    std::string name;
    Event* from = nullptr;
    bool suspended = false;
    int action = -1;
    int span = -1;
    double flops = 0, bytes = 0;
  };
  int spans_opened_ = 0;
  bool open_ = false;
  Open cur_;
  std::vector<Pending> pending_;
  std::vector<Span> spans_;
  std::array<double, kPhases> totals_{};
};

// A Chrome trace-event file (Perfetto, chrome://tracing) of one step: per worker a process
// (pid = worker, named by `process_names`), per lane a thread (tid 0 compute, 1 comm); each span
// a complete event ("ph": "X") with ts and dur in microseconds from the step's start.
// `meta` goes to the file's "otherData" (what the trace is of). A span's work goes to its args as
// flops, bytes and busy_us, its roofline_fraction where set.
std::string chrome_trace(const std::vector<std::vector<Span>>& workers, const std::vector<std::string>& process_names,
                         const std::map<std::string, std::string>& meta);

}  // namespace pb
