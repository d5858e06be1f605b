// parbench report: GB JSON files -> the comparison table (markdown, CSV, JSON) and a chart.
// A thin command over reports/; the chart is scripts/chart.py (matplotlib) on the report JSON.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "bench/cli.h"
#include "engine/check.h"
#include "engine/fsutil.h"
#include "reports/table.h"

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
#ifdef PARBENCH_SOURCE_DIR
  if (fs::exists(std::string(PARBENCH_SOURCE_DIR "/scripts/") + name)) return PARBENCH_SOURCE_DIR "/scripts/" + name;
#endif
  if (fs::exists("scripts/" + name)) return "scripts/" + name;
  return "";
}

// Runs `python script input png`; the PNG is written only when the script succeeded.
bool render_png(const std::string& name, const char* env_var, const std::string& input, const std::string& png) {
  const std::string script = find_script(name, env_var);
  if (script.empty()) {
    fmt::print(stderr, "parbench: warning: {} not written: scripts/{} not found (set {})\n", png, name, env_var);
    return false;
  }
  // Debian's python has matplotlib; the first python3 on PATH may not.
  const char* env_python = std::getenv("PARBENCH_PYTHON");
  const std::string python = env_python ? env_python : "/usr/bin/python3";
  // The script writes a temporary file; the PNG then goes through write_file_atomic, which writes
  // through a device or FIFO and reports a failed write (a full disk, /dev/full) as an error.
  const std::string tmp_png =
      (std::filesystem::temp_directory_path() / fmt::format("parbench-chart-{}.png", ::getpid())).string();
  struct Remove {
    const std::string& path;
    ~Remove() { std::remove(path.c_str()); }
  } remove_tmp{tmp_png};
  std::vector<std::string> args = {python, script, input, tmp_png};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = 0;
  if (const int e = posix_spawn(&pid, python.c_str(), nullptr, nullptr, argv.data(), environ); e != 0) {
    fmt::print(stderr, "parbench: warning: {} not written: cannot run {}: {}\n", png, python, std::strerror(e));
    return false;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    write_file_atomic(png, read_file(tmp_png));
    return true;
  }
  // The script prints its own reason (matplotlib missing: exit 3).
  fmt::print(stderr, "parbench: warning: {} not written ({} {} exited with status {})\n", png, python, script,
             WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return false;
}

}  // namespace

bool render_chart(const std::string& report_json, const std::string& png) {
  return render_png("chart.py", "PARBENCH_CHART_SCRIPT", report_json, png);
}

bool render_timeline(const std::string& run_dir, const std::string& png) {
  return render_png("timeline.py", "PARBENCH_TIMELINE_SCRIPT", run_dir, png);
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
          });
  if (!f.parse(args)) return 0;
  if (f.positional().empty()) throw UsageError("expected one or more Google Benchmark JSON files (see parbench report --help)");
  const std::string format = f.str("format");
  if (format != "markdown" && format != "csv" && format != "json")
    throw UsageError(fmt::format("--format expects markdown, csv or json, got '{}'", format));

  std::vector<reports::RunFile> files;
  for (const std::string& path : f.positional()) files.push_back(reports::load_run_json(path));
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
  return 0;
}

}  // namespace pb
