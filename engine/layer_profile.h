// Per-layer times of a net's training passes on one backend -- forward, backward-data and
// backward-weights apart, the first call of each (plan, algorithm search, workspace growth) apart
// from the steady ones -- on the device's own clock, with each call's library workspace and algorithm.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/model.h"
#include "engine/net.h"

namespace pb {

struct LayerTimes {
  double forward_s = 0, backward_data_s = 0, backward_weights_s = 0;
  double total_s() const { return forward_s + backward_data_s + backward_weights_s; }
};

// Per pass, indexed by LayerPass (forward, backward-data, backward-weights).
template <class T>
using PerPass = std::array<T, 3>;

// Medians (or means) over the repetitions. The whole passes are timed in separate repetitions without the
// per-layer events, so their sums can be checked against them.
struct NetProfile {
  int64_t batch = 0;
  std::vector<LayerTimes> layers;  // one per layer of the plan
  double forward_s = 0;            // one whole forward
  double backward_s = 0;           // one whole backward (the first layer's input gradient not computed)
  double loss_s = 0;               // MSE loss and its gradient
  double optimizer_s = 0;          // one Adam step over every parameter
  // Per layer, from the first training step (one call of each pass, the backend's library
  // workspace released before each, the events synchronized after): that call's seconds (0 where
  // the layer makes no such call), the growth of the device's workspace count around it (the
  // library workspace the call needs), and the algorithm the backend chose (convolutions).
  std::vector<LayerTimes> first_call;
  std::vector<PerPass<std::size_t>> workspace_bytes;
  std::vector<PerPass<std::string>> algorithms;
  double setup_s = 0;       // host seconds making the stage, its parameters and data on the device
  double first_step_s = 0;  // host seconds of the first step (every call timed, workspace measured)
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
  // The first step's per-call workspace: false for workers timed side by side on one device,
  // whose workspace counts mix (their first_call times stay).
  bool workspace = true;
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

// Each layer alone on a fresh backend from `make` at `batch`: the growth of its device's workspace
// count and what each convolution layer's backend chose (Backend::conv_algorithms: CUDA,
// each direction's cuDNN engine or algorithm and its workspace; empty on CPU, which chooses none).
struct LayerConvChoice {
  std::size_t workspace_bytes = 0;
  std::string algorithms;
};
std::vector<LayerConvChoice> layer_conv_choices(const NetPlan& plan, int64_t batch,
                                                const std::function<std::unique_ptr<Backend>()>& make);
// The library workspace (MemoryPool::Workspace) each layer's calls need: the largest of its passes'.
std::vector<std::size_t> layer_workspace_bytes(const NetProfile& p);

// Parameters about as PyTorch's default initialisation spreads them (sd 1/sqrt(3 fan-in)) and
// inputs and targets of sd 1, made on the stage's device by Backend::fill_normal: data for
// timing, not the training data of run / train / replay.
void fill_timing_params(const NetPlan& plan, Sequential& stage, uint64_t seed);

}  // namespace pb
