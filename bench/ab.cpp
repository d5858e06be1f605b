// parbench ab: the A/B regression gate. Runs a baseline build and a contender build of parbench
// alternately (pair k: AB for even k, BA for odd k), so whatever drifts between runs (machine
// load, clocks, memory placement) hits both sides alike, then compares the pairs
// (reports::compare_paired). Exit 0 pass, 1 regression or a run that failed, 2 bad input,
// 3 inconclusive.
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "bench/cli.h"
#include "bench/run.h"
#include "engine/check.h"
#include "engine/fsutil.h"
#include "reports/compare.h"

extern char** environ;

namespace pb {

namespace {

namespace fs = std::filesystem;

// A binary given with a path must exist and be executable; a bare name is looked up in PATH
// when it is started.
void check_binary(const std::string& role, const std::string& binary) {
  if (binary.find('/') == std::string::npos) return;
  if (!fs::exists(binary)) throw UsageError(fmt::format("the {} binary '{}' does not exist", role, binary));
  if (fs::is_directory(binary) || ::access(binary.c_str(), X_OK) != 0)
    throw UsageError(fmt::format("the {} binary '{}' is not an executable file", role, binary));
}

// The last non-empty line of a log, for error messages.
std::string last_line(const std::string& path) {
  std::string text;
  try {
    text = read_file(path);
  } catch (const std::exception&) {
    return "";
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  const std::size_t nl = text.rfind('\n');
  return nl == std::string::npos ? text : text.substr(nl + 1);
}

// `binary ARGS`, stderr (and stdout, unless out_log) into log, stdin from /dev/null. Returns the
// wait status; throws UsageError when the binary cannot be started.
int run_side(const std::string& role, const std::string& binary, std::vector<std::string> args, const std::string& log,
             const std::string& out_log = "") {
  args.insert(args.begin(), binary);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  struct Destroy {
    posix_spawn_file_actions_t* a;
    ~Destroy() { posix_spawn_file_actions_destroy(a); }
  } destroy{&actions};
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (out_log.empty()) posix_spawn_file_actions_adddup2(&actions, 2, 1);
  else posix_spawn_file_actions_addopen(&actions, 1, out_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::fflush(stdout);
  std::fflush(stderr);
  // The runs' charts are not needed here, and a Python start per run would add load to the
  // measurement: an empty PARBENCH_CHART_SCRIPT makes `run` skip the chart (a warning in the log).
  std::vector<std::string> env_strings = {"PARBENCH_CHART_SCRIPT="};
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "PARBENCH_CHART_SCRIPT=", 22) != 0) env_strings.push_back(*e);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  if (const int e = posix_spawnp(&pid, binary.c_str(), &actions, nullptr, argv.data(), envp.data()); e != 0)
    throw UsageError(fmt::format("cannot run the {} binary '{}': {}", role, binary, std::strerror(e)));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

// A benchmark name as a literal in Google Benchmark's filter (a POSIX extended regex).
std::string regex_escape(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (std::strchr(".[]{}()*+?^$|\\", c)) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

int cmd_ab(const std::vector<std::string>& args) {
  // Everything after "--" is for the builds' `run`.
  std::vector<std::string> own, run_args;
  const auto dash = std::find(args.begin(), args.end(), "--");
  own.assign(args.begin(), dash);
  if (dash != args.end()) run_args.assign(dash + 1, args.end());
  Flags f("parbench ab",
          "The A/B regression gate: runs two parbench builds alternately in one job, so drift between\n"
          "runs (load, clocks) hits both sides alike: for each of --pairs pairs and each benchmark (or\n"
          "whole run, --interleave run), baseline then contender or the other way round, alternating,\n"
          "each as `BINARY run RUN_FLAGS [--benchmark_filter=^NAME] --out OUT/<side>/<pair>[/<benchmark>]`.\n"
          "Then compares the pairs: per benchmark and pair the ratio of median iteration times; the\n"
          "suite's geometric mean ratio with a t interval (Welch's over the benchmarks when each ran in\n"
          "processes of its own, else over the pairs). On a CPU machine shared with other jobs, use\n"
          "--time cpu (wall time there swings by far more than 5%). Exit\n"
          "status: 0 no regression; 1 the suite is slower by the threshold (the interval lies above 1 and\n"
          "the ratio is at least 1 + threshold), a benchmark disappeared or failed (with --gate each: or\n"
          "any benchmark is slower), or a run crashed; 2 bad input: a binary that cannot run or is not\n"
          "parbench, bad run flags, or builds whose runs differ in what they measure (without --force);\n"
          "3 inconclusive: the interval reaches beyond 1 + threshold without showing a slowdown (more\n"
          "pairs decide). Rules: docs/reports.md.\n"
          "usage: parbench ab BASELINE_BINARY CONTENDER_BINARY [flags] [-- RUN_FLAGS]",
          {
              {"pairs", "N", "runs of each build (repetitions a side), alternating", "5"},
              {"out", "DIR", "folder for the runs, their logs and compare.md (default: runs/<UTC timestamp>-ab)", ""},
              {"threshold", "FRACTION", "smallest time change that counts (0.05 = 5%)", "0.05", FlagType::Number},
              {"alpha", "P", "significance level (the intervals are at 1 - alpha)", "0.05", FlagType::Number},
              {"gate", "WHAT", "suite: fail on the suite verdict; each: also on any single benchmark's", "suite"},
              {"time", "WHICH", "real: wall time per iteration; cpu: the process's CPU time per iteration", "real"},
              {"force", "", "compare even when the runs are not comparable (the summary lists the differences)", ""},
              {"interleave", "UNIT", "what alternates: run (each run measures every benchmark) or benchmark (each\n"
                                     "benchmark in a process of its own, pair by pair)", "benchmark"},
          });
  if (!f.parse(own)) return 0;
  if (f.positional().size() != 2)
    throw UsageError(fmt::format("expected BASELINE_BINARY CONTENDER_BINARY, got {} argument(s) (see parbench ab --help)",
                                 f.positional().size()));
  const int64_t pairs = f.integer("pairs");
  if (pairs < 2 || pairs > 1000) throw UsageError(fmt::format("--pairs expects 2 to 1000, got {}", pairs));
  reports::CompareOptions o;
  o.threshold = f.number("threshold");
  o.alpha = f.number("alpha");
  if (!(o.threshold >= 0)) throw UsageError(fmt::format("--threshold must be >= 0, got {}", o.threshold));
  if (!(o.alpha > 0 && o.alpha < 1)) throw UsageError(fmt::format("--alpha must be in (0, 1), got {}", o.alpha));
  const std::string gate = f.str("gate");
  if (gate != "suite" && gate != "each") throw UsageError(fmt::format("--gate expects suite or each, got '{}'", gate));
  o.gate_each = gate == "each";
  const std::string interleave = f.str("interleave");
  if (interleave != "run" && interleave != "benchmark")
    throw UsageError(fmt::format("--interleave expects run or benchmark, got '{}'", interleave));
  const std::string time = f.str("time");
  if (time != "real" && time != "cpu") throw UsageError(fmt::format("--time expects real or cpu, got '{}'", time));
  for (const std::string& a : run_args)
    if (a == "--out" || a.rfind("--out=", 0) == 0 || a.rfind("--benchmark_out", 0) == 0)
      throw UsageError(fmt::format("run flag '{}': parbench ab chooses where each run writes (use --out DIR before --)", a));
  const std::string binaries[2] = {f.positional()[0], f.positional()[1]};
  const char* roles[2] = {"baseline", "contender"};
  for (int s = 0; s < 2; ++s) check_binary(roles[s], binaries[s]);
  const std::string out = f.has("out") ? f.str("out") : "runs/" + utc_stamp() + "-ab";
  if (fs::exists(out) && (!fs::is_directory(out) || !fs::is_empty(out)))
    throw UsageError(fmt::format("--out {}: exists and is not an empty folder (each A/B job needs a fresh one)", out));
  for (const char* role : roles) make_dirs((fs::path(out) / role).string());

  // The unit that alternates: whole runs, or each benchmark in a process of its own (listed by
  // the builds themselves), so that a pair's two halves are seconds apart and each benchmark
  // draws its own process (placement, clocks) instead of sharing one per run.
  std::vector<std::string> benchmarks[2];
  if (interleave == "benchmark")
    for (int s = 0; s < 2; ++s) {
      const std::string list = (fs::path(out) / roles[s]).string() + "-benchmarks.txt";
      std::vector<std::string> a = {"run"};
      a.insert(a.end(), run_args.begin(), run_args.end());
      a.push_back("--benchmark_list_tests=true");
      const int status = run_side(roles[s], binaries[s], a, list + ".log", list);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        throw UsageError(fmt::format("the {} binary '{}' could not list its benchmarks (`run ... "
                                     "--benchmark_list_tests=true`): {} (log: {}.log)",
                                     roles[s], binaries[s], last_line(list + ".log"), list));
      std::string text = read_file(list);
      for (std::size_t at = 0; at < text.size();) {
        const std::size_t nl = std::min(text.find('\n', at), text.size());
        const std::string line = text.substr(at, nl - at);
        at = nl + 1;
        if (!line.empty()) benchmarks[s].push_back(reports::benchmark_identity(line));
      }
      if (benchmarks[s].empty())
        throw UsageError(fmt::format("the {} binary '{}' listed no benchmark for these run flags (see {}): is it a "
                                     "parbench binary?", roles[s], binaries[s], list));
    }
  // Units: one "" (the whole run), or each benchmark either build has, baseline's first.
  std::vector<std::string> units = {""};
  if (interleave == "benchmark") {
    units = benchmarks[0];
    for (const std::string& b : benchmarks[1])
      if (std::find(units.begin(), units.end(), b) == units.end()) units.push_back(b);
  }
  const int width = static_cast<int>(std::to_string(std::max<int64_t>(pairs, static_cast<int64_t>(units.size()))).size());
  for (int64_t k = 0; k < pairs; ++k) {
    for (std::size_t u = 0; u < units.size(); ++u) {
      for (int step = 0; step < 2; ++step) {
        // AB, BA, AB, ... along the sequence of pairs, so neither side is always first.
        const int s = ((k + static_cast<int64_t>(u)) % 2 == 0) ? step : 1 - step;
        const std::string& unit = units[u];
        if (!unit.empty() && std::find(benchmarks[s].begin(), benchmarks[s].end(), unit) == benchmarks[s].end())
          continue;  // this build lacks the benchmark: the comparison shows it missing or new
        fs::path dir = fs::path(out) / roles[s] / fmt::format("{:0{}d}", k + 1, width);
        if (!unit.empty()) dir /= fmt::format("{:0{}d}", u + 1, width);
        const std::string log = dir.string() + ".log";
        make_dirs(dir.parent_path().string());
        std::vector<std::string> a = {"run"};
        a.insert(a.end(), run_args.begin(), run_args.end());
        if (!unit.empty()) a.push_back("--benchmark_filter=^" + regex_escape(unit) + "(/|$)");
        a.push_back("--out");
        a.push_back(dir.string());
        fmt::print(stderr, "parbench ab: pair {}/{}: {} ({}){}\n", k + 1, pairs, roles[s], binaries[s],
                   unit.empty() ? "" : " " + unit);
        const int status = run_side(roles[s], binaries[s], a, log);
        const std::string results = (dir / "results.json").string();
        const std::string why = last_line(log);
        if (WIFSIGNALED(status))
          throw Error(fmt::format("the {} binary '{}' was killed by signal {} ({}) in pair {}; log: {}", roles[s],
                                  binaries[s], WTERMSIG(status), strsignal(WTERMSIG(status)), k + 1, log));
        const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
        if (rc == 2)
          throw UsageError(fmt::format("the {} binary '{}' refused its run (exit 2) in pair {}: {} (log: {})", roles[s],
                                       binaries[s], k + 1, why, log));
        if (!fs::exists(results)) {
          if (rc == 0)
            throw UsageError(fmt::format("the {} binary '{}' exited 0 but wrote no {}: is it a parbench binary? (log: {})",
                                         roles[s], binaries[s], results, log));
          throw Error(fmt::format("the {} binary '{}' failed (exit {}) in pair {} and wrote no results: {} (log: {})",
                                  roles[s], binaries[s], rc, k + 1, why, log));
        }
      }
    }
  }
  // Read back exactly as `parbench compare --paired OUT/baseline OUT/contender` would.
  std::vector<reports::RunFile> runs[2];
  bool per_benchmark = true;
  for (int s = 0; s < 2; ++s) {
    reports::PairedSide side = reports::load_paired_runs((fs::path(out) / roles[s]).string());
    per_benchmark = per_benchmark && side.per_benchmark_processes;
    runs[s] = std::move(side.runs);
    if (time == "cpu")
      for (reports::RunFile& r : runs[s]) r = reports::with_process_cpu_time(std::move(r));
  }
  const reports::Comparison c = reports::compare_paired(runs[0], runs[1], o, f.on("force"), per_benchmark);
  const std::string md = reports::comparison_markdown(c, runs[0].front().source, runs[1].front().source);
  std::fputs(md.c_str(), stdout);
  write_file_atomic((fs::path(out) / "compare.md").string(), md);
  return c.exit_code();
}

}  // namespace pb
