// parbench report: GB JSON files -> the comparison table (markdown, CSV, JSON), charts and an HTML
// page. A thin command over reports/; charts are scripts/chart.py (matplotlib) on the report JSON,
// the page scripts/html_report.py.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "bench/cli.h"
#include "bench/report.h"
#include "engine/check.h"
#include "engine/fsutil.h"
#include "reports/table.h"
#include "parbench_paths.h"

extern char** environ;

namespace pb {

namespace {

// scripts/<name>: $<env>, the first scripts/ folder at or above the executable (a build folder
// inside the source tree, or a bundle), or the source tree the program was built from (a build
// folder elsewhere on the build machine).
std::string find_script(const std::string& name, const char* env_var) {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv(env_var)) return env;
  std::error_code ec;
  fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  for (; !ec && !dir.empty(); dir = dir.parent_path()) {
    if (fs::exists(dir / "scripts" / name)) return (dir / "scripts" / name).string();
    if (dir == dir.root_path()) break;
  }
  if (fs::exists(std::string(PARBENCH_SOURCE_DIR "/scripts/") + name)) return PARBENCH_SOURCE_DIR "/scripts/" + name;
  if (fs::exists("scripts/" + name)) return "scripts/" + name;
  return "";
}

// Runs `python script args... tmp` and, when it succeeded, moves its output to `out` through
// write_file_atomic, which writes through a device or FIFO and reports a failed write (a full
// disk, /dev/full) as an error.
bool run_script(const std::string& name, const char* env_var, std::vector<std::string> script_args,
                const std::string& out) {
  const std::string script = find_script(name, env_var);
  if (script.empty()) {
    fmt::print(stderr, "parbench: warning: {} not written: scripts/{} not found (set {})\n", out, name, env_var);
    return false;
  }
  // Debian's python has matplotlib; the first python3 on PATH may not.
  const char* env_python = std::getenv("PARBENCH_PYTHON");
  const std::string python = env_python ? env_python : "/usr/bin/python3";
  // Named by what the script writes (chart.py: a PNG), whatever `out` is called (/dev/full).
  const std::string tmp = (std::filesystem::temp_directory_path() /
                           fmt::format("parbench-{}-{}{}", std::filesystem::path(name).stem().string(), ::getpid(),
                                       name == "html_report.py" ? ".html" : ".png"))
                              .string();
  struct Remove {
    const std::string& path;
    ~Remove() { std::remove(path.c_str()); }
  } remove_tmp{tmp};
  std::vector<std::string> args = {python, script};
  args.insert(args.end(), script_args.begin(), script_args.end());
  args.push_back(tmp);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = 0;
  if (const int e = posix_spawn(&pid, python.c_str(), nullptr, nullptr, argv.data(), environ); e != 0) {
    fmt::print(stderr, "parbench: warning: {} not written: cannot run {}: {}\n", out, python, std::strerror(e));
    return false;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    write_file_atomic(out, read_file(tmp));
    return true;
  }
  // The script prints its own reason (matplotlib missing: exit 3).
  fmt::print(stderr, "parbench: warning: {} not written ({} {} exited with status {})\n", out, python, script,
             WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return false;
}

bool render_kind(const std::string& kind, const std::string& report_json, const std::string& context_json,
                 const std::string& png) {
  std::vector<std::string> args = {"--kind", kind};
  if (!context_json.empty()) args.insert(args.end(), {"--context", context_json});
  args.push_back(report_json);
  return run_script("chart.py", "PARBENCH_CHART_SCRIPT", args, png);
}

// `dir` holds report.json and report.md: its pareto.png and breakdown.png, then OUT.html.
bool render_html(const std::string& dir, const std::vector<std::string>& results, const std::string& html) {
  const std::string context = results.empty() ? "" : results.front();
  render_kind("pareto", dir + "/report.json", context, dir + "/pareto.png");
  render_kind("breakdown", dir + "/report.json", context, dir + "/breakdown.png");
  std::vector<std::string> args;
  for (const std::string& r : results) args.insert(args.end(), {"--results", r});
  // The script writes a temporary file elsewhere: the trace links start from the page's folder.
  std::error_code ec;
  const std::filesystem::path page = std::filesystem::absolute(html, ec);
  args.insert(args.end(), {"--base", page.parent_path().string()});
  args.push_back(dir);
  return run_script("html_report.py", "PARBENCH_HTML_SCRIPT", args, html);
}

}  // namespace

bool render_chart(const std::string& report_json, const std::string& png) {
  return render_kind("throughput", report_json, "", png);
}

bool render_timeline(const std::string& run_dir, const std::string& png) {
  return run_script("timeline.py", "PARBENCH_TIMELINE_SCRIPT", {run_dir}, png);
}

bool write_run_html(const std::string& dir) {
  return render_html(dir, {dir + "/results.json"}, dir + "/report.html");
}

int cmd_report(const std::vector<std::string>& args) {
  Flags f("parbench report",
          "Reads Google Benchmark JSON files of parbench runs and prints, per workload, a table with rows\n"
          "strategy x devices: median ms/iteration, CV, samples/s, GFLOP/s, speedup over regular on one\n"
          "device, scaling efficiency, peak memory per device, compute / transfer / idle shares, exposed\n"
          "communication, bubble (measured and formula), bus bandwidth; the best\n"
          "strategy per device count marked. Columns and formulas: docs/reports.md.\n"
          "usage: parbench report FILE.json [FILE.json ...] [flags]",
          {
              {"format", "FMT", "what to print: markdown, csv or json", "markdown"},
              {"out", "PREFIX", "also write PREFIX.md, PREFIX.csv and PREFIX.json", ""},
              {"chart", "FILE.png", "write a throughput-vs-devices chart (matplotlib via /usr/bin/python3)", ""},
              {"html", "FILE.html",
               "write one self-contained page: the tables (sortable), the charts (throughput, memory against\n"
               "samples/s, the step's breakdown), each file's context and links to the trace-*.json beside it",
               ""},
          });
  if (!f.parse(args)) return 0;
  if (f.positional().empty()) throw UsageError("expected one or more Google Benchmark JSON files (see parbench report --help)");
  const std::string format = f.str("format");
  if (format != "markdown" && format != "csv" && format != "json")
    throw UsageError(fmt::format("--format expects markdown, csv or json, got '{}'", format));

  std::vector<reports::RunFile> files;
  for (const std::string& path : f.positional()) files.push_back(reports::load_run_json(path));
  // The page is built around each run's context (machine, workload, precision): without one it
  // cannot be made, so say so before anything is printed or written.
  if (f.has("html"))
    for (const reports::RunFile& r : files)
      if (r.context.empty())
        throw UsageError(fmt::format("--html {}: {} has no \"context\" (the machine and settings of its run, as parbench "
                                     "run writes in results.json); leave --html out for the tables alone",
                                     f.str("html"), r.source));
  const reports::Report rep = reports::build_report(files);
  const std::string md = reports::report_markdown(rep), csv = reports::report_csv(rep), js = reports::report_json(rep);
  std::fputs((format == "markdown" ? md : format == "csv" ? csv : js).c_str(), stdout);
  std::fflush(stdout);

  std::string json_path;
  if (f.has("out")) {
    const std::string prefix = f.str("out");
    const std::string parent = std::filesystem::path(prefix).parent_path().string();
    make_dirs(parent);
    write_file_atomic(prefix + ".md", md);
    write_file_atomic(prefix + ".csv", csv);
    write_file_atomic(prefix + ".json", js);
    json_path = prefix + ".json";
    fmt::print(stderr, "parbench report: wrote {0}.md, {0}.csv, {0}.json\n", prefix);
  }
  if (f.has("chart")) {
    std::string tmp;
    if (json_path.empty()) {
      tmp = (std::filesystem::temp_directory_path() / fmt::format("parbench-report-{}.json", ::getpid())).string();
      write_file_atomic(tmp, js);
      json_path = tmp;
    }
    if (render_chart(json_path, f.str("chart"))) fmt::print(stderr, "parbench report: wrote {}\n", f.str("chart"));
    if (!tmp.empty()) std::remove(tmp.c_str());
  }
  if (f.has("html")) {
    // The page's inputs in a folder of their own, as a run folder holds them.
    namespace fs = std::filesystem;
    const fs::path tmp_dir = fs::temp_directory_path() / fmt::format("parbench-html-{}", ::getpid());
    struct RemoveAll {
      const fs::path& dir;
      ~RemoveAll() {
        std::error_code ec;
        fs::remove_all(dir, ec);
      }
    } remove_dir{tmp_dir};
    make_dirs(tmp_dir.string());
    write_file_atomic((tmp_dir / "report.md").string(), md);
    write_file_atomic((tmp_dir / "report.json").string(), js);
    render_chart((tmp_dir / "report.json").string(), (tmp_dir / "throughput.png").string());
    if (render_html(tmp_dir.string(), f.positional(), f.str("html")))
      fmt::print(stderr, "parbench report: wrote {}\n", f.str("html"));
  }
  return 0;
}

}  // namespace pb
