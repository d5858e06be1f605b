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
  int64_t image = 512;       // great_net, resnet, unet: image height and width
  double width = 1.0;        // their channel width scale (1 = the seed's, ResNet-18's, the U-Net's channels)
};

// GreatNetwork: 14 conv3x3 pad 1 layers, channels 3-16-32-...-1024-...-16-3, ReLU after each,
// MSE against the input image, Adam lr 1e-4. Hidden channels scale by `width` (at least 1).
NetSpec great_net(int64_t image, double width);
// The seed's model-parallel split of GreatNetwork: its network1 holds the first 6 conv + ReLU
// pairs (3->16 ... 256->512, up to the 512-channel layer), network2 the other 8.
constexpr int kGreatNetSeedFirstStage = 12;
// ResNet-18's shape without normalization: a 7x7 stride-2 stem, ReLU and 2x2 max pooling, four
// stages of two residual blocks (two 3x3 convs, the block's input added, ReLU; the first block of
// stages 2-4 at stride 2 with a 1x1 projection shortcut), channels 64-128-256-512, then flatten and
// a linear layer to 10 outputs, a random target. Channels scale by `width` (at least 1).
NetSpec resnet(int64_t image, double width);
// A 2-D U-Net of depth 4: per level two 3x3 conv + ReLU (channels 32-64-128-256), 2x2 max pooling
// down; up, a 2x2 stride-2 transposed conv, the level's encoder output concatenated, two 3x3 conv +
// ReLU; a 1x1 conv to 3 channels, MSE against the input. Channels scale by `width`; the image is a
// multiple of 8.
NetSpec unet(int64_t image, double width);
// great_net, resnet and unet: sized by --image and --width.
bool scaled_workload(const std::string& name);
// The tutorial's model: Linear(5, 2), a random target.
NetSpec linear_net();
// A net from JSON text; `source` names the file in errors.
NetSpec parse_net_json(const std::string& text, const std::string& source);
// A workload's name begins every benchmark name (workload/strategy/devices:N/...) and trace file
// name: 1 to kMaxWorkloadName letters, digits, '_', '-', '.' or '+'. UsageError naming `where`.
inline constexpr std::size_t kMaxWorkloadName = 64;
void check_workload_name(const std::string& name, const std::string& where);
NetSpec load_net_json(const std::string& path);
// The net as the JSON parse_net_json reads: every layer's fields, "inputs" where a layer reads
// other than the one before it, the target and Adam's settings; parse_net_json gives it back.
std::string net_to_json(const NetSpec& net);
// Why `lr` is not a usable Adam learning rate ("must be ..."), or empty when it is.
std::string adam_lr_problem(double lr);

// "great_net", "resnet", "unet", "linear", or a path to a .json net description.
NetSpec resolve_workload(const std::string& name, const WorkloadOptions& opts);
std::vector<std::string> builtin_workloads();

// Standard-normal values, seeded (the seed's FakeDataset draws torch.randn images).
std::vector<float> synthetic_values(int64_t n, uint64_t seed);

}  // namespace pb
