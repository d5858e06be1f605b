// The gate's statistics: per benchmark and for the suite, a t interval on the difference of
// mean log repetition times, and the one rule that turns an interval into a verdict. The rules
// are written out in docs/reports.md.
#include <cmath>

#include "engine/check.h"
#include "reports/compare.h"

namespace pb::reports {

namespace {

std::vector<double> logs_of(const std::vector<double>& v) {
  std::vector<double> out;
  for (double x : v) out.push_back(std::log(x));
  return out;
}

double variance(const std::vector<double>& v) { return stddev(v) * stddev(v); }

}  // namespace

Verdict interval_verdict(double ratio, double lo, double hi, double threshold) {
  if (lo > 1 && ratio >= 1 + threshold) return Verdict::Slower;
  if (hi < 1 && ratio <= 1 - threshold) return Verdict::Faster;
  if (hi > 1 + threshold) return Verdict::Inconclusive;
  return Verdict::Same;
}

std::string interval_note(Verdict v, double lo, double hi, double threshold) {
  if (v == Verdict::Inconclusive)
    return fmt::format("too little data: a slowdown of {:g}% is neither shown nor ruled out; more repetitions or "
                       "parbench ab decide", threshold * 100);
  if (v == Verdict::Same && (lo > 1 || hi < 1))
    return fmt::format("a change, but smaller than the threshold of {:g}%", threshold * 100);
  return "";
}

std::vector<double> repetition_times(const Benchmark& b, std::vector<int>* files) {
  std::vector<double> out;
  if (files) files->clear();
  const bool iterations = !b.iteration_times_s.empty() && b.iteration_times_s.size() == b.times_s.size();
  for (std::size_t i = 0; i < b.times_s.size(); ++i) {
    // A repetition's median iteration: one slow step (a wake-up, another job) does not move it.
    out.push_back(iterations && !b.iteration_times_s[i].empty() ? median(b.iteration_times_s[i]) : b.times_s[i]);
    if (files) files->push_back(b.times_file[i]);
  }
  if (out.empty())
    if (const std::optional<double> m = b.median_s()) {  // GB's aggregates alone: one value
      out.push_back(*m);
      if (files) files->push_back(0);
    }
  return out;
}

LogDiff log_diff(const std::vector<std::vector<double>>& base_runs, const std::vector<double>& cont,
                 const CompareOptions& o) {
  LogDiff r;
  std::vector<double> run_means;  // mean log time of each baseline run that measured it
  std::vector<double> pooled;
  for (const std::vector<double>& run : base_runs) {
    if (run.empty()) continue;
    const std::vector<double> l = logs_of(run);
    run_means.push_back(mean(l));
    pooled.insert(pooled.end(), l.begin(), l.end());
    r.n_baseline += static_cast<int>(run.size());
  }
  r.n_contender = static_cast<int>(cont.size());
  if (run_means.empty() || cont.empty()) {
    r.too_little = "no repetition times";
    return r;
  }
  const std::vector<double> y = logs_of(cont);
  r.cont_log = mean(y);
  r.history = base_runs.size() > 1;
  if (!r.history) {
    r.base_log = run_means.front();
    if (pooled.size() < kMinRepetitions || y.size() < kMinRepetitions) {
      r.too_little = fmt::format("{} vs {} repetition(s): an interval needs at least {} a side "
                                 "(--benchmark_repetitions=5)",
                                 pooled.size(), y.size(), kMinRepetitions);
      return r;
    }
    const double n1 = static_cast<double>(pooled.size()), n2 = static_cast<double>(y.size());
    r.parts = {{variance(pooled) / n1, n1 - 1}, {variance(y) / n2, n2 - 1}};
  } else {
    // Several past runs: the spread of their means is the run-to-run drift (load, clocks) that
    // the contender, one more run, is subject to as well: a prediction interval, not the
    // repetitions' own spread.
    r.base_log = mean(run_means);
    const double k = static_cast<double>(run_means.size());
    if (run_means.size() < kMinHistoryRuns) {
      r.too_little = fmt::format("{} baseline run(s) measured it: a history needs at least {}", run_means.size(),
                                 kMinHistoryRuns);
      return r;
    }
    r.parts = {{variance(run_means) * (1 + 1 / k), k - 1}};
  }
  r.t = t_from_parts(*r.cont_log - *r.base_log, r.parts, 1.0, r.n_baseline + r.n_contender, o.alpha);
  return r;
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
  std::vector<LogDiff> diffs;
  double d = 0;
  int lacking = 0;
  std::string first_lacking;
  for (std::size_t b = 0; b < cont.size(); ++b) {
    diffs.push_back(log_diff(base_runs[b], cont[b], o));
    const LogDiff& l = diffs.back();
    if (l.cont_log && l.base_log) d += (*l.cont_log - *l.base_log) / static_cast<double>(cont.size());
    if (!l.t && lacking++ == 0) first_lacking = l.too_little;
  }
  s.ratio = std::exp(d);
  if (lacking > 0) {  // a verdict on part of the suite would hide the rest
    s.verdict = Verdict::Inconclusive;
    s.note = fmt::format("too little data for {} of {} benchmark(s): {}", lacking, cont.size(), first_lacking);
    return s;
  }
  std::vector<TPart> parts;
  const double scale = 1 / static_cast<double>(cont.size());
  if (!diffs.front().history) {
    for (const LogDiff& l : diffs) parts.insert(parts.end(), l.parts.begin(), l.parts.end());
  } else {
    // Run k's drift: the mean over the benchmarks it measured of its offset from their history.
    std::vector<double> drift;
    for (std::size_t k = 0; k < base_runs.front().size(); ++k) {
      double sum = 0;
      int n = 0;
      for (std::size_t b = 0; b < cont.size(); ++b)
        if (k < base_runs[b].size() && !base_runs[b][k].empty()) {
          sum += mean(logs_of(base_runs[b][k])) - *diffs[b].base_log;
          ++n;
        }
      if (n > 0) drift.push_back(sum / n);
    }
    if (drift.size() < kMinHistoryRuns) {
      s.verdict = Verdict::Inconclusive;
      s.note = fmt::format("{} baseline run(s): a history needs at least {}", drift.size(), kMinHistoryRuns);
      return s;
    }
    const double k = static_cast<double>(drift.size());
    parts = {{variance(drift) * (1 + 1 / k), k - 1}};
  }
  const PairedT t = t_from_parts(d, parts, diffs.front().history ? 1.0 : scale, 0, o.alpha);
  s.lo = std::exp(t.lo);
  s.hi = std::exp(t.hi);
  s.verdict = interval_verdict(*s.ratio, *s.lo, *s.hi, o.threshold);
  s.note = interval_note(s.verdict, *s.lo, *s.hi, o.threshold);
  return s;
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
  s.verdict = interval_verdict(*s.ratio, *s.lo, *s.hi, o.threshold);
  s.note = interval_note(s.verdict, *s.lo, *s.hi, o.threshold);
  return s;
}

}  // namespace pb::reports
