// cuDNN graph (backend) API convolutions: see cudnn_graph.h.
#include "engine/cuda/cudnn_graph.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>

#include "engine/check.h"
#include "engine/conv_policy.h"
#include "engine/cuda/cuda_util.h"
#include "engine/tensor.h"

namespace pb::cu {

bool use_graph_api() {
  const char* env = std::getenv("PARBENCH_CUDNN_API");
  if (env == nullptr || *env == '\0') return true;
  const std::string v = env;
  if (v == "graph") return true;
  if (v == "legacy") return false;
  throw UsageError(fmt::format("PARBENCH_CUDNN_API must be 'graph' or 'legacy', got '{}'", v));
}

unsigned legacy_math_notes(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_FMA_MATH: return 0;
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return kNoteTensorCore | kNoteDownConvertInputs;
    default: return kNoteTensorCore;
  }
}

namespace {

// An owned backend descriptor.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) { CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_)); }
  ~Desc() {
    if (d_) (void)cudnnBackendDestroyDescriptor(d_);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  cudnnBackendDescriptor_t* ptr() { return &d_; }
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t n, const void* v) {
    CUDNN_CHECK(cudnnBackendSetAttribute(d_, name, type, n, v));
  }
  void set(cudnnBackendAttributeName_t name, const Desc& other) {
    cudnnBackendDescriptor_t o = other.get();
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &o);
  }
  cudnnStatus_t finalize() { return cudnnBackendFinalize(d_); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

std::size_t elem_bytes(cudnnDataType_t t) { return t == CUDNN_DATA_FLOAT ? 4 : 2; }

// A packed tensor of dims [n, c, h, w] (a filter's [k, c, r, s]), NCHW or, with nhwc, NHWC.
std::unique_ptr<Desc> tensor(int64_t uid, cudnnDataType_t type, std::array<int64_t, 4> dims, int64_t align,
                             bool nhwc) {
  auto d = std::make_unique<Desc>(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const std::array<int64_t, 4> strides =
      nhwc ? std::array<int64_t, 4>{dims[1] * dims[2] * dims[3], 1, dims[3] * dims[1], dims[1]}
           : std::array<int64_t, 4>{dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
  d->set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  d->set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
  d->set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
  d->set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  d->set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  CUDNN_CHECK(d->finalize());
  return d;
}

// The largest power of two up to 16 that every pointer of the call is aligned to.
int64_t alignment(const GraphConvCall& c) {
  const auto bits = reinterpret_cast<uintptr_t>(c.a) | reinterpret_cast<uintptr_t>(c.b) |
                    reinterpret_cast<uintptr_t>(c.out);
  int64_t a = 16;
  while (a > 1 && (bits % static_cast<uintptr_t>(a)) != 0) a /= 2;
  return a;
}

// Under exhaustive search: how often each candidate is timed (after one untimed run).
constexpr int kTimedRuns = 2;

}  // namespace

struct GraphConv::Entry {
  // Everything a plan was made from stays alive with it.
  std::vector<std::unique_ptr<Desc>> keep;
  std::unique_ptr<Desc> plan;
  int64_t workspace = 0;
  int64_t engine = -1;
  int candidates = 0, timed = 0;
  std::string none;  // why there is no plan: the caller uses the legacy API
};

GraphConv::GraphConv(Device dev, cudnnHandle_t cudnn, bool exhaustive, std::optional<std::size_t> cap)
    : dev_(dev), cudnn_(cudnn), exhaustive_(exhaustive), cap_(cap) {}
GraphConv::~GraphConv() = default;

GraphConv::Key GraphConv::key_of(const GraphConvCall& c) {
  const ConvGeom& g = c.g;
  return Key{static_cast<int64_t>(c.dir), g.n, g.c, g.h, g.w, g.k, g.r, g.s, g.stride_h, g.stride_w, g.pad_h,
             g.pad_w, static_cast<int64_t>(c.data), static_cast<int64_t>(c.precision),
             static_cast<int64_t>(c.beta * 2), alignment(c), c.nhwc ? 1 : 0};
}

namespace {

// The one-operation graph of a call; its descriptors are appended to keep.
std::unique_ptr<Desc> op_graph(cudnnHandle_t h, const GraphConvCall& c, std::vector<std::unique_ptr<Desc>>& keep,
                               std::string* why) {
  const ConvGeom& g = c.g;
  const int64_t align = alignment(c);
  auto x = tensor(c.dir == ConvDir::BackwardData ? 3 : 1, c.data, {g.n, g.c, g.h, g.w}, align, c.nhwc);
  auto w = tensor(c.dir == ConvDir::BackwardFilter ? 3 : 2, c.data, {g.k, g.c, g.r, g.s}, align, c.nhwc);
  auto y = tensor(c.dir == ConvDir::Forward ? 3 : c.dir == ConvDir::BackwardData ? 1 : 2, c.data,
                  {g.n, g.k, g.p(), g.q()}, align, c.nhwc);
  auto conv = std::make_unique<Desc>(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t dims = 2, dil[2] = {1, 1}, stride[2] = {g.stride_h, g.stride_w}, pad[2] = {g.pad_h, g.pad_w};
  conv->set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
  conv->set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  conv->set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
  conv->set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil);
  conv->set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride);
  conv->set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  conv->set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  CUDNN_CHECK(conv->finalize());

  const float alpha = 1.0f, beta = c.beta;
  std::unique_ptr<Desc> op;
  switch (c.dir) {
    case ConvDir::Forward:
      op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
      op->set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, *x);
      op->set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, *w);
      op->set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, *y);
      op->set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, *conv);
      op->set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
      op->set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
      break;
    case ConvDir::BackwardData:
      op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR);
      op->set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, *x);
      op->set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, *w);
      op->set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, *y);
      op->set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, *conv);
      op->set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
      op->set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
      break;
    case ConvDir::BackwardFilter:
      op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR);
      op->set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, *x);
      op->set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, *w);
      op->set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, *y);
      op->set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, *conv);
      op->set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
      op->set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
      break;
  }
  if (cudnnStatus_t st = op->finalize(); st != CUDNN_STATUS_SUCCESS) {
    *why = fmt::format("operation not supported ({})", cudnnGetErrorString(st));
    return nullptr;
  }
  auto graph = std::make_unique<Desc>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph->set(CUDNN_ATTR_OPERATIONGRAPH_OPS, *op);
  graph->set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  if (cudnnStatus_t st = graph->finalize(); st != CUDNN_STATUS_SUCCESS) {
    *why = fmt::format("operation graph not supported ({})", cudnnGetErrorString(st));
    return nullptr;
  }
  for (auto* d : {&x, &w, &y, &conv, &op}) keep.push_back(std::move(*d));
  return graph;
}

// The engine configurations cuDNN's heuristics rank for the graph, best first.
std::vector<std::unique_ptr<Desc>> engine_configs(const Desc& graph, cudnnBackendHeurMode_t mode) {
  std::vector<std::unique_ptr<Desc>> out;
  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (heur.finalize() != CUDNN_STATUS_SUCCESS) return out;
  int64_t count = 0;
  if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                               nullptr) != CUDNN_STATUS_SUCCESS || count <= 0)
    return out;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    out.push_back(std::make_unique<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(out.back()->get());
  }
  int64_t got = 0;
  if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                               raw.data()) != CUDNN_STATUS_SUCCESS)
    got = 0;
  out.resize(static_cast<std::size_t>(std::clamp<int64_t>(got, 0, count)));
  return out;
}

// The engine's global index and its numerical notes as ConvNote bits; false when unreadable.
bool engine_info(const Desc& cfg, int64_t* index, unsigned* bits) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  int64_t n = 0;
  if (cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                               engine.ptr()) != CUDNN_STATUS_SUCCESS)
    return false;
  std::vector<cudnnBackendNumericalNote_t> notes(CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
  int64_t count = 0;
  if (cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               static_cast<int64_t>(notes.size()), &count, notes.data()) != CUDNN_STATUS_SUCCESS)
    return false;
  notes.resize(static_cast<std::size_t>(std::clamp<int64_t>(count, 0, CUDNN_NUMERICAL_NOTE_TYPE_COUNT)));
  *bits = 0;
  for (cudnnBackendNumericalNote_t note : notes) {
    if (note == CUDNN_NUMERICAL_NOTE_TENSOR_CORE) *bits |= kNoteTensorCore;
    if (note == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) *bits |= kNoteDownConvertInputs;
    if (note == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) *bits |= kNoteReducedPrecisionReduction;
    if (note == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) *bits |= kNoteNondeterministic;
  }
  if (cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, index) !=
      CUDNN_STATUS_SUCCESS)
    *index = -1;
  return true;
}

const char* dir_name(ConvDir d) {
  return d == ConvDir::Forward ? "forward" : d == ConvDir::BackwardData ? "backward-data" : "backward-filter";
}

void execute(cudnnHandle_t h, const Desc& plan, const GraphConvCall& c, void* ws, cudnnStatus_t* status) {
  int64_t uids[3] = {1, 2, 3};
  void* ptrs[3] = {const_cast<void*>(c.a), const_cast<void*>(c.b), c.out};
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs);
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  CUDNN_CHECK(pack.finalize());
  const cudnnStatus_t st = cudnnBackendExecute(h, plan.get(), pack.get());
  if (status) *status = st;
  else CUDNN_CHECK(st);
}

}  // namespace

GraphConv::Entry& GraphConv::entry(const GraphConvCall& c, const Workspace& ws) {
  const Key key = key_of(c);
  if (auto it = entries_.find(key); it != entries_.end()) return *it->second;
  auto e = std::make_unique<Entry>();
  std::unique_ptr<Desc> graph = op_graph(cudnn_, c, e->keep, &e->none);
  struct Candidate {
    std::unique_ptr<Desc> plan;
    int64_t workspace, engine;
  };
  // Every engine the heuristics rank (mode A; with exhaustive search the fallback list too, as
  // PyTorch's find; without, the fallback list only where mode A has nothing that runs).
  std::vector<Candidate> built;
  std::vector<ConvCandidate> ranked;
  const auto build = [&](cudnnBackendHeurMode_t mode) {
    for (std::unique_ptr<Desc>& cfg : engine_configs(*graph, mode)) {
      ++e->candidates;
      int64_t engine = -1;
      unsigned notes = 0;
      if (!engine_info(*cfg, &engine, &notes)) continue;
      auto plan = std::make_unique<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &cudnn_);
      plan->set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *cfg);
      if (plan->finalize() != CUDNN_STATUS_SUCCESS) continue;
      int64_t bytes = 0, n = 0;
      if (cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                   &bytes) != CUDNN_STATUS_SUCCESS ||
          bytes < 0)
        continue;
      e->keep.push_back(std::move(cfg));
      built.push_back({std::move(plan), bytes, engine});
      ranked.push_back({fmt::format("engine {}", engine), static_cast<std::size_t>(bytes), notes});
    }
  };
  const ConvGeom& g = c.g;
  const std::string what = fmt::format("conv x[{},{},{},{}] w[{},{},{},{}] {}{} (graph API)", g.n, g.c, g.h, g.w, g.k,
                                       g.c, g.r, g.s, dir_name(c.dir), c.nhwc ? " NHWC" : "");
  const ConvPolicy policy{c.precision, cap_};
  std::unique_ptr<Buffer> trial;  // exhaustive search: each candidate's own workspace, freed after
  const auto get_workspace = [&](std::size_t bytes) {
    try {
      if (exhaustive_) {
        trial.reset();
        trial = std::make_unique<Buffer>(dev_, bytes, MemoryPool::Workspace);
      } else {
        ws(bytes);
      }
      return true;
    } catch (const OutOfMemory&) {
      return false;
    }
  };
  cudaStream_t stream = nullptr;
  CUDNN_CHECK(cudnnGetStream(cudnn_, &stream));
  cu::Event t0, t1;
  // One untimed run, then the best of kTimedRuns, on the call's own buffers.
  const auto time = [&](int i) -> std::optional<double> {
    const Candidate& cand = built[static_cast<std::size_t>(i)];
    void* w = trial ? trial->data() : nullptr;
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    execute(cudnn_, *cand.plan, c, w, &st);
    float ms = -1;
    for (int r = 0; r < kTimedRuns && st == CUDNN_STATUS_SUCCESS; ++r) {
      CUDA_CHECK(cudaEventRecord(t0.get(), stream));
      execute(cudnn_, *cand.plan, c, w, &st);
      CUDA_CHECK(cudaEventRecord(t1.get(), stream));
      CUDA_CHECK(cudaEventSynchronize(t1.get()));
      float t = 0;
      CUDA_CHECK(cudaEventElapsedTime(&t, t0.get(), t1.get()));
      ms = ms < 0 ? t : std::min(ms, t);
    }
    if (st != CUDNN_STATUS_SUCCESS) return std::nullopt;
    return ms * 1e-3;
  };
  std::optional<ConvPick> pick;
  if (graph) {
    try {
      build(CUDNN_HEUR_MODE_A);
      if (exhaustive_) build(CUDNN_HEUR_MODE_FALLBACK);
      try {
        pick = pick_conv_algorithm(ranked, policy, get_workspace, exhaustive_ ? std::function(time) : nullptr, what);
      } catch (const OutOfMemory&) {
        throw;
      } catch (const Error&) {
        if (exhaustive_) throw;
        // Nothing of mode A: the fallback list, as PyTorch's heuristics path.
        const std::size_t first = built.size();
        build(CUDNN_HEUR_MODE_FALLBACK);
        std::vector<ConvCandidate> rest(ranked.begin() + static_cast<std::ptrdiff_t>(first), ranked.end());
        pick = pick_conv_algorithm(rest, policy, get_workspace, nullptr, what);
        pick->index += static_cast<int>(first);
      }
    } catch (const OutOfMemory&) {
      throw;
    } catch (const Error& err) {
      e->none = err.what();
    }
  }
  trial.reset();
  if (pick) {
    Candidate& best = built[static_cast<std::size_t>(pick->index)];
    e->plan = std::move(best.plan);
    e->workspace = best.workspace;
    e->engine = best.engine;
    e->timed = pick->timed;
  }
  return *entries_.emplace(key, std::move(e)).first->second;
}

bool GraphConv::prepare(const GraphConvCall& c, const Workspace& ws) { return entry(c, ws).plan != nullptr; }

void GraphConv::run(const GraphConvCall& c, const Workspace& ws) {
  Entry& e = entry(c, ws);
  PB_CHECK(e.plan != nullptr, "cuDNN graph API: no plan for this convolution ({})", e.none);
  execute(cudnn_, *e.plan, c, ws(static_cast<std::size_t>(e.workspace)), nullptr);
}

std::string GraphConv::describe(const GraphConvCall& c) const {
  const auto it = entries_.find(key_of(c));
  if (it == entries_.end()) return "";
  const Entry& e = *it->second;
  if (!e.plan) return fmt::format("graph API: {} (legacy API used)", e.none);
  return fmt::format("graph engine {}{}, {} B workspace", e.engine,
                     e.timed > 1 ? fmt::format(" (fastest of {} timed)", e.timed) : "", e.workspace);
}

}  // namespace pb::cu
