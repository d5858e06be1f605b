// Convolutions through cuDNN's graph (backend) API: one operation graph per shape and direction,
// cuDNN's heuristics (mode A, then the fallback list) for the engines, and with exhaustive
// search the fastest of all of them timed, as PyTorch's cuDNN v8 path does; the choice itself is
// engine/conv_policy.h's (numerics filter, the first or fastest whose workspace can be had). The legacy API
// (cudnnConvolutionForward and its algorithm enums) reaches only the engines behind those enums;
// the graph API reaches every engine cuDNN has for the chip. PARBENCH_CUDNN_API=legacy|graph
// picks one for the process; a shape no engine supports falls back to the legacy API.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <cuda_runtime.h>
#include <cudnn.h>

#include "engine/backend.h"

namespace pb::cu {

enum class ConvDir { Forward, BackwardData, BackwardFilter };

// One convolution call. Inputs and output by direction: Forward x, w -> y; BackwardData dy, w -> dx;
// BackwardFilter x, dy -> dw. Every tensor of `data` type, packed NCHW (filters KCRS) or, with
// nhwc, NHWC (filters KRSC); fp32 accumulation.
struct GraphConvCall {
  ConvDir dir = ConvDir::Forward;
  ConvGeom g;
  cudnnDataType_t data = CUDNN_DATA_FLOAT;
  Precision precision = Precision::Fp32;  // which engines' numerics are allowed
  float beta = 0;                         // 0 overwrites the output, 1 adds to it
  const void* a = nullptr;
  const void* b = nullptr;
  void* out = nullptr;
  bool nhwc = false;
};

// A legacy API math mode as the numerical notes (engine/conv_policy.h ConvNote bits) the policy's
// filter reads: default math may pick TF32 tensor cores; ALLOW_CONVERSION rounds inputs down.
unsigned legacy_math_notes(cudnnMathType_t m);

// PARBENCH_CUDNN_API: true for the graph API (the default), false for legacy; anything else is a
// usage error naming the variable.
bool use_graph_api();

class GraphConv {
 public:
  // The backend's shared workspace of at least the bytes asked; throws pb::OutOfMemory.
  using Workspace = std::function<void*(std::size_t)>;
  // Runs on the stream the handle is bound to when a call comes. cap: the most workspace an
  // engine may use; none: any the allocator can give.
  GraphConv(Device dev, cudnnHandle_t cudnn, bool exhaustive, std::optional<std::size_t> cap);
  ~GraphConv();
  GraphConv(const GraphConv&) = delete;
  GraphConv& operator=(const GraphConv&) = delete;

  // Chooses the engine for c's shape on first use (timing candidates on c's own buffers under
  // exhaustive search, each on a workspace of its own size, so the output holds garbage afterwards).
  // False: no engine runs this shape (none allowed, or none whose workspace can be had); the
  // caller uses the legacy API.
  bool prepare(const GraphConvCall& c, const Workspace& ws);
  // Runs c through the engine prepare() chose.
  void run(const GraphConvCall& c, const Workspace& ws);
  // "graph engine 14 (fastest of 7 timed), 1048576 B workspace", or why there is none; "" if unplanned.
  std::string describe(const GraphConvCall& c) const;

 private:
  struct Entry;
  using Key = std::array<int64_t, 17>;
  static Key key_of(const GraphConvCall& c);
  Entry& entry(const GraphConvCall& c, const Workspace& ws);

  Device dev_;
  cudnnHandle_t cudnn_;
  bool exhaustive_;
  std::optional<std::size_t> cap_;
  std::map<Key, std::unique_ptr<Entry>> entries_;
};

}  // namespace pb::cu
