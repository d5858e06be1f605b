// What `parbench project` sweeps of each strategy, how it names a swept configuration, and which
// per-unit cost it bears: declared on the strategy's registry line (registry.cpp), read by the
// projection, which names no strategy.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "strategies/strategy.h"

namespace pb {

// How project treats a registered strategy (the `ProjectionRule` of its registry line).
struct ProjectionRule {
  // The options project sweeps: none (one configuration), ddp's bucket sizes, micro-batch counts
  // (a variant whose name fixes its schedule), or micro-batch counts x schedules (x recompute);
  // a family's members sweep micro-batch counts only, their schedule and recompute in their names.
  enum class Axes { None, Buckets, MicroBatches, Schedules } axes = Axes::None;
  bool in_all = true;      // a word of `project --strategies all`; false: projected by its own name only
  std::string variant_of;  // a variant's rows carry its base strategy with `schedule` and `recompute`
  Schedule schedule = Schedule::GPipe;  // the schedule and recompute the name stands for
  bool recompute = false;
  // The machine's unit_overhead_s key of the bookkeeping it pays per unit it frees ("": none).
  std::string unit_class;
  // A table of fastest variants shows its rows among that strategy's ("": its own; mp: pipeline,
  // of which it is the one-micro-batch case).
  std::string shown_with;
};

// A family of hybrids (dp<D>xpp<P>, ...): its member of shape D x S, and the reverse.
struct Family {
  std::string (*member)(int d, int s, Schedule schedule, bool recompute) = nullptr;
  bool (*parse)(const std::string& name, int* d, int* s, Schedule* schedule, bool* recompute) = nullptr;
  explicit operator bool() const { return member != nullptr; }
};

// A registry line's projection facts: `name` a strategy or a family.
struct ProjectionFacts {
  std::string name;
  bool single_device = false;
  ProjectionRule projected;
  Family family;
};
// Every registered strategy, in display order (registry.cpp).
const std::vector<ProjectionFacts>& projection_facts();
// The line of `name`: a family's member resolves to its family. nullptr for an unknown name.
const ProjectionFacts* projection_facts_of(const std::string& name);

// Schedules by the names the command line and projection rows give them (gpipe, 1f1b).
std::string schedule_name(Schedule s);
std::vector<std::string> schedule_names();
bool parse_schedule(const std::string& name, Schedule* s);

// One configuration project sweeps: the strategy as its rows name it, and its options.
struct Setting {
  std::string strategy;
  int micro_batches = 1;  // per replica
  Schedule schedule = Schedule::GPipe;
  bool recompute = false;
  double bucket_bytes = 25.0 * (1 << 20);
};
// project's --micro-batches, --schedules, --bucket-mb and --recompute.
struct SweepAxes {
  std::vector<int64_t> micro_batches;
  std::vector<Schedule> schedules;
  std::vector<double> bucket_bytes;
  bool recompute = false;
};

// The words `project --strategies all` stands for, in display order.
std::vector<std::string> swept_strategies();
// Whether `word` is a registered strategy, family or family member.
bool is_swept(const std::string& word);
// A family's name (dpxpp, ...): it names no strategy to run.
bool is_family(const std::string& word);
// Every configuration of --strategies word `word` at `devices` and a global batch: a family all
// its members at the device count (D x S, both at least 2), a member those of its shape.
std::vector<Setting> sweep_settings(const std::string& word, int devices, int64_t global, const SweepAxes& axes);
// Why `word` has no configuration at any of `devices` (`micro`: the --micro-batches counts).
std::string no_setting(const std::string& word, const std::vector<int64_t>& devices, const std::vector<int64_t>& micro);
// A registered variant as its rows name it (pipeline-1f1b: pipeline with the 1f1b schedule); the
// setting unchanged for anything else.
Setting as_swept(const Setting& s);
// The name run gives a setting (pipeline with the 1f1b schedule: pipeline-1f1b; a member's name
// with the setting's schedule and recompute added).
std::string run_name(const Setting& s);
// A row's label (e.g. "pipeline (M=8, 1f1b)", "ddp (25 MiB buckets)") and its benchmark-name
// options (micro_batches:8, schedule:1f1b, recompute:1, bucket_mb:25).
std::string setting_label(const Setting& s);
std::vector<std::string> setting_options(const Setting& s);
// The unit_overhead_s classes the registry declares (fsdp, zero2), and the one `run_name` pays.
std::vector<std::string> unit_classes();
std::string unit_class_of(const std::string& run_name);
// The strategy a table of fastest variants shows `strategy`'s rows under (ProjectionRule::shown_with).
std::string shown_with(const std::string& strategy);
// Whether `strategy` is the one-device baseline speedups are measured against.
bool is_baseline(const std::string& strategy);

}  // namespace pb
