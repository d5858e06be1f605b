// parbench compare: a CI regression gate over GB JSON files. A thin command over
// reports/compare.h; exit 0 pass, 1 regression or lost benchmark, 2 bad input or unlike runs,
// 3 inconclusive (too little data for a verdict).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "bench/cli.h"
#include "engine/check.h"
#include "engine/fsutil.h"
#include "reports/compare.h"

namespace pb {

namespace {

namespace fs = std::filesystem;

// The Google Benchmark JSON files below a folder (reports::is_run_record) but `except` (a
// contender kept among the baseline's runs), by name.
std::vector<std::string> run_files(const std::string& dir, const std::string& except) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && reports::is_run_record(e.path()) &&
        (except.empty() || !fs::equivalent(e.path(), except, ec)))
      files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

// A contender: one Google Benchmark JSON file, or a run folder holding one (results.json).
std::string contender_file(const std::string& path) {
  if (!fs::is_directory(path)) return path;
  if (fs::is_regular_file(path + "/results.json")) return path + "/results.json";
  const std::vector<std::string> files = run_files(path, "");
  if (files.size() != 1)
    throw UsageError(fmt::format("{}: a contender folder must hold one run (results.json, or one .json file), found {} "
                                 ".json file(s); for folders of runs side by side use --paired", path, files.size()));
  return files.front();
}

// A baseline: one Google Benchmark JSON file, or a folder of past runs (never the contender).
std::vector<reports::RunFile> load_baselines(const std::string& path, const std::string& contender) {
  std::vector<reports::RunFile> out;
  if (!fs::is_directory(path)) {
    out.push_back(reports::load_run_json(path));
    return out;
  }
  const std::vector<std::string> files = run_files(path, contender);
  if (files.empty()) throw UsageError(fmt::format("{}: a baseline folder, but it holds no .json file besides the contender", path));
  for (const std::string& f : files) out.push_back(reports::load_run_json(f));
  return out;
}

// What tells one run from another: its start and host, and every measured time. Two files with
// the same are one run given twice: counted twice it would narrow the baseline's spread.
std::string run_fingerprint(const reports::RunFile& r) {
  std::string s = r.context_value("date") + "|" + r.context_value("host_name");
  for (const reports::BenchRun& b : r.runs) s += fmt::format("|{}#{}:{:.17g}", b.name, b.repetition_index, b.real_s);
  return s;
}

// A folder of past runs: the contender's run is left out, found by what it holds as by its path
// (a CI history it was copied into); no other run twice.
std::vector<reports::RunFile> distinct_runs(std::vector<reports::RunFile> base, const reports::RunFile& cont,
                                            const std::string& dir) {
  std::vector<reports::RunFile> out;
  std::map<std::string, std::string> seen;  // fingerprint -> file
  const std::string own = run_fingerprint(cont);
  for (reports::RunFile& r : base) {
    const std::string fp = run_fingerprint(r);
    if (!cont.runs.empty() && fp == own) continue;
    const auto [at, fresh] = seen.emplace(fp, r.source);
    if (!fresh && !r.runs.empty())
      throw UsageError(fmt::format("{} and {} hold the same run: each baseline run once", at->second, r.source));
    out.push_back(std::move(r));
  }
  if (out.empty()) throw UsageError(fmt::format("{}: a baseline folder, but it holds no run besides the contender's", dir));
  return out;
}

}  // namespace

int cmd_compare(const std::vector<std::string>& args) {
  Flags f("parbench compare",
          "Compares a contender run with a baseline (Google Benchmark JSON, any program's). The baseline is\n"
          "one run, or a folder of past runs (every .json below it but report.json, trace-*.json, plans/ and the\n"
          "contender) taken together as the baseline distribution; the contender, one run: a .json file or a run folder. Benchmarks are matched by identity (the name without Google Benchmark's\n"
          "/iterations:N/... suffixes). A repetition's time is its median iteration; per benchmark, the\n"
          "ratio of the repetitions' geometric means with a t interval (Welch's; with a folder of past runs,\n"
          "a prediction interval from their spread); the suite: the geometric mean of those ratios and its\n"
          "interval, printed first. Verdicts: slower (the interval lies above 1 and the ratio is at least\n"
          "1 + threshold), faster, same, inconclusive (too little data: fewer than 3 repetitions a side\n"
          "(use --benchmark_repetitions=5), fewer than 3 past runs, or an interval that reaches beyond\n"
          "1 + threshold without showing a slowdown), missing, new, failed. Prints markdown.\n"
          "Exit status: 0 no regression; 1 the suite is slower, or a benchmark disappeared or failed where\n"
          "the baseline ran (with --gate each: or any benchmark is slower); 2 bad input, or runs that\n"
          "differ in the environment or in what they measure (GPU, CPU, library versions, workload and its\n"
          "parameters, precision, scaling, micro-batches, bucket size, balance, threads, ...) without\n"
          "--force; 3 inconclusive: the suite (with --gate each: or any benchmark) has too little data for\n"
          "a verdict. Rules: docs/reports.md.\n"
          "With --paired, both are folders of runs made side by side, compared pair by pair (see parbench ab).\n"
          "usage: parbench compare BASELINE.json|BASELINE_DIR CONTENDER.json|CONTENDER_DIR [flags]\n"
          "       parbench compare --paired BASELINE_DIR CONTENDER_DIR [flags]",
          {
              {"threshold", "FRACTION", "smallest time change that counts (0.05 = 5%)", "0.05", FlagType::Number},
              {"alpha", "P", "significance level of the tests (the suite's interval is 1 - alpha)", "0.05", FlagType::Number},
              {"gate", "WHAT", "suite: fail on the suite verdict; each: also on any single benchmark's", "suite"},
              {"time", "WHICH", "real: wall time per iteration; cpu: the process's CPU time per iteration", "real"},
              {"force", "", "compare even when the runs are not comparable (the summary lists the differences)", ""},
              {"out", "FILE.md", "also write the markdown summary to this file", ""},
              {"paired", "", "BASELINE and CONTENDER are folders of runs made side by side (parbench ab's OUT/baseline\n"
                             "and OUT/contender): each .json file or subfolder in one is a run, and the k-th runs of\n"
                             "the two, in name order, form a pair", ""},
          });
  if (!f.parse(args)) return 0;
  if (f.positional().size() != 2)
    throw UsageError(fmt::format("expected BASELINE CONTENDER.json, got {} argument(s) (see parbench compare --help)",
                                 f.positional().size()));
  reports::CompareOptions o;
  o.threshold = f.number("threshold");
  o.alpha = f.number("alpha");
  const std::string gate = f.str("gate");
  if (gate != "suite" && gate != "each") throw UsageError(fmt::format("--gate expects suite or each, got '{}'", gate));
  o.gate_each = gate == "each";
  const std::string time = f.str("time");
  if (time != "real" && time != "cpu") throw UsageError(fmt::format("--time expects real or cpu, got '{}'", time));
  if (f.on("paired")) {
    reports::PairedSide sides[2] = {reports::load_paired_runs(f.positional()[0]),
                                    reports::load_paired_runs(f.positional()[1])};
    if (time == "cpu")
      for (auto& side : sides)
        for (reports::RunFile& r : side.runs) r = reports::with_process_cpu_time(std::move(r));
    const reports::Comparison c =
        reports::compare_paired(sides[0].runs, sides[1].runs, o, f.on("force"),
                                sides[0].per_benchmark_processes && sides[1].per_benchmark_processes);
    const std::string md = reports::comparison_markdown(c, sides[0].runs.front().source, sides[1].runs.front().source);
    std::fputs(md.c_str(), stdout);
    if (f.has("out")) {
      make_dirs(std::filesystem::path(f.str("out")).parent_path().string());
      write_file_atomic(f.str("out"), md);
    }
    return c.exit_code();
  }
  const std::string cont_file = contender_file(f.positional()[1]);
  std::vector<reports::RunFile> base = load_baselines(f.positional()[0], cont_file);
  reports::RunFile cont = reports::load_run_json(cont_file);
  if (time == "cpu") {
    for (reports::RunFile& b : base) b = reports::with_process_cpu_time(std::move(b));
    cont = reports::with_process_cpu_time(std::move(cont));
  }
  if (std::filesystem::is_directory(f.positional()[0])) base = distinct_runs(std::move(base), cont, f.positional()[0]);
  const reports::Comparison c = reports::compare_runs(base, cont, o, f.on("force"));
  const std::string md = reports::comparison_markdown(c, base.front().source, cont.source);
  std::fputs(md.c_str(), stdout);
  if (f.has("out")) {
    make_dirs(std::filesystem::path(f.str("out")).parent_path().string());
    write_file_atomic(f.str("out"), md);
  }
  return c.exit_code();
}

}  // namespace pb
