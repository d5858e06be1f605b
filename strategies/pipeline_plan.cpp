// The plans of mp, pipeline (GPipe, 1F1B, ZB-H1, interleaved 1F1B, -recompute) and dp x pp: the calls of pipeline.cpp's
// step in the same order, from the same rules (stage split, micro-batches, slots, schedule,
// recompute decisions).
#include <map>

#include <fmt/format.h>

#include "engine/bf16.h"
#include "engine/check.h"
#include "engine/memory_estimate.h"
#include "strategies/batch.h"
#include "strategies/plan_gen.h"
#include "strategies/rules.h"
#include "strategies/stages.h"

namespace pb {

namespace {

constexpr int64_t kF = sizeof(float);
constexpr int kNone = -1;

DType activation_wire(const StrategyOptions& o) {
  return o.backend.precision == Precision::Bf16 && o.bf16_activation_wire ? DType::Bf16 : DType::F32;
}

// One stage's emission: the actions of one worker's stage (or interleaved chunk) for every micro-batch.
struct StageEmitter {
  PlanBuilder& b;
  int w, world, s;
  bool last, recompute;
  int slots, begin, end;
  int64_t in, out;  // values per sample at the stage's input and output
  const std::vector<int64_t>& sizes;
  std::vector<std::vector<int>> act_send;  // per micro-batch: its outputs' sends in flight
  std::vector<int> grad_send[2] = {};      // per input-gradient slot: its sends in flight
  int backwards = 0, last_scratch_send = kNone;
  int own_group = -1;
  int* grouped = nullptr;  // the worker's open p2p group, shared by its chunks: its plan group (-1: none)
  // Chunked schedules: the previous and next stages' workers, the chunk its buffers belong to, and
  // the emitters of those stages where they are this worker's own chunks (handed over in place).
  int prev = w - 1, next = w + 1;
  int chunk = 0;
  StageEmitter* local_prev = nullptr;
  StageEmitter* local_next = nullptr;
  std::map<int, int> dx_of{};         // micro-batch -> the input-gradient buffer its backward wrote
  int unread_dx[2] = {kNone, kNone};  // per input-gradient buffer: the micro-batch a local next has yet to read
  // Megatron's batches (interleaved): receives posted a step ahead (post_*), a step's sends held
  // until its computations are done (flush), each step's transfers one group.
  bool batched = false;
  std::map<int, int> posted_in{}, posted_dy{};  // micro-batch -> its receive
  struct Pending {
    bool act;
    int micro, buffer, slot;
  };
  std::vector<Pending> pending{};
  // What activations and their gradients travel in: bf16 under --precision bf16, whose stage
  // outputs and received gradients are bf16 values (docs/bf16.md), so no value changes.
  DType wire = DType::F32;
  const NetPlan* net = nullptr;  // sizes the Sequential's buffers
  bool bf16 = false;
  int64_t param_count = 0;      // the stage's parameters
  // A stage of a net with skips (one stage a worker): the values it receives from every stage
  // that makes one (an input slot each, entry j's at index j * slots + slot), the exits it sends
  // to every stage reading one (a gradient received for each: out j's output gradient at index j,
  // the first's -1), and an input gradient sent back for each entry (entry j's at 2 j + slot).
  const StageLinks* links = nullptr;
  int worker_of(int stage) const { return owner ? (*owner)[stage].first : w - s + stage; }
  // A chunked schedule's stage of a net with skips: every stage's worker and chunk, this worker's
  // stages (by chunk), and the one-way channel of each flow between two workers (Flows). A value
  // from a stage on this worker is read in place from its maker's slot, and its gradient written
  // where the maker reads it (entry_grad).
  struct Flows {
    std::map<std::pair<int, int>, int> acts, grads;  // (from stage, to stage) -> plan group
  };
  const std::vector<std::pair<int, int>>* owner = nullptr;
  const std::vector<int>* stage_slots = nullptr;  // per stage: the micro-batches its worker holds at once
  std::vector<StageEmitter>* mates = nullptr;
  const Flows* flows = nullptr;
  std::map<int, std::vector<int>> flow_grad_send{};  // per input-gradient buffer: its send in flight
  bool remote(int stage) const { return worker_of(stage) != w; }
  // Whether a value made on this worker is copied into this stage's slot: where the weights'
  // gradients wait (ZB-V's W), the maker may run its next micro-batch in that slot before them.
  bool copy_local = false;
  // Entry j of micro-batch k where a stage on this worker made it: its maker's slot (or input).
  int made_here(int k, int j) {
    StageEmitter& maker = (*mates)[(*owner)[links->entry_from[j]].second];
    return links->boundary.entries[j] == kNetInput ? maker.input(k) : maker.acts(k);
  }

  SequentialBuffers keeps(int64_t n) const { return sequential_buffers(*net, begin, end, n, bf16); }

  // The groups its transfers go on: activations received and sent, gradients received and sent
  // (the world's, but for one-way channels).
  int act_in = world, act_out = world, grad_in = world, grad_out = world;
  int channel(bool grad, bool send) const { return grad ? (send ? grad_out : grad_in) : (send ? act_out : act_in); }
  Action& p2p(ActionKind kind, int peer, int64_t n, int into, bool grad = false) {
    return on_wire(b.p2p(w, kind, channel(grad, kind == ActionKind::Send), peer, n, into, true), wire);
  }
  int buf(BufferRole role, int64_t values, int index = -1) { return b.buffer(w, role, index, values * kF, DType::F32, chunk); }
  int input(int k) {
    if (local_prev) return local_prev->acts(k);  // the previous stage's output, in place
    return s == 0 ? buf(BufferRole::Input, sizes[k] * in, k) : buf(BufferRole::StageInput, sizes[0] * in, k % slots);
  }
  // Micro-batch k's activation slot, as large as the first micro-batch it serves (torch.chunk's
  // sizes do not grow).
  int acts(int k) {
    const int slot = recompute ? 0 : k % slots;
    return b.buffer(w, BufferRole::Activations, slot, keeps(sizes[slot]).activations, DType::F32, chunk);
  }
  int params() { return buf(BufferRole::Params, 0); }
  int grads() { return buf(BufferRole::Grads, 0); }
  int dy() { return buf(BufferRole::OutputGrad, sizes[0] * out); }
  // A group of the transfers that follow on plan group g's communicator (default: the world's);
  // one open on another closes first (a group is one communicator's).
  void open(int g = -1) {
    if (!grouped) grouped = &own_group;
    if (g < 0) g = world;
    if (*grouped == g) return;
    close();
    Action& a = b.add(w, ActionKind::GroupStart);
    if (g != world) a.group = g;
    *grouped = g;
  }
  void close() {
    if (!grouped) grouped = &own_group;
    if (*grouped < 0) return;
    Action& a = b.add(w, ActionKind::GroupEnd);
    if (*grouped != world) a.group = *grouped;
    *grouped = -1;
  }
  void receive(int into, int64_t n, int peer, int micro, bool grad = false) {
    open(channel(grad, false));
    Action& a = p2p(ActionKind::Recv, peer, n, into, grad);
    a.micro = micro;
    const int id = a.id;
    close();
    b.wait(w, {id});
  }
  void wait_send(int k) {
    if (k == kNone || act_send[k].empty()) return;
    b.wait(w, act_send[k]);
    act_send[k].clear();
  }
  void wait_grad_send(int slot) {
    if (grad_send[slot].empty()) return;
    b.wait(w, grad_send[slot]);
    grad_send[slot].clear();
  }
  void free_scratch() {
    if (!recompute) return;
    wait_send(last_scratch_send);
    last_scratch_send = kNone;
  }
  void post_forward(int k) {
    if (s == 0 || local_prev) return;
    open(act_in);
    Action& a = p2p(ActionKind::Recv, prev, sizes[k] * in, input(k));
    a.micro = k, posted_in[k] = a.id;
  }
  void post_backward(int k) {
    if (last || local_next) return;
    open(grad_in);
    Action& a = p2p(ActionKind::Recv, next, sizes[k] * out, dy(), true);
    a.micro = k, posted_dy[k] = a.id;
  }
  void flush() {
    for (const Pending& p : pending) {
      open(channel(!p.act, true));
      Action& a = p2p(ActionKind::Send, p.act ? next : prev, sizes[p.micro] * (p.act ? out : in), p.buffer, !p.act);
      a.micro = p.micro;
      (p.act ? act_send[p.micro] : grad_send[p.slot]).push_back(a.id);
    }
    pending.clear();
  }
  void forward(int k) {
    if (owner && links) return forward_linked(k);
    const int64_t n = sizes[k];
    b.at(w, n);
    if (s > 0 && local_prev) {
      // in place: nothing travels
    } else if (s > 0 && batched) {
      close();
      b.wait(w, {posted_in.at(k)});
    } else if (s > 0 && links) {
      receive_entries(k);
    } else if (s > 0) {
      receive(input(k), n * in, prev, k);
    }
    close();
    free_scratch();
    b.compute(w, ActionKind::Forward, begin, end, k, entry_reads(k, {params()}), {acts(k)}).bytes = n * out * kF;
    if (links) return send_exits(k);
    if (last || local_next) return;
    if (batched) return pending.push_back({true, k, acts(k), -1});
    open(act_out);
    Action& a = p2p(ActionKind::Send, next, n * out, acts(k));
    a.micro = k;
    act_send[k].push_back(a.id);
    if (recompute) last_scratch_send = k;
  }
  // Entry j's slot for micro-batch k (stage 0's: the net's input; a chunked schedule's value made
  // on this worker: its maker's).
  int entry_in(int k, int j) {
    if (s == 0) return input(k);
    if (owner && !remote(links->entry_from[j]) && !copy_local) return made_here(k, j);
    return buf(BufferRole::StageInput, sizes[0] * links->entry_numel[j], j * slots + k % slots);
  }
  // What a forward reads: its input, or each entry's; then `rest`.
  std::vector<int> entry_reads(int k, std::vector<int> rest) {
    std::vector<int> r;
    if (!links) r.push_back(input(k));
    for (std::size_t j = 0; links && j < links->entry_numel.size(); ++j) r.push_back(entry_in(k, static_cast<int>(j)));
    r.insert(r.end(), rest.begin(), rest.end());
    return r;
  }
  // Values between neighbour stages travel as a chain's, on its channel; a skip over several
  // stages on a one-way channel of its own (`far_acts`, and `far_grads` for its gradient), whose
  // stream only such transfers wait on: on the neighbours' in-order stream the last stage's first
  // backward would send stage 0 a gradient it receives only after its warm-up, while stage 0's
  // warm-up sends wait for the last stage's receives (tests/test_nccl_order.cpp).
  int far_acts = -1, far_grads = -1;
  bool far(int stage) const { return stage != s - 1 && stage != s + 1; }
  Action& link(ActionKind kind, int stage, int64_t n, int into, bool grad, int layer, int k) {
    Action& a = far(stage) ? on_wire(b.p2p(w, kind, grad ? far_grads : far_acts, worker_of(stage), n, into, true), wire)
                           : p2p(kind, worker_of(stage), n, into, grad);
    a.micro = k, a.layer_begin = layer, a.layer_end = layer >= 0 ? layer + 1 : -1;  // its value (or gradient)
    return a;
  }
  // Each entry's value: the neighbour's in one group (with the sends before it), the far ones' in another.
  void receive_entries(int k) {
    std::vector<int> ids;
    for (bool far_pass : {false, true}) {
      for (std::size_t j = 0; j < links->entry_numel.size(); ++j) {
        if (far(links->entry_from[j]) != far_pass) continue;
        open(far_pass ? far_acts : act_in);
        ids.push_back(link(ActionKind::Recv, links->entry_from[j], sizes[k] * links->entry_numel[j],
                           entry_in(k, static_cast<int>(j)), false, links->boundary.entries[j], k).id);
      }
      close();
    }
    b.wait(w, ids);
  }
  // Each exit to every stage reading it: the far ones first, as a group; the neighbour's left
  // open for the receive that follows, as a chain's.
  void send_exits(int k) {
    for (bool far_pass : {true, false}) {
      for (std::size_t j = 0; j < links->outs.size(); ++j) {
        const StageLinks::Out& o = links->outs[j];
        if (far(o.to) != far_pass) continue;
        open(far_pass ? far_acts : act_out);
        const int from = o.layer == kNetInput ? input(k) : acts(k);
        act_send[k].push_back(link(ActionKind::Send, o.to, sizes[k] * links->out_numel[j], from, false, o.layer, k).id);
      }
      if (far_pass) close();
    }
    if (recompute && !links->outs.empty()) last_scratch_send = k;
  }
  // Out j's output gradient, received from its reader (the first's at index -1, as a chain's).
  int dy_of(int j) { return buf(BufferRole::OutputGrad, sizes[0] * links->out_numel[j], j == 0 ? -1 : j); }
  // Entry j's input gradient in `slot`: none for the net's input.
  int dx_of_entry(int j, int slot) {
    if (links->boundary.entries[j] == kNetInput) return kNone;
    return buf(BufferRole::InputGrad, sizes[0] * links->entry_numel[j], 2 * j + slot);
  }
  // Micro-batch k's input gradient, read in place by the previous stage on this worker.
  int take_dx(int k) {
    const int id = dx_of.at(k);
    for (int& u : unread_dx)
      if (u == k) u = kNone;
    return id;
  }
  int keep(int k) {  // B's output gradients, for W
    return b.buffer(w, BufferRole::KeptGrad, k % slots, keeps(sizes[0]).kept, DType::F32, chunk);
  }
  // ZB-H1's W: the weight gradients from what B kept.
  void weights(int k, bool first) {
    b.at(w, sizes[k]);
    close();
    std::vector<int> reads = {keep(k), acts(k)};
    if (!first) reads.push_back(grads());
    b.compute(w, ActionKind::BackwardWeights, begin, end, k, reads, {grads()});
  }
  // Before micro-batch k's backward: its forward again (`again`: recompute), and on the last stage
  // its loss, whose gradient goes to `dy`.
  void recompute_and_loss(int k, bool again, int dy) {
    const int64_t n = sizes[k];
    if (again) {
      free_scratch();
      b.compute(w, ActionKind::Recompute, begin, end, k, entry_reads(k, {params()}), {acts(k)}).bytes = n * out * kF;
    }
    if (!last) return;
    int64_t piece = 0;  // the target of every micro-batch, a loss each
    for (int64_t m : sizes) piece += m;
    b.compute(w, ActionKind::Loss, -1, -1, k, {acts(k), buf(BufferRole::Target, piece * out)},
              {dy, buf(BufferRole::Loss, static_cast<int64_t>(sizes.size()))})
        .bytes = n * out * kF;
  }
  // A whole backward, or (`split`) ZB-H1's B: the input gradient alone, keeping what W reads.
  void backward(int k, bool first, bool again, bool split = false) {
    if (owner && links) return backward_linked(k, first, split);
    const int64_t n = sizes[k];
    b.at(w, n);
    // The output gradient: the loss's, the next stage's input gradient in place, or received.
    if (links) return backward_graph(k, first, again, split);
    const int dy = local_next ? local_next->take_dx(k) : this->dy();
    if (!last && !local_next) {
      if (batched) close(), b.wait(w, {posted_dy.at(k)});
      else receive(dy, n * out, next, k, true);
      if (!recompute) wait_send(k);
    }
    close();
    recompute_and_loss(k, again, dy);
    const int slot = backwards++ % 2;
    int dx = kNone;
    if (s > 0) {
      wait_grad_send(slot);
      PB_CHECK(unread_dx[slot] == kNone, "{}: worker {} stage {} overwrites micro-batch {}'s input gradient before the "
               "previous stage reads it", b.plan().strategy, w, s, unread_dx[slot]);
      dx = buf(BufferRole::InputGrad, sizes[0] * in, slot);
      dx_of[k] = dx;
      if (local_prev) unread_dx[slot] = k;
    }
    std::vector<int> reads = {dy, acts(k)};
    if (!first) reads.push_back(grads());  // later micro-batches add to the gradients
    if (!split) b.compute(w, ActionKind::BackwardWeights, begin, end, k, reads, {grads()});
    std::vector<int> writes;
    if (dx != kNone) writes.push_back(dx);
    if (split) writes.push_back(keep(k));
    b.compute(w, ActionKind::BackwardData, begin, end, k, {dy, acts(k), params()}, writes);
    if (s > 0 && local_prev) {
      // read in place by the previous stage's backward (take_dx)
    } else if (s > 0 && batched) {
      pending.push_back({false, k, dx, slot});
    } else if (s > 0) {
      open(grad_out);
      Action& a = p2p(ActionKind::Send, prev, n * in, dx, true);
      a.micro = k;
      grad_send[slot].push_back(a.id);
    }
  }
  // A graph stage's backward of micro-batch k from its exits' gradients `dys`: the weight
  // gradients (but for a split backward's B, which keeps what W reads) and the entries' into `dxs`.
  void graph_backward_computes(int k, bool first, bool split, const std::vector<int>& dys, std::vector<int> dxs) {
    std::vector<int> reads = dys;
    reads.push_back(acts(k));
    if (!first) reads.push_back(grads());
    if (!split) b.compute(w, ActionKind::BackwardWeights, begin, end, k, reads, {grads()});
    reads = dys;
    reads.push_back(acts(k)), reads.push_back(params());
    if (split) dxs.push_back(keep(k));
    b.compute(w, ActionKind::BackwardData, begin, end, k, reads, dxs);
  }
  // The same for a stage of a net with skips: each exit's gradients received from its readers
  // (the output gradient's reads, in links->outs' order), each entry's sent to its maker.
  void backward_graph(int k, bool first, bool again, bool split) {
    const int64_t n = sizes[k];
    std::vector<int> dys;
    if (last) {
      dys.push_back(dy());
    } else {
      std::vector<int> ids;
      for (std::size_t j = 0; j < links->outs.size(); ++j)
        if (links->outs[j].exit >= 0) dys.push_back(dy_of(static_cast<int>(j)));  // the net's input has no gradient
      for (bool far_pass : {false, true}) {
        for (std::size_t j = 0, r = 0; j < links->outs.size(); ++j) {
          const StageLinks::Out& o = links->outs[j];
          if (o.exit < 0) continue;
          const int dy = dys[r++];
          if (far(o.to) != far_pass) continue;
          open(far_pass ? far_grads : grad_in);
          ids.push_back(link(ActionKind::Recv, o.to, n * links->out_numel[j], dy, true, o.layer, k).id);
        }
        close();
      }
      b.wait(w, ids);
      if (!recompute) wait_send(k);
    }
    close();
    recompute_and_loss(k, again, dy());
    const int slot = backwards++ % 2;
    std::vector<int> dxs;
    wait_grad_send(slot);
    for (std::size_t j = 0; j < links->entry_numel.size(); ++j)
      if (const int dx = dx_of_entry(static_cast<int>(j), slot); dx != kNone) dxs.push_back(dx);
    graph_backward_computes(k, first, split, dys, dxs);
    for (bool far_pass : {true, false}) {  // as send_exits: the far ones first, the neighbour's left open
      for (std::size_t j = 0; j < links->entry_numel.size(); ++j) {
        const int dx = dx_of_entry(static_cast<int>(j), slot);
        if (dx == kNone || far(links->entry_from[j]) != far_pass) continue;
        open(far_pass ? far_grads : grad_out);
        grad_send[slot].push_back(
            link(ActionKind::Send, links->entry_from[j], n * links->entry_numel[j], dx, true, links->boundary.entries[j], k).id);
      }
      if (far_pass) close();
    }
  }

  // A chunked schedule's stage of a net with skips, micro-batch k: each value from another worker
  // received on its flow's channel just before the forward, each exit sent to every other worker's
  // reader right after; a flow carries one kind between two stages, so both ends meet in
  // micro-batch order and no transfer waits behind another's.
  Action& flow(ActionKind kind, bool grad, int from, int to, int64_t n, int into, int layer, int k) {
    const int peer = worker_of(kind == ActionKind::Send ? to : from);
    Action& a = on_wire(b.p2p(w, kind, (grad ? flows->grads : flows->acts).at({from, to}), peer, n, into, true), wire);
    a.micro = k, a.layer_begin = layer, a.layer_end = layer >= 0 ? layer + 1 : -1;
    return a;
  }
  void forward_linked(int k) {
    const int64_t n = sizes[k];
    b.at(w, n);
    std::vector<int> ids;
    for (std::size_t j = 0; s > 0 && j < links->entry_numel.size(); ++j)
      if (const int u = links->entry_from[j]; remote(u))
        ids.push_back(flow(ActionKind::Recv, false, u, s, n * links->entry_numel[j], entry_in(k, static_cast<int>(j)),
                           links->boundary.entries[j], k).id);
    if (!ids.empty()) b.wait(w, ids);
    for (std::size_t j = 0; s > 0 && copy_local && j < links->entry_numel.size(); ++j)
      if (!remote(links->entry_from[j])) {
        const int layer = links->boundary.entries[j];
        Action& a = b.compute(w, ActionKind::Copy, layer, layer >= 0 ? layer + 1 : -1, k, {made_here(k, static_cast<int>(j))},
                              {entry_in(k, static_cast<int>(j))});
        a.bytes = n * links->entry_numel[j] * kF;
      }
    b.compute(w, ActionKind::Forward, begin, end, k, entry_reads(k, {params()}), {acts(k)}).bytes = n * out * kF;
    for (std::size_t j = 0; j < links->outs.size(); ++j) {
      const StageLinks::Out& o = links->outs[j];
      if (!remote(o.to)) continue;
      const int from = o.layer == kNetInput ? input(k) : acts(k);
      act_send[k].push_back(flow(ActionKind::Send, false, s, o.to, n * links->out_numel[j], from, o.layer, k).id);
    }
  }
  // The gradient of entry j for micro-batch k, written by this stage's backward and read by its
  // maker's (in place on this worker, else once sent): one buffer per slot of the maker's, which
  // holds micro-batch k from its forward to its backward; the gradient's life falls between, so
  // micro-batch k + slots finds it read (and sent: its wait returns at once).
  int entry_grad(int k, int j) {
    int first = 0;  // entry j's buffers follow the earlier entries'
    for (int i = 0; i < j; ++i) first += stage_slots->at(links->entry_from[i]);
    const int slots_of = stage_slots->at(links->entry_from[j]);
    return buf(BufferRole::InputGrad, sizes[0] * links->entry_numel[j], first + k % slots_of);
  }
  void wait_flow_grads() {
    for (auto& [buffer, ids] : flow_grad_send)
      if (!ids.empty()) b.wait(w, ids), ids.clear();
  }
  void backward_linked(int k, bool first, bool split) {
    const int64_t n = sizes[k];
    b.at(w, n);
    std::vector<int> dys, ids;
    if (last) dys.push_back(dy());
    for (std::size_t j = 0; !last && j < links->outs.size(); ++j) {
      const StageLinks::Out& o = links->outs[j];
      if (o.exit < 0) continue;  // the net's input has no gradient
      if (remote(o.to)) {
        dys.push_back(dy_of(static_cast<int>(j)));
        ids.push_back(flow(ActionKind::Recv, true, o.to, s, n * links->out_numel[j], dys.back(), o.layer, k).id);
      } else {
        StageEmitter& reader = (*mates)[(*owner)[o.to].second];
        dys.push_back(reader.entry_grad(k, reader.links->boundary.entry_of(o.layer)));
      }
    }
    if (!ids.empty()) b.wait(w, ids);
    wait_send(k);  // its readers are done with it
    recompute_and_loss(k, false, dy());
    std::vector<int> dxs;
    for (std::size_t j = 0; s > 0 && j < links->entry_numel.size(); ++j) {
      if (links->boundary.entries[j] == kNetInput) continue;
      dxs.push_back(entry_grad(k, static_cast<int>(j)));
      std::vector<int>& sent = flow_grad_send[dxs.back()];
      if (!sent.empty()) b.wait(w, sent), sent.clear();
    }
    graph_backward_computes(k, first, split, dys, dxs);
    for (std::size_t j = 0, r = 0; s > 0 && j < links->entry_numel.size(); ++j) {
      if (links->boundary.entries[j] == kNetInput) continue;
      const int dx = dxs[r++];
      if (const int u = links->entry_from[j]; remote(u))
        flow_grad_send[dx].push_back(flow(ActionKind::Send, true, s, u, n * links->entry_numel[j], dx, links->boundary.entries[j], k).id);
    }
  }
};

// What a worker's Sequentials keep beside their slots, once its actions are made: a later stage's
// pair of input gradients (both, though one backward uses one), one backward scratch for all its
// chunks (each part as large as the largest chunk's: a smaller one it outgrows is freed first),
// each chunk's bf16 parameter copy, dp x pp's bf16 gradient staging, and the bf16 transfer
// staging its sends and receives take.
void stage_keeps(PlanBuilder& b, const StrategyOptions& o, int w, const std::vector<StageEmitter>& chunks, bool replicated) {
  constexpr int64_t kH = sizeof(Bf16);
  std::vector<SequentialBuffers> kept;  // per chunk: its scratch's parts, each shared with the other chunks'
  for (const StageEmitter& e : chunks) {
    for (int k = 0; k < 2 && e.s > 0 && !e.links; ++k) b.buffer(w, BufferRole::InputGrad, k, e.sizes[0] * e.in * kF, DType::F32, e.chunk);
    for (std::size_t j = 0; e.links && j < e.links->entry_numel.size(); ++j)
      for (int k = 0; k < 2 && e.links->boundary.entries[j] != kNetInput && !e.owner; ++k)
        b.buffer(w, BufferRole::InputGrad, 2 * static_cast<int>(j) + k, e.sizes[0] * e.links->entry_numel[j] * kF,
                 DType::F32, e.chunk);
    kept.push_back(e.keeps(e.sizes[0]));
    if (e.bf16 && e.param_count > 0) b.buffer(w, BufferRole::ParamCopy, -1, e.param_count * kH, DType::Bf16, e.chunk);
    if (replicated) gradient_staging(b, w, o, e.param_count, e.chunk);
  }
  if (const int64_t scratch = shared_scratch(kept); scratch > 0) b.buffer(w, BufferRole::Scratch, 0, scratch);
  int k = 0;  // each communicator's slots (the world's, the one-way channels'), numbered on
  for (std::size_t g = 0; g < b.plan().groups.size(); ++g)
    for (int64_t values : transfer_staging(b.plan(), w, static_cast<int>(g)))
      b.buffer(w, BufferRole::Staging, k++, values * kH, DType::Bf16);
}

}  // namespace

// A chunked schedule (strategies/rules.h): each worker's chunks a stage's emitter each (their
// buffers' chunk c), all of a worker's sharing its open p2p group. On one group a worker must
// receive a peer's messages in the order sent: interleaved 1F1B's order does, activations and
// gradients together on the world's (PipelineSchedule.InterleavedRunsEveryChunkWithoutDeadlock), in
// Megatron's batches, since on NCCL's in-order stream a lone send may wait on a peer whose send
// waits for this worker's next launch (tests/test_nccl_order.cpp); a schedule with one-way channels
// (ZB-V) sends after each computation and receives before, as 1F1B, each kind on its own group.
// Over a net with skips either sends so, every flow between two workers on a group of its own
// (StageEmitter::forward_linked).
Plan plan_chunked(const NetPlan& net, const StrategyOptions& o, int64_t batch, const std::string& name,
                  const std::vector<std::pair<int, int>>& ranges, const std::vector<int64_t>& sizes,
                  const ChunkSchedule& sched) {
  const int V = sched.chunks, S = static_cast<int>(ranges.size()), P = S / V, m = static_cast<int>(sizes.size());
  PB_CHECK(V >= 1 && P >= 1 && P * V == S, "{}: {} stages for {} chunks per worker", name, S, V);
  PlanBuilder b(name, P, batch, m);
  std::vector<int> all(P);
  for (int r = 0; r < P; ++r) all[r] = r;
  const int world = b.group("world", all);
  std::vector<int> acts(V, world), grads(V, world);  // per chunk: the group its inputs, its output gradients come on
  if (sched.one_way_channels)
    for (int c = 0; c < V; ++c) {
      if (c > 0) acts[c] = b.group(fmt::format("acts {}", c), all);
      grads[c] = b.group(fmt::format("grads {}", c), all);
    }
  std::vector<std::pair<int, int>> owner(S, {-1, -1});  // stage -> (worker, chunk)
  for (int r = 0; r < P; ++r)
    for (int c = 0; c < V; ++c) {
      const int st = sched.stage(P, r, c);
      PB_CHECK(st >= 0 && st < S && owner[st].first < 0, "{}: worker {} chunk {} at stage {}", name, r, c, st);
      owner[st] = {r, c};
    }
  // A net with skips: each stage's links, and a one-way channel of two workers for each flow
  // between stages on two workers, activations and gradients apart.
  std::vector<StageLinks> links;
  StageEmitter::Flows flows;
  for (int st = 0; st < S && net.has_skips(); ++st) links.push_back(stage_links(net, ranges, st));
  for (int t = 0; t < static_cast<int>(links.size()); ++t)
    for (std::size_t j = 0; t > 0 && j < links[t].entry_from.size(); ++j) {
      const int u = links[t].entry_from[j], a = owner[u].first, c = owner[t].first;
      if (a == c) continue;
      const std::vector<int> pair = {std::min(a, c), std::max(a, c)};
      if (!flows.acts.count({u, t})) flows.acts[{u, t}] = b.group(fmt::format("skips {}>{}", u, t), pair);
      if (links[t].boundary.entries[j] != kNetInput && !flows.grads.count({t, u}))
        flows.grads[{t, u}] = b.group(fmt::format("skip grads {}>{}", t, u), pair);
    }
  std::vector<std::vector<PipeOp>> worker_ops(P);  // per worker, its schedule
  std::vector<int> stage_slots(S);
  for (int r = 0; r < P; ++r) {
    worker_ops[r] = sched.ops(P, r, m, name);
    for (int c = 0; c < V; ++c) stage_slots[sched.stage(P, r, c)] = chunk_slots(worker_ops[r], c);
  }
  for (int r = 0; r < P; ++r) {
    const std::vector<PipeOp>& ops = worker_ops[r];
    b.plan().replica[r] = 0;
    int grouped = -1;
    std::vector<StageEmitter> e;
    e.reserve(V);
    std::vector<int64_t> np(V, 0);
    for (int c = 0; c < V; ++c) {
      const int s = sched.stage(P, r, c);
      const auto [begin, end] = ranges[s];
      for (int i = begin; i < end; ++i) np[c] += net.layers[i].weight_numel + net.layers[i].bias_numel;
      e.push_back(StageEmitter{b, r, world, s, s == S - 1, false, chunk_slots(ops, c), begin, end,
                               numel_of(net.layers[begin].in), numel_of(net.layers[end - 1].out), sizes,
                               std::vector<std::vector<int>>(m)});
      StageEmitter& x = e.back();
      x.grouped = &grouped;
      x.act_in = acts[c], x.grad_in = grads[c];
      if (s + 1 < S) x.act_out = acts[owner[s + 1].second];
      if (s > 0) x.grad_out = grads[owner[s - 1].second];
      x.prev = s > 0 ? owner[s - 1].first : -1, x.next = s + 1 < S ? owner[s + 1].first : -1;
      x.chunk = c;
      x.wire = activation_wire(o);
      x.batched = sched.batched;
      x.net = &net, x.bf16 = o.backend.precision == Precision::Bf16, x.param_count = np[c];
      x.buf(BufferRole::Params, np[c]), x.buf(BufferRole::Grads, np[c]);
      if (!links.empty()) {
        x.links = &links[s], x.owner = &owner, x.mates = &e, x.flows = &flows, x.stage_slots = &stage_slots;
        x.copy_local = std::any_of(ops.begin(), ops.end(), [](const PipeOp& op) { return op.part == PipeOp::Part::Weights; });
      }
    }
    for (StageEmitter& x : e) {
      if (x.s > 0 && owner[x.s - 1].first == r) x.local_prev = &e[owner[x.s - 1].second];
      if (x.s + 1 < S && owner[x.s + 1].first == r) x.local_next = &e[owner[x.s + 1].second];
    }
    auto run = [&](const PipeOp& op) {
      StageEmitter& x = e[op.chunk];
      if (op.forward) x.forward(op.micro);
      else if (op.part == PipeOp::Part::Weights) x.weights(op.micro, op.first_backward);
      else x.backward(op.micro, op.first_backward, false, op.part == PipeOp::Part::Data);
    };
    if (sched.batched && links.empty()) {
      // Megatron's steps: each warm-up forward, each steady forward with its backward, each cool-down
      // backward; after a step one group sends its outputs and receives the next step's inputs.
      const std::size_t total = ops.size() / 2;
      std::size_t lead = 0, i = 0;
      while (lead < ops.size() && ops[lead].forward) ++lead;
      std::vector<std::vector<PipeOp>> steps;
      for (; i < (lead == total ? total : lead - 1); ++i) steps.push_back({ops[i]});
      for (; i + 1 < ops.size() && ops[i].forward; i += 2) steps.push_back({ops[i], ops[i + 1]});
      for (; i < ops.size(); ++i) steps.push_back({ops[i]});
      auto post = [&](const std::vector<PipeOp>& step) {
        for (const PipeOp& op : step)
          if (op.forward) e[op.chunk].post_forward(op.micro);
          else if (op.part != PipeOp::Part::Weights) e[op.chunk].post_backward(op.micro);  // W receives nothing
        e[0].close();
      };
      post(steps[0]);
      for (std::size_t j = 0; j < steps.size(); ++j) {
        for (const PipeOp& op : steps[j]) run(op);
        for (const PipeOp& op : steps[j]) e[op.chunk].flush();
        if (j + 1 < steps.size()) post(steps[j + 1]);
        e[0].close();
      }
    } else {
      for (const PipeOp& op : ops) run(op);
      e[0].close();
    }
    for (StageEmitter& x : e) {
      for (int k = 0; k < m; ++k) x.wait_send(k);
      x.wait_grad_send(0), x.wait_grad_send(1), x.wait_flow_grads();
    }
    for (int c = 0; c < V; ++c)
      b.compute(r, ActionKind::Optimizer, -1, -1, -1, {e[c].grads()}, {e[c].params(), e[c].buf(BufferRole::AdamState, 2 * np[c])}).bytes =
          np[c] * kF;
    stage_keeps(b, o, r, e, false);
  }
  return b.take();
}

std::vector<int64_t> transfer_staging(const Plan& p, int worker, int group) {
  const std::vector<Action>& list = p.actions.at(worker);
  WireSlots slots;
  std::vector<int> held(list.size(), -1);  // per started transfer: its slot
  for (const Action& a : list) {
    if ((a.kind == ActionKind::Send || a.kind == ActionKind::Recv) && a.dtype == DType::Bf16 && a.group == group) {
      const int k = slots.take(a.count);
      if (a.async) held.at(a.id) = k;
      else slots.give(k);
    }
    if (a.kind == ActionKind::Wait)
      for (int id : a.waits)
        if (held.at(id) >= 0) slots.give(held[id]), held[id] = -1;
  }
  return slots.sizes();
}

Plan plan_chunk_pipeline(const NetPlan& net, const StrategyOptions& o, int64_t batch, const std::string& name,
                         const ChunkSchedule& sched) {
  if (o.micro_batches < 1)
    throw UsageError(fmt::format("{}: --micro-batches must be at least 1, got {}", name, o.micro_batches));
  if (o.devices == 1) return plan_staged(net, o, batch, name, o.micro_batches, 1);  // one stage (Staged::plan_workers)
  sched.ops(o.devices, 0, o.micro_batches, name);  // refuses an M it cannot run, before the split is timed
  const auto ranges = stage_ranges(net, o.devices * sched.chunks, o, o.micro_batches, cpu(0), name);
  const std::vector<int64_t> pieces = replica_pieces(batch, 1, name);
  return plan_chunked(net, o, batch, name, ranges,
                      replica_micro_batches(pieces, o.micro_batches, o.cap_micro_batches, batch, name).at(0), sched);
}

Plan plan_staged(const NetPlan& net, const StrategyOptions& o, int64_t batch, const std::string& name, int micro,
                 int replicas) {
  if (micro < 1) throw UsageError(fmt::format("{}: --micro-batches must be at least 1, got {}", name, micro));
  PB_CHECK(replicas >= 1 && o.devices % replicas == 0, "{}: {} replicas over {} workers", name, replicas, o.devices);
  const int stages = o.devices / replicas;
  const bool interleaved = o.schedule == Schedule::Interleaved;
  PB_CHECK(!interleaved || replicas == 1, "{}: interleaved 1F1B has no dp x pp form", name);
  if (interleaved && stages > 1) return plan_chunk_pipeline(net, o, batch, name, interleaved_schedule(o));
  if (interleaved) interleaved_ops(stages, o.virtual_stages, 0, micro, name);  // refuses a V it cannot run
  const auto ranges = stage_ranges(net, stages, o, micro * replicas, cpu(0), name);  // one worker: 1F1B, one stage
  const std::vector<int64_t> pieces = replica_pieces(batch, replicas, name);
  return plan_stage_steps(net, o, batch, name, ranges, replica_micro_batches(pieces, micro, o.cap_micro_batches, batch, name));
}

Plan plan_stage_steps(const NetPlan& net, const StrategyOptions& o, int64_t batch, const std::string& name,
                      const std::vector<std::pair<int, int>>& ranges,
                      const std::vector<std::vector<int64_t>>& micro_sizes) {
  const int replicas = static_cast<int>(micro_sizes.size()), stages = static_cast<int>(ranges.size());
  const int workers = replicas * stages;
  PlanBuilder b(name, workers, batch, static_cast<int>(micro_sizes[0].size()));
  std::vector<int> all(workers);
  for (int r = 0; r < workers; ++r) all[r] = r;
  const int world = b.group("world", all);
  std::vector<StageLinks> links;  // a net with skips: per stage, what it receives and sends
  for (int st = 0; st < stages && net.has_skips(); ++st) links.push_back(stage_links(net, ranges, st));
  int far_acts = kNone, far_grads = kNone;  // skips over several stages: one-way channels over every worker
  for (const StageLinks& l : links)
    for (const StageLinks::Out& o : l.outs)
      if (o.to > &l - links.data() + 1 && far_acts == kNone)
        far_acts = b.group("skips", all), far_grads = b.group("skip grads", all);
  std::vector<int> stage_group(stages, kNone);
  if (replicas > 1)
    for (int st = 0; st < stages; ++st) {
      std::vector<int> members;
      for (int r = st; r < workers; r += stages) members.push_back(r);
      stage_group[st] = b.group(fmt::format("stage {}", st), members);
    }
  for (int r = 0; r < workers; ++r) {
    const int s = r % stages, d = r / stages;
    const auto& sizes = micro_sizes[d];
    const int m = static_cast<int>(sizes.size());
    const auto [begin, end] = ranges[s];
    int64_t np = 0;
    for (int i = begin; i < end; ++i) np += net.layers[i].weight_numel + net.layers[i].bias_numel;
    b.plan().replica[r] = d;
    const Schedule schedule = o.schedule;
    StageEmitter e{b, r, world, s, s == stages - 1, o.recompute, pipeline_slots(schedule, stages, s, m), begin, end,
                   numel_of(net.layers[begin].in), numel_of(net.layers[end - 1].out), sizes,
                   std::vector<std::vector<int>>(sizes.size())};
    e.wire = activation_wire(o);
    e.net = &net, e.bf16 = o.backend.precision == Precision::Bf16, e.param_count = np;
    if (!links.empty()) e.links = &links[s], e.far_acts = far_acts, e.far_grads = far_grads;
    b.buffer(r, BufferRole::Params, -1, np * kF);
    b.buffer(r, BufferRole::Grads, -1, np * kF);
    for (const PipeOp& op : pipeline_ops(schedule, o.recompute, stages, s, m)) {
      if (op.forward) e.forward(op.micro);
      else if (op.part == PipeOp::Part::Weights) e.weights(op.micro, op.first_backward);
      else e.backward(op.micro, op.first_backward, op.recompute, op.part == PipeOp::Part::Data);
    }
    e.close();
    for (int k = 0; k < m; ++k) e.wait_send(k);
    e.wait_grad_send(0), e.wait_grad_send(1);
    if (replicas > 1) {
      Action& ar = on_wire(b.collective(r, CollKind::AllReduce, stage_group[s], np, np * kF, false), o.reduce_dtype);
      ar.reads.push_back(e.grads()), ar.writes.push_back(e.grads());
    }
    b.compute(r, ActionKind::Optimizer, -1, -1, -1, {e.grads()}, {e.params(), e.buf(BufferRole::AdamState, 2 * np)}).bytes = np * kF;
    stage_keeps(b, o, r, {e}, replicas > 1);
  }
  return b.take();
}

}  // namespace pb
