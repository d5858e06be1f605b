// Layer lists and their shape plan: the description every model, strategy and workload shares.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/tensor.h"

namespace pb {

// MaxPool2d: 2x2, stride 2 (torch.nn.MaxPool2d(2)); Upsample: nearest, 2x (torch.nn.Upsample(scale_factor=2));
// ConvTranspose2d: torch.nn.ConvTranspose2d without output padding, dilation or groups; Add: the sum
// of two inputs of one shape (a residual); Concat: its inputs along the channels (torch.cat(dim=1)).
enum class LayerType { Conv2d, ReLU, Linear, Flatten, MaxPool2d, Upsample, ConvTranspose2d, Add, Concat };
const char* layer_type_name(LayerType t);
inline constexpr LayerType kLayerTypes[] = {LayerType::Conv2d,  LayerType::ReLU,      LayerType::Linear,
                                            LayerType::Flatten, LayerType::MaxPool2d, LayerType::Upsample,
                                            LayerType::ConvTranspose2d, LayerType::Add, LayerType::Concat};
// The layers with weights and a bias: conv2d, conv_transpose2d and linear.
inline bool has_weights(LayerType t) {
  return t == LayerType::Conv2d || t == LayerType::ConvTranspose2d || t == LayerType::Linear;
}
// The type layer_type_name gives `name`; false when none does.
bool parse_layer_type(const std::string& name, LayerType* type);
// "conv2d, relu, ..., upsample or conv_transpose2d", for messages.
std::string layer_type_names();

struct LayerSpec {
  LayerType type = LayerType::ReLU;
  // Its parameter files' prefix (<name>.weight.npy): a module path, as a state_dict names it;
  // empty: the layer's index, as in an nn.Sequential.
  std::string name{};
  // The layers it reads, by index (kNetInput: the net's input), in order; empty: the layer before
  // it (the net's input for the first). Only earlier layers: the list is in topological order.
  std::vector<int> inputs{};
  // conv2d, conv_transpose2d
  int64_t out_channels = 0, kernel_h = 0, kernel_w = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  int64_t in_channels = -1;  // declared by the user; -1 = inferred
  // linear
  int64_t out_features = 0;
  int64_t in_features = -1;  // declared by the user; -1 = inferred
};

inline constexpr int kNetInput = -1;

enum class Target { Input, Random };  // reconstruct the input, or regress a random target

struct NetSpec {
  std::string name;
  Shape input;  // per sample: {C, H, W} or {F}
  std::vector<LayerSpec> layers;
  Target target = Target::Input;
  AdamParams adam;
};

// One layer with its shapes resolved. Parameter offsets index the whole net's flat buffer, in
// nn.Sequential's parameters() order (weight then bias, layer by layer).
struct LayerPlan {
  LayerSpec spec;
  int index = 0;     // position in the layer list = PyTorch state_dict prefix
  // The layers it reads (kNetInput: the net's input; plan_net never leaves it empty, a plan made
  // otherwise (a profile's) may: the layer before) and how many layers read it.
  std::vector<int> inputs;
  int readers = 0;
  Shape in, out;     // per sample; in: its (first) input's
  int64_t weight_numel = 0, bias_numel = 0;
  Shape weight_shape, bias_shape;
  int64_t param_offset = 0;
  double forward_flops = 0;  // per sample, multiply-add = 2 FLOPs
};

struct NetPlan {
  std::vector<LayerPlan> layers;
  Shape input, output;  // per sample
  int64_t param_count = 0;
  double forward_flops = 0;  // per sample
  // Some layer reads other than the one before it (a skip: residual add, U-Net concat).
  bool has_skips() const;
};
// "layer 5 (add) reads layer 2": the first skip, for messages; empty for a chain.
std::string first_skip(const NetPlan& plan);

// Validates the layer chain; errors (UsageError) name the layer index, type and field.
NetPlan plan_net(const NetSpec& net);

// PyTorch's default init (kaiming_uniform a=sqrt(5): U(+-1/sqrt(fan_in)) for weights, and
// U(+-1/sqrt(fan_in)) for biases) from a seeded generator, for the whole net.
std::vector<float> init_params(const NetPlan& plan, uint64_t seed);

// A small seeded generator whose stream is the same on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull) {}
  uint64_t next_u64();
  float uniform(float lo, float hi);  // [lo, hi)
  float normal();
 private:
  uint64_t state_;
};

}  // namespace pb
