// The buffers of a stage of a net with skips: in-place layers and backward's gradient pool.
#include "engine/graph_stage.h"

#include "engine/check.h"

namespace pb {

bool graph_in_place(const NetPlan& plan, int begin, int i) {
  const LayerPlan& l = plan.layers[i];
  if (l.spec.type == LayerType::Flatten) return true;
  if (l.spec.type != LayerType::ReLU) return false;
  const int src = l.inputs[0];
  return src >= begin && plan.layers[src].readers == 1 && plan.layers[src].spec.type != LayerType::Flatten;
}

bool is_graph_stage(const NetPlan& plan, int begin, int end) {
  bool graph = false;
  for (int i = begin; i < end; ++i) {
    const LayerPlan& l = plan.layers[i];
    if (l.inputs.empty()) continue;  // a plan made without plan_net (a profile's): a chain
    graph = graph || l.inputs.size() != 1 || l.inputs[0] != i - 1 || (i + 1 < end && l.readers != 1);
  }
  return graph;
}

namespace {
// Best fit among the free buffers, else a new one; a buffer only grows to what it is taken for.
struct Pool {
  std::vector<int64_t>& size;
  std::vector<bool> busy;
  int take(int64_t n) {
    int best = -1;
    for (int k = 0; k < static_cast<int>(size.size()); ++k)
      if (!busy[k] && size[k] >= n && (best < 0 || size[k] < size[best])) best = k;
    if (best < 0) {
      best = static_cast<int>(size.size());
      size.push_back(n);
      busy.push_back(false);
    }
    busy[best] = true;
    return best;
  }
  void give(int k) {
    if (k >= 0) busy[k] = false;
  }
};

int64_t out_numel(const NetPlan& plan, int src) {
  return numel_of(src == kNetInput ? plan.input : plan.layers[src].out);
}
}  // namespace

GraphBackward plan_graph_backward(const NetPlan& plan, int begin, int end) {
  GraphBackward g;
  const int n = end - begin;
  g.writes.resize(n);
  g.grad_of.assign(n, -1);
  Pool pool{g.pool, {}};
  std::vector<int> buf(n, -1);
  bool dx_written = false;
  for (int i = end - 1; i >= begin; --i) {
    const LayerPlan& l = plan.layers[i];
    const int j = i - begin;
    PB_CHECK(i == end - 1 || buf[j] >= 0, "layer {} of stage [{}, {}) is read by no later layer of it", i, begin, end);
    g.grad_of[j] = i == end - 1 ? -1 : buf[j];
    // Add and flatten pass their output gradient on as it is: a later contribution adds it in place.
    const bool passes = l.spec.type == LayerType::Add || l.spec.type == LayerType::Flatten;
    for (int src : l.inputs) {
      PB_CHECK(src >= begin - 1 && src < i, "layer {} reads layer {}, outside stage [{}, {})", i, src, begin, end);
      GraphBackward::Write w;
      if (src < begin) {
        w.first = !dx_written;
        dx_written = true;
      } else {
        w.target = src - begin;
        w.first = buf[w.target] < 0;
        if (w.first) buf[w.target] = pool.take(out_numel(plan, src));
        w.buf = buf[w.target];
      }
      if (!w.first && !passes) {
        w.tmp = pool.take(out_numel(plan, src));
        pool.give(w.tmp);  // free again for the next contribution: each is added before it is made
      }
      g.writes[j].push_back(w);
    }
    pool.give(g.grad_of[j]);
  }
  return g;
}

std::string bf16_graph_refusal(const NetPlan& plan, int begin, int end) {
  std::vector<bool> fp32(end - begin);  // per layer: autocast keeps its output in fp32
  std::vector<int> reads(end - begin + 1);  // so far, per output (the last: the stage's input)
  auto is_fp32 = [&](int src) { return src < begin || fp32[src - begin]; };
  for (int i = begin; i < end; ++i) {
    const LayerPlan& l = plan.layers[i];
    const bool joins = l.spec.type == LayerType::Add || l.spec.type == LayerType::Concat;
    bool any = false;
    for (int src : l.inputs) {
      const bool again = reads[src < begin ? end - begin : src - begin]++ > 0;  // a skip: its gradient sums
      if (is_fp32(src) && (joins || again))
        return fmt::format("layer {} ({}) reads {}, a value autocast keeps in fp32 (computed from the {} input with no "
                           "conv or linear before it): such skips run in fp32 only", i, layer_type_name(l.spec.type),
                           src == kNetInput ? std::string("the net's input") : fmt::format("layer {}", src),
                           begin == 0 ? "net's" : "stage's");
      any = any || is_fp32(src);
    }
    fp32[i - begin] = any && !has_weights(l.spec.type);
  }
  if (fp32.back())
    return fmt::format("its output (layer {}) is computed from its input with no conv or linear: autocast keeps it in "
                       "fp32", end - 1);
  return "";
}


GraphBuffers graph_buffers(const NetPlan& plan, int begin, int end) {
  GraphBuffers b;
  for (int i = begin; i < end; ++i)
    if (!graph_in_place(plan, begin, i)) b.activations += numel_of(plan.layers[i].out);
  for (int64_t v : plan_graph_backward(plan, begin, end).pool) b.scratch += v;
  return b;
}

}  // namespace pb
