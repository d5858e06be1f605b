// Per-layer times of a net's training passes on one backend -- forward, backward-data and
// backward-weights apart -- on the device's own clock (backend events: CUDA events on a GPU,
// the steady clock around synchronous calls on CPU), and the library workspace each layer needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/backend.h"
#include "engine/net.h"

namespace pb {

struct LayerTimes {
  double forward_s = 0, backward_data_s = 0, backward_weights_s = 0;
  double total_s() const { return forward_s + backward_data_s + backward_weights_s; }
};

// Medians (or means) over the repetitions. The whole passes are timed in separate repetitions without the
// per-layer events, so their sums can be checked against them.
struct NetProfile {
  int64_t batch = 0;
  std::vector<LayerTimes> layers;  // one per layer of the plan
  double forward_s = 0;            // one whole forward
  double backward_s = 0;           // one whole backward (the first layer's input gradient not computed)
  double loss_s = 0;               // MSE loss and its gradient
  double optimizer_s = 0;          // one Adam step over every parameter
};

struct ProfileOptions {
  ProfileOptions(int64_t batch_ = 1, int warmup_ = 2, int repetitions_ = 5, uint64_t seed_ = 0, bool mean_ = false)
      : batch(batch_), warmup(warmup_), repetitions(repetitions_), seed(seed_), mean(mean_) {}
  int64_t batch = 1;
  int warmup = 2;       // untimed training steps first (algorithm search, scratch growth)
  int repetitions = 5;  // timed: per-layer and whole-pass ones each
  uint64_t seed = 0;    // parameters and data
  // The mean over the repetitions instead of the median: for workers timed side by side, where a
  // layer's time depends on what the others run meanwhile and a step pays the mean.
  bool mean = false;
  // Workers timed side by side: called before every timed layer call and whole pass, a barrier
  // among them, so that they run the same layer at once as a data-parallel step's workers do.
  std::function<void()> sync;
};

NetProfile profile_net(const NetPlan& plan, Backend& be, const ProfileOptions& o);

// Workers that timed the same layers side by side (each one's NetProfile at one batch) as one:
// every time is the workers' mean x the slowest worker's total over the mean total. Workers
// sharing cores do not run at one speed (a VM's cores may be shared with other tenants), and a
// step's workers wait for each other, so a step goes at the pace of the slowest. `*factor`: that ratio.
NetProfile at_slowest_pace(const std::vector<NetProfile>& workers, double* factor = nullptr);

// The library workspace (MemoryPool::Workspace) each layer's forward, backward-data and
// backward-weights calls need at `batch`: every layer runs once on a fresh backend from `make`,
// and the growth of its device's workspace count is that layer's figure.
std::vector<std::size_t> layer_workspace_bytes(const NetPlan& plan, int64_t batch,
                                               const std::function<std::unique_ptr<Backend>()>& make);
// The same run, with what each convolution layer's backend chose (Backend::conv_algorithms: CUDA,
// each direction's cuDNN engine or algorithm and its workspace; empty on CPU, which chooses none).
struct LayerConvChoice {
  std::size_t workspace_bytes = 0;
  std::string algorithms;
};
std::vector<LayerConvChoice> layer_conv_choices(const NetPlan& plan, int64_t batch,
                                                const std::function<std::unique_ptr<Backend>()>& make);

}  // namespace pb
