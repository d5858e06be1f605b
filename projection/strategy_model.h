// The projection's one strategy-specific part, behind one narrow interface: which strategies it
// models and by what names, the configurations `project` considers of each, what a configuration
// needs timed, and each configuration's step as per-worker programs for the simulator. Everything
// else (profile, machine, links, simulator, memory, tables) is strategy-blind, so a simulator of
// the plans strategies/ generates can replace this interface's implementation
// (projection/strategy_model.cpp, projection/program_*.cpp) alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/net.h"
#include "projection/predict.h"
#include "projection/simulator.h"

namespace pb::projection {

// ---- names -----------------------------------------------------------------------------------
// The hybrids the model knows (names: strategies/strategy.h): hybrid_shape gives {D, P} of a
// dp<D>xpp<P> in the GPipe schedule, as modelled; dptp_shape {D, T} of a dp<D>xtp<T>; nothing
// for any other name.
std::optional<std::pair<int, int>> hybrid_shape(const std::string& strategy);
std::optional<std::pair<int, int>> dptp_shape(const std::string& strategy);
// The words `project --strategies` takes (all of them: `all`): every modelled strategy, and the
// families dpxpp / dpxtp (every dp<D>xpp<P> / dp<D>xtp<T> whose D x T is the device count).
const std::vector<std::string>& modelled_strategies();
// A word of modelled_strategies() or one hybrid's own name (dp2xpp2).
bool is_modelled(const std::string& strategy);

// ---- configurations --------------------------------------------------------------------------
// The options `project` sweeps: pipeline micro-batch counts and schedules, ddp bucket sizes.
struct Sweep {
  std::vector<int64_t> micro_batches;
  std::vector<std::string> schedules;
  std::vector<double> bucket_bytes;
  bool recompute = false;  // also the pipeline variants that recompute stage activations
};
// Every configuration of --strategies word `strategy` at n devices and a global batch.
std::vector<Config> configurations(const std::string& strategy, int n, int64_t global, const Sweep& sweep);
// Why `strategy` has no configuration at any of the device counts (`micro`: --micro-batches as given).
std::string no_configuration(const std::string& strategy, const std::vector<int64_t>& devices, const std::string& micro);

// ---- what a configuration needs timed (project --validate) -----------------------------------
// The batch sizes its workers compute at, for the profile to hold (every split a step of it makes:
// chunks over the devices, micro-batches, replicas and their micro-batches, the whole batch).
std::vector<int64_t> batch_pieces(const Config& c);
// How its layers must be timed to be priced as it runs them: in the profile's one Sequential, as
// separate layers (tp, dp x tp: `slices` channel slices, with tp's ReLUs and layout copies; fsdp,
// zero2: whole), or as separate stages (mp, pipeline, dp x pp: `stages` of them).
struct Timing {
  enum Kind { Whole, Layers, Stages } kind = Whole;
  int slices = 1;
  bool tp = false;
  int stages = 1;
};
Timing timing_of(const Config& c);
// Timing::Stages: each stage's layers [begin, end) of `plan` as the run splits them (by FLOPs).
std::vector<std::pair<int, int>> stage_ranges(const NetPlan& plan, const Config& c);

// ---- the step --------------------------------------------------------------------------------
// A configuration's step as the simulator plays it: one actor per worker (and per communication
// stream beside it), or why it cannot run (`refused`, the other fields empty).
struct StepProgram {
  std::string refused;
  Config priced;  // the configuration as priced: a named pipeline variant as pipeline + its schedule
  std::vector<Actor> actors;
  int workers = 0;
  std::vector<std::pair<int, int>> stages;  // mp, pipeline, dp x pp: each stage's layers
  double bookkeeping_s = 0;                 // per step, on every worker at once: fsdp / zero2's units
  double comm_bytes = 0;                    // per step, sent by all workers together
};
// `threads`: CPU threads per worker (the cores' share the simulator gives each busy worker).
// Throws UsageError for a collective the machine has no cost for.
StepProgram step_program(const Profile& p, const Machine& m, const Config& c, const Options& o, int threads);

}  // namespace pb::projection
