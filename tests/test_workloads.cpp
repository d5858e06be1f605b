// Workload definitions and the JSON net format's validation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/check.h"
#include "engine/state_dict.h"
#include "tests/paths.h"
#include "workloads/workload.h"

namespace pb {
namespace {

using ::testing::HasSubstr;

std::string error_of(const std::string& json) {
  try {
    parse_net_json(json, "my_net.json");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Workloads, GreatNetIsTheSeedsNetwork) {
  const NetPlan p = plan_net(great_net(512, 1.0));
  ASSERT_EQ(p.layers.size(), 28u);
  const int64_t channels[] = {16, 32, 64, 128, 256, 512, 1024, 512, 256, 128, 64, 32, 16, 3};
  for (int i = 0; i < 14; ++i) {
    EXPECT_EQ(p.layers[2 * i].spec.type, LayerType::Conv2d);
    EXPECT_EQ(p.layers[2 * i].out[0], channels[i]);
    EXPECT_EQ(p.layers[2 * i].spec.kernel_h, 3);
    EXPECT_EQ(p.layers[2 * i].spec.pad_h, 1);
    EXPECT_EQ(p.layers[2 * i + 1].spec.type, LayerType::ReLU);
  }
  EXPECT_EQ(p.output, (Shape{3, 512, 512}));
  // Forward FLOPs: 2 * 9 * 512^2 * sum(c_in * c_out) per image; training is 3x that (about 20 TFLOP).
  double macs = 0;
  int64_t prev = 3;
  for (int64_t c : channels) macs += static_cast<double>(prev) * c, prev = c;
  EXPECT_DOUBLE_EQ(p.forward_flops, 2.0 * 9 * 512 * 512 * macs);
  EXPECT_NEAR(3 * p.forward_flops / 1e12, 20.0, 1.0);
  const NetPlan small = plan_net(great_net(16, 0.25));
  EXPECT_EQ(small.layers[12].out[0], 256);  // 1024 * 0.25
  EXPECT_EQ(small.layers[26].out[0], 3);    // the output keeps 3 channels
}

// ResNet-18 without normalization: 17 convs on the main path and 3 projection shortcuts, 8
// residual adds; at 224 pixels the stages run at 56, 28, 14 and 7 (the stem's pooling is 2x2).
TEST(Workloads, ResnetIsResNet18sShape) {
  const NetPlan p = plan_net(resnet(224, 1.0));
  int convs = 0, adds = 0, projections = 0;
  for (const LayerPlan& l : p.layers) {
    convs += l.spec.type == LayerType::Conv2d;
    adds += l.spec.type == LayerType::Add;
    projections += l.spec.type == LayerType::Conv2d && l.spec.kernel_h == 1;
    if (l.spec.type == LayerType::Add) {
      EXPECT_EQ(p.layers[l.inputs[0]].out, p.layers[l.inputs[1]].out) << "layer " << l.index;
      // The shortcut (identity) or the block's body (beside a projection) is a skip.
      EXPECT_TRUE(l.inputs[0] != l.index - 1 || l.inputs[1] != l.index - 1) << "layer " << l.index;
    }
  }
  EXPECT_EQ(convs, 20);
  EXPECT_EQ(projections, 3);
  EXPECT_EQ(adds, 8);
  EXPECT_EQ(p.layers[2].out, (Shape{64, 56, 56}));
  EXPECT_EQ(p.layers[p.layers.size() - 3].out, (Shape{512, 7, 7}));
  EXPECT_EQ(p.output, (Shape{10}));
  // torchvision's resnet18 has 11,689,512 parameters: its batch norms' 9,600 and its 512 -> 1000
  // classifier's 513,000 go; its convs' biases (4,800: one per output channel) and a 512*49 -> 10
  // classifier come.
  EXPECT_EQ(p.param_count, 11689512 - 9600 - 513000 + 4800 + (512 * 49 * 10 + 10));
  EXPECT_EQ(plan_net(resnet(32, 0.25)).layers[0].out, (Shape{16, 16, 16}));
  EXPECT_THROW(resnet(3, 1.0), UsageError);
  EXPECT_THROW(resnet(32, 0), UsageError);
}

// Depth 4: three poolings down, three transposed convs up, each meeting its level's encoder output.
TEST(Workloads, UnetIsADepthFourUNet) {
  const NetPlan p = plan_net(unet(64, 1.0));
  int concats = 0;
  for (const LayerPlan& l : p.layers) {
    if (l.spec.type != LayerType::Concat) continue;
    ++concats;
    const LayerPlan& up = p.layers[l.inputs[0]];
    const LayerPlan& skip = p.layers[l.inputs[1]];
    EXPECT_EQ(up.spec.type, LayerType::ConvTranspose2d);
    EXPECT_EQ(skip.spec.type, LayerType::ReLU);
    EXPECT_EQ(up.out, skip.out) << "layer " << l.index;
  }
  EXPECT_EQ(concats, 3);
  int64_t widest = 0;
  for (const LayerPlan& l : p.layers) widest = std::max(widest, l.out[0]);
  EXPECT_EQ(widest, 256);
  EXPECT_EQ(p.output, p.input);
  EXPECT_EQ(p.input, (Shape{3, 64, 64}));
  try {
    unet(60, 1.0);
    ADD_FAILURE() << "a 60-pixel U-Net";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("unet: --image must be a multiple of 8"));
  }
}

// net_to_json writes what parse_net_json reads back as the same net: the built-ins, a fixture with
// named layers and skips from the input, a net with declared input sizes and non-square kernels.
TEST(Workloads, NetJsonRoundTrips) {
  NetSpec odd = parse_net_json(R"({"name": "odd", "input": [2, 7, 5], "target": "random", "lr": 0.002,
    "weight_decay": 0.01, "betas": [0.8, 0.99], "eps": 1e-6, "layers": [
    {"type": "conv2d", "in_channels": 2, "out_channels": 3, "kernel_size": [3, 1], "padding": [1, 0]},
    {"type": "relu", "name": "r"}, {"type": "concat", "inputs": ["r", "input"]},
    {"type": "conv2d", "out_channels": 2, "kernel_size": [1, 3], "stride": [2, 1], "padding": [0, 1]}, {"type": "flatten"},
    {"type": "linear", "out_features": 4, "name": "head.fc"}]})", "odd.json");
  std::vector<NetSpec> nets = {great_net(32, 0.25), resnet(32, 0.25), unet(16, 0.25), linear_net(), odd,
                               load_net_json((test::source_dir() / "tests/fixtures/graph/unet_small/net.json").string())};
  for (NetSpec& net : nets) {
    SCOPED_TRACE(net.name);
    if (scaled_workload(net.name)) net.name += "-copy";  // a file may not take a built-in's name
    const std::string text = net_to_json(net);
    const NetSpec back = parse_net_json(text, "written.json");
    EXPECT_EQ(back.name, net.name);
    EXPECT_EQ(back.target, net.target);
    EXPECT_EQ(back.adam.lr, net.adam.lr);
    EXPECT_EQ(back.adam.weight_decay, net.adam.weight_decay);
    EXPECT_EQ(back.adam.beta1, net.adam.beta1);
    EXPECT_EQ(back.adam.beta2, net.adam.beta2);
    EXPECT_EQ(back.adam.eps, net.adam.eps);
    const NetPlan a = plan_net(net), b = plan_net(back);
    ASSERT_EQ(a.layers.size(), b.layers.size());
    EXPECT_EQ(a.input, b.input);
    for (std::size_t i = 0; i < a.layers.size(); ++i) {
      EXPECT_EQ(b.layers[i].spec.type, a.layers[i].spec.type) << "layer " << i;
      EXPECT_EQ(b.layers[i].spec.name, a.layers[i].spec.name) << "layer " << i;
      EXPECT_EQ(b.layers[i].inputs, a.layers[i].inputs) << "layer " << i;
      EXPECT_EQ(b.layers[i].out, a.layers[i].out) << "layer " << i;
      EXPECT_EQ(b.layers[i].param_offset, a.layers[i].param_offset) << "layer " << i;
      EXPECT_EQ(b.layers[i].spec.stride_h, a.layers[i].spec.stride_h) << "layer " << i;
      EXPECT_EQ(b.layers[i].spec.pad_w, a.layers[i].spec.pad_w) << "layer " << i;
    }
  }
  EXPECT_THAT(net_to_json(nets[4]), HasSubstr(R"("inputs":[1,"input"])"));
}

TEST(Workloads, LinearIsTheTutorialsModel) {
  const NetPlan p = plan_net(linear_net());
  EXPECT_EQ(p.input, Shape{5});
  EXPECT_EQ(p.output, Shape{2});
  EXPECT_EQ(p.param_count, 12);
}

TEST(Workloads, JsonNetParses) {
  const NetSpec n = parse_net_json(R"({"name": "t", "input": [2, 7, 5], "target": "random", "lr": 0.01,
    "layers": [{"type": "conv2d", "out_channels": 3, "kernel_size": [3, 1], "stride": [2, 1], "padding": [1, 0]},
               {"type": "relu"}, {"type": "flatten"}, {"type": "linear", "out_features": 4, "in_features": 60}]})",
                                   "t.json");
  const NetPlan p = plan_net(n);
  EXPECT_EQ(p.layers[0].out, (Shape{3, 4, 5}));
  EXPECT_EQ(p.output, Shape{4});
  EXPECT_DOUBLE_EQ(n.adam.lr, 0.01);
  EXPECT_EQ(n.target, Target::Random);
}

TEST(Workloads, JsonErrorsNameTheFileLayerAndField) {
  EXPECT_THAT(error_of("{\"input\": [3, 8, 8], \"layers\": ["), HasSubstr("my_net.json: malformed JSON"));
  EXPECT_THAT(error_of("[1, 2]"), HasSubstr("my_net.json: expected a JSON object"));
  const std::string chain = R"({"input": [3, 8, 8], "layers": [
      {"type": "conv2d", "out_channels": 4, "kernel_size": 3, "padding": 1},
      {"type": "conv2d", "in_channels": 5, "out_channels": 3, "kernel_size": 3, "padding": 1}]})";
  EXPECT_THAT(error_of(chain), HasSubstr("layer 1 (conv2d): in_channels is 5 but the previous layer gives 4"));
  const std::string big = R"({"input": [3, 4, 4], "target": "random", "layers": [
      {"type": "conv2d", "out_channels": 4, "kernel_size": 7, "padding": 1}]})";
  EXPECT_THAT(error_of(big), HasSubstr("layer 0 (conv2d): kernel_size [7, 7] is larger than the padded input 6x6"));
  EXPECT_THAT(error_of(R"({"input": [3, 4, 4], "target": "random", "layers": [{"type": "conv2d", "out_channels": 0, "kernel_size": 3}]})"),
              HasSubstr("layer 0 (conv2d): out_channels must be positive, got 0"));
  EXPECT_THAT(error_of(R"({"input": [3, 4, 4], "target": "random", "layers": [{"type": "conv2d", "out_channels": 2, "kernel_size": 3, "stride": -1}]})"),
              HasSubstr("layer 0 (conv2d): stride must be positive"));
  EXPECT_THAT(error_of(R"({"input": [3, 0, 4], "layers": [{"type": "relu"}]})"), HasSubstr("input sizes must be positive"));
  EXPECT_THAT(error_of(R"({"input": [3, 4, 4], "layers": [{"type": "pool"}]})"),
              HasSubstr("layer 0: unknown layer type \"pool\""));
  EXPECT_THAT(error_of(R"({"input": [3, 4, 4], "layers": [{"type": "relu", "inplace": true}]})"),
              HasSubstr("layer 0 (relu): unknown field \"inplace\""));
  EXPECT_THAT(error_of(R"({"input": [3, 4, 4], "layers": [{"type": "conv2d", "kernel_size": 3}]})"),
              HasSubstr("layer 0 (conv2d): missing field \"out_channels\""));
  EXPECT_THAT(error_of(R"({"input": [3, 4, 4], "layers": [{"type": "conv2d", "out_channels": "8", "kernel_size": 3}]})"),
              HasSubstr("field \"out_channels\" must be an integer"));
  EXPECT_THAT(error_of(R"({"input": [3, 4, 4], "layers": [{"type": "conv2d", "out_channels": 2, "kernel_size": 3, "padding": 1}]})"),
              HasSubstr("target \"input\" needs the output shape (2, 4, 4) to equal the input shape (3, 4, 4)"));
  EXPECT_THAT(error_of(R"({"input": [3, 4, 4], "layers": [{"type": "linear", "out_features": 2}]})"),
              HasSubstr("layer 0 (linear): expects a flat [F] input"));
  EXPECT_THAT(error_of(R"({"input": [3, 4, 4], "layers": []})"), HasSubstr("the layer list is empty"));
  EXPECT_THAT(error_of(R"({"input": [3, 4, 4], "layers": [{"type": "relu"}], "lr": -1})"), HasSubstr("\"lr\""));
  EXPECT_THAT(error_of(R"({"inputs": [3, 4, 4], "layers": [{"type": "relu"}]})"), HasSubstr("unknown field \"inputs\""));
  // Pooling and upsampling: PyTorch's MaxPool2d(2) and Upsample(scale_factor=2) only.
  EXPECT_THAT(error_of(R"({"input": [3, 4, 4], "target": "random", "layers": [{"type": "maxpool2d", "kernel_size": 3}]})"),
              HasSubstr("layer 0 (maxpool2d): \"kernel_size\" must be 2"));
  EXPECT_THAT(error_of(R"({"input": [3, 1, 4], "target": "random", "layers": [{"type": "maxpool2d"}]})"),
              HasSubstr("layer 0 (maxpool2d): expects a [C, H, W] input of at least 2x2, got (3, 1, 4)"));
  EXPECT_THAT(error_of(R"({"input": [3, 4, 4], "target": "random", "layers": [{"type": "upsample", "scale_factor": 3}]})"),
              HasSubstr("layer 0 (upsample): \"scale_factor\" must be 2"));
  EXPECT_THAT(error_of(R"({"input": [3, 4, 4], "target": "random", "layers": [{"type": "upsample", "mode": "bilinear"}]})"),
              HasSubstr("layer 0 (upsample): \"mode\" must be \"nearest\""));
}

// Pooling halves the planes (an odd last row or column left out) and upsampling doubles them, so
// an hourglass of even size reconstructs its input.
TEST(Workloads, PoolingAndUpsamplingShapes) {
  const NetPlan odd = plan_net(load_net_json((test::source_dir() / "tests/fixtures/conv_pool_upsample/net.json").string()));
  EXPECT_EQ(odd.layers[2].out, (Shape{4, 4, 3}));  // maxpool2d of (4, 9, 7)
  EXPECT_EQ(odd.layers[5].out, (Shape{6, 8, 6}));  // upsample of (6, 4, 3)
  EXPECT_EQ(odd.param_count, odd.layers[0].weight_numel + 4 + odd.layers[3].weight_numel + 6 + odd.layers[6].weight_numel + 2);
  NetSpec hourglass;
  hourglass.input = {3, 8, 8};
  hourglass.layers = {LayerSpec{LayerType::MaxPool2d}, LayerSpec{LayerType::Upsample}};
  EXPECT_EQ(plan_net(hourglass).output, hourglass.input);  // target "input" accepted
}

// A transposed convolution's output is (in - 1) * stride - 2 * padding + kernel, its weights
// [in, out, kH, kW] as PyTorch's ConvTranspose2d; what leaves no output is refused by name.
TEST(Workloads, TransposedConvolutionShapes) {
  const NetPlan t = plan_net(load_net_json((test::source_dir() / "tests/fixtures/conv_transpose/net.json").string()));
  EXPECT_EQ(t.layers[5].out, (Shape{3, 8, 6}));  // 2x2, stride 2, of (6, 4, 3)
  EXPECT_EQ(t.layers[5].weight_shape, (Shape{6, 3, 2, 2}));
  EXPECT_EQ(t.layers[7].out, (Shape{2, 8, 12}));  // [3, 2] kernel, stride [1, 2], padding [1, 0]: 7 - 2 + 3, 10 + 2
  EXPECT_EQ(t.layers[7].bias_shape, (Shape{2}));
  EXPECT_DOUBLE_EQ(t.layers[5].forward_flops, 2.0 * 6 * 4 * 3 * 3 * 2 * 2);  // every input value into k*k outputs per channel
  EXPECT_THAT(error_of(R"({"input": [3, 2, 2], "target": "random", "layers": [{"type": "conv_transpose2d", "out_channels": 2,
      "kernel_size": 1, "padding": 1}]})"),
              HasSubstr("layer 0 (conv_transpose2d): padding [1, 1] leaves no output from a 2x2 input"));
  EXPECT_THAT(error_of(R"({"input": [3, 2, 2], "target": "random", "layers": [{"type": "conv_transpose2d", "out_channels": 2,
      "kernel_size": 2, "stride": 4611686018427387904}]})"),
              HasSubstr("more than any device can hold"));
  EXPECT_THAT(error_of(R"({"input": [3, 2, 2], "layers": [{"type": "conv_transpose2d", "out_channels": 2, "kernel_size": 2,
      "output_padding": 1}]})"),
              HasSubstr("layer 0 (conv_transpose2d): unknown field \"output_padding\""));
}

// A layer's name is its parameter files' prefix (a module path, as torch_export.py writes it);
// unnamed layers keep their index, and a name that would clash with one is refused.
TEST(Workloads, LayerNamesNameTheParameterFiles) {
  const NetPlan p = plan_net(parse_net_json(R"({"input": [3, 4, 4], "target": "random", "layers": [
      {"type": "conv2d", "name": "encoder.0", "out_channels": 2, "kernel_size": 3},
      {"type": "relu"}, {"type": "conv2d", "out_channels": 2, "kernel_size": 1},
      {"type": "flatten", "name": "flat"}, {"type": "linear", "name": "fc", "out_features": 2}]})", "named.json"));
  std::vector<std::string> keys;
  for (const ParamEntry& e : param_entries(p)) keys.push_back(e.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"encoder.0.weight", "encoder.0.bias", "2.weight", "2.bias", "fc.weight",
                                            "fc.bias"}));
  auto layers_with = [](const std::string& second_name) {
    return R"({"input": [3, 4, 4], "target": "random", "layers": [{"type": "conv2d", "name": "a", "out_channels": 2,
        "kernel_size": 1}, {"type": "conv2d", "name": )" + second_name + R"(, "out_channels": 2, "kernel_size": 1}]})";
  };
  EXPECT_THAT(error_of(layers_with("\"a\"")), HasSubstr("layer 1 (conv2d): name 'a' is given to an earlier layer too"));
  EXPECT_THAT(error_of(layers_with("\"0\"")), HasSubstr("layer 1 (conv2d): name '0' is another layer's index"));
  EXPECT_THAT(error_of(layers_with("\"../x\"")), HasSubstr("name '../x' must be 1 to 200 letters"));
  EXPECT_THAT(error_of(layers_with("\"a.\"")), HasSubstr("not starting or ending with '.'"));
  EXPECT_THAT(error_of(layers_with("7")), HasSubstr("field \"name\" must be a string, got 7"));
  EXPECT_NO_THROW(plan_net(parse_net_json(layers_with("\"1\""), "own_index.json")));  // its own index
}

TEST(Workloads, UnknownWorkloadAndMissingFile) {
  EXPECT_THROW(resolve_workload("resnet18", {}), UsageError);
  try {
    resolve_workload("/nonexistent/net.json", {});
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/net.json"));
  }
}

TEST(Workloads, SyntheticDataIsSeededAndStandardNormal) {
  const auto a = synthetic_values(100000, 3), b = synthetic_values(100000, 3), c = synthetic_values(100000, 4);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  double mean = 0, var = 0;
  for (float v : a) mean += v;
  mean /= a.size();
  for (float v : a) var += (v - mean) * (v - mean);
  var /= a.size();
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(var, 1.0, 0.02);
}

TEST(Workloads, InitFollowsPyTorchBounds) {
  const NetPlan p = plan_net(great_net(8, 0.5));
  const auto params = init_params(p, 1);
  for (const LayerPlan& l : p.layers) {
    if (l.weight_numel == 0) continue;
    const double bound = 1.0 / std::sqrt(static_cast<double>(l.weight_numel / l.weight_shape[0]));
    double mx = 0;
    for (int64_t i = 0; i < l.weight_numel + l.bias_numel; ++i) mx = std::max(mx, double(std::abs(params[l.param_offset + i])));
    EXPECT_LE(mx, bound);
    EXPECT_GT(mx, 0.9 * bound);  // fills the range
  }
}

}  // namespace
}  // namespace pb
