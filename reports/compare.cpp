// The CI comparison: per benchmark, ratio of medians and a two-sided Mann-Whitney U test over
// repetitions; for the suite, the geometric mean of the ratios with a bootstrap interval. The
// verdict rules are written out in docs/reports.md and in decide() / suite_verdict() below.
#include "reports/compare.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <tuple>

#include "engine/check.h"
#include "reports/schema.h"
#include "reports/table.h"

namespace pb::reports {

namespace {

std::string fmt_time(std::optional<double> s) {
  if (!s) return "-";
  const double ms = *s * 1e3;
  if (ms >= 100) return fmt::format("{:.1f}", ms);
  if (ms >= 1) return fmt::format("{:.3f}", ms);
  return fmt::format("{:.4g}", ms);
}


// Slower: the interval [lo, hi] of a time ratio lies above 1 (a slowdown is certain) and
// reaches 1 + threshold (one of the threshold's size is not ruled out). A certain but provably
// small change passes.
Verdict interval_verdict(double lo, double hi, double threshold) {
  if (lo > 1 && hi > 1 + threshold) return Verdict::Slower;
  if (hi < 1 && lo < 1 - threshold) return Verdict::Faster;
  return Verdict::Same;
}

}  // namespace

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::Faster: return "faster";
    case Verdict::Slower: return "slower";
    case Verdict::Same: return "same";
    case Verdict::Missing: return "missing";
    case Verdict::New: return "new";
    case Verdict::Failed: return "failed";
    case Verdict::Skipped: return "skipped";
  }
  return "?";
}

std::vector<EnvDiff> environment_diffs(const RunFile& baseline, const RunFile& contender) {
  std::vector<EnvDiff> diffs;
  auto check = [&](const std::string& key) {
    const bool hb = baseline.context.count(key) > 0, hc = contender.context.count(key) > 0;
    if (!hb && !hc) return;
    const std::string vb = hb ? baseline.context.at(key) : "(not recorded)";
    const std::string vc = hc ? contender.context.at(key) : "(not recorded)";
    if (vb != vc) diffs.push_back({key, vb, vc, baseline.source});
  };
  const std::string kind = schema::context::device_kind.name;
  const bool cpu = baseline.context_value(kind) == "cpu" || contender.context_value(kind) == "cpu";
  for (const schema::Key& k : schema::kContext)
    if (k.match == schema::Match::Always || (k.match == schema::Match::Cpu && cpu)) check(k.name);
  return diffs;
}

int Comparison::exit_code() const {
  if (suite.verdict == Verdict::Slower) return 1;
  for (const CompareEntry& e : entries)
    if (e.verdict == Verdict::Missing || e.verdict == Verdict::Failed || (options.gate_each && e.verdict == Verdict::Slower))
      return 1;
  return 0;
}

SuiteVerdict suite_verdict(const std::vector<std::vector<std::vector<double>>>& base_runs,
                           const std::vector<std::vector<double>>& cont, const CompareOptions& o) {
  PB_CHECK(base_runs.size() == cont.size(), "suite_verdict: {} baseline vs {} contender benchmarks", base_runs.size(),
           cont.size());
  SuiteVerdict s;
  s.benchmarks = static_cast<int>(cont.size());
  if (cont.empty()) {
    s.verdict = Verdict::Skipped;
    s.note = "no benchmark measured on both sides";
    return s;
  }
  auto pooled = [](const std::vector<std::vector<double>>& runs) {
    std::vector<double> all;
    for (const auto& r : runs) all.insert(all.end(), r.begin(), r.end());
    return all;
  };
  auto geomean = [&](auto&& ratio_of) {
    double log_sum = 0;
    for (std::size_t b = 0; b < cont.size(); ++b) log_sum += std::log(ratio_of(b));
    return std::exp(log_sum / static_cast<double>(cont.size()));
  };
  std::vector<double> base_median(cont.size());
  for (std::size_t b = 0; b < cont.size(); ++b) base_median[b] = median(pooled(base_runs[b]));
  s.ratio = geomean([&](std::size_t b) { return median(cont[b]) / base_median[b]; });
  // With several baseline runs, run k's effect: the geometric mean over the benchmarks it
  // measured of its median over the pooled median. The contender is one run and drifts like
  // them (machine load, clocks), so each resample is divided by a drawn run's effect.
  std::vector<double> effects;
  for (std::size_t k = 0; k < base_runs.front().size(); ++k) {
    double log_sum = 0;
    int n = 0;
    for (std::size_t b = 0; b < cont.size(); ++b)
      if (k < base_runs[b].size() && !base_runs[b][k].empty()) {
        log_sum += std::log(median(base_runs[b][k]) / base_median[b]);
        ++n;
      }
    if (n > 0) effects.push_back(std::exp(log_sum / n));
  }
  if (effects.size() < 2) effects = {1.0};
  // Percentile bootstrap; a fixed seed keeps the verdict reproducible for the same files.
  std::mt19937_64 rng(0x70617262656e6368ull);
  auto pick = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); };
  auto resample = [&](const std::vector<double>& v) {
    std::vector<double> out(v.size());
    for (double& x : out) x = v[pick(v.size())];
    return out;
  };
  std::vector<double> stats;
  for (int i = 0; i < std::max(1, o.bootstrap); ++i) {
    const double effect = effects[pick(effects.size())];
    stats.push_back(geomean([&](std::size_t b) {
      std::vector<std::size_t> measured;  // the runs that measured this benchmark
      for (std::size_t k = 0; k < base_runs[b].size(); ++k)
        if (!base_runs[b][k].empty()) measured.push_back(k);
      std::vector<double> base;  // runs with replacement, then repetitions within each run
      for (std::size_t k = 0; k < measured.size(); ++k) {
        const std::vector<double> r = resample(base_runs[b][measured[pick(measured.size())]]);
        base.insert(base.end(), r.begin(), r.end());
      }
      return median(resample(cont[b])) / median(base);
    }) / effect);
  }
  std::sort(stats.begin(), stats.end());
  auto quantile = [&](double q) {
    const double pos = q * static_cast<double>(stats.size() - 1);
    const std::size_t i = static_cast<std::size_t>(pos);
    const double frac = pos - static_cast<double>(i);
    return i + 1 < stats.size() ? stats[i] * (1 - frac) + stats[i + 1] * frac : stats[i];
  };
  s.lo = quantile(o.alpha / 2);
  s.hi = quantile(1 - o.alpha / 2);
  s.verdict = interval_verdict(*s.lo, *s.hi, o.threshold);
  if (s.verdict == Verdict::Same && (*s.lo > 1 || *s.hi < 1))
    s.note = fmt::format("a change, but smaller than the threshold of {:g}%", o.threshold * 100);
  return s;
}

namespace {

// The verdict for a benchmark both runs measured.
void decide(CompareEntry& e, const Benchmark& b, const Benchmark& c, const CompareOptions& o) {
  e.ratio = *e.contender_s / *e.baseline_s;
  const bool up = *e.ratio > 1 + o.threshold, down = *e.ratio < 1 - o.threshold;
  bool use_test = false;
  if (e.n_baseline < 2 || e.n_contender < 2) {
    e.note = fmt::format("test not possible ({} vs {} repetitions): judged on the ratio alone", e.n_baseline, e.n_contender);
  } else if (const double min_p = mann_whitney_min_p(e.n_baseline, e.n_contender); min_p > o.alpha) {
    // With so few repetitions no data can reach alpha: the test would hide every change.
    e.test = mann_whitney_u(b.times_s, c.times_s);
    e.note = fmt::format("test too weak ({} vs {} repetitions, smallest possible p {:.3g} > alpha): judged on the ratio alone",
                         e.n_baseline, e.n_contender, min_p);
  } else {
    e.test = mann_whitney_u(b.times_s, c.times_s);
    use_test = true;
  }
  const bool significant = !use_test || e.test->p < o.alpha;
  if (up && significant) e.verdict = Verdict::Slower;
  else if (down && significant) e.verdict = Verdict::Faster;
  else e.verdict = Verdict::Same;
  if (use_test && (up || down) && !significant) e.note = fmt::format("change not significant (p {:.3g} >= alpha)", e.test->p);
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
        decide(e, b, *c, opts);
        // The suite's samples: repetition times (GB's aggregates stand in when that is all there is).
        std::vector<std::vector<double>> runs(base_files.size());
        for (std::size_t i = 0; i < b.times_s.size(); ++i) runs[static_cast<std::size_t>(b.times_file[i])].push_back(b.times_s[i]);
        if (b.times_s.empty()) runs.front() = {*e.baseline_s};
        suite_base.push_back(std::move(runs));
        suite_cont.push_back(c->times_s.empty() ? std::vector<double>{*e.contender_s} : c->times_s);
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

SuiteVerdict paired_suite_verdict(const std::vector<std::vector<double>>& log_ratios, const CompareOptions& o,
                                  bool per_benchmark_processes) {
  SuiteVerdict s;
  s.benchmarks = static_cast<int>(log_ratios.size());
  if (log_ratios.empty()) {
    s.verdict = Verdict::Skipped;
    s.note = "no benchmark measured in every run on both sides";
    return s;
  }
  const std::size_t pairs = log_ratios.front().size();
  for (const auto& l : log_ratios)
    PB_CHECK(l.size() == pairs, "paired_suite_verdict: {} vs {} pairs", l.size(), pairs);
  // One value per pair: the whole suite's log ratio in that pair. Benchmarks of one pair share
  // its drift, so the pairs, not the benchmarks, are the independent samples.
  std::vector<double> per_pair(pairs, 0.0);
  for (std::size_t k = 0; k < pairs; ++k) {
    for (const auto& l : log_ratios) per_pair[k] += l[k];
    per_pair[k] /= static_cast<double>(log_ratios.size());
  }
  const PairedT t = per_benchmark_processes ? mean_of_means_t(log_ratios, o.alpha) : paired_t(per_pair, o.alpha);
  s.ratio = std::exp(t.mean);
  s.lo = std::exp(t.lo);
  s.hi = std::exp(t.hi);
  s.verdict = interval_verdict(*s.lo, *s.hi, o.threshold);
  if (s.verdict == Verdict::Same && (*s.lo > 1 || *s.hi < 1))
    s.note = fmt::format("a change, but smaller than the threshold of {:g}%", o.threshold * 100);
  return s;
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
      e.verdict = Verdict::Same;
      e.note = fmt::format("measured on both sides in {} pair(s): no verdict", logs.size());
    } else {
      e.paired = paired_t(logs, opts.alpha);
      e.ratio = std::exp(e.paired->mean);
      e.lo = std::exp(e.paired->lo);
      e.hi = std::exp(e.paired->hi);
      e.verdict = interval_verdict(*e.lo, *e.hi, opts.threshold);
      if (logs.size() < pairs) e.note = fmt::format("{} of {} pairs (the baseline failed in the others)", logs.size(), pairs);
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
      if (f.is_regular_file() && f.path().extension() == ".json" && f.path().filename() != "report.json")
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

std::string comparison_markdown(const Comparison& c, const std::string& baseline_source,
                                const std::string& contender_source) {
  std::string out = "# parbench compare\n\n";
  const SuiteVerdict& s = c.suite;
  // The suite verdict first: it is what the gate mostly rests on.
  if (s.ratio)
    out += fmt::format("**{}** suite of {} benchmark(s): geometric mean time ratio {:.3f} ({:g}% CI {:.3f} to {:.3f}): "
                       "**{}**{}\n\n",
                       c.exit_code() ? "FAIL" : "PASS", s.benchmarks, *s.ratio, (1 - c.options.alpha) * 100, *s.lo, *s.hi,
                       verdict_name(s.verdict), s.note.empty() ? "" : " (" + s.note + ")");
  else
    out += fmt::format("**{}** suite: {}\n\n", c.exit_code() ? "FAIL" : "PASS", s.note);
  const std::size_t more = c.baseline_sources.size() > 1 ? c.baseline_sources.size() - 1 : 0;
  if (c.pairs > 0)
    out += fmt::format("Paired: {} baseline runs (`{}`, ...) and {} contender runs (`{}`, ...) made side by side, run k "
                       "of each side a pair; the suite's interval is {}. Threshold {:g}%, alpha {:g}.\n\n",
                       c.pairs, baseline_source, c.pairs, contender_source,
                       c.per_benchmark_processes
                           ? "Welch's t over the benchmarks (each benchmark ran in processes of its own)"
                           : "Student's t over the pairs (the benchmarks of a run shared its process)",
                       c.options.threshold * 100, c.options.alpha);
  else
    out += fmt::format("Baseline `{}`{}, contender `{}`. Threshold {:g}%, alpha {:g}.\n\n", baseline_source,
                       more ? fmt::format(" and {} more run(s)", more) : "", contender_source, c.options.threshold * 100,
                       c.options.alpha);
  if (!c.env_diffs.empty()) {
    out += "**Warning: the environments differ (compared with --force):**\n\n";
    for (const EnvDiff& d : c.env_diffs) out += fmt::format("- {}: baseline `{}`, contender `{}`\n", d.key, d.baseline, d.contender);
    out += "\n";
  }
  int counts[7] = {};
  for (const CompareEntry& e : c.entries) counts[static_cast<int>(e.verdict)]++;
  out += fmt::format("Benchmarks: {} slower, {} missing, {} failed, {} faster, {} same, {} new, {} skipped\n\n",
                     counts[1], counts[3], counts[5], counts[0], counts[2], counts[4], counts[6]);
  out += "| benchmark | baseline ms | contender ms | ratio | p-value | reps | verdict | note |\n";
  out += "|---|--:|--:|--:|--:|--:|:-:|---|\n";
  for (const CompareEntry& e : c.entries) {
    std::string p = "-";
    if (e.test) p = fmt::format("{:.3g}{}", e.test->p, e.test->exact ? "" : " (normal)");
    if (e.paired) p = fmt::format("{:.3g} (paired t)", e.paired->p);
    std::string ratio = e.ratio ? fmt::format("{:.3f}", *e.ratio) : "-";
    if (e.lo && e.hi) ratio += fmt::format(" ({:.3f} to {:.3f})", *e.lo, *e.hi);
    std::string v = verdict_name(e.verdict);
    if ((c.options.gate_each && e.verdict == Verdict::Slower) || e.verdict == Verdict::Missing || e.verdict == Verdict::Failed)
      v = "**" + v + "**";
    out += fmt::format("| {} | {} | {} | {} | {} | {}/{} | {} | {} |\n", md_escape(e.name), fmt_time(e.baseline_s),
                       fmt_time(e.contender_s), ratio, p, e.n_baseline,
                       e.n_contender, v, md_escape(e.note));
  }
  if (c.pairs > 0)
    out += fmt::format("\nPaired: per benchmark, medians and reps over the pairs, ratio = geometric mean of the pairs' "
                       "ratios (interval at 1 - alpha). Slower (suite and benchmark): the interval lies above 1 and "
                       "reaches beyond 1 + threshold. Exit code 1 when the suite is slower or a benchmark is missing or "
                       "failed{}. Rules: docs/reports.md.\n",
                       c.options.gate_each ? ", or any benchmark is slower (--gate each)" : "");
  else
    out += fmt::format("\nsuite slower: its interval lies above 1 and reaches beyond 1 + threshold. A benchmark is slower "
                       "when its ratio > 1 + threshold and p < alpha (or the ratio alone when the test is not possible). "
                       "Exit code 1 when the suite is slower or a benchmark is missing or failed{}. Rules: docs/reports.md.\n",
                       c.options.gate_each ? ", or any benchmark is slower (--gate each)" : "");
  return out;
}

}  // namespace pb::reports
