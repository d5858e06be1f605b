// The CI comparison: per benchmark, ratio of medians and a two-sided Mann-Whitney U test over
// repetitions; the verdict rules are written out in docs/reports.md and in decide() below.
#include "reports/compare.h"

#include <algorithm>

#include "engine/check.h"
#include "reports/table.h"

namespace pb::reports {

namespace {

// Context keys whose difference makes two runs incomparable (written by `parbench run`).
const char* const kEnvKeys[] = {"device_kind", "gpu_count", "gpu_names",    "precision",   "cuda_driver",
                                "cuda_runtime", "cudnn",    "nccl",         "conv_backend"};
// Only for CPU runs: there the CPU is the device.
const char* const kCpuEnvKeys[] = {"cpu_model", "cpu_threads"};

std::string fmt_time(std::optional<double> s) {
  if (!s) return "-";
  const double ms = *s * 1e3;
  if (ms >= 100) return fmt::format("{:.1f}", ms);
  if (ms >= 1) return fmt::format("{:.3f}", ms);
  return fmt::format("{:.4g}", ms);
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
    if (vb != vc) diffs.push_back({key, vb, vc});
  };
  for (const char* k : kEnvKeys) check(k);
  if (baseline.context_value("device_kind") == "cpu" || contender.context_value("device_kind") == "cpu")
    for (const char* k : kCpuEnvKeys) check(k);
  return diffs;
}

int Comparison::exit_code() const {
  for (const CompareEntry& e : entries)
    if (e.verdict == Verdict::Slower || e.verdict == Verdict::Missing || e.verdict == Verdict::Failed) return 1;
  return 0;
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

Comparison compare_runs(const RunFile& baseline, const RunFile& contender, const CompareOptions& opts, bool force) {
  if (!(opts.threshold >= 0)) throw UsageError(fmt::format("--threshold must be >= 0, got {}", opts.threshold));
  if (!(opts.alpha > 0 && opts.alpha < 1)) throw UsageError(fmt::format("--alpha must be in (0, 1), got {}", opts.alpha));
  Comparison out;
  out.options = opts;
  out.env_diffs = environment_diffs(baseline, contender);
  if (!out.env_diffs.empty() && !force) {
    std::string msg = fmt::format("{} and {} were run in different environments (use --force to compare anyway):",
                                  baseline.source, contender.source);
    for (const EnvDiff& d : out.env_diffs) msg += fmt::format("\n  {}: baseline '{}', contender '{}'", d.key, d.baseline, d.contender);
    throw UsageError(msg);
  }
  const std::vector<Benchmark> base = collect_benchmarks(baseline), cont = collect_benchmarks(contender);
  auto find = [](const std::vector<Benchmark>& v, const std::string& name) -> const Benchmark* {
    for (const Benchmark& b : v)
      if (b.name == name) return &b;
    return nullptr;
  };
  for (const Benchmark& b : base) {
    CompareEntry e;
    e.name = b.name;
    e.n_baseline = b.repetitions();
    e.baseline_s = b.median_s();
    const Benchmark* c = find(cont, b.name);
    if (!c) {
      e.verdict = Verdict::Missing;
      e.note = "in the baseline, not in the contender";
    } else {
      e.n_contender = c->repetitions();
      e.contender_s = c->median_s();
      if (!e.baseline_s && !e.contender_s) {
        e.verdict = Verdict::Skipped;
        e.note = "failed in both runs: " + c->error_message;
      } else if (!e.contender_s) {
        e.verdict = Verdict::Failed;
        e.note = "failed in the contender: " + (c->error_message.empty() ? std::string("no measurement") : c->error_message);
      } else if (!e.baseline_s || *e.baseline_s <= 0) {
        e.verdict = Verdict::New;
        e.note = "failed in the baseline: " + b.error_message;
      } else {
        decide(e, b, *c, opts);
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
  return out;
}

std::string comparison_markdown(const Comparison& c, const std::string& baseline_source,
                                const std::string& contender_source) {
  std::string out = "# parbench compare\n\n";
  out += fmt::format("Baseline `{}`, contender `{}`. Threshold {:g}%, alpha {:g}.\n\n", baseline_source, contender_source,
                     c.options.threshold * 100, c.options.alpha);
  if (!c.env_diffs.empty()) {
    out += "**Warning: the environments differ (compared with --force):**\n\n";
    for (const EnvDiff& d : c.env_diffs) out += fmt::format("- {}: baseline `{}`, contender `{}`\n", d.key, d.baseline, d.contender);
    out += "\n";
  }
  int counts[7] = {};
  for (const CompareEntry& e : c.entries) counts[static_cast<int>(e.verdict)]++;
  out += fmt::format("**{}** ({} slower, {} missing, {} failed, {} faster, {} same, {} new, {} skipped)\n\n",
                     c.exit_code() ? "FAIL" : "PASS", counts[1], counts[3], counts[5], counts[0], counts[2], counts[4], counts[6]);
  out += "| benchmark | baseline ms | contender ms | ratio | p-value | reps | verdict | note |\n";
  out += "|---|--:|--:|--:|--:|--:|:-:|---|\n";
  for (const CompareEntry& e : c.entries) {
    std::string p = "-";
    if (e.test) p = fmt::format("{:.3g}{}", e.test->p, e.test->exact ? "" : " (normal)");
    std::string v = verdict_name(e.verdict);
    if (e.verdict == Verdict::Slower || e.verdict == Verdict::Missing || e.verdict == Verdict::Failed) v = "**" + v + "**";
    out += fmt::format("| {} | {} | {} | {} | {} | {}/{} | {} | {} |\n", md_escape(e.name), fmt_time(e.baseline_s),
                       fmt_time(e.contender_s), e.ratio ? fmt::format("{:.3f}", *e.ratio) : "-", p, e.n_baseline,
                       e.n_contender, v, md_escape(e.note));
  }
  out += "\nslower: ratio > 1 + threshold and p < alpha (or the ratio alone when the test is not possible); "
         "exit code 1 on any slower, missing or failed benchmark. Rules: docs/reports.md.\n";
  return out;
}

}  // namespace pb::reports
