// `parbench project` and `parbench calibrate`: shared declarations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend.h"
#include "engine/net.h"
#include "plan/plan.h"
#include "scenarios/scenarios.h"

namespace pb {

class Flags;

// ---- profiles timed here (bench/project_profile.cpp) ------------------------------------------
// A per-layer profile of `plan` on the CPU backend with `threads` threads at each batch size,
// timed as `parbench profile` times it (profile_net), in the profile.json format: what
// `project --validate` uses when no --profile is given. `concurrent` workers time it at once
// (context.concurrent_workers), as a step's workers share the cores: at most as many as the cores
// run at once (`project` shares them beyond that).
projection::Profile engine_profile(const NetPlan& plan, const std::string& workload, std::vector<int64_t> batches,
                                   int threads, int reps = 3, int concurrent = 1, Precision precision = Precision::Fp32);

// How the same work's time grows with the workers computing at once, from the profiles with
// `threads` threads timed by 1, 2, ... concurrent workers: [b - 1] = their total seconds with b at
// once (projection::Options::busy_seconds); empty without one of one worker alone and one of more.
std::vector<double> busy_curve(const std::vector<projection::Profile>& ps, int threads);

// `more`'s one batch (above `p`'s) added to p; Adam's time per parameter: their mean.
void append_batch(projection::Profile& p, const projection::Profile& more);
// Per layer, pass and batch, the median of profiles of the same net timed in turn.
projection::Profile median_of(const std::vector<projection::Profile>& v);
// `p` with each conv / linear layer timed alone as worker 0 of an n-way tp runs it (n = 1: whole),
// and with tp's ReLUs and layout copies when `tp` (projection::Timing::Layers).
projection::Profile layerwise_profile(const projection::Profile& p, const NetPlan& plan, int n, int reps, int rounds, bool tp);
// `p` with each stage [b, e) of `ranges` timed as a Sequential of its own (projection::Timing::Stages).
projection::Profile stagewise_profile(const projection::Profile& p, const NetPlan& plan,
                                      const std::vector<std::pair<int, int>>& ranges, int reps, int rounds);

// ---- project (bench/project.cpp) ------------------------------------------------------------
// The profile timed with `threads` threads per worker, by `concurrent` workers at once when there
// is one, else by any number (the simulator scales from its own); else the only one given.
const projection::Profile& profile_for(const std::vector<projection::Profile>& ps, int threads, int concurrent = 1);
std::vector<std::string> split_list(const std::string& s);

// ---- project --validate and --combine (bench/project_validate.cpp, bench/project_combine.cpp) ---
int project_validate(const Flags& f, const projection::Machine& m, std::vector<projection::Profile> profiles);
int project_combine(const Flags& f);
// One configuration predicted against measured, as printed and written.
struct Checked {
  std::string name;
  int threads = 0;
  double measured_s = 0;
  std::vector<double> times;
  bool feasible = true;
  std::string reason;
  double predicted_s = 0, compute_s = 0, exposed_comm_s = 0, idle_s = 0;
  bool anchor = false;  // --anchor's row: shown, not counted
};
// The table, the mean and worst error, the one-device spread; --out PREFIX.md/.json. `json_extra`
// joins the JSON's top level.
void report_validation(const Flags& f, std::string out, const std::vector<Checked>& got, const std::string& measured_note,
                       const std::string& tail, nlohmann::json json_extra);

// ---- project --validate, action by action (bench/project_actions.cpp) -------------------------
// A configuration's prediction, action by action, with the plan it priced.
struct ActionCheck {
  std::string name;  // the benchmark
  Plan plan;
  std::vector<projection::ActionSpan> predicted;
  double scale = 1;  // --anchor's
};
// Per configuration traced by the run (trace-<benchmark>.json in `run_dir`, run --trace): per
// action kind the measured and predicted seconds over every worker (waiting left out), and the
// five actions furthest off, named; markdown, and one JSON entry each pushed into `doc`. "" when
// no configuration has a trace.
std::string per_action_report(const std::string& run_dir, const std::vector<ActionCheck>& checks, nlohmann::json* doc);

int cmd_project(const std::vector<std::string>& args);
int cmd_calibrate(const std::vector<std::string>& args);

}  // namespace pb
