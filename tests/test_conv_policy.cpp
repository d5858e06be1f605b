// The cuDNN convolution policy's decisions (engine/conv_policy.h) with a fake allocator and fake
// timings: OOM fallback, fastest first, the cap, the numerics filter per precision, the error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "engine/check.h"
#include "engine/conv_policy.h"

namespace pb {
namespace {

using ::testing::HasSubstr;

constexpr std::size_t kMiB = std::size_t(1) << 20;

// An allocator with `free` bytes that records what it was asked for.
struct FakeAllocator {
  std::size_t free;
  std::vector<std::size_t> asked;
  std::function<bool(std::size_t)> fn() {
    return [this](std::size_t b) {
      asked.push_back(b);
      return b <= free;
    };
  }
};

std::function<std::optional<double>(int)> timings(std::map<int, double> t, std::vector<int>* ran = nullptr) {
  return [t, ran](int i) -> std::optional<double> {
    if (ran) ran->push_back(i);
    const auto it = t.find(i);
    if (it == t.end()) return std::nullopt;
    return it->second;
  };
}

ConvPolicy policy(Precision p, std::optional<std::size_t> cap = std::nullopt) {
  ConvPolicy o;
  o.precision = p;
  o.cap_bytes = cap;
  return o;
}

TEST(ConvPolicy, HeuristicsTakeTheFirstRankedWhoseWorkspaceTheAllocatorGives) {
  const std::vector<ConvCandidate> ranked = {
      {"a", 40ull << 30, kNoteTensorCore}, {"b", 6ull << 30, kNoteTensorCore}, {"c", 2 * kMiB, kNoteTensorCore}};
  FakeAllocator big{64ull << 30, {}};
  const ConvPick p0 = pick_conv_algorithm(ranked, policy(Precision::Tf32), big.fn(), nullptr, "layer 3 forward");
  EXPECT_EQ(p0.index, 0) << "no cap: the 40 GiB engine runs when the allocator gives 40 GiB";
  EXPECT_EQ(p0.workspace, 40ull << 30);
  FakeAllocator small{8ull << 30, {}};
  const ConvPick p1 = pick_conv_algorithm(ranked, policy(Precision::Tf32), small.fn(), nullptr, "layer 3 forward");
  EXPECT_EQ(p1.index, 1) << "out of memory for the first: the next";
  EXPECT_EQ(p1.out_of_memory, 1);
  EXPECT_EQ(small.asked, (std::vector<std::size_t>{40ull << 30, 6ull << 30}));
}

TEST(ConvPolicy, ExhaustiveSearchTimesEveryCandidateThatGetsItsWorkspaceAndTakesTheFastest) {
  std::vector<ConvCandidate> ranked;
  for (int i = 0; i < 9; ++i) ranked.push_back({"e" + std::to_string(i), static_cast<std::size_t>(i) * kMiB, 0});
  ranked[3].workspace = 100 * kMiB;  // the allocator cannot give it
  FakeAllocator a{50 * kMiB, {}};
  std::vector<int> ran;
  // The fastest is the eighth: more than the first six heuristic engines are timed.
  const ConvPick p = pick_conv_algorithm(ranked, policy(Precision::Fp32), a.fn(),
                                         timings({{0, 5.0}, {1, 4.0}, {2, 3.0}, {4, 3.0}, {5, 2.5}, {6, 2.0}, {7, 1.0}, {8, 1.0}}, &ran),
                                         "layer 1 backward-data");
  EXPECT_EQ(p.index, 7) << "fastest, the earlier rank on a tie";
  EXPECT_EQ(p.workspace, 7 * kMiB);
  EXPECT_EQ(p.timed, 8);
  EXPECT_EQ(p.out_of_memory, 1);
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2, 4, 5, 6, 7, 8})) << "the candidate without workspace is never run";
}

TEST(ConvPolicy, ACapDropsWhatExceedsItAndNoCapDropsNothing) {
  const std::vector<ConvCandidate> ranked = {{"huge", 2ull << 30, 0}, {"fits", kMiB, 0}, {"none", 0, 0}};
  FakeAllocator a{std::size_t(1) << 40, {}};
  const ConvPick capped = pick_conv_algorithm(ranked, policy(Precision::Fp32, std::size_t(1) << 30), a.fn(),
                                              timings({{0, 1.0}, {1, 2.0}, {2, 3.0}}), "layer 0 forward");
  EXPECT_EQ(capped.index, 1) << "the fastest (2 GiB) is over the 1 GiB cap";
  EXPECT_EQ(capped.over_cap, 1);
  const ConvPick zero = pick_conv_algorithm(ranked, policy(Precision::Fp32, 0), a.fn(), nullptr, "layer 0 forward");
  EXPECT_EQ(zero.index, 2) << "cap 0: zero-workspace algorithms only";
  const ConvPick none = pick_conv_algorithm(ranked, policy(Precision::Fp32), a.fn(), timings({{0, 1.0}, {1, 2.0}, {2, 3.0}}),
                                            "layer 0 forward");
  EXPECT_EQ(none.index, 0);
  EXPECT_EQ(none.over_cap, 0);
}

TEST(ConvPolicy, NumericsFilterFollowsThePrecision) {
  const unsigned tc = kNoteTensorCore, rpr = kNoteReducedPrecisionReduction, down = kNoteDownConvertInputs,
                 nondet = kNoteNondeterministic;
  // fp32: FMA only -- no TF32 tensor cores, no reduced-precision reduction, no down-conversion.
  EXPECT_TRUE(conv_notes_allowed(Precision::Fp32, 0));
  EXPECT_TRUE(conv_notes_allowed(Precision::Fp32, nondet));
  EXPECT_FALSE(conv_notes_allowed(Precision::Fp32, tc));
  EXPECT_FALSE(conv_notes_allowed(Precision::Fp32, rpr));
  EXPECT_FALSE(conv_notes_allowed(Precision::Fp32, down));
  // tf32 and bf16: what PyTorch keeps (tensor cores, reduced-precision reduction, nondeterministic),
  // never down-conversion of the inputs.
  for (Precision p : {Precision::Tf32, Precision::Bf16}) {
    EXPECT_TRUE(conv_notes_allowed(p, tc)) << precision_name(p);
    EXPECT_TRUE(conv_notes_allowed(p, tc | rpr)) << precision_name(p);
    EXPECT_TRUE(conv_notes_allowed(p, tc | nondet)) << precision_name(p);
    EXPECT_FALSE(conv_notes_allowed(p, tc | down)) << precision_name(p);
  }
  const std::vector<ConvCandidate> ranked = {{"tf32 rpr", 0, tc | rpr}, {"tf32", 0, tc}, {"fma", 0, 0}};
  FakeAllocator a{kMiB, {}};
  EXPECT_EQ(pick_conv_algorithm(ranked, policy(Precision::Tf32), a.fn(), nullptr, "l").index, 0);
  const ConvPick fp32 = pick_conv_algorithm(ranked, policy(Precision::Fp32), a.fn(), nullptr, "l");
  EXPECT_EQ(fp32.index, 2);
  EXPECT_EQ(fp32.filtered, 2);
}

TEST(ConvPolicy, NothingLeftIsAnErrorNamingTheLayerAndWhy) {
  const std::vector<ConvCandidate> ranked = {{"tc", 0, kNoteTensorCore}, {"big", 8 * kMiB, 0}, {"huge", 64 * kMiB, 0}};
  FakeAllocator a{16 * kMiB, {}};
  try {
    pick_conv_algorithm(ranked, policy(Precision::Fp32, 32 * kMiB), a.fn(), timings({}), "layer 7 (conv2d) backward-filter");
    ADD_FAILURE() << "expected pb::Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("layer 7 (conv2d) backward-filter"));
    EXPECT_THAT(e.what(), HasSubstr("1 dropped by the numerics filter"));
    EXPECT_THAT(e.what(), HasSubstr("1 over the 32 MiB workspace cap"));
    EXPECT_THAT(e.what(), HasSubstr("1 failed to run"));
  }
  FakeAllocator none{0, {}};
  EXPECT_THROW(pick_conv_algorithm({{"big", kMiB, 0}}, policy(Precision::Tf32), none.fn(), nullptr, "l"), Error);
}

TEST(ConvPolicy, PolicyNames) {
  EXPECT_EQ(conv_workspace_policy_name(std::nullopt), "fastest-fits");
  EXPECT_EQ(conv_workspace_policy_name(std::size_t(65536) << 20), "cap 65536 MiB");
}

}  // namespace
}  // namespace pb
