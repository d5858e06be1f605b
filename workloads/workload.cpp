// Built-in workloads, the JSON net format, and synthetic data.
#include "workloads/workload.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "engine/check.h"
#include "engine/fsutil.h"
#include "engine/json_input.h"

namespace pb {

NetSpec great_net(int64_t image, double width) {
  if (image <= 0) throw UsageError(fmt::format("great_net: image size must be positive, got {}", image));
  // The widest layer has 1024 * width channels; beyond 2^31 no allocation could hold it.
  if (!(width > 0 && width * 1024 <= double(1 << 30) * 2))
    throw UsageError(fmt::format("great_net: --width must be a positive finite scale (at most {}), got {}",
                                 double(1 << 30) * 2 / 1024, width));
  static const int64_t channels[] = {3, 16, 32, 64, 128, 256, 512, 1024, 512, 256, 128, 64, 32, 16, 3};
  NetSpec net;
  net.name = "great_net";
  net.input = {3, image, image};
  const int n = static_cast<int>(std::size(channels));
  for (int i = 1; i < n; ++i) {
    LayerSpec conv;
    conv.type = LayerType::Conv2d;
    conv.out_channels = (i == n - 1) ? 3 : std::max<int64_t>(1, std::llround(channels[i] * width));
    conv.kernel_h = conv.kernel_w = 3;
    conv.pad_h = conv.pad_w = 1;
    net.layers.push_back(conv);
    net.layers.push_back(LayerSpec{LayerType::ReLU});
  }
  // plan_net refuses a tensor beyond 2^48 values but knows no flags: name the one that sized it.
  int64_t widest = 3;
  for (const LayerSpec& l : net.layers) widest = std::max(widest, l.out_channels);
  const double values = static_cast<double>(widest) * static_cast<double>(image) * static_cast<double>(image);
  if (values > 0x1p48)
    throw UsageError(fmt::format("great_net: --image {} makes a {} x {} x {} activation, {:.3g} values per sample, more "
                                 "than any device can hold: give a smaller --image (or --width)",
                                 image, widest, image, image, values));
  net.target = Target::Input;
  net.adam.lr = 1e-4;
  return net;
}

namespace {
void check_scale(const char* net, int64_t image, double width, int64_t widest) {
  if (!(width > 0 && width * static_cast<double>(widest) <= double(1 << 30) * 2))
    throw UsageError(fmt::format("{}: --width must be a positive finite scale (at most {}), got {}", net,
                                 double(1 << 30) * 2 / static_cast<double>(widest), width));
  if (static_cast<double>(image) * static_cast<double>(image) * width * static_cast<double>(widest) > 0x1p48)
    throw UsageError(fmt::format("{}: --image {} makes activations of more values per sample than any device can "
                                 "hold: give a smaller --image (or --width)", net, image));
}
int64_t scaled(int64_t channels, double width) { return std::max<int64_t>(1, std::llround(static_cast<double>(channels) * width)); }
LayerSpec conv(int64_t out, int64_t k, int64_t stride, int64_t pad, std::vector<int> inputs = {}) {
  LayerSpec c;
  c.type = LayerType::Conv2d;
  c.out_channels = out;
  c.kernel_h = c.kernel_w = k;
  c.stride_h = c.stride_w = stride;
  c.pad_h = c.pad_w = pad;
  c.inputs = std::move(inputs);
  return c;
}
LayerSpec layer(LayerType t, std::vector<int> inputs = {}) {
  LayerSpec l;
  l.type = t;
  l.inputs = std::move(inputs);
  return l;
}
int last(const NetSpec& n) { return static_cast<int>(n.layers.size()) - 1; }
}  // namespace

NetSpec resnet(int64_t image, double width) {
  if (image < 4) throw UsageError(fmt::format("resnet: --image must be at least 4 (its stem halves it twice), got {}", image));
  check_scale("resnet", image, width, 64);
  NetSpec net;
  net.name = "resnet";
  net.input = {3, image, image};
  net.layers = {conv(scaled(64, width), 7, 2, 3), layer(LayerType::ReLU), layer(LayerType::MaxPool2d)};
  int64_t channels = scaled(64, width);
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t out = scaled(int64_t{64} << stage, width);
    for (int block = 0; block < 2; ++block) {
      const int stride = stage > 0 && block == 0 ? 2 : 1;
      const int in = last(net);
      net.layers.push_back(conv(out, 3, stride, 1));
      net.layers.push_back(layer(LayerType::ReLU));
      net.layers.push_back(conv(out, 3, 1, 1));
      const int body = last(net);
      int shortcut = in;
      if (stride != 1 || out != channels) {  // a 1x1 projection, as torchvision's downsample
        net.layers.push_back(conv(out, 1, stride, 0, {in}));
        shortcut = last(net);
      }
      net.layers.push_back(layer(LayerType::Add, {body, shortcut}));
      net.layers.push_back(layer(LayerType::ReLU));
      channels = out;
    }
  }
  net.layers.push_back(layer(LayerType::Flatten));
  LayerSpec fc;
  fc.type = LayerType::Linear;
  fc.out_features = 10;
  net.layers.push_back(fc);
  net.target = Target::Random;
  net.adam.lr = 1e-4;
  return net;
}

NetSpec unet(int64_t image, double width) {
  if (image < 8 || image % 8 != 0)
    throw UsageError(fmt::format("unet: --image must be a multiple of 8 (three poolings and their up-samplings meet "
                                 "the skips at the same size), got {}", image));
  check_scale("unet", image, width, 256);
  NetSpec net;
  net.name = "unet";
  net.input = {3, image, image};
  std::vector<int> skips;
  auto double_conv = [&](int64_t out) {
    for (int k = 0; k < 2; ++k) {
      net.layers.push_back(conv(out, 3, 1, 1));
      net.layers.push_back(layer(LayerType::ReLU));
    }
  };
  for (int level = 0; level < 4; ++level) {
    if (level > 0) net.layers.push_back(layer(LayerType::MaxPool2d));
    double_conv(scaled(int64_t{32} << level, width));
    skips.push_back(last(net));
  }
  for (int level = 2; level >= 0; --level) {
    const int64_t out = scaled(int64_t{32} << level, width);
    LayerSpec up;
    up.type = LayerType::ConvTranspose2d;
    up.out_channels = out;
    up.kernel_h = up.kernel_w = up.stride_h = up.stride_w = 2;
    net.layers.push_back(up);
    net.layers.push_back(layer(LayerType::Concat, {last(net), skips[level]}));
    double_conv(out);
  }
  net.layers.push_back(conv(3, 1, 1, 0));
  net.target = Target::Input;
  net.adam.lr = 1e-4;
  return net;
}

bool scaled_workload(const std::string& name) { return name == "great_net" || name == "resnet" || name == "unet"; }

NetSpec linear_net() {
  NetSpec net;
  net.name = "linear";
  net.input = {5};
  LayerSpec fc;
  fc.type = LayerType::Linear;
  fc.out_features = 2;
  net.layers.push_back(fc);
  net.target = Target::Random;
  net.adam.lr = 1e-3;
  return net;
}

namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& src, const std::string& where, const std::string& what) {
  throw UsageError(fmt::format("{}: {}: {}", src, where, what));
}

int64_t get_int(const json& j, const std::string& src, const std::string& where, const char* key,
                int64_t fallback, bool required) {
  if (!j.contains(key)) {
    if (required) bad(src, where, fmt::format("missing field \"{}\"", key));
    return fallback;
  }
  const json& v = j.at(key);
  if (!v.is_number_integer()) bad(src, where, fmt::format("field \"{}\" must be an integer, got {}", key, v.dump()));
  return v.get<int64_t>();
}

// An int or a [h, w] pair.
std::pair<int64_t, int64_t> get_pair(const json& j, const std::string& src, const std::string& where,
                                     const char* key, int64_t fallback, bool required) {
  if (!j.contains(key)) {
    if (required) bad(src, where, fmt::format("missing field \"{}\"", key));
    return {fallback, fallback};
  }
  const json& v = j.at(key);
  if (v.is_number_integer()) return {v.get<int64_t>(), v.get<int64_t>()};
  if (v.is_array() && v.size() == 2 && v[0].is_number_integer() && v[1].is_number_integer())
    return {v[0].get<int64_t>(), v[1].get<int64_t>()};
  bad(src, where, fmt::format("field \"{}\" must be an integer or [h, w], got {}", key, v.dump()));
}

double get_double(const json& j, const std::string& src, const char* key, double fallback) {
  if (!j.contains(key)) return fallback;
  const json& v = j.at(key);
  if (!v.is_number()) bad(src, fmt::format("field \"{}\"", key), fmt::format("must be a number, got {}", v.dump()));
  return v.get<double>();
}

// A layer's "name": the prefix of its parameter files, so letters, digits, '_', '.' and '-' (a module
// path), unique, and not a number other than its own index (another layer's files).
std::string layer_name(const json& v, const std::string& src, const std::string& where, int index,
                       std::set<std::string>& names) {
  if (!v.is_string()) bad(src, where, fmt::format("field \"name\" must be a string, got {}", v.dump()));
  const std::string name = v.get<std::string>();
  bool ok = !name.empty() && name.size() <= 200 && name.front() != '.' && name.back() != '.';
  for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-');
  if (!ok)
    bad(src, where, fmt::format("name '{}' must be 1 to 200 letters, digits, '_', '.' or '-', not starting or ending "
                                "with '.' (a module path)", name.size() > 80 ? name.substr(0, 80) + "..." : name));
  const bool number = std::all_of(name.begin(), name.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  if (number && name != std::to_string(index))
    bad(src, where, fmt::format("name '{}' is another layer's index (its parameter files' default name)", name));
  if (name == "input") bad(src, where, "name 'input' stands for the net's input in \"inputs\": give the layer another");
  if (!names.insert(name).second) bad(src, where, fmt::format("name '{}' is given to an earlier layer too", name));
  return name;
}

// A layer's "inputs": earlier layers by name or index, "input" for the net's input.
std::vector<int> layer_inputs(const json& v, const std::string& src, const std::string& where,
                              const std::map<std::string, int>& index_of) {
  const std::string expected = "a list of earlier layers, each a name, an index or \"input\" (the net's input)";
  if (!v.is_array() || v.empty()) bad(src, where, fmt::format("field \"inputs\" must be {}, got {}", expected, v.dump()));
  std::vector<int> out;
  for (const json& e : v) {
    if (e.is_number_integer() && e.get<int64_t>() >= 0 && e.get<int64_t>() <= std::numeric_limits<int>::max()) {
      out.push_back(static_cast<int>(e.get<int64_t>()));
    } else if (e.is_string() && e.get<std::string>() == "input") {
      out.push_back(kNetInput);
    } else if (e.is_string() && index_of.count(e.get<std::string>())) {
      out.push_back(index_of.at(e.get<std::string>()));
    } else {
      bad(src, where, fmt::format("field \"inputs\": {} is not an earlier layer's name or index, nor \"input\"", e.dump()));
    }
  }
  return out;
}

}  // namespace

void check_workload_name(const std::string& name, const std::string& where) {
  // The first a letter or digit: not ".", ".." or "-x", which read as paths or flags.
  bool ok = !name.empty() && name.size() <= kMaxWorkloadName && std::isalnum(static_cast<unsigned char>(name[0]));
  for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '+');
  if (!ok)
    throw UsageError(fmt::format("{}: '{}' cannot name a workload: 1 to {} letters, digits, '_', '-', '.' or '+', the "
                                 "first a letter or digit (it starts every benchmark and trace file name)",
                                 where, name.size() > 80 ? name.substr(0, 80) + "..." : name, kMaxWorkloadName));
  // The built-in scaled nets' benchmarks carry their image and width (great_net/image:96/width:0.5/...):
  // a net file of such a name would be named as if it had them.
  if (scaled_workload(name))
    throw UsageError(fmt::format("{}: '{}' is a built-in net's name; give the file's net another", where, name));
}

NetSpec parse_net_json(const std::string& text, const std::string& src) {
  const json j = parse_json_input(text, src);
  if (!j.is_object()) throw UsageError(fmt::format("{}: expected a JSON object with \"input\" and \"layers\"", src));
  static const char* known_top[] = {"name", "input", "layers", "target", "lr", "weight_decay", "betas", "eps"};
  for (const auto& [k, v] : j.items())
    if (std::find(std::begin(known_top), std::end(known_top), k) == std::end(known_top))
      bad(src, "top level", fmt::format("unknown field \"{}\" (known: {})", k, fmt::join(known_top, ", ")));
  NetSpec net;
  if (j.contains("name") && !j["name"].is_string())
    bad(src, "field \"name\"", fmt::format("must be a string, got {}", j["name"].dump()));
  // A nameless net is named after its file; either way the name is checked now, before any work,
  // since it starts every benchmark and trace file name.
  net.name = j.contains("name") ? j["name"].get<std::string>() : std::filesystem::path(src).stem().string();
  check_workload_name(net.name, fmt::format("{}: {}", src, j.contains("name") ? "field \"name\"" : "the file's name (no field \"name\")"));
  if (!j.contains("input") || !j["input"].is_array())
    bad(src, "field \"input\"", "missing or not an array: expected [C, H, W] or [F]");
  for (const json& d : j["input"]) {
    if (!d.is_number_integer()) bad(src, "field \"input\"", fmt::format("sizes must be integers, got {}", j["input"].dump()));
    net.input.push_back(d.get<int64_t>());
  }
  if (!j.contains("layers") || !j["layers"].is_array()) bad(src, "field \"layers\"", "missing or not an array");
  int i = 0;
  std::set<std::string> names;
  std::map<std::string, int> index_of;  // the named layers so far
  for (const json& l : j["layers"]) {
    const std::string where = fmt::format("layer {}", i);
    if (!l.is_object() || !l.contains("type") || !l["type"].is_string())
      bad(src, where, "expected an object with a string field \"type\"");
    const std::string type = l["type"].get<std::string>();
    LayerSpec s;
    std::vector<std::string> allowed{"type"};
    if (type == "conv2d" || type == "conv_transpose2d") {  // torch.nn.Conv2d's or ConvTranspose2d's fields
      s.type = type == "conv2d" ? LayerType::Conv2d : LayerType::ConvTranspose2d;
      const std::string at = fmt::format("{} ({})", where, type);
      s.out_channels = get_int(l, src, at, "out_channels", 0, true);
      s.in_channels = get_int(l, src, at, "in_channels", -1, false);
      std::tie(s.kernel_h, s.kernel_w) = get_pair(l, src, at, "kernel_size", 0, true);
      std::tie(s.stride_h, s.stride_w) = get_pair(l, src, at, "stride", 1, false);
      std::tie(s.pad_h, s.pad_w) = get_pair(l, src, at, "padding", 0, false);
      allowed = {"type", "out_channels", "in_channels", "kernel_size", "stride", "padding"};
    } else if (type == "linear") {
      s.type = LayerType::Linear;
      s.out_features = get_int(l, src, where + " (linear)", "out_features", 0, true);
      s.in_features = get_int(l, src, where + " (linear)", "in_features", -1, false);
      allowed = {"type", "out_features", "in_features"};
    } else if (type == "relu") {
      s.type = LayerType::ReLU;
    } else if (type == "flatten") {
      s.type = LayerType::Flatten;
    } else if (type == "maxpool2d") {  // torch.nn.MaxPool2d(2): the only window it takes
      s.type = LayerType::MaxPool2d;
      for (const char* k : {"kernel_size", "stride"})
        if (get_pair(l, src, where + " (maxpool2d)", k, 2, false) != std::pair<int64_t, int64_t>{2, 2})
          bad(src, where + " (maxpool2d)", fmt::format("\"{}\" must be 2 (2x2 windows of stride 2)", k));
      allowed = {"type", "kernel_size", "stride"};
    } else if (type == "add") {  // a + b (torch.add): a residual
      s.type = LayerType::Add;
    } else if (type == "concat") {  // torch.cat(inputs, dim=1)
      s.type = LayerType::Concat;
      if (get_int(l, src, where + " (concat)", "dim", 1, false) != 1)
        bad(src, where + " (concat)", "\"dim\" must be 1 (the channels)");
      allowed = {"type", "dim"};
    } else if (type == "upsample") {  // torch.nn.Upsample(scale_factor=2), nearest
      s.type = LayerType::Upsample;
      if (get_int(l, src, where + " (upsample)", "scale_factor", 2, false) != 2)
        bad(src, where + " (upsample)", "\"scale_factor\" must be 2");
      if (l.contains("mode") && l["mode"] != "nearest") bad(src, where + " (upsample)", "\"mode\" must be \"nearest\"");
      allowed = {"type", "scale_factor", "mode"};
    } else {
      bad(src, where, fmt::format("unknown layer type \"{}\" (known: {})", type, layer_type_names()));
    }
    allowed.push_back("name");
    allowed.push_back("inputs");
    for (const auto& [k, v] : l.items())
      if (std::find(allowed.begin(), allowed.end(), k) == allowed.end())
        bad(src, fmt::format("{} ({})", where, type), fmt::format("unknown field \"{}\"", k));
    if (l.contains("inputs")) s.inputs = layer_inputs(l["inputs"], src, fmt::format("{} ({})", where, type), index_of);
    if (l.contains("name")) {
      s.name = layer_name(l["name"], src, fmt::format("{} ({})", where, type), i, names);
      index_of[s.name] = i;
    }
    net.layers.push_back(s);
    ++i;
  }
  if (j.contains("target") && !j["target"].is_string())
    bad(src, "field \"target\"", fmt::format("expected \"input\" or \"random\", got {}", j["target"].dump()));
  const std::string target = j.value("target", std::string("input"));
  if (target == "input") net.target = Target::Input;
  else if (target == "random") net.target = Target::Random;
  else bad(src, "field \"target\"", fmt::format("expected \"input\" or \"random\", got \"{}\"", target));
  net.adam.lr = get_double(j, src, "lr", 1e-4);
  net.adam.weight_decay = get_double(j, src, "weight_decay", 0.0);
  net.adam.eps = get_double(j, src, "eps", 1e-8);
  if (j.contains("betas")) {
    const json& b = j["betas"];
    if (!b.is_array() || b.size() != 2 || !b[0].is_number() || !b[1].is_number())
      bad(src, "field \"betas\"", fmt::format("expected [beta1, beta2], got {}", b.dump()));
    net.adam.beta1 = b[0].get<double>();
    net.adam.beta2 = b[1].get<double>();
  }
  if (const std::string p = adam_lr_problem(net.adam.lr); !p.empty()) bad(src, "field \"lr\"", p);
  // PyTorch's torch.optim.Adam checks: 0 <= beta < 1, eps >= 0, weight_decay >= 0.
  for (const auto& [field, v] : {std::pair<const char*, double>{"betas[0]", net.adam.beta1}, {"betas[1]", net.adam.beta2}})
    if (!(v >= 0 && v < 1)) bad(src, fmt::format("field \"{}\"", field), fmt::format("must be in [0, 1), got {}", v));
  if (!(std::isfinite(net.adam.eps) && net.adam.eps >= 0))
    bad(src, "field \"eps\"", fmt::format("must be a finite number >= 0, got {}", net.adam.eps));
  if (!(std::isfinite(net.adam.weight_decay) && net.adam.weight_decay >= 0))
    bad(src, "field \"weight_decay\"", fmt::format("must be a finite number >= 0, got {}", net.adam.weight_decay));
  plan_net(net);  // shape errors name the layer now, not at run time
  return net;
}

std::string adam_lr_problem(double lr) {
  // Parameters are float32: a step of lr or more overflows them at once.
  if (!(lr > 0 && lr <= std::numeric_limits<float>::max()))
    return fmt::format("must be a positive finite number (at most {:g}, the float32 limit), got {}",
                       std::numeric_limits<float>::max(), lr);
  return "";
}

NetSpec load_net_json(const std::string& path) { return parse_net_json(read_file(path), path); }

std::string net_to_json(const NetSpec& net) {
  using json = nlohmann::ordered_json;  // fields in the order a person reads them
  auto pair = [](int64_t h, int64_t w) { return h == w ? json(h) : json::array({h, w}); };
  json layers = json::array();
  for (std::size_t i = 0; i < net.layers.size(); ++i) {
    const LayerSpec& s = net.layers[i];
    json l = {{"type", layer_type_name(s.type)}};
    if (!s.name.empty()) l["name"] = s.name;
    if (s.type == LayerType::Conv2d || s.type == LayerType::ConvTranspose2d) {
      l["out_channels"] = s.out_channels;
      if (s.in_channels >= 0) l["in_channels"] = s.in_channels;
      l["kernel_size"] = pair(s.kernel_h, s.kernel_w);
      l["stride"] = pair(s.stride_h, s.stride_w);
      l["padding"] = pair(s.pad_h, s.pad_w);
    } else if (s.type == LayerType::Linear) {
      l["out_features"] = s.out_features;
      if (s.in_features >= 0) l["in_features"] = s.in_features;
    }
    const bool previous = s.inputs.empty() || (s.inputs.size() == 1 && s.inputs[0] == static_cast<int>(i) - 1);
    if (!previous) {
      json in = json::array();
      for (int src : s.inputs) in.push_back(src == kNetInput ? json("input") : json(src));
      l["inputs"] = in;
    }
    layers.push_back(l);
  }
  json j = {{"name", net.name},
            {"input", net.input},
            {"layers", layers},
            {"target", net.target == Target::Input ? "input" : "random"},
            {"lr", net.adam.lr},
            {"weight_decay", net.adam.weight_decay},
            {"betas", {net.adam.beta1, net.adam.beta2}},
            {"eps", net.adam.eps}};
  // One layer a line: a file people read and edit.
  std::string out = "{\n";
  bool first = true;
  for (const auto& [k, v] : j.items()) {
    if (!first) out += ",\n";
    first = false;
    if (k != "layers") {
      out += fmt::format("  {}: {}", json(k).dump(), v.dump());
      continue;
    }
    out += "  \"layers\": [\n";
    for (std::size_t i = 0; i < v.size(); ++i) out += fmt::format("    {}{}\n", v[i].dump(), i + 1 < v.size() ? "," : "");
    out += "  ]";
  }
  return out + "\n}\n";
}

std::vector<std::string> builtin_workloads() { return {"great_net", "resnet", "unet", "linear"}; }

NetSpec resolve_workload(const std::string& name, const WorkloadOptions& opts) {
  if (name == "great_net") return great_net(opts.image, opts.width);
  if (name == "resnet") return resnet(opts.image, opts.width);
  if (name == "unet") return unet(opts.image, opts.width);
  if (name == "linear") return linear_net();
  if (name.size() > 5 && name.substr(name.size() - 5) == ".json") return load_net_json(name);
  throw UsageError(fmt::format("unknown workload '{}': expected great_net, resnet, unet, linear, or a path to a .json net",
                               name));
}

std::vector<float> synthetic_values(int64_t n, uint64_t seed) {
  std::vector<float> v(static_cast<std::size_t>(n));
  Rng rng(seed);
  for (float& x : v) x = rng.normal();
  return v;
}

}  // namespace pb
