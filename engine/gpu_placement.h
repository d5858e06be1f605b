// Which GPU each rank of a multi-process job uses, decided from the PCI bus ids every rank sees
// rather than from its local rank: under per-rank CUDA_VISIBLE_DEVICES (Slurm's GPU binding)
// every rank sees one GPU as device 0, yet each is a different GPU.
#pragma once

#include <string>
#include <vector>

namespace pb {

// What one rank sees: its host, and the PCI bus ids of its visible GPUs in its own CUDA order.
// `error` is set instead when the rank could not ask (its CUDA module failed to load, say).
struct RankGpus {
  std::string host;
  std::vector<std::string> bus_ids;
  std::string error;
};

struct GpuPlacement {
  std::vector<int> device;          // per rank: the CUDA index it uses, in its own numbering; -1: none
  std::vector<std::string> bus_id;  // per rank: that GPU's bus id (lower case); empty: none
  std::vector<int> sharers;         // per rank: ranks on its host using the same GPU, itself included
  bool shared = false;              // some GPU serves two or more ranks
  bool nccl = false;                // every rank has a GPU of its own: NCCL can span the job
};

// Ranks on one host that see the same bus id use the same GPU, whatever index it has for each.
// Per host, the ranks with the fewest visible GPUs choose first (then by rank), each taking its
// least-used visible GPU (then the lowest index): without binding that is local rank modulo GPU
// count, with binding each rank's own GPU.
GpuPlacement place_gpus(const std::vector<RankGpus>& ranks);

// Why the placement cannot run `strategy` on GPUs, or "" when it can: a rank that could not look,
// one with no GPU, or (unless allow_shared) GPUs shared by ranks. Every rank gets the same answer.
std::string placement_problem(const std::vector<RankGpus>& ranks, const GpuPlacement& g, const std::string& strategy,
                              bool allow_shared);

// This job's placement: every rank's bus ids, gathered over MPI on the first call (collective:
// every process makes that call at the same point), then kept.
struct JobGpus {
  std::vector<RankGpus> ranks;
  GpuPlacement placement;
};
const JobGpus& job_gpus();

}  // namespace pb
