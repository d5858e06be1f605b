// The memory estimate's library workspace, measured: a fresh backend runs the layers (each alone,
// or as one Sequential) forward and backward, untimed, and the workspace pool's growth is the answer.
#include <map>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/memory_estimate.h"
#include "engine/model.h"
#include "engine/model_detail.h"

namespace pb {

namespace {

// fp32_dx (bf16 only): each layer's input gradient also written in fp32 (tp's split layers, whose
// backward-data has its own primitive and scratch).
std::function<double(const std::vector<LayerPlan>&, int64_t)> probe(const BackendOptions& options, Device device, bool sequential,
                                                                     bool fp32_dx = false) {
  auto cache = std::make_shared<std::map<std::string, double>>();
  return [options, device, cache, sequential, fp32_dx](const std::vector<LayerPlan>& layers, int64_t batch) -> double {
    std::vector<NetPlan> probes;  // each layer alone, in turn, or (sequential) all together
    std::string key = fmt::format("{} {}", batch, sequential);
    // A stage of a net with skips that reads values from before the layer ahead of it, or gives
    // values to layers after it, cannot run alone: its layers are probed each alone (the plain
    // layouts it runs them in).
    const int first = layers.empty() ? 0 : layers.front().index;
    bool alone = sequential && !layers.empty();
    std::vector<int> read(layers.size(), 0);
    for (std::size_t k = 0; alone && k < layers.size(); ++k) {
      alone = layers[k].index == first + static_cast<int>(k);  // a run of layers
      for (int src : layers[k].inputs) {
        alone = alone && (src >= first || src == first - 1);
        if (alone && src >= first) ++read[src - first];
      }
    }
    for (std::size_t k = 0; k + 1 < layers.size(); ++k) alone = alone && read[k] > 0;
    if (alone) {
      NetSpec all;
      all.name = "workspace probe";
      all.input = layers.front().in;
      all.target = Target::Random;
      if (first > 0) all.layers.push_back(LayerSpec{});  // computes the first layer's dx, as above
      std::string keys;
      for (const LayerPlan& l : layers) {
        LayerSpec s = l.spec;
        s.in_channels = -1, s.in_features = -1;
        s.inputs.clear();  // the layers it reads, in the probe's numbering (the one ahead of it: 0)
        for (int src : l.inputs) s.inputs.push_back(first > 0 ? src - first + 1 : src);
        all.layers.push_back(s);
        keys += fmt::format("|{} {} {} {} {} {} {} {} {}", shape_str(l.in), shape_str(l.out), layer_type_name(s.type),
                            s.kernel_h, s.kernel_w, s.stride_h, s.stride_w, s.pad_h * 1000 + s.pad_w, fmt::join(s.inputs, ","));
      }
      NetPlan probe = plan_net(all);
      // bf16: a stage whose input two layers read takes it as a bf16 value; the probe's ReLU ahead
      // would make it one autocast keeps in fp32, which bf16 refuses -- its layers are probed alone.
      alone = options.precision != Precision::Bf16 || !is_graph_stage(probe, 0, static_cast<int>(probe.layers.size())) ||
              bf16_graph_refusal(probe).empty();
      if (alone) probes.push_back(std::move(probe)), key += keys;
    }
    for (const LayerPlan& l : alone || (sequential && layers.empty()) ? std::vector<LayerPlan>{} : layers) {
      if (!has_weights(l.spec.type)) continue;  // no library call
      // Every strategy computes a layer's input gradient except the net's first layer's: a ReLU
      // before it makes the probe do the same.
      const bool dx = l.index > 0;
      NetSpec one;
      one.name = "workspace probe";
      one.input = l.in;
      one.target = Target::Random;
      if (dx) one.layers.push_back(LayerSpec{});
      LayerSpec s = l.spec;
      s.in_channels = -1, s.in_features = -1;
      s.inputs.clear();  // the layer ahead of it
      one.layers.push_back(s);
      probes.push_back(plan_net(one));
      key += fmt::format("|{} {} {} {} {} {} {} {} {}", shape_str(l.in), shape_str(probes.back().output), layer_type_name(s.type), dx,
                         s.kernel_h, s.kernel_w, s.stride_h, s.stride_w, s.pad_h * 1000 + s.pad_w);
    }
    if (probes.empty() || batch <= 0) return 0;
    if (const auto it = cache->find(key); it != cache->end()) return it->second;
    const std::unique_ptr<Backend> be = make_backend(device, options);
    const Allocator& a = allocator_for(device);
    const std::size_t before = a.current_bytes(MemoryPool::Workspace);
    std::size_t after = before;
    {
      std::vector<std::unique_ptr<Sequential>> keep;  // a backend's scratch outlives each call
      for (const NetPlan& p : probes) {
        keep.push_back(std::make_unique<Sequential>(p, 0, static_cast<int>(p.layers.size()), *be));
        keep.back()->load_params(init_params(p, 0));
        const int64_t in_n = batch * numel_of(p.input), out_n = batch * numel_of(p.output);
        const Tensor x = Tensor::from_host({in_n}, std::vector<float>(static_cast<std::size_t>(in_n), 0.5f), device);
        const Tensor dy = Tensor::from_host({out_n}, std::vector<float>(static_cast<std::size_t>(out_n), 0.25f), device);
        keep.back()->forward(x.data(), batch);
        keep.back()->backward(dy.data(), nullptr, false);
        const LayerPlan& l = p.layers.back();
        if (fp32_dx && options.precision == Precision::Bf16 && l.index > 0 && has_weights(l.spec.type)) {
          const int64_t yn = batch * numel_of(l.out), xn = batch * numel_of(l.in);
          const Tensor dy16 = Tensor::empty({yn}, device, DType::Bf16), w16 = Tensor::empty({l.weight_numel}, device, DType::Bf16);
          const Tensor dx = Tensor::empty({xn}, device), w = Tensor::empty({l.weight_numel}, device);
          be->fill(w.data(), l.weight_numel, 0.5f);
          be->to_bf16(yn, dy.data(), dy16.data_bf16());
          be->to_bf16(l.weight_numel, w.data(), w16.data_bf16());
          if (l.spec.type == LayerType::Conv2d)
            be->conv2d_backward_data_bf16_f32(model_detail::geom(l, batch), dy16.data_bf16(), w16.data_bf16(), dx.data());
          else if (l.spec.type == LayerType::ConvTranspose2d)
            be->conv_transpose2d_backward_data_bf16_f32(model_detail::transposed_geom(l, batch), dy16.data_bf16(),
                                                        w16.data_bf16(), dx.data());
          else
            be->linear_backward_data_bf16_f32(batch, l.in[0], l.out[0], dy16.data_bf16(), w16.data_bf16(), dx.data());
        }
        be->synchronize();
        keep.back()->release_scratch();
      }
      after = a.current_bytes(MemoryPool::Workspace);
    }
    return (*cache)[key] = static_cast<double>(after > before ? after - before : 0);
  };
}

}  // namespace

std::function<double(const std::vector<LayerPlan>&, int64_t)> measured_workspace(const BackendOptions& options, Device device) {
  return probe(options, device, false);
}

std::function<double(const std::vector<LayerPlan>&, int64_t)> measured_sequential_workspace(const BackendOptions& options,
                                                                                              Device device) {
  return probe(options, device, true);
}

std::function<double(const std::vector<LayerPlan>&, int64_t)> measured_tp_workspace(const BackendOptions& options, Device device) {
  return probe(options, device, false, true);
}

}  // namespace pb
