// --reduce-dtype bf16 in every data-parallel strategy against a straightforward reference: each
// replica's fp32 gradient (its chunk's share of the global loss) rounded to bf16, summed in rank
// order rounding every partial sum, widened, then one Adam step (docs/bf16.md derives the bounds).
#include "engine/model.h"
#include "strategies/plan_gen.h"
#include "tests/bf16_skip.h"
#include "tests/test_projection_support.h"
#include "tests/test_strategies_support.h"

namespace pb::strategies_test {
namespace {

struct Reference {
  std::vector<float> params;  // after the step
  std::vector<double> abs;    // per parameter: the sum over replicas of |bf16(gradient)|
};

// One step of `net` from init_params(plan, 0) on the batch's chunks over `replicas`.
Reference reference_step(const NetSpec& net, int64_t batch, int replicas) {
  const NetPlan plan = plan_net(net);
  const int64_t in = numel_of(plan.input), out = numel_of(plan.output), np = plan.param_count;
  const std::vector<float> x = synthetic_values(batch * in, 1);
  const std::vector<float> t = net.target == Target::Input ? x : synthetic_values(batch * out, 2);
  const std::vector<float> p0 = init_params(plan, 0);
  BackendOptions bo;
  bo.threads = 1;
  auto be = make_backend(cpu(), bo);
  const float scale = 2.0f / static_cast<float>(batch * out);  // as GroupStrategy's grad_scale
  std::vector<float> sum(np, 0.0f);
  Reference r;
  r.abs.assign(np, 0.0);
  int64_t at = 0;
  const std::vector<int64_t> chunks = chunk_sizes(batch, replicas);
  for (std::size_t w = 0; w < chunks.size(); ++w) {
    const int64_t n = chunks[w];
    Sequential m(plan, 0, static_cast<int>(plan.layers.size()), *be);
    m.load_params(p0);
    const Tensor xs = Tensor::from_host({n * in}, std::vector<float>(x.begin() + at * in, x.begin() + (at + n) * in), cpu());
    const Tensor ts = Tensor::from_host({n * out}, std::vector<float>(t.begin() + at * out, t.begin() + (at + n) * out), cpu());
    Tensor dy = Tensor::empty({n * out}, cpu()), loss = Tensor::zeros({1}, cpu());
    const float* y = m.forward(xs.data(), n);
    be->mse_loss_grad(n * out, y, ts.data(), scale, dy.data(), loss.data());
    m.backward(dy.data(), nullptr, false);
    const std::vector<float> g = m.grads().to_host();
    for (int64_t i = 0; i < np; ++i) {
      const float b = round_bf16(g[i]);
      sum[i] = w == 0 ? b : round_bf16(sum[i] + b);
      r.abs[i] += std::abs(b);
    }
    at += n;
  }
  Tensor params = Tensor::from_host({np}, p0, cpu()), grads = Tensor::from_host({np}, sum, cpu());
  Adam adam(*be, np, net.adam);
  adam.step(params, grads);
  r.params = params.to_host();
  return r;
}

struct Case {
  std::string strategy;
  int devices, replicas;
  int64_t batch;
  bool exact;  // sums the replicas in rank order from the same fp32 gradients as the reference
};

std::size_t reduced_bytes(const StepStats& s) {
  std::size_t b = 0;
  for (const WorkerStats& w : s.workers)
    for (CollKind k : {CollKind::AllReduce, CollKind::Reduce, CollKind::ReduceScatter}) b += w.kinds[static_cast<int>(k)].bytes;
  return b;
}

// Adam with eps far above the gradients moves each parameter by about lr g / eps, so a gradient
// off by dg moves it by at most lr dg / eps: the parameters show the reduced gradients.
TEST(ReduceBf16, DataParallelStrategiesSumBf16RoundedGradients) {
  const NetSpec net = scale_sensitive(small_great_net(), 1.0, 1.0);
  for (const Case& c : std::vector<Case>{{"ddp", 2, 2, 5, true},
                                         {"ddp", 3, 3, 5, true},
                                         {"ddp", 4, 4, 7, true},
                                         {"dp", 3, 3, 5, true},
                                         {"fsdp", 2, 2, 5, true},
                                         {"fsdp", 3, 3, 7, true},
                                         {"zero2", 3, 3, 5, true},
                                         {"fsdp-prefetch", 2, 2, 5, true},
                                         {"zero2-prefetch", 4, 4, 7, true},
                                         {"hsdp2x2", 4, 4, 7, false},
                                         {"dp2xpp2", 4, 2, 6, false},
                                         {"dp2xtp2", 4, 2, 5, false}}) {
    SCOPED_TRACE(fmt::format("{} on {} workers, batch {}", c.strategy, c.devices, c.batch));
    StrategyOptions o = options(c.devices);
    o.cap_micro_batches = true;  // dp x pp: at most a replica's samples
    o.micro_batches = 2;
    const Trained fp32 = train(c.strategy, o, net, {c.batch}, 1);
    o.reduce_dtype = DType::Bf16;
    const Trained bf16 = train(c.strategy, o, net, {c.batch}, 1);
    const Reference ref = reference_step(net, c.batch, c.replicas);
    ASSERT_EQ(bf16.params.size(), ref.params.size());
    // Exact: the same terms summed in the same order with the same roundings, the same Adam.
    // Otherwise (hsdp's two-stage sum, a pipeline's micro-batches, tp's slices) within
    // lr / eps * N 2^-7 sum|bf16(g)| + 2^-21 (|p| + lr) (docs/bf16.md).
    const double lr = net.adam.lr, eps = net.adam.eps, N = c.replicas;
    double worst = -1;
    std::size_t at = 0;
    for (std::size_t i = 0; i < ref.params.size(); ++i) {
      const double tol = c.exact ? 0.0 : lr / eps * N * std::ldexp(ref.abs[i], -7) + std::ldexp(std::abs(ref.params[i]) + lr, -21);
      const double excess = std::abs(double(bf16.params[i]) - ref.params[i]) - tol;
      if (excess > worst) worst = excess, at = i;
    }
    EXPECT_LE(worst, 0.0) << "worst at [" << at << "]: " << bf16.params[at] << " vs " << ref.params[at];
    // The bf16 wire changed the step; its gradient reductions booked half their fp32 bytes, as
    // the plan says (tp's activation all-reduces stay fp32).
    EXPECT_NE(bf16.params, fp32.params);
    std::size_t planned = 0;
    for (const auto& list : make_plan(c.strategy, plan_net(net), o, c.batch).actions)
      for (const Action& a : list) planned += a.dtype == DType::Bf16 ? a.bytes : 0;
    EXPECT_GT(planned, 0u);
    EXPECT_EQ(reduced_bytes(fp32.stats) - reduced_bytes(bf16.stats), planned);
    if (c.strategy != "dp2xtp2") {
      EXPECT_EQ(2 * reduced_bytes(bf16.stats), reduced_bytes(fp32.stats));
    }
  }
}

std::size_t gathered_bytes(const StepStats& s) {
  std::size_t b = 0;
  for (const WorkerStats& w : s.workers) b += w.kinds[static_cast<int>(CollKind::AllGather)].bytes;
  return b;
}

// Under autocast the layers round the gathered fp32 parameters to bf16 anyway: gathering them in
// bf16 changes no value, and halves the gathers' bytes.
TEST(ReduceBf16, ParamDtypeBf16GathersHalfTheBytesAndChangesNothingUnderAutocast) {
  SKIP_WITHOUT_BF16();
  const NetSpec net = small_great_net();
  for (const std::string s : {"fsdp", "zero2-prefetch", "hsdp2x2"}) {
    SCOPED_TRACE(s);
    StrategyOptions o = options(s == "hsdp2x2" ? 4 : 3);
    o.backend.precision = Precision::Bf16;
    const Trained fp32 = train(s, o, net, {7}, 2);
    o.param_dtype = DType::Bf16;
    const Trained bf16 = train(s, o, net, {7}, 2);
    EXPECT_EQ(bf16.params, fp32.params);
    EXPECT_EQ(bf16.losses, fp32.losses);
    EXPECT_GT(gathered_bytes(bf16.stats), 0u);
    EXPECT_EQ(2 * gathered_bytes(bf16.stats), gathered_bytes(fp32.stats));
  }
}

TEST(ReduceBf16, RefusedWhereTheyDoNotApplyNamingTheFlag) {
  const NetSpec net = linear_net();
  auto refusal = [&](const std::string& s, int devices, DType reduce, DType param, Precision p = Precision::Fp32) {
    StrategyOptions o = options(devices);
    o.reduce_dtype = reduce, o.param_dtype = param, o.backend.precision = p;
    try {
      make_strategy(s, o);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  for (const std::string s : {"regular", "mp", "pipeline", "pipeline-zb", "tp"})
    EXPECT_THAT(refusal(s, s == "regular" ? 1 : 2, DType::Bf16, DType::F32), HasSubstr("--reduce-dtype bf16: strategy " + s));
  for (const std::string s : {"ddp", "dp", "dp2xpp2", "regular"})
    EXPECT_THAT(refusal(s, s == "regular" ? 1 : s == "dp2xpp2" ? 4 : 2, DType::F32, DType::Bf16, Precision::Bf16),
                HasSubstr("--param-dtype bf16: strategy " + s));
  EXPECT_THAT(refusal("fsdp", 2, DType::F32, DType::Bf16), HasSubstr("--param-dtype bf16 needs --precision bf16"));
  // --reduce-dtype bf16 with fp32 compute is torch's bf16 compression hook: accepted.
  EXPECT_EQ(refusal("ddp", 2, DType::Bf16, DType::F32), "");
  EXPECT_THROW(make_plan("mp", plan_net(net), [] {
    StrategyOptions o = options(2);
    o.reduce_dtype = DType::Bf16;
    return o;
  }(), 4), UsageError);
}

// The projection prices the plan's bytes: ddp's all-reduces and fsdp's reduce-scatters halve, its
// all-gathers stay fp32; a pipeline reduces nothing and keeps its bytes.
TEST(ReduceBf16, ProjectionPricesTheHalvedBytes) {
  using namespace projection_test;
  const pj::Profile p = uniform();
  const pj::Machine m = machine();
  for (const std::string s : {"ddp", "fsdp", "pipeline"}) {
    SCOPED_TRACE(s);
    pj::Config c = config(s, 4, 8);
    const pj::Prediction fp32 = pj::predict(p, m, c, {});
    c.reduce_dtype = "bf16";
    const pj::Prediction bf16 = pj::predict(p, m, c, {});
    ASSERT_GT(fp32.comm_bytes, 0);
    if (s == "ddp") {
      EXPECT_DOUBLE_EQ(2 * bf16.comm_bytes, fp32.comm_bytes);
    }
    if (s == "fsdp") {
      EXPECT_LT(bf16.comm_bytes, fp32.comm_bytes);
      EXPECT_GT(bf16.comm_bytes, fp32.comm_bytes / 2);
    }
    if (s == "pipeline") {
      EXPECT_EQ(bf16.comm_bytes, fp32.comm_bytes);
    } else {
      EXPECT_GT(bf16.peak_bytes, fp32.peak_bytes) << "the wire's staging";
    }
  }
}

}  // namespace
}  // namespace pb::strategies_test
