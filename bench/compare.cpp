// parbench compare: a CI regression gate over two GB JSON files. A thin command over
// reports/compare.h; exit 0 pass, 1 regression or lost benchmark, 2 bad input or unlike runs.
#include <cstdio>
#include <filesystem>

#include "bench/cli.h"
#include "engine/check.h"
#include "engine/fsutil.h"
#include "reports/compare.h"

namespace pb {

int cmd_compare(const std::vector<std::string>& args) {
  Flags f("parbench compare",
          "Compares a contender run with a baseline run (Google Benchmark JSON, any program's), benchmark by\n"
          "benchmark: ratio of median times, two-sided Mann-Whitney U test over repetitions, verdict faster /\n"
          "slower / same / missing / new / failed. Prints a markdown summary.\n"
          "Exit status: 0 no regression; 1 a benchmark is slower by more than the threshold and significantly\n"
          "so, or disappeared, or failed where the baseline ran; 2 bad input, or runs from different\n"
          "environments (GPU model, device count, precision, library versions) without --force.\n"
          "Rules: docs/reports.md.\n"
          "usage: parbench compare BASELINE.json CONTENDER.json [flags]",
          {
              {"threshold", "FRACTION", "smallest time change that counts (0.05 = 5%)", "0.05"},
              {"alpha", "P", "significance level of the Mann-Whitney U test", "0.05"},
              {"force", "", "compare even when the environments differ (the summary lists the differences)", ""},
              {"out", "FILE.md", "also write the markdown summary to this file", ""},
          });
  if (!f.parse(args)) return 0;
  if (f.positional().size() != 2)
    throw UsageError(fmt::format("expected BASELINE.json CONTENDER.json, got {} file(s) (see parbench compare --help)",
                                 f.positional().size()));
  reports::CompareOptions o;
  o.threshold = f.number("threshold");
  o.alpha = f.number("alpha");
  const reports::RunFile base = reports::load_run_json(f.positional()[0]);
  const reports::RunFile cont = reports::load_run_json(f.positional()[1]);
  const reports::Comparison c = reports::compare_runs(base, cont, o, f.on("force"));
  const std::string md = reports::comparison_markdown(c, base.source, cont.source);
  std::fputs(md.c_str(), stdout);
  if (f.has("out")) {
    make_dirs(std::filesystem::path(f.str("out")).parent_path().string());
    write_file_atomic(f.str("out"), md);
  }
  return c.exit_code();
}

}  // namespace pb
