// The convolution algorithm policy: see conv_policy.h.
#include "engine/conv_policy.h"

#include <fmt/format.h>

#include "engine/check.h"

namespace pb {

bool conv_notes_allowed(Precision p, unsigned notes) {
  if (notes & kNoteDownConvertInputs) return false;
  if (p == Precision::Fp32) return !(notes & (kNoteTensorCore | kNoteReducedPrecisionReduction));
  return true;
}

std::string conv_workspace_policy_name(const std::optional<std::size_t>& cap_bytes) {
  if (!cap_bytes) return "fastest-fits";
  return fmt::format("cap {} MiB", *cap_bytes >> 20);
}

ConvPick pick_conv_algorithm(const std::vector<ConvCandidate>& ranked, const ConvPolicy& policy,
                             const std::function<bool(std::size_t)>& get_workspace,
                             const std::function<std::optional<double>(int)>& time, const std::string& what) {
  ConvPick pick;
  double best = -1;
  int failed = 0;
  for (int i = 0; i < static_cast<int>(ranked.size()); ++i) {
    const ConvCandidate& c = ranked[static_cast<std::size_t>(i)];
    if (!conv_notes_allowed(policy.precision, c.notes)) {
      ++pick.filtered;
      continue;
    }
    if (policy.cap_bytes && c.workspace > *policy.cap_bytes) {
      ++pick.over_cap;
      continue;
    }
    if (!get_workspace(c.workspace)) {
      ++pick.out_of_memory;
      continue;
    }
    if (!time) {
      pick.index = i, pick.workspace = c.workspace;
      return pick;
    }
    const std::optional<double> t = time(i);
    if (!t) {
      ++failed;
      continue;
    }
    ++pick.timed;
    if (best < 0 || *t < best) best = *t, pick.index = i, pick.workspace = c.workspace;
  }
  if (pick.index >= 0) return pick;
  const std::string over = policy.cap_bytes ? fmt::format("{} over the {} MiB workspace cap, ", pick.over_cap,
                                                          *policy.cap_bytes >> 20)
                                            : std::string();
  throw Error(fmt::format("{}: no {} convolution algorithm left of {} candidates ({} dropped by the numerics filter, "
                          "{}{} whose workspace the allocator could not give, {} failed to run)",
                          what, precision_name(policy.precision), ranked.size(), pick.filtered, over,
                          pick.out_of_memory, failed));
}

}  // namespace pb
