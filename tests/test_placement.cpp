// GPU placement of a multi-process job from fake ranks' hosts and PCI bus ids
// (engine/gpu_placement.h): Slurm's per-rank binding, one process per GPU without binding,
// oversubscription, and mixes of them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/gpu_placement.h"

namespace pb {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::vector<std::string> kFour = {"0000:1B:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0"};

// n ranks on `host` that each see all of `ids` (no binding).
std::vector<RankGpus> unbound(const std::string& host, int n, const std::vector<std::string>& ids) {
  return std::vector<RankGpus>(static_cast<std::size_t>(n), RankGpus{host, ids, ""});
}

TEST(Placement, SlurmBindingGivesEveryRankItsOwnDeviceZero) {
  std::vector<RankGpus> ranks;
  for (const std::string& id : kFour) ranks.push_back({"node1", {id}, ""});
  const GpuPlacement g = place_gpus(ranks);
  EXPECT_THAT(g.device, ElementsAre(0, 0, 0, 0));
  EXPECT_THAT(g.bus_id, ElementsAre("0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0"));
  EXPECT_THAT(g.sharers, ElementsAre(1, 1, 1, 1));
  EXPECT_FALSE(g.shared);
  EXPECT_TRUE(g.nccl) << "distinct GPUs, each seen as device 0, are not shared";
  EXPECT_EQ(placement_problem(ranks, g, "ddp", false), "");
}

TEST(Placement, WithoutBindingEachLocalRankTakesTheNextDevice) {
  const std::vector<RankGpus> ranks = unbound("node1", 4, kFour);
  const GpuPlacement g = place_gpus(ranks);
  EXPECT_THAT(g.device, ElementsAre(0, 1, 2, 3));
  EXPECT_TRUE(g.nccl);
  EXPECT_EQ(placement_problem(ranks, g, "ddp", false), "");
}

TEST(Placement, MoreRanksThanDevicesShareThemRoundRobin) {
  const std::vector<RankGpus> ranks = unbound("node1", 6, {kFour[0], kFour[1], kFour[2], kFour[3]});
  const GpuPlacement g = place_gpus(ranks);
  EXPECT_THAT(g.device, ElementsAre(0, 1, 2, 3, 0, 1));  // local rank modulo GPU count, as before
  EXPECT_THAT(g.sharers, ElementsAre(2, 2, 1, 1, 2, 2));
  EXPECT_TRUE(g.shared);
  EXPECT_FALSE(g.nccl);
  const std::string why = placement_problem(ranks, g, "ddp", false);
  EXPECT_THAT(why, HasSubstr("ranks 0, 4 on node1 would share the GPU at PCI bus id 0000:1b:00.0"));
  EXPECT_THAT(why, HasSubstr("4 distinct GPU(s)"));
  EXPECT_THAT(why, HasSubstr("--oversubscribe"));
  EXPECT_EQ(placement_problem(ranks, g, "ddp", true), "") << "--oversubscribe allows it";
}

TEST(Placement, RanksBoundToTheSameDeviceShareIt) {
  const std::vector<RankGpus> ranks = {{"node1", {kFour[2]}, ""}, {"node1", {kFour[2]}, ""}};
  const GpuPlacement g = place_gpus(ranks);
  EXPECT_THAT(g.device, ElementsAre(0, 0));
  EXPECT_THAT(g.sharers, ElementsAre(2, 2));
  EXPECT_FALSE(g.nccl);
  EXPECT_THAT(placement_problem(ranks, g, "pipeline", false),
              HasSubstr("pipeline: ranks 0, 1 on node1 would share the GPU at PCI bus id 0000:52:00.0 (1 distinct"));
}

TEST(Placement, TheSameBusIdOnTwoHostsIsTwoDevices) {
  const std::vector<RankGpus> ranks = {{"node1", {kFour[0]}, ""}, {"node2", {kFour[0]}, ""}};
  const GpuPlacement g = place_gpus(ranks);
  EXPECT_THAT(g.sharers, ElementsAre(1, 1));
  EXPECT_TRUE(g.nccl);
}

TEST(Placement, MixedHostsAndBindings) {
  // node1 binds one GPU per rank; node2 does not; on node3 one rank sees two GPUs and one sees
  // only the first of them: the one with the fewer choices goes first, so neither shares.
  std::vector<RankGpus> ranks = {{"node1", {kFour[1]}, ""}, {"node1", {kFour[0]}, ""}};
  for (const RankGpus& r : unbound("node2", 2, {kFour[0], kFour[1]})) ranks.push_back(r);
  ranks.push_back({"node3", {kFour[0], kFour[1]}, ""});
  ranks.push_back({"node3", {kFour[0]}, ""});
  const GpuPlacement g = place_gpus(ranks);
  EXPECT_THAT(g.device, ElementsAre(0, 0, 0, 1, 1, 0));
  EXPECT_THAT(g.bus_id, ElementsAre("0000:43:00.0", "0000:1b:00.0", "0000:1b:00.0", "0000:43:00.0",
                                    "0000:43:00.0", "0000:1b:00.0"));
  EXPECT_THAT(g.sharers, ElementsAre(1, 1, 1, 1, 1, 1));
  EXPECT_TRUE(g.nccl);
}

TEST(Placement, BusIdsCompareWithoutCase) {
  const std::vector<RankGpus> ranks = {{"node1", {"0000:3B:00.0"}, ""}, {"node1", {"0000:3b:00.0"}, ""}};
  EXPECT_TRUE(place_gpus(ranks).shared);
}

TEST(Placement, ARankWithoutADeviceOrThatCouldNotLookIsNamed) {
  std::vector<RankGpus> ranks = {{"node1", {kFour[0]}, ""}, {"node2", {}, ""}};
  GpuPlacement g = place_gpus(ranks);
  EXPECT_THAT(g.device, ElementsAre(0, -1));
  EXPECT_FALSE(g.nccl);
  EXPECT_EQ(placement_problem(ranks, g, "ddp", true),
            "ddp: CUDA workers requested, but rank 1 (node2) sees no CUDA device");
  ranks[1].error = "the CUDA backend module could not be loaded";
  g = place_gpus(ranks);
  EXPECT_EQ(placement_problem(ranks, g, "ddp", true),
            "ddp: rank 1 (node2) could not list its GPUs: the CUDA backend module could not be loaded");
}

TEST(Placement, ThisProcessAloneIsOneRank) {
  // Outside MPI the gather is this process: no GPU here (CPU build or machine), or its own ones.
  const JobGpus& job = job_gpus();
  ASSERT_EQ(job.ranks.size(), 1u);
  EXPECT_EQ(job.placement.device.size(), 1u);
  EXPECT_EQ(job.placement.device[0] >= 0, !job.ranks[0].bus_ids.empty());
}

}  // namespace
}  // namespace pb
