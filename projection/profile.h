// profile.json: a net's per-layer times at several batch sizes (parbench profile), read strictly
// and interpolated to the batches a configuration's workers run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pb::projection {

inline constexpr double kFloat = sizeof(float);

// Values in a shape (per sample: channels x height x width, or features).
inline double numel(const std::vector<int64_t>& s) {
  double n = 1;
  for (int64_t d : s) n *= static_cast<double>(d);
  return n;
}

struct LayerProfile {
  int index = 0;
  std::string type;  // a layer type name (layer_type_name)
  std::vector<int64_t> in, out;
  std::vector<int> inputs;  // the layers it reads (-1: the net's input); empty: the one before it
  int64_t params = 0;
  double forward_flops = 0;  // per sample
  std::vector<double> forward_s, backward_data_s, backward_weights_s;  // per entry of Profile::batches
  double activation_bytes_per_sample = 0;
  double workspace_bytes = 0;
};

struct Profile {
  std::string source;
  nlohmann::json context;
  std::vector<int64_t> batches;
  std::vector<LayerProfile> layers;
  std::vector<double> loss_s;
  double optimizer_s_per_param = 0;
  int threads = 0;          // context.threads; 0 when not recorded
  // context.concurrent_workers: how many workers timed the same layers at once, each with
  // `threads` threads (1: the profile ran alone). The simulator takes the profile's speed as the
  // speed of that many busy workers on a node and scales from there.
  int concurrent = 1;
  std::string device_kind;  // context.device_kind or context.device ("cpu", "cuda", ...)
  // context.precision: fp32, tf32 or bf16, what the layers were timed in (fp32 when not recorded).
  // The memory estimate follows it (bf16: activations and a parameter copy in bf16).
  std::string precision = "fp32";

  int64_t param_count() const;
  double forward_flops() const;  // per sample
  double input_bytes_per_sample() const;
  double output_bytes_per_sample() const;
  // Seconds at batch b: linear between the measured batches, extrapolated along the last two.
  double forward(int layer, double b) const;
  double backward_data(int layer, double b) const;
  double backward_weights(int layer, double b) const;
  double loss(double b) const;
  // The highest forward rate of any layer at any measured batch (FLOPs / second).
  double best_forward_flops_per_s() const;
};

// Throws pb::UsageError "SOURCE: field: what was expected".
Profile parse_profile(const std::string& text, const std::string& source);
Profile load_profile(const std::string& path);
nlohmann::json profile_json(const Profile& p);
// The profile of the same convolutional net at images `to` pixels wide instead of `from`: times,
// FLOPs and activation bytes of every layer scale with the pixel count (to/from)^2, parameters and
// the optimizer do not -- an assumption, exact for FLOPs, close for large convolutions. UsageError
// for a net with linear or flatten layers, whose width the image changes.
Profile scale_image(const Profile& p, int64_t from, int64_t to);

}  // namespace pb::projection
