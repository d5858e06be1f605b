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

StageBoundary stage_boundary(const NetPlan& plan, int begin, int end) {
  StageBoundary b;
  const int n = static_cast<int>(plan.layers.size());
  std::vector<bool> entry(begin + 1, false), exit(end - begin, false);  // entry: src + 1
  auto read = [&](int reader, int src) {
    if (reader >= begin && reader < end && src < begin) entry[src + 1] = true;
    if (reader >= end && src >= begin && src < end) exit[src - begin] = true;
  };
  for (int i = begin; i < n; ++i) {
    const LayerPlan& l = plan.layers[i];
    if (l.inputs.empty()) read(i, i - 1);  // a plan made without plan_net (a profile's): a chain
    for (int src : l.inputs) read(i, src);
  }
  exit.back() = true;
  for (int v = 0; v <= begin; ++v)
    if (entry[v]) b.entries.push_back(v - 1);
  for (int j = 0; j < end - begin; ++j)
    if (exit[j]) b.exits.push_back(begin + j);
  return b;
}

int StageBoundary::entry_of(int layer) const {
  for (std::size_t k = 0; k < entries.size(); ++k)
    if (entries[k] == layer) return static_cast<int>(k);
  PB_CHECK(false, "layer {} is no entry of the stage", layer);
  return -1;
}

GraphBackward plan_graph_backward(const NetPlan& plan, int begin, int end, bool bf16) {
  GraphBackward g;
  const int n = end - begin;
  const StageBoundary sb = stage_boundary(plan, begin, end);
  g.writes.resize(n);
  g.grad_of.assign(n, -1);
  g.exit_of.assign(n, -1);
  g.exit_tmp.assign(n, -1);
  g.entry_buf.assign(sb.entries.size(), -1);
  for (std::size_t k = 0; k < sb.exits.size(); ++k) g.exit_of[sb.exits[k] - begin] = static_cast<int>(k);
  Pool pool{g.pool, {}};
  std::vector<int> buf(n, -1);
  std::vector<bool> entry_written(sb.entries.size(), false);
  for (int i = end - 1; i >= begin; --i) {
    const LayerPlan& l = plan.layers[i];
    const int j = i - begin;
    const bool exit = g.exit_of[j] >= 0, last = i == end - 1;
    PB_CHECK(exit || buf[j] >= 0, "layer {} of stage [{}, {}) is read by no later layer", i, begin, end);
    // bf16: an exit's gradient (fp32, the caller's) is rounded into a buffer: its own where no
    // layer of the stage reads it, else one it is added from. The last's: backward's scratch.
    if (bf16 && exit && !last) {
      if (buf[j] < 0) {
        buf[j] = pool.take(numel_of(l.out));
      } else {
        g.exit_tmp[j] = pool.take(numel_of(l.out));
        pool.give(g.exit_tmp[j]);
      }
    }
    g.grad_of[j] = buf[j];
    // Add and flatten pass their output gradient on as it is: a later contribution adds it in place.
    const bool passes = l.spec.type == LayerType::Add || l.spec.type == LayerType::Flatten;
    for (int src : l.inputs) {
      PB_CHECK(src < i, "layer {} reads layer {}, not an earlier one", i, src);
      GraphBackward::Write w;
      if (src < begin) {
        w.entry = sb.entry_of(src);
        w.first = !entry_written[w.entry];
        entry_written[w.entry] = true;
        if (bf16 && w.first) g.entry_buf[w.entry] = pool.take(out_numel(plan, src));  // held to the end
        if (bf16) w.buf = g.entry_buf[w.entry];
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

StageGradients plan_stage_gradients(const NetPlan& plan, const std::vector<int>& cuts) {
  const int stages = static_cast<int>(cuts.size()) - 1;
  StageGradients g;
  g.entry_from.resize(stages), g.entry_buf.resize(stages), g.entry_tmp.resize(stages), g.exit_buf.resize(stages);
  std::vector<StageBoundary> sb;
  std::vector<std::pair<int, int>> made_by(plan.layers.size(), {-1, 0});  // per layer: its stage and exit
  for (int s = 0; s < stages; ++s) {
    sb.push_back(stage_boundary(plan, cuts[s], cuts[s + 1]));
    for (int e : sb[s].entries) g.entry_from[s].push_back(e == kNetInput ? std::pair<int, int>{-1, 0} : made_by[e]);
    for (std::size_t k = 0; k < sb[s].exits.size(); ++k) made_by[sb[s].exits[k]] = {s, static_cast<int>(k)};
  }
  // Best fit among the free buffers, else the largest free one grown, else a new one: a chain's
  // gradients then take two buffers in turn, as they would with one each of the widest.
  std::vector<bool> busy;
  auto take = [&](int64_t n) {
    int best = -1, largest = -1;
    for (int k = 0; k < static_cast<int>(g.pool.size()); ++k) {
      if (busy[k]) continue;
      if (g.pool[k] >= n && (best < 0 || g.pool[k] < g.pool[best])) best = k;
      if (largest < 0 || g.pool[k] > g.pool[largest]) largest = k;
    }
    if (best < 0 && largest >= 0) best = largest, g.pool[best] = n;
    if (best < 0) best = static_cast<int>(g.pool.size()), g.pool.push_back(n), busy.push_back(false);
    busy[best] = true;
    return best;
  };
  std::vector<int> buf(plan.layers.size(), -1);  // per layer: its gradient's buffer while held
  for (int s = stages - 1; s >= 0; --s) {
    for (int e : sb[s].exits) g.exit_buf[s].push_back(buf[e]);
    for (int e : sb[s].entries) {
      int tmp = -1;
      if (e != kNetInput && buf[e] < 0) buf[e] = take(out_numel(plan, e));
      else if (e != kNetInput) tmp = take(out_numel(plan, e));
      g.entry_buf[s].push_back(e == kNetInput ? -1 : buf[e]);
      g.entry_tmp[s].push_back(tmp);
    }
    for (int t : g.entry_tmp[s])
      if (t >= 0) busy[t] = false;
    for (int e : sb[s].exits)
      if (buf[e] >= 0) busy[buf[e]] = false, buf[e] = -1;
  }
  return g;
}

std::string bf16_graph_refusal(const NetPlan& plan) {
  const int begin = 0, end = static_cast<int>(plan.layers.size());
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
                           "net's");
      any = any || is_fp32(src);
    }
    fp32[i - begin] = any && !has_weights(l.spec.type);
  }
  if (fp32.back())
    return fmt::format("its output (layer {}) is computed from its input with no conv or linear: autocast keeps it in "
                       "fp32", end - 1);
  return "";
}


GraphBuffers graph_buffers(const NetPlan& plan, int begin, int end, bool bf16) {
  GraphBuffers b;
  for (int i = begin; i < end; ++i)
    if (!graph_in_place(plan, begin, i)) b.activations += numel_of(plan.layers[i].out);
  for (int64_t v : plan_graph_backward(plan, begin, end, bf16).pool) b.scratch += v;
  return b;
}

}  // namespace pb
