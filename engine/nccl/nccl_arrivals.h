// When every rank is in this process, all their events are at hand: a point-to-point launch's
// wait for its peers is split off its span afterwards (split_arrival), from when each peer's
// stream reached its matching launch. All on the host clock: each rank's events are placed by an
// origin event recorded on an idle stream at its step's start, when the host took the time.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "engine/comm.h"
#include "engine/nccl_order.h"

namespace pb {

class P2pArrivals {
 public:
  explicit P2pArrivals(int ranks) : ranks_(ranks) {}

  // On the rank's thread at its step's start (idle: a stream nothing else uses).
  void reset(int rank, Backend& be, Stream& idle, Event& origin) {
    Rank& r = ranks_.at(rank);
    std::lock_guard<std::mutex> lock(r.mu);
    r.be = &be, r.origin = &origin;
    be.record(origin, &idle);
    r.origin_host = std::chrono::steady_clock::now();
    r.from.clear(), r.ordinal.clear(), r.launches.clear();
  }

  // A launch of the rank's starts on its stream between from and to; span: its index in the
  // rank's device spans.
  void launched(int rank, const std::vector<P2pStart>& batch, Event* from, Event* to, int span) {
    Rank& r = ranks_.at(rank);
    std::lock_guard<std::mutex> lock(r.mu);
    Launch l{span, from, to, {}};
    for (const P2pStart& p : batch) {
      const int64_t k = r.ordinal[{p.peer, p.send}]++;
      r.from[Key{p.peer, p.send, k}] = from;
      l.partners.push_back({p.peer, Key{rank, !p.send, k}});  // its match, at the peer
    }
    r.launches.push_back(std::move(l));
  }

  // The rank's launch spans, placed on the host clock and split; its device work is complete,
  // so its peers have issued (and begun) every matching launch.
  void split(int rank, std::vector<CommDeviceSpan>& spans) {
    std::vector<Launch> launches;
    {
      std::lock_guard<std::mutex> lock(ranks_.at(rank).mu);
      launches = ranks_[rank].launches;
    }
    for (const Launch& l : launches) {
      std::vector<double> peers;
      for (const auto& [peer, key] : l.partners) {
        Rank& p = ranks_.at(peer);
        std::lock_guard<std::mutex> lock(p.mu);
        auto it = p.from.find(key);
        if (it != p.from.end()) peers.push_back(at(p, *it->second));
      }
      const double from = at(ranks_[rank], *l.from), to = at(ranks_[rank], *l.to);
      const ArrivalSplit s = split_arrival(from, to, peers);
      CommDeviceSpan& d = spans.at(l.span);
      d.on_host = true;
      d.host_arrive = host(ranks_[rank], from);
      d.host_from = host(ranks_[rank], from + s.wait_s);
      d.host_to = host(ranks_[rank], from + s.wait_s + s.transfer_s);
    }
  }

 private:
  using Key = std::tuple<int, bool, int64_t>;  // (peer, send, ordinal among the rank's to/from it)
  struct Launch {
    int span;
    Event *from, *to;
    std::vector<std::pair<int, Key>> partners;
  };
  struct Rank {
    std::mutex mu;
    Backend* be = nullptr;
    Event* origin = nullptr;
    std::chrono::steady_clock::time_point origin_host;
    std::map<Key, Event*> from;
    std::map<std::pair<int, bool>, int64_t> ordinal;
    std::vector<Launch> launches;
  };
  // Seconds since the epoch of the host clock at which the rank's device reached e.
  static double at(Rank& r, Event& e) {
    return std::chrono::duration<double>(r.origin_host.time_since_epoch()).count() + r.be->elapsed_s(*r.origin, e);
  }
  static std::chrono::steady_clock::time_point host(Rank& r, double s) {
    return r.origin_host + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                               std::chrono::duration<double>(s - std::chrono::duration<double>(r.origin_host.time_since_epoch()).count()));
  }

  std::vector<Rank> ranks_;
};

}  // namespace pb
