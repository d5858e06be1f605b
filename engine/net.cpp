// Shape planning, validation and PyTorch-style initialisation of layer lists.
#include "engine/net.h"

#include <cmath>
#include <iterator>

#include <fmt/ranges.h>

#include "engine/check.h"

namespace pb {

const char* layer_type_name(LayerType t) {
  switch (t) {
    case LayerType::Conv2d: return "conv2d";
    case LayerType::ReLU: return "relu";
    case LayerType::Linear: return "linear";
    case LayerType::Flatten: return "flatten";
    case LayerType::MaxPool2d: return "maxpool2d";
    case LayerType::Upsample: return "upsample";
    case LayerType::ConvTranspose2d: return "conv_transpose2d";
    case LayerType::Add: return "add";
    case LayerType::Concat: return "concat";
  }
  return "?";
}

bool parse_layer_type(const std::string& name, LayerType* type) {
  for (LayerType t : kLayerTypes)
    if (name == layer_type_name(t)) return *type = t, true;
  return false;
}

std::string layer_type_names() {
  std::string s;
  for (std::size_t i = 0; i < std::size(kLayerTypes); ++i)
    s += std::string(i == 0 ? "" : i + 1 == std::size(kLayerTypes) ? " or " : ", ") + layer_type_name(kLayerTypes[i]);
  return s;
}

namespace {
std::string source_name(int src) { return src == kNetInput ? std::string("the net's input") : fmt::format("layer {}", src); }
[[noreturn]] void bad_layer(const std::string& net, int i, LayerType t, const std::string& what) {
  throw UsageError(fmt::format("{}: layer {} ({}): {}", net.empty() ? "net" : net, i,
                               layer_type_name(t), what));
}
// What conv2d and conv_transpose2d ask of their fields and input.
void check_conv(const std::string& nm, int i, const LayerSpec& s, const Shape& cur, const std::string& from) {
  if (cur.size() != 3) bad_layer(nm, i, s.type, fmt::format("expects a [C, H, W] input, got {}", shape_str(cur)));
  if (s.out_channels <= 0) bad_layer(nm, i, s.type, fmt::format("out_channels must be positive, got {}", s.out_channels));
  if (s.kernel_h <= 0 || s.kernel_w <= 0)
    bad_layer(nm, i, s.type, fmt::format("kernel_size must be positive, got [{}, {}]", s.kernel_h, s.kernel_w));
  if (s.stride_h <= 0 || s.stride_w <= 0)
    bad_layer(nm, i, s.type, fmt::format("stride must be positive, got [{}, {}]", s.stride_h, s.stride_w));
  if (s.pad_h < 0 || s.pad_w < 0)
    bad_layer(nm, i, s.type, fmt::format("padding must not be negative, got [{}, {}]", s.pad_h, s.pad_w));
  if (s.in_channels >= 0 && s.in_channels != cur[0])
    bad_layer(nm, i, s.type, fmt::format("in_channels is {} but {} gives {} channels", s.in_channels, from, cur[0]));
}
}  // namespace

NetPlan plan_net(const NetSpec& net) {
  NetPlan plan;
  const std::string& nm = net.name;
  if (net.input.empty() || (net.input.size() != 1 && net.input.size() != 3))
    throw UsageError(fmt::format("{}: input must be [C, H, W] or [F], got {}", nm, shape_str(net.input)));
  double input_numel = 1;
  for (int64_t d : net.input) {
    if (d <= 0) throw UsageError(fmt::format("{}: input sizes must be positive, got {}", nm, shape_str(net.input)));
    input_numel *= static_cast<double>(d);
  }
  if (input_numel > 0x1p48)
    throw UsageError(fmt::format("{}: input {} has {:.3g} values per sample, more than any device can hold", nm,
                                 shape_str(net.input), input_numel));
  if (net.layers.empty()) throw UsageError(fmt::format("{}: the layer list is empty", nm));
  plan.input = net.input;
  for (std::size_t li = 0; li < net.layers.size(); ++li) {
    const LayerSpec& s = net.layers[li];
    const int i = static_cast<int>(li);
    LayerPlan lp;
    lp.spec = s;
    lp.index = i;
    lp.inputs = s.inputs.empty() ? std::vector<int>{i - 1} : s.inputs;
    std::vector<Shape> ins;
    for (int src : lp.inputs) {
      if (src < kNetInput || src >= i)
        bad_layer(nm, i, s.type, fmt::format("reads layer {}, which is not an earlier layer (a layer reads the net's "
                                             "input or layers before it)", src));
      ins.push_back(src == kNetInput ? net.input : plan.layers[src].out);
      if (src != kNetInput) ++plan.layers[src].readers;
    }
    const std::size_t arity = s.type == LayerType::Add ? 2 : s.type == LayerType::Concat ? 0 : 1;
    if (arity ? lp.inputs.size() != arity : lp.inputs.size() < 2)
      bad_layer(nm, i, s.type, fmt::format("reads {} inputs; it takes {}", lp.inputs.size(),
                                           arity == 2 ? "two" : arity == 1 ? "one" : "two or more"));
    const Shape& cur = ins[0];
    const std::string from = s.inputs.empty() ? std::string("the previous layer") : source_name(lp.inputs[0]);
    lp.in = cur;
    lp.param_offset = plan.param_count;
    switch (s.type) {
      case LayerType::Conv2d: {
        check_conv(nm, i, s, cur, from);
        const int64_t ph = cur[1] + 2 * s.pad_h, pw = cur[2] + 2 * s.pad_w;
        if (s.kernel_h > ph || s.kernel_w > pw)
          bad_layer(nm, i, s.type, fmt::format("kernel_size [{}, {}] is larger than the padded input {}x{}",
                                               s.kernel_h, s.kernel_w, ph, pw));
        const int64_t oh = (ph - s.kernel_h) / s.stride_h + 1, ow = (pw - s.kernel_w) / s.stride_w + 1;
        lp.out = {s.out_channels, oh, ow};
        lp.weight_shape = {s.out_channels, cur[0], s.kernel_h, s.kernel_w};
        lp.bias_shape = {s.out_channels};
        lp.forward_flops = 2.0 * s.out_channels * oh * ow * cur[0] * s.kernel_h * s.kernel_w;
        break;
      }
      case LayerType::ConvTranspose2d: {  // the adjoint of a conv2d from its output to its input
        check_conv(nm, i, s, cur, from);
        // In double first: a file's stride or padding may be any int64.
        const double dh = static_cast<double>(cur[1] - 1) * static_cast<double>(s.stride_h) - 2.0 * static_cast<double>(s.pad_h) +
                          static_cast<double>(s.kernel_h);
        const double dw = static_cast<double>(cur[2] - 1) * static_cast<double>(s.stride_w) - 2.0 * static_cast<double>(s.pad_w) +
                          static_cast<double>(s.kernel_w);
        if (dh <= 0 || dw <= 0)
          bad_layer(nm, i, s.type, fmt::format("padding [{}, {}] leaves no output from a {}x{} input", s.pad_h, s.pad_w,
                                               cur[1], cur[2]));
        if (dh * dw > 0x1p48)
          bad_layer(nm, i, s.type, fmt::format("its {:.3g} x {:.3g} output is more than any device can hold", dh, dw));
        const int64_t oh = static_cast<int64_t>(dh), ow = static_cast<int64_t>(dw);
        lp.out = {s.out_channels, oh, ow};
        lp.weight_shape = {cur[0], s.out_channels, s.kernel_h, s.kernel_w};  // [in, out, kH, kW], as PyTorch's
        lp.bias_shape = {s.out_channels};
        lp.forward_flops = 2.0 * cur[0] * cur[1] * cur[2] * s.out_channels * s.kernel_h * s.kernel_w;
        break;
      }
      case LayerType::Linear: {
        if (cur.size() != 1)
          bad_layer(nm, i, s.type, fmt::format("expects a flat [F] input, got {} (add a flatten layer)", shape_str(cur)));
        if (s.out_features <= 0) bad_layer(nm, i, s.type, fmt::format("out_features must be positive, got {}", s.out_features));
        if (s.in_features >= 0 && s.in_features != cur[0])
          bad_layer(nm, i, s.type, fmt::format("in_features is {} but {} gives {} features", s.in_features, from, cur[0]));
        lp.out = {s.out_features};
        lp.weight_shape = {s.out_features, cur[0]};
        lp.bias_shape = {s.out_features};
        lp.forward_flops = 2.0 * s.out_features * cur[0];
        break;
      }
      case LayerType::ReLU:
        lp.out = cur;
        break;
      case LayerType::Flatten:
        lp.out = {numel_of(cur)};
        break;
      case LayerType::MaxPool2d:
        if (cur.size() != 3 || cur[1] < 2 || cur[2] < 2)
          bad_layer(nm, i, s.type, fmt::format("expects a [C, H, W] input of at least 2x2, got {}", shape_str(cur)));
        lp.out = {cur[0], cur[1] / 2, cur[2] / 2};  // an odd last row or column left out, as PyTorch
        break;
      case LayerType::Upsample:
        if (cur.size() != 3) bad_layer(nm, i, s.type, fmt::format("expects a [C, H, W] input, got {}", shape_str(cur)));
        lp.out = {cur[0], 2 * cur[1], 2 * cur[2]};
        break;
      case LayerType::Add:
        if (ins[1] != cur)
          bad_layer(nm, i, s.type, fmt::format("adds inputs of two shapes, {} ({}) and {} ({})", shape_str(cur),
                                               source_name(lp.inputs[0]), shape_str(ins[1]), source_name(lp.inputs[1])));
        lp.out = cur;
        break;
      case LayerType::Concat: {
        lp.out = cur;
        for (std::size_t k = 0; k < ins.size(); ++k) {
          if (cur.size() != 3 || ins[k].size() != 3 || ins[k][1] != cur[1] || ins[k][2] != cur[2])
            bad_layer(nm, i, s.type, fmt::format("joins [C, H, W] inputs of one height and width along the channels; "
                                                 "{} gives {} beside {}", source_name(lp.inputs[k]), shape_str(ins[k]),
                                                 shape_str(cur)));
          if (k > 0) lp.out[0] += ins[k][0];
        }
        break;
      }
    }
    // Sizes beyond 2^48 values fit no device and would overflow the int64 element counts.
    for (const Shape* sh : {&lp.out, &lp.weight_shape}) {
      double n = 1;
      for (int64_t d : *sh) n *= static_cast<double>(d);
      if (n > 0x1p48)
        bad_layer(nm, i, s.type, fmt::format("{} {} has {:.3g} values, more than any device can hold",
                                             sh == &lp.out ? "output" : "weight", shape_str(*sh), n));
    }
    if (!lp.weight_shape.empty()) {
      lp.weight_numel = numel_of(lp.weight_shape);
      lp.bias_numel = numel_of(lp.bias_shape);
    }
    plan.param_count += lp.weight_numel + lp.bias_numel;
    plan.forward_flops += lp.forward_flops;
    plan.layers.push_back(lp);
  }
  for (const LayerPlan& l : plan.layers)
    if (l.readers == 0 && l.index + 1 < static_cast<int>(plan.layers.size()))
      bad_layer(nm, l.index, l.spec.type, "its output is read by no layer (the last layer's output is the net's)");
  plan.output = plan.layers.back().out;
  if (net.target == Target::Input && plan.output != plan.input)
    throw UsageError(fmt::format("{}: target \"input\" needs the output shape {} to equal the input shape {}",
                                 nm, shape_str(plan.output), shape_str(plan.input)));
  return plan;
}

bool NetPlan::has_skips() const { return !first_skip(*this).empty(); }

std::string first_skip(const NetPlan& plan) {
  for (const LayerPlan& l : plan.layers) {
    if (l.inputs.empty() || (l.inputs.size() == 1 && l.inputs[0] == l.index - 1)) continue;
    std::vector<std::string> from;
    for (int src : l.inputs) from.push_back(source_name(src));
    return fmt::format("layer {} ({}) reads {}", l.index, layer_type_name(l.spec.type), fmt::join(from, " and "));
  }
  return "";
}

uint64_t Rng::next_u64() {  // splitmix64
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

float Rng::uniform(float lo, float hi) {
  const double u = static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
  return static_cast<float>(lo + (hi - lo) * u);
}

float Rng::normal() {  // Box-Muller
  double u1 = static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
  const double u2 = static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
  if (u1 < 1e-300) u1 = 1e-300;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

std::vector<float> init_params(const NetPlan& plan, uint64_t seed) {
  std::vector<float> p(static_cast<std::size_t>(plan.param_count));
  Rng rng(seed);
  for (const LayerPlan& l : plan.layers) {
    if (l.weight_numel == 0) continue;
    const int64_t fan_in = l.weight_numel / l.weight_shape[0];
    const float bound = static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in)));
    float* w = p.data() + l.param_offset;
    for (int64_t i = 0; i < l.weight_numel + l.bias_numel; ++i) w[i] = rng.uniform(-bound, bound);
  }
  return p;
}

}  // namespace pb
