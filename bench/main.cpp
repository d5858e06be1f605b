// parbench: one program, subcommands. Only here do errors become exit codes:
// 2 for bad input (flags, files), 1 for anything else. Launched by mpirun, it is one rank of a
// multi-process job: an error on any rank ends the whole job (MPI_Abort) rather than hang it.
#include <cstdio>

#include <fmt/ranges.h>

#include "bench/cli.h"
#include "bench/project.h"
#include "engine/check.h"
#include "engine/process.h"

namespace pb { int cmd_plan(const std::vector<std::string>& args); }  // bench/plan.cpp

namespace {

const char* kUsage =
    "usage: parbench <command> [flags]\n"
    "\n"
    "Which parallelism strategy trains a conv net fastest on this machine, by how much, and at\n"
    "what memory cost.\n"
    "\n"
    "commands:\n"
    "  run       benchmark every strategy x device count (Google Benchmark), print the table,\n"
    "            write a run folder (JSON, markdown, CSV, chart)\n"
    "  report    tables and a chart from the JSON of one or more runs\n"
    "  compare   baseline vs contender JSON: a verdict per benchmark; exit 1 slower, 3 inconclusive\n"
    "  ab        run two builds alternately and compare the pairs: the CI gate for noisy machines\n"
    "  train     train a workload and print each iteration's time and loss\n"
    "  replay    K training steps from .npy parameters and data; writes losses and parameters\n"
    "  devices   list the CPU and GPUs this build can use\n"
    "  profile   per-layer forward / backward-data / backward-weights time and bytes on one device\n"
    "  project   project every strategy to other device counts and machines from a per-layer\n"
    "            profile; --validate against a measured run\n"
    "  calibrate time this machine's collectives and write its machine description (for project)\n"
    "  plan      one training step of a strategy as data: every worker's actions, buffers and bytes\n"
    "  net       a workload's net as JSON (the format --workload FILE reads), to edit and run\n"
    "\n"
    "Run 'parbench <command> --help' for a command's flags; 'parbench --version' for the version.\n";

// Every rank of a job must run the same command line: compare a hash of each one's (FNV-1a).
// Returns false (after rank 0 named the odd ranks) when they differ; every rank then exits 2.
bool same_command_on_every_rank(int argc, char** argv) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 1; i < argc; ++i)
    for (const char* c = argv[i];; ++c) {
      h = (h ^ static_cast<unsigned char>(*c)) * 1099511628211ull;
      if (!*c) break;
    }
  const std::vector<uint64_t> all = pb::world_allgather(h);
  std::vector<int> odd;
  for (std::size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) odd.push_back(static_cast<int>(r));
  if (odd.empty()) return true;
  if (pb::process().rank == 0)
    fmt::print(stderr, "parbench: error: configuration mismatch: rank(s) {} of {} were started with other arguments "
               "than rank 0; every rank of an MPI job must run the same parbench command line\n",
               fmt::join(odd, ","), all.size());
  return false;
}

int dispatch(const std::string& cmd, const std::vector<std::string>& args) {
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (cmd == "--version") {
    fmt::print("parbench {} (commit {})\n", PARBENCH_VERSION, PARBENCH_GIT_COMMIT);
    return 0;
  }
  if (cmd == "run") return pb::cmd_run(args);
  if (cmd == "report") return pb::cmd_report(args);
  if (cmd == "compare") return pb::cmd_compare(args);
  if (cmd == "ab") return pb::cmd_ab(args);
  if (cmd == "train") return pb::cmd_train(args);
  if (cmd == "replay") return pb::cmd_replay(args);
  if (cmd == "devices") return pb::cmd_devices(args);
  if (cmd == "profile") return pb::cmd_profile(args);
  if (cmd == "project") return pb::cmd_project(args);
  if (cmd == "calibrate") return pb::cmd_calibrate(args);
  if (cmd == "plan") return pb::cmd_plan(args);
  if (cmd == "net") return pb::cmd_net(args);
  fmt::print(stderr, "parbench: error: unknown command '{}' (see parbench --help)\n", cmd);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string cmd = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  pb::ProcessSession session(&argc, &argv);  // MPI_Init when an MPI launcher started us
  if (pb::multi_process()) {
    try {
      if (!same_command_on_every_rank(argc, argv)) return 2;
      return dispatch(cmd, args);
    } catch (const pb::UsageError& e) {
      pb::abort_job(fmt::format("parbench {}: {}", cmd, e.what()), 2);
    } catch (const std::exception& e) {
      pb::abort_job(fmt::format("parbench {}: {}", cmd, e.what()), 1);
    }
  }
  try {
    return dispatch(cmd, args);
  } catch (const pb::UsageError& e) {
    fmt::print(stderr, "parbench {}: error: {}\n", cmd, e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "parbench {}: error: {}\n", cmd, e.what());
    return 1;
  }
}
