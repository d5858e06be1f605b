// What the projection knows of strategies, behind one narrow interface: their names, the
// configurations `project` sweeps of each, what a configuration needs timed, and its step -- the
// plan its generator makes (strategies/plan_gen.h) priced by projection/plan_price.h. No step is
// written here: the simulator plays the plan the run runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/net.h"
#include "projection/machine.h"
#include "projection/options.h"
#include "projection/simulator.h"
#include "scenarios/config.h"

namespace pb::projection {

// ---- names -----------------------------------------------------------------------------------
// All of it asked of the registry (strategies/sweep.h): each strategy's line says what is swept.
// The words `project --strategies all` stands for: every registered strategy and family the
// registry sweeps by default (a family: each member whose D x S is the device count).
const std::vector<std::string>& modelled_strategies();
// A registered strategy, family or member (dp2xpp2), as strategies/sweep.h's is_swept.
bool is_modelled(const std::string& strategy);

// ---- configurations --------------------------------------------------------------------------
// The options `project` sweeps (--micro-batches, --schedules, --bucket-mb, --recompute); which a
// strategy takes its registry line says.
struct Sweep {
  std::vector<int64_t> micro_batches;
  std::vector<std::string> schedules;
  std::vector<double> bucket_bytes;
  bool recompute = false;  // also the variants that recompute stage activations
};
// Every configuration of --strategies word `strategy` at n devices and a global batch.
std::vector<Config> configurations(const std::string& strategy, int n, int64_t global, const Sweep& sweep);
// Why `strategy` has no configuration at any of the device counts (`micro`: the --micro-batches counts).
std::string no_configuration(const std::string& strategy, const std::vector<int64_t>& devices,
                             const std::vector<int64_t>& micro);

// ---- what a configuration needs timed (project --validate) -----------------------------------
// The batch sizes its workers compute at, for the profile to hold: the samples of every compute
// action of its plan on `net`, and the whole batch.
std::vector<int64_t> batch_pieces(const NetPlan& net, const Config& c);
// How its layers must be timed to be priced as it runs them, read off its plan on `net`: in the
// profile's one Sequential, as separate layers (a worker computing layer by layer: fsdp's and
// zero2's units, whole; tp's slices, `slices` ways with its ReLUs and layout copies), or as
// separate stages (workers of one replica holding different layers: `stages` of them).
struct Timing {
  enum Kind { Whole, Layers, Stages } kind = Whole;
  int slices = 1;
  bool tp = false;
  int stages = 1;
};
Timing timing_of(const NetPlan& net, const Config& c);
// Timing::Stages: each stage's layers [begin, end) of `net` as its plan splits them (its --balance;
// `time` from `p`'s layer times, by FLOPs without one). UsageError where the run refuses it.
std::vector<std::pair<int, int>> stage_ranges(const NetPlan& net, const Config& c, const Profile* p);

// ---- the step --------------------------------------------------------------------------------
// A configuration's step as the simulator plays it: one actor per worker (and per communication
// stream beside it), or why it cannot run (`refused`, the other fields empty).
struct StepProgram {
  std::string refused;
  Config priced;  // the configuration as priced: a named pipeline variant as pipeline + its schedule
  std::string name;      // as run names it (pipeline-1f1b, dp2xpp2-recompute, ...; a plan file's strategy)
  int micro_batches = 1; // as its plan runs them (dp x pp: capped at a replica's samples)
  Plan plan;             // the step priced
  std::vector<Actor> actors;
  int workers = 0;
  double bookkeeping_s = 0;                 // per step, on every worker at once: fsdp / zero2's units
  double comm_bytes = 0;                    // per step, sent by all workers together
};
// `threads`: CPU threads per worker (the cores' share the simulator gives each busy worker).
// Throws UsageError for a collective the machine has no cost for.
StepProgram step_program(const Profile& p, const Machine& m, const Config& c, const Options& o, int threads);

}  // namespace pb::projection
