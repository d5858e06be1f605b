// Workloads: the seed's GreatNetwork, the tutorial's Linear(5, 2), and nets described in JSON;
// plus the synthetic data they train on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/net.h"

namespace pb {

struct WorkloadOptions {
  int64_t image = 512;       // great_net: image height and width
  double width = 1.0;        // great_net: channel width scale (1 = the seed's channels)
};

// GreatNetwork: 14 conv3x3 pad 1 layers, channels 3-16-32-...-1024-...-16-3, ReLU after each,
// MSE against the input image, Adam lr 1e-4. Hidden channels scale by `width` (at least 1).
NetSpec great_net(int64_t image, double width);
// The seed's model-parallel split of GreatNetwork: its network1 holds the first 6 conv + ReLU
// pairs (3->16 ... 256->512, up to the 512-channel layer), network2 the other 8.
constexpr int kGreatNetSeedFirstStage = 12;
// The tutorial's model: Linear(5, 2), a random target.
NetSpec linear_net();
// A net from JSON text; `source` names the file in errors.
NetSpec parse_net_json(const std::string& text, const std::string& source);
// A workload's name begins every benchmark name (workload/strategy/devices:N/...) and trace file
// name: 1 to kMaxWorkloadName letters, digits, '_', '-', '.' or '+'. UsageError naming `where`.
inline constexpr std::size_t kMaxWorkloadName = 64;
void check_workload_name(const std::string& name, const std::string& where);
NetSpec load_net_json(const std::string& path);
// Why `lr` is not a usable Adam learning rate ("must be ..."), or empty when it is.
std::string adam_lr_problem(double lr);

// "great_net", "linear", or a path to a .json net description.
NetSpec resolve_workload(const std::string& name, const WorkloadOptions& opts);
std::vector<std::string> builtin_workloads();

// Standard-normal values, seeded (the seed's FakeDataset draws torch.randn images).
std::vector<float> synthetic_values(int64_t n, uint64_t seed);

}  // namespace pb
