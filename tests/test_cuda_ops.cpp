// The CUDA backend's other ops against the CPU backend (Linear, ReLU, MSE, Adam, copies) and a
// short GPU training run against the CPU engine; skip without a GPU.
#include "tests/test_cuda_support.h"

namespace pb {
namespace {

using namespace pb::cuda_test;

TEST(CudaGpu, LinearMatchesCpu) {
  PB_REQUIRE_GPU();
  Rand r;
  auto c_be = make_backend(cpu());
  for (Precision p : kPrecisions) {
    auto g_be = gpu_backend(p);
    for (int trial = 0; trial < 12; ++trial) {
      const int64_t n = r.i(1, 9), in = r.i(1, 300), out = r.i(1, 129);
      const bool bias = r.coin(), accumulate = r.coin();
      SCOPED_TRACE(fmt::format("seed {} {} trial {}: n {} in {} out {} bias {} accumulate {}", r.seed,
                               precision_name(p), trial, n, in, out, bias, accumulate));
      const auto x = r.vec(n * in), w = r.vec(out * in), b = r.vec(out), dy = r.vec(n * out);
      const auto dw0 = accumulate ? r.vec(out * in) : poisoned(out * in);
      const auto db0 = accumulate ? r.vec(out) : poisoned(out);
      std::vector<float> y = poisoned(n * out), dx = poisoned(n * in), dw = dw0, db = db0;
      c_be->linear_forward(n, in, out, x.data(), w.data(), bias ? b.data() : nullptr, y.data());
      c_be->linear_backward_data(n, in, out, dy.data(), w.data(), dx.data());
      c_be->linear_backward_weights(n, in, out, x.data(), dy.data(), dw.data(), bias ? db.data() : nullptr,
                                    accumulate);
      Tensor gx = gpu(x), gw = gpu(w), gb = gpu(b), gdy = gpu(dy);
      Tensor gy = gpu_poisoned(n * out), gdx = gpu_poisoned(n * in), gdw = gpu(dw0), gdb = gpu(db0);
      g_be->linear_forward(n, in, out, gx.data(), gw.data(), bias ? gb.data() : nullptr, gy.data());
      g_be->linear_backward_data(n, in, out, gdy.data(), gw.data(), gdx.data());
      g_be->linear_backward_weights(n, in, out, gx.data(), gdy.data(), gdw.data(), bias ? gdb.data() : nullptr,
                                    accumulate);
      EXPECT_REL_CLOSE(gy.to_host(), y, tol_for(p));
      EXPECT_REL_CLOSE(gdx.to_host(), dx, tol_for(p));
      EXPECT_REL_CLOSE(gdw.to_host(), dw, tol_for(p));
      if (bias) EXPECT_REL_CLOSE(gdb.to_host(), db, kFp32Tol);  // a plain sum, no TF32
    }
  }
}

TEST(CudaGpu, ReluMatchesCpuAlsoInPlace) {
  PB_REQUIRE_GPU();
  Rand r;
  auto c_be = make_backend(cpu());
  auto g_be = gpu_backend(Precision::Fp32);
  for (int64_t n : {int64_t(1), r.i(2, 1000), r.i(100000, 3000000)}) {
    SCOPED_TRACE(fmt::format("seed {} n {}", r.seed, n));
    auto x = r.vec(n);
    x[0] = 0.0f;  // relu(0) = 0 and its gradient is 0, as in PyTorch
    const auto dy = r.vec(n);
    std::vector<float> y = poisoned(n), dx = poisoned(n);
    c_be->relu_forward(n, x.data(), y.data());
    c_be->relu_backward(n, y.data(), dy.data(), dx.data());

    Tensor gx = gpu(x), gy = gpu_poisoned(n), gdy = gpu(dy), gdx = gpu_poisoned(n);
    g_be->relu_forward(n, gx.data(), gy.data());
    g_be->relu_backward(n, gy.data(), gdy.data(), gdx.data());
    EXPECT_EQ(gy.to_host(), y);
    EXPECT_EQ(gdx.to_host(), dx);

    // In place: y over x, dx over dy (what Sequential does).
    g_be->relu_forward(n, gx.data(), gx.data());
    g_be->relu_backward(n, gx.data(), gdy.data(), gdy.data());
    EXPECT_EQ(gx.to_host(), y);
    EXPECT_EQ(gdy.to_host(), dx);
  }
}

TEST(CudaGpu, MseLossGradMatchesCpu) {
  PB_REQUIRE_GPU();
  Rand r;
  auto c_be = make_backend(cpu());
  auto g_be = gpu_backend(Precision::Fp32);
  // 1, small, and more elements than 2048 blocks of 256 threads cover (grid-stride + last block).
  for (int64_t n : {int64_t(1), r.i(2, 5000), r.i(300000, 2000000)}) {
    SCOPED_TRACE(fmt::format("seed {} n {}", r.seed, n));
    const auto y = r.vec(n), t = r.vec(n);
    const float scale = 2.0f / static_cast<float>(n * r.i(1, 3));  // global batch may be larger
    std::vector<float> dy = poisoned(n);
    float loss = NAN;
    c_be->mse_loss_grad(n, y.data(), t.data(), scale, dy.data(), &loss);
    Tensor gy = gpu(y), gt = gpu(t), gdy = gpu_poisoned(n), gloss = gpu_poisoned(1);
    for (int rep = 0; rep < 2; ++rep) {  // the second call checks the reduction reset itself
      g_be->mse_loss_grad(n, gy.data(), gt.data(), scale, gdy.data(), gloss.data());
      EXPECT_REL_CLOSE(gloss.to_host(), std::vector<float>{loss}, 1e-6);
      EXPECT_REL_CLOSE(gdy.to_host(), dy, 1e-7);
    }
  }
}

TEST(CudaGpu, AdamMatchesCpu) {
  PB_REQUIRE_GPU();
  Rand r;
  auto c_be = make_backend(cpu());
  auto g_be = gpu_backend(Precision::Fp32);
  for (double wd : {0.0, 0.01}) {
    const int64_t n = r.i(1, 200000);
    SCOPED_TRACE(fmt::format("seed {} n {} weight_decay {}", r.seed, n, wd));
    AdamParams a;
    a.lr = 1e-3, a.weight_decay = wd;
    auto p = r.vec(n), m = std::vector<float>(n, 0.0f), v = std::vector<float>(n, 0.0f);
    Tensor gp = gpu(p), gm = gpu(m), gv = gpu(v);
    for (int64_t step = 1; step <= 3; ++step) {
      const auto g = r.vec(n);
      Tensor gg = gpu(g);
      c_be->adam_step(n, p.data(), g.data(), m.data(), v.data(), a, step);
      g_be->adam_step(n, gp.data(), gg.data(), gm.data(), gv.data(), a, step);
    }
    EXPECT_REL_CLOSE(gp.to_host(), p, kFp32Tol);
    EXPECT_REL_CLOSE(gm.to_host(), m, kFp32Tol);
    EXPECT_REL_CLOSE(gv.to_host(), v, kFp32Tol);
  }
}

TEST(CudaGpu, CopiesInEveryDirection) {
  PB_REQUIRE_GPU();
  Rand r;
  const auto v = r.vec(r.i(1, 100000));
  const int64_t n = static_cast<int64_t>(v.size());
  Tensor a = gpu(v), b = Tensor::empty({n}, cuda());
  b.copy_from(a);  // GPU to GPU, same device
  EXPECT_EQ(b.to_host(), v);
  Tensor h = Tensor::empty({n}, cpu());
  h.copy_from(b);  // GPU to host through Tensor
  EXPECT_EQ(h.to_host(), v);
  for (int d = 1; d < cuda_device_count(); ++d) {  // peer copies, where there are peers
    Tensor c = Tensor::empty({n}, cuda(d));
    c.copy_from(a);
    Tensor back = Tensor::empty({n}, cuda());
    back.copy_from(c);
    EXPECT_EQ(back.to_host(), v) << "via cuda:" << d;
  }
}

// Five Adam steps of a small GreatNetwork through the regular strategy: same losses and
// parameters on the GPU as on the CPU engine.
TEST(CudaGpu, TrainingMatchesCpuEngine) {
  PB_REQUIRE_GPU();
  const NetSpec net = great_net(16, 0.125);
  const NetPlan plan = plan_net(net);
  const int64_t batch = 2;
  const auto params = init_params(plan, 7);
  const auto x = synthetic_values(batch * numel_of(plan.input), 8);
  std::vector<std::vector<double>> losses(2);
  std::vector<std::vector<float>> final_params(2);
  for (int k = 0; k < 2; ++k) {
    StrategyOptions so;
    so.kind = k == 0 ? DeviceKind::Cpu : DeviceKind::Cuda;
    so.backend.precision = Precision::Fp32;
    auto s = make_strategy("regular", so);
    s->setup(plan, params, net.adam);
    s->load_batch(x, x, batch);
    for (int step = 0; step < 5; ++step) {
      s->step();
      losses[k].push_back(s->loss());
    }
    final_params[k] = s->params();
  }
  for (int step = 0; step < 5; ++step)
    EXPECT_NEAR(losses[1][step], losses[0][step], 1e-4 * std::fabs(losses[0][step])) << "step " << step + 1;
  EXPECT_REL_CLOSE(final_params[1], final_params[0], 1e-4);
}

}  // namespace
}  // namespace pb
