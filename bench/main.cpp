// parbench: one program, subcommands. Only here do errors become exit codes:
// 2 for bad input (flags, files), 1 for anything else.
#include <cstdio>

#include "bench/cli.h"
#include "engine/check.h"

namespace {

const char* kUsage =
    "usage: parbench <command> [flags]\n"
    "\n"
    "Which parallelism strategy trains a conv net fastest on this machine, by how much, and at\n"
    "what memory cost.\n"
    "\n"
    "commands:\n"
    "  train     train a workload and print each iteration's time and loss\n"
    "  replay    K training steps from .npy parameters and data; writes losses and parameters\n"
    "  devices   list the CPU and GPUs this build can use\n"
    "\n"
    "Run 'parbench <command> --help' for a command's flags.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string cmd = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (cmd == "--help" || cmd == "-h" || cmd == "help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (cmd == "train") return pb::cmd_train(args);
    if (cmd == "replay") return pb::cmd_replay(args);
    if (cmd == "devices") return pb::cmd_devices(args);
    fmt::print(stderr, "parbench: unknown command '{}'\n\n{}", cmd, kUsage);
    return 2;
  } catch (const pb::UsageError& e) {
    fmt::print(stderr, "parbench {}: error: {}\n", cmd, e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "parbench {}: error: {}\n", cmd, e.what());
    return 1;
  }
}
