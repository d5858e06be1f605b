// The CI comparison: matching the benchmarks of two runs (or of two folders of paired runs),
// and the exit code. The statistics are in compare_stats.cpp, the markdown in
// compare_markdown.cpp; the rules are written out in docs/reports.md.
#include "reports/compare.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <tuple>

#include "engine/check.h"
#include "reports/schema.h"

namespace pb::reports {


const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::Faster: return "faster";
    case Verdict::Slower: return "slower";
    case Verdict::Same: return "same";
    case Verdict::Missing: return "missing";
    case Verdict::New: return "new";
    case Verdict::Failed: return "failed";
    case Verdict::Skipped: return "skipped";
    case Verdict::Inconclusive: return "inconclusive";
  }
  return "?";
}

std::vector<EnvDiff> environment_diffs(const RunFile& baseline, const RunFile& contender) {
  std::vector<EnvDiff> diffs;
  auto check = [&](const std::string& key) {
    const bool hb = baseline.context.count(key) > 0, hc = contender.context.count(key) > 0;
    if (!hb && !hc) return;
    // The dtypes are recorded only when not fp32, the virtual stages only when not 2; CUDA runs before
    // --layout were NCHW.
    const bool dtype = key == schema::context::reduce_dtype.name || key == schema::context::param_dtype.name;
    const std::string absent = dtype                                          ? "fp32"
                               : key == schema::context::virtual_stages.name ? "2"
                               : key == schema::context::conv_layout.name    ? "nchw"
                                                                              : "(not recorded)";
    const std::string vb = hb ? baseline.context.at(key) : absent;
    const std::string vc = hc ? contender.context.at(key) : absent;
    if (vb != vc) diffs.push_back({key, vb, vc, baseline.source});
  };
  const std::string kind = schema::context::device_kind.name;
  const bool cpu = baseline.context_value(kind) == "cpu" || contender.context_value(kind) == "cpu";
  const bool gpu = baseline.context_value(kind) == "cuda" || contender.context_value(kind) == "cuda";
  for (const schema::Key& k : schema::kContext)
    if (k.match == schema::Match::Always || (k.match == schema::Match::Cpu && cpu) || (k.match == schema::Match::Gpu && gpu))
      check(k.name);
  return diffs;
}

int Comparison::exit_code() const {
  if (suite.verdict == Verdict::Slower) return 1;
  bool inconclusive = suite.verdict == Verdict::Inconclusive;
  for (const CompareEntry& e : entries) {
    if (e.verdict == Verdict::Missing || e.verdict == Verdict::Failed || (options.gate_each && e.verdict == Verdict::Slower))
      return 1;
    inconclusive |= options.gate_each && e.verdict == Verdict::Inconclusive;
  }
  return inconclusive ? kExitInconclusive : 0;
}

namespace {

// The verdict for a benchmark both runs measured: the interval on its repetition times.
void decide(CompareEntry& e, const LogDiff& l, const CompareOptions& o) {
  e.n_baseline = l.n_baseline;
  e.n_contender = l.n_contender;
  if (l.base_log && l.cont_log) {
    e.baseline_s = std::exp(*l.base_log);
    e.contender_s = std::exp(*l.cont_log);
    e.ratio = std::exp(*l.cont_log - *l.base_log);
  }
  if (!l.t) {
    e.verdict = Verdict::Inconclusive;
    e.note = "too little data: " + l.too_little;
    return;
  }
  e.t = l.t;
  e.lo = std::exp(l.t->lo);
  e.hi = std::exp(l.t->hi);
  e.verdict = interval_verdict(*e.ratio, *e.lo, *e.hi, o.threshold);
  e.note = interval_note(e.verdict, *e.lo, *e.hi, o.threshold);
}

}  // namespace

Comparison compare_runs(const std::vector<RunFile>& baselines, const RunFile& contender, const CompareOptions& opts,
                        bool force) {
  if (!(opts.threshold >= 0)) throw UsageError(fmt::format("--threshold must be >= 0, got {}", opts.threshold));
  if (!(opts.alpha > 0 && opts.alpha < 1)) throw UsageError(fmt::format("--alpha must be in (0, 1), got {}", opts.alpha));
  PB_CHECK(!baselines.empty(), "compare_runs: no baseline");
  Comparison out;
  out.options = opts;
  for (const RunFile& b : baselines) {
    out.baseline_sources.push_back(b.source);
    for (EnvDiff& d : environment_diffs(b, contender)) out.env_diffs.push_back(std::move(d));
  }
  if (!out.env_diffs.empty() && !force) {
    std::string msg = fmt::format("the runs are not comparable: they differ in the environment or in what they measure "
                                  "(use --force to compare anyway):");
    for (const EnvDiff& d : out.env_diffs)
      msg += fmt::format("\n  {}: baseline '{}' ({}), contender '{}' ({})", d.key, d.baseline, d.baseline_source,
                         d.contender, contender.source);
    throw UsageError(msg);
  }
  std::vector<const RunFile*> base_files;
  for (const RunFile& b : baselines) base_files.push_back(&b);
  const std::vector<Benchmark> base = collect_benchmarks(base_files), cont = collect_benchmarks(contender);
  auto find = [](const std::vector<Benchmark>& v, const std::string& name) -> const Benchmark* {
    for (const Benchmark& b : v)
      if (b.name == name) return &b;
    return nullptr;
  };
  std::vector<std::vector<std::vector<double>>> suite_base;
  std::vector<std::vector<double>> suite_cont;
  for (const Benchmark& b : base) {
    CompareEntry e;
    e.name = b.name;
    e.n_baseline = b.repetitions();
    e.baseline_s = b.median_s();
    const Benchmark* c = find(cont, b.name);
    if (!c) {
      e.verdict = b.error ? Verdict::Skipped : Verdict::Missing;
      e.note = b.error ? "failed in the baseline, not in the contender" : "in the baseline, not in the contender";
    } else {
      e.n_contender = c->repetitions();
      e.contender_s = c->median_s();
      if (!e.baseline_s && !e.contender_s) {
        e.verdict = Verdict::Skipped;
        e.note = "failed in both runs: " + c->error_message;
      } else if (!e.contender_s) {
        e.verdict = Verdict::Failed;
        e.note = "failed in the contender: " + (c->error_message.empty() ? std::string("no measurement") : c->error_message);
      } else if (!e.baseline_s) {
        e.verdict = Verdict::New;
        e.note = "failed in the baseline: " + b.error_message;
      } else {
        // The table's samples are the suite's: repetition times, per baseline run.
        std::vector<int> files;
        const std::vector<double> reps = repetition_times(b, &files);
        std::vector<std::vector<double>> runs(base_files.size());
        for (std::size_t i = 0; i < reps.size(); ++i) runs[static_cast<std::size_t>(files[i])].push_back(reps[i]);
        std::vector<double> cont_reps = repetition_times(*c);
        decide(e, log_diff(runs, cont_reps, opts), opts);
        suite_base.push_back(std::move(runs));
        suite_cont.push_back(std::move(cont_reps));
      }
    }
    out.entries.push_back(std::move(e));
  }
  for (const Benchmark& c : cont) {
    if (find(base, c.name)) continue;
    CompareEntry e;
    e.name = c.name;
    e.verdict = Verdict::New;
    e.n_contender = c.repetitions();
    e.contender_s = c.median_s();
    e.note = c.error ? "new, and failed: " + c.error_message : "not in the baseline";
    out.entries.push_back(std::move(e));
  }
  out.suite = suite_verdict(suite_base, suite_cont, opts);
  return out;
}

Comparison compare_runs(const RunFile& baseline, const RunFile& contender, const CompareOptions& opts, bool force) {
  return compare_runs(std::vector<RunFile>{baseline}, contender, opts, force);
}

Comparison compare_paired(const std::vector<RunFile>& baselines, const std::vector<RunFile>& contenders,
                          const CompareOptions& opts, bool force, bool per_benchmark_processes) {
  if (!(opts.threshold >= 0)) throw UsageError(fmt::format("--threshold must be >= 0, got {}", opts.threshold));
  if (!(opts.alpha > 0 && opts.alpha < 1)) throw UsageError(fmt::format("--alpha must be in (0, 1), got {}", opts.alpha));
  if (baselines.size() != contenders.size())
    throw UsageError(fmt::format("paired comparison: {} baseline run(s) but {} contender run(s); run k of one side pairs "
                                 "with run k of the other",
                                 baselines.size(), contenders.size()));
  if (baselines.size() < 2)
    throw UsageError(fmt::format("paired comparison: {} pair(s) of runs; the interval needs at least 2 (5 is a good CI "
                                 "setting)",
                                 baselines.size()));
  Comparison out;
  out.options = opts;
  out.pairs = static_cast<int>(baselines.size());
  out.per_benchmark_processes = per_benchmark_processes;
  // Every run must measure the same thing: each pair, and every run against the first of its side.
  std::vector<std::pair<const RunFile*, const RunFile*>> checks;
  for (std::size_t k = 0; k < baselines.size(); ++k) {
    out.baseline_sources.push_back(baselines[k].source);
    checks.push_back({&baselines[k], &contenders[k]});
    if (k > 0) {
      checks.push_back({&baselines[0], &baselines[k]});
      checks.push_back({&contenders[0], &contenders[k]});
    }
  }
  std::string msg;
  for (const auto& [a, b] : checks)
    for (EnvDiff& d : environment_diffs(*a, *b)) {
      msg += fmt::format("\n  {}: '{}' ({}), '{}' ({})", d.key, d.baseline, a->source, d.contender, b->source);
      const bool seen = std::any_of(out.env_diffs.begin(), out.env_diffs.end(), [&](const EnvDiff& e) {
        return e.key == d.key && e.baseline == d.baseline && e.contender == d.contender;
      });
      if (!seen) out.env_diffs.push_back(std::move(d));
    }
  if (!out.env_diffs.empty() && !force)
    throw UsageError("the runs are not comparable: they differ in the environment or in what they measure (use --force "
                     "to compare anyway):" + msg);

  const std::size_t pairs = baselines.size();
  std::vector<std::vector<Benchmark>> base(pairs), cont(pairs);
  std::vector<std::string> names;  // in order of first appearance, baseline runs first
  for (std::size_t k = 0; k < pairs; ++k) {
    base[k] = collect_benchmarks(baselines[k]);
    cont[k] = collect_benchmarks(contenders[k]);
  }
  for (const auto* side : {&base, &cont})
    for (const auto& run : *side)
      for (const Benchmark& b : run)
        if (std::find(names.begin(), names.end(), b.name) == names.end()) names.push_back(b.name);
  auto find = [](const std::vector<Benchmark>& v, const std::string& name) -> const Benchmark* {
    for (const Benchmark& b : v)
      if (b.name == name) return &b;
    return nullptr;
  };
  std::vector<std::vector<double>> suite_logs;
  for (const std::string& name : names) {
    CompareEntry e;
    e.name = name;
    std::vector<double> logs, base_s, cont_s;
    bool base_any = false, cont_any = false;
    std::string lost, failed, base_error, cont_error;
    for (std::size_t k = 0; k < pairs; ++k) {
      const Benchmark *b = find(base[k], name), *c = find(cont[k], name);
      const std::optional<double> tb = b ? b->median_s() : std::nullopt, tc = c ? c->median_s() : std::nullopt;
      if (b && !tb && base_error.empty()) base_error = b->error_message;
      if (c && !tc && cont_error.empty()) cont_error = c->error_message;
      base_any |= tb.has_value();
      cont_any |= tc.has_value();
      if (tb && !c && lost.empty()) lost = contenders[k].source;
      if (tb && c && !tc && failed.empty()) failed = contenders[k].source;
      if (tb && tc) {
        logs.push_back(std::log(*tc / *tb));
        base_s.push_back(*tb);
        cont_s.push_back(*tc);
      }
    }
    if (!base_s.empty()) e.baseline_s = median(base_s), e.contender_s = median(cont_s);
    e.n_baseline = e.n_contender = static_cast<int>(logs.size());
    if (!failed.empty()) {
      e.verdict = Verdict::Failed;
      e.note = fmt::format("failed in the contender ({}): {}", failed, cont_error.empty() ? "no measurement" : cont_error);
    } else if (!lost.empty()) {
      e.verdict = Verdict::Missing;
      e.note = fmt::format("in the baseline, not in the contender ({})", lost);
    } else if (!base_any) {
      e.verdict = cont_any ? Verdict::New : Verdict::Skipped;
      e.note = !cont_any ? "failed in both: " + cont_error
               : base_error.empty() ? std::string("not in the baseline") : "failed in the baseline: " + base_error;
    } else if (logs.size() < 2) {
      e.ratio = std::exp(logs.empty() ? 0.0 : logs.front());
      e.verdict = Verdict::Inconclusive;
      e.note = fmt::format("too little data: measured on both sides in {} pair(s), an interval needs 2", logs.size());
    } else {
      e.t = paired_t(logs, opts.alpha);
      e.ratio = std::exp(e.t->mean);
      e.lo = std::exp(e.t->lo);
      e.hi = std::exp(e.t->hi);
      e.verdict = interval_verdict(*e.ratio, *e.lo, *e.hi, opts.threshold);
      e.note = interval_note(e.verdict, *e.lo, *e.hi, opts.threshold);
      if (logs.size() < pairs)
        e.note += fmt::format("{}{} of {} pairs (the baseline failed in the others)", e.note.empty() ? "" : "; ",
                              logs.size(), pairs);
      if (logs.size() == pairs) suite_logs.push_back(logs);
    }
    out.entries.push_back(std::move(e));
  }
  out.suite = paired_suite_verdict(suite_logs, opts, per_benchmark_processes);
  return out;
}

RunFile merge_run_pieces(const std::vector<RunFile>& pieces) {
  PB_CHECK(!pieces.empty(), "merge_run_pieces: no piece");
  RunFile out = pieces.front();
  for (std::size_t i = 1; i < pieces.size(); ++i) {
    const RunFile& p = pieces[i];
    const std::vector<EnvDiff> diffs = environment_diffs(pieces.front(), p);
    if (!diffs.empty())
      throw UsageError(fmt::format("{} and {}: parts of one run, but they differ in {} ('{}' vs '{}')", pieces.front().source,
                                   p.source, diffs.front().key, diffs.front().baseline, diffs.front().contender));
    std::vector<std::string> seen;
    for (const BenchRun& r : out.runs) seen.push_back(benchmark_identity(r.run_name));
    for (const BenchRun& r : p.runs)
      if (std::find(seen.begin(), seen.end(), benchmark_identity(r.run_name)) != seen.end())
        throw UsageError(fmt::format("{}: benchmark {} is also in {}, another part of the same run", p.source,
                                     benchmark_identity(r.run_name), out.source));
    out.runs.insert(out.runs.end(), p.runs.begin(), p.runs.end());
    for (const auto& [name, reps] : p.iteration_times) out.iteration_times[name] = reps;
  }
  return out;
}

bool is_run_record(const std::filesystem::path& file) {
  const std::string name = file.filename().string();
  return file.extension() == ".json" && name != "report.json" && name.rfind("trace-", 0) != 0 &&
         file.parent_path().filename() != "plans";
}

PairedSide load_paired_runs(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw UsageError(fmt::format("{}: expected a folder of runs (one .json file or subfolder per run)", dir));
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() || (e.is_regular_file() && e.path().extension() == ".json" && e.path().filename() != "report.json"))
      entries.push_back(e.path());
  // Numeric names by value (2 before 10), then the rest by name.
  auto key = [](const fs::path& p) {
    const std::string n = p.stem().string();
    const bool numeric = !n.empty() && std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; });
    return std::make_tuple(numeric ? 0 : 1, numeric ? n.size() : 0, n);
  };
  std::sort(entries.begin(), entries.end(), [&](const fs::path& a, const fs::path& b) { return key(a) < key(b); });
  PairedSide side;
  std::vector<RunFile>& runs = side.runs;
  side.per_benchmark_processes = true;
  for (const fs::path& e : entries) {
    if (!fs::is_directory(e)) {
      runs.push_back(load_run_json(e.string()));
      side.per_benchmark_processes = false;
      continue;
    }
    std::vector<std::string> files;
    for (const auto& f : fs::recursive_directory_iterator(e))
      if (f.is_regular_file() && is_run_record(f.path()))
        files.push_back(f.path().string());
    if (files.empty()) continue;  // a run that left nothing: the comparison then lacks a pair
    std::sort(files.begin(), files.end());
    std::vector<RunFile> pieces;
    for (const std::string& f : files) {
      pieces.push_back(load_run_json(f));
      if (collect_benchmarks(pieces.back()).size() != 1) side.per_benchmark_processes = false;
    }
    runs.push_back(merge_run_pieces(pieces));
  }
  if (runs.empty()) throw UsageError(fmt::format("{}: holds no run (no .json file)", dir));
  return side;
}

}  // namespace pb::reports
