// The comparison as markdown: the suite verdict first (what the gate rests on), then one row per
// benchmark, then the rules in a sentence.
#include <fmt/format.h>

#include "reports/compare.h"
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

const char* gate_word(int code) {
  switch (code) {
    case 0: return "PASS";
    case 1: return "FAIL";
    default: return "INCONCLUSIVE";
  }
}

}  // namespace

std::string comparison_markdown(const Comparison& c, const std::string& baseline_source,
                                const std::string& contender_source) {
  std::string out = "# parbench compare\n\n";
  const SuiteVerdict& s = c.suite;
  const char* gate = gate_word(c.exit_code());
  if (s.ratio && s.lo && s.hi)
    out += fmt::format("**{}** suite of {} benchmark(s): geometric mean time ratio {:.3f} ({:g}% CI {:.3f} to {:.3f}): "
                       "**{}**{}\n\n",
                       gate, s.benchmarks, *s.ratio, (1 - c.options.alpha) * 100, *s.lo, *s.hi, verdict_name(s.verdict),
                       s.note.empty() ? "" : " (" + s.note + ")");
  else if (s.ratio)  // too little data: the ratio, but no interval and no verdict
    out += fmt::format("**{}** suite of {} benchmark(s): geometric mean time ratio {:.3f}, no interval: **{}** ({})\n\n",
                       gate, s.benchmarks, *s.ratio, verdict_name(s.verdict), s.note);
  else
    out += fmt::format("**{}** suite: {}\n\n", gate, s.note);
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
  int counts[8] = {};
  for (const CompareEntry& e : c.entries) counts[static_cast<int>(e.verdict)]++;
  auto n = [&](Verdict v) { return counts[static_cast<int>(v)]; };
  out += fmt::format("Benchmarks: {} slower, {} missing, {} failed, {} inconclusive, {} faster, {} same, {} new, {} skipped\n\n",
                     n(Verdict::Slower), n(Verdict::Missing), n(Verdict::Failed), n(Verdict::Inconclusive),
                     n(Verdict::Faster), n(Verdict::Same), n(Verdict::New), n(Verdict::Skipped));
  out += "| benchmark | baseline ms | contender ms | ratio (CI) | p-value | reps | verdict | note |\n";
  out += "|---|--:|--:|--:|--:|--:|:-:|---|\n";
  const char* test = c.pairs > 0 ? "paired t" : more ? "history t" : "Welch t";
  for (const CompareEntry& e : c.entries) {
    const std::string p = e.t ? fmt::format("{:.3g} ({})", e.t->p, test) : "-";
    std::string ratio = e.ratio ? fmt::format("{:.3f}", *e.ratio) : "-";
    if (e.lo && e.hi) ratio += fmt::format(" ({:.3f} to {:.3f})", *e.lo, *e.hi);
    std::string v = verdict_name(e.verdict);
    if ((c.options.gate_each && (e.verdict == Verdict::Slower || e.verdict == Verdict::Inconclusive)) ||
        e.verdict == Verdict::Missing || e.verdict == Verdict::Failed)
      v = "**" + v + "**";
    out += fmt::format("| {} | {} | {} | {} | {} | {}/{} | {} | {} |\n", md_escape(e.name), fmt_time(e.baseline_s),
                       fmt_time(e.contender_s), ratio, p, e.n_baseline, e.n_contender, v, md_escape(e.note));
  }
  out += c.pairs > 0
             ? "\nPaired: per benchmark, medians and reps over the pairs, ratio = geometric mean of the pairs' ratios.\n"
             : "\nms: geometric mean of the repetitions' median iteration times, ratio = contender / baseline; the "
               "suite's ratio is the geometric mean of these ratios.\n";
  out += fmt::format("Slower (suite and benchmark): the interval lies above 1 and the ratio is at least 1 + threshold; "
                     "inconclusive: otherwise the interval reaches beyond 1 + threshold, or there is too little data for "
                     "one (fewer than {} repetitions a side, {} past runs, 2 pairs). Exit code 1 when the suite is slower "
                     "or a benchmark is missing or failed{}; else 3 when the suite{} is inconclusive; else 0. Rules: "
                     "docs/reports.md.\n",
                     kMinRepetitions, kMinHistoryRuns,
                     c.options.gate_each ? ", or any benchmark is slower (--gate each)" : "",
                     c.options.gate_each ? " or a benchmark" : "");
  return out;
}

}  // namespace pb::reports
