// Command-line flags for the parbench subcommands: declared once with their help, parsed by
// CLI11 strictly (unknown or malformed flags name themselves), printed by --help.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "strategies/strategy.h"
#include "workloads/workload.h"

namespace pb {

// What a flag's value must be, checked when the flags are parsed. Auto: a switch when `value`
// is empty; an integer (a list of integers when the metavar says LIST) when the name has an
// accepted range (int_flag_range); text otherwise.
enum class FlagType { Auto, Text, Switch, Integer, IntList, Number };

struct Flag {
  std::string name;   // without the leading --
  std::string value;  // metavar for --help; empty for a boolean switch
  std::string help;
  std::string fallback;  // default shown in --help; empty = none
  FlagType type = FlagType::Auto;
};

// Old spellings kept working for users' scripts: each prints one warning naming the new flag.
// One table for every command; an alias applies where a command declares the new name.
struct FlagAlias {
  const char* old_name;
  const char* name;
};
const std::vector<FlagAlias>& deprecated_flag_aliases();

class Flags {
 public:
  Flags(std::string command, std::string summary, std::vector<Flag> flags);
  // Parses --name value and --name=value, and --config FILE (TOML or INI: `name = value` lines,
  // the flag names without --; flags on the command line win over the file). Returns false when
  // --help was asked (help printed). Arguments not starting with - are positional; unknown flags
  // (or keys in the file) throw UsageError unless passthrough_prefix matches them (they are kept
  // in passthrough()). Values are checked against their FlagType here.
  bool parse(const std::vector<std::string>& args, const std::string& passthrough_prefix = "");
  std::string help() const;

  bool has(const std::string& name) const;
  std::string str(const std::string& name) const;  // value or the declared default
  int64_t integer(const std::string& name) const;  // UsageError naming the flag when not an integer
  double number(const std::string& name) const;
  bool on(const std::string& name) const { return has(name); }
  std::vector<int64_t> int_list(const std::string& name) const;  // "1,2,4"
  const std::vector<std::string>& positional() const { return positional_; }
  const std::vector<std::string>& passthrough() const { return passthrough_; }
  // The --config file given, or empty.
  const std::string& config_file() const { return config_file_; }

 private:
  const Flag& find(const std::string& name) const;
  std::string command_, summary_;
  std::vector<Flag> flags_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_, passthrough_;
  std::string config_file_;
};

// A flag's value read as its type; UsageError naming the flag otherwise (and for integers
// outside the flag's range).
int64_t parse_int_flag(const std::string& flag, const std::string& s);
std::vector<int64_t> parse_int_list_flag(const std::string& flag, const std::string& s);
double parse_number_flag(const std::string& flag, const std::string& s);

// Every integer flag's accepted range, by name, one table for every command (flags parse as 64
// bits and are mostly used as int: nothing may wrap). Flags::integer and int_list refuse a value
// outside it, naming the flag and the range; below lo only where check_lo (elsewhere the
// command's own check says what the least value means). A name not in the table: at most INT_MAX.
struct IntRange {
  int64_t lo = 0, hi = 0;
  bool check_lo = true;
};
IntRange int_flag_range(const std::string& flag);
bool has_int_flag_range(const std::string& flag);
// UsageError "flag --FLAG expects an integer from LO to HI, got 'GIVEN'" when v is outside.
void check_int_flag(const std::string& flag, int64_t v, const std::string& given);
[[noreturn]] void int_flag_range_error(const std::string& flag, const std::string& given);

// The registry's strategy names, for --help: "regular, dp, ... (dpxpp and dpxtp by a member ...)".
std::string strategy_names_help();
// Flags shared by every command that trains: workload, strategy, devices, precision.
std::vector<Flag> training_flags();
// great_net's --image and --width, one default for every command: the seed's 512 and 1 on GPUs,
// 96 and 0.5 on CPU (a great_net a CPU trains in seconds a step). Other workloads have a fixed
// shape: either flag given with them is refused, naming it.
WorkloadOptions workload_options(const Flags& f, DeviceKind kind);
// --device-kind auto|cpu|cuda -> a kind; auto means cuda when a GPU is present.
DeviceKind device_kind(const std::string& s);
// Pipeline micro-batches, one rule for every command: --micro-batches when given (the strategy
// refuses more than the batch has samples), else min(kDefaultMicroBatches, global batch).
constexpr int kDefaultMicroBatches = 4;
int micro_batches(const Flags& f, int64_t global_batch);
// --schedule gpipe|1f1b -> a schedule (UsageError naming the flag otherwise).
Schedule pipeline_schedule(const std::string& s);
// The strategy a name means under --schedule / --recompute: a pipeline variant (pipeline,
// pipeline-1f1b, ...) with the flags applied, so the name carries them; other strategies are
// unchanged -- or, when `strict` (one --strategy), refused when either flag is given.
// A dp x pp hybrid name (dp<D>xpp<P>) takes the flags likewise. With `strict`, --dp/--pp name the
// hybrid to run (the default strategy, or dpxpp, becomes dp<D>xpp<P>).
std::string strategy_name(const Flags& f, const std::string& name, bool strict);
// --dp D / --pp P / --tp T of the dp x pp and dp x tp hybrids: the given ones (0: not given), each
// at least 1; --pp and --tp exclude each other.
struct HybridShape {
  int dp = 0, pp = 0, tp = 0;
  bool given() const { return dp > 0 || pp > 0 || tp > 0; }
};
HybridShape hybrid_shape(const Flags& f);
// --plan FILE (run, project): the plan file read and validated (plan/check.h); null without the
// flag. UsageError naming the file and each wrong worker and action; or naming one of `others`
// given beside it (the plan sets what they would).
std::shared_ptr<const Plan> user_plan(const Flags& f, const std::vector<std::string>& others);
// run --plan FILE: user_plan, its batch against --batch, and check_plan_file (strategies/plan_gen.h)
// on `net` before anything runs; null without the flag.
std::shared_ptr<const Plan> run_plan_file(const Flags& f, const NetSpec& spec, const NetPlan& net);
// The "shapes" field of a plan's identity: FNV-1a (64 bits, 16 hex digits) over every layer's
// type, per-sample input and output shape and parameter count, so that a plan is bound to its
// net's structure (a stride or a layer moved), not only to its size. `run` computes it from the
// net, `project` from the profile's layers.
struct LayerSignature {
  std::string type;
  Shape in, out;
  int64_t params = 0;
};
std::string shapes_digest(const std::vector<LayerSignature>& layers);
// A plan's identity (Plan::identity) for the net `spec` / `net` under f's --precision,
// --reduce-dtype and --param-dtype: what `parbench plan` writes and `run --plan` checks.
std::vector<std::pair<std::string, std::string>> plan_identity(const Flags& f, const NetSpec& spec, const NetPlan& net);
// UsageError "<source>: made for <field> X, this run has Y ..." for the first field of `want`
// the plan's identity differs in; a plan without an identity is refused, asking to make it again.
void check_plan_identity(const Plan& p, const std::vector<std::pair<std::string, std::string>>& want,
                         const std::string& source);
// The options a run of that plan takes: strategy_options at its workers and batch, the plan, its
// micro-batches.
StrategyOptions plan_file_options(const Flags& f, const std::shared_ptr<const Plan>& user);
// Workers of one --strategy run: --devices; by default the MPI job's processes, or D * P (D * T)
// for --dp D --pp P (--tp T) or --strategy dp<D>xpp<P> (dp<D>xtp<T>).
int worker_count(const Flags& f);
// --conv-workspace-mib as bytes; none when not given (no cap). UsageError naming the flag.
std::optional<std::size_t> conv_workspace_cap(const Flags& f);
// --layout: true for nhwc; UsageError naming the flag for another value or for nhwc on a CPU run.
bool conv_layout_nhwc(const Flags& f, DeviceKind kind);
// Also sets the process-wide --comm-timeout.
StrategyOptions strategy_options(const Flags& f, int devices, int64_t global_batch);
// Google Benchmark's flags as passed through by `run`: values GB would misread (repetitions 0 or
// -1, an unknown format, an output file in a missing folder) throw UsageError naming the flag.
void check_benchmark_flags(const std::vector<std::string>& args);
// The workload and the flags that size it, for "needs X GiB" messages.
std::string workload_sizing(const Flags& f, const NetSpec& net);

int cmd_replay(const std::vector<std::string>& args);
int cmd_train(const std::vector<std::string>& args);
int cmd_devices(const std::vector<std::string>& args);
int cmd_net(const std::vector<std::string>& args);
int cmd_run(const std::vector<std::string>& args);
int cmd_report(const std::vector<std::string>& args);
int cmd_compare(const std::vector<std::string>& args);
int cmd_profile(const std::vector<std::string>& args);
int cmd_ab(const std::vector<std::string>& args);

// Runs scripts/chart.py (with /usr/bin/python3, or $PARBENCH_PYTHON) on a report JSON; a warning,
// not an error, when it cannot (matplotlib missing). Returns whether the PNG was written; a PNG
// made but not writable to `png` (a full disk) throws pb::Error.
bool render_chart(const std::string& report_json, const std::string& png);
// Runs scripts/timeline.py ($PARBENCH_TIMELINE_SCRIPT) on a run folder's trace-*.json files: a
// Gantt chart of one step per worker, per strategy at its largest device count. Like render_chart.
bool render_timeline(const std::string& run_dir, const std::string& png);

}  // namespace pb
