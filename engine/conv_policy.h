// The convolution algorithm policy of the CUDA backend's every cuDNN path, as pure decisions the
// CPU build compiles and tests: which engines a precision allows, and which ranked candidate runs.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend.h"

namespace pb {

// cuDNN's numerical notes the filter reads, as bits (set from CUDNN_NUMERICAL_NOTE_* by the caller).
enum ConvNote : unsigned {
  kNoteTensorCore = 1u << 0,
  kNoteDownConvertInputs = 1u << 1,
  kNoteReducedPrecisionReduction = 1u << 2,
  kNoteNondeterministic = 1u << 3,
};

// Whether an engine with `notes` may run a convolution at precision `p`. Mirrors PyTorch's filterEngineConfigs (aten/src/ATen/native/cudnn/Conv_v8.cpp, with
// torch.backends.cudnn.deterministic off): DOWN_CONVERT_INPUTS never; on fp32 data TENSOR_CORE only
// where TF32 is allowed (tf32; bf16's fp32 convolutions run on bf16 values, which TF32 keeps);
// nondeterministic and reduced-precision-reduction engines kept. fp32 also drops
// REDUCED_PRECISION_REDUCTION: fp32 means no reduced precision anywhere (DESIGN.md).
bool conv_notes_allowed(Precision p, unsigned notes);

// The workspace policy as the run context records it: "fastest-fits" (no cap) or "cap N MiB".
std::string conv_workspace_policy_name(const std::optional<std::size_t>& cap_bytes);

struct ConvCandidate {
  std::string name;           // for messages: "engine 14", "IMPLICIT_PRECOMP_GEMM (1), tensor-op math"
  std::size_t workspace = 0;  // bytes it needs
  unsigned notes = 0;         // ConvNote bits
};

struct ConvPolicy {
  Precision precision = Precision::Fp32;
  std::optional<std::size_t> cap_bytes;  // none: fastest-fits
};

struct ConvPick {
  int index = -1;  // into the candidates
  std::size_t workspace = 0;
  int filtered = 0, over_cap = 0, out_of_memory = 0, timed = 0;  // candidates dropped / timed, for reports
};

// Picks the algorithm of one convolution direction from `ranked` (cuDNN's order, best first), as
// PyTorch does without a cap: candidates the numerics filter or the cap drop are skipped; for each
// other, get_workspace(bytes) asks the allocator (false: out of memory, the next candidate).
// Without `time` the first that gets its workspace wins (heuristics). With `time` (exhaustive
// search) every such candidate is timed -- time(i) runs candidate i on its workspace, seconds, or
// nullopt where it did not run -- and the fastest wins, the earlier rank on a tie. Throws pb::Error
// naming `what` (the layer and direction) and why each candidate was dropped when none is left.
ConvPick pick_conv_algorithm(const std::vector<ConvCandidate>& ranked, const ConvPolicy& policy,
                             const std::function<bool(std::size_t)>& get_workspace,
                             const std::function<std::optional<double>(int)>& time, const std::string& what);

}  // namespace pb
