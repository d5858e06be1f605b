// The worker pool under the strategies, and what a user sees when the system refuses workers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <mutex>
#include <thread>

#include "tests/paths.h"
#include "engine/check.h"
#include "strategies/pool.h"
#include "strategies/strategy.h"

namespace pb {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

TEST(WorkerPool, TaskZeroOnTheCallerTheOthersEachOnTheirOwnThread) {
  WorkerPool pool(3);
  std::vector<std::thread::id> first(3), second(3);
  pool.run(3, [&](int i) { first[i] = std::this_thread::get_id(); });
  pool.run(3, [&](int i) { second[i] = std::this_thread::get_id(); });
  EXPECT_EQ(first[0], std::this_thread::get_id());
  EXPECT_NE(first[1], first[0]);
  EXPECT_NE(first[2], first[1]);
  EXPECT_EQ(first, second);  // a worker's backend is always driven by the same thread
  std::atomic<int> calls{0};
  pool.run(1, [&](int i) { calls += i + 1; });  // only task 0
  EXPECT_EQ(calls, 1);
}

TEST(WorkerPool, FirstFailureRethrownAfterEveryTaskEnded) {
  WorkerPool pool(3);
  for (int failing : {0, 2}) {
    std::atomic<int> done{0}, aborts{0};
    try {
      pool.run(3, [&](int i) {
        if (i == failing) throw Error(fmt::format("task {} fails", i));
        ++done;
      }, [&] { ++aborts; });
      ADD_FAILURE() << "no exception";
    } catch (const Error& e) {
      EXPECT_EQ(e.what(), fmt::format("task {} fails", failing));
    }
    EXPECT_EQ(done, 2);
    EXPECT_EQ(aborts, 1);
  }
  std::atomic<int> done{0};
  pool.run(3, [&](int) { ++done; });  // still usable
  EXPECT_EQ(done, 3);
}

TEST(SpinCondition, WakesPollingAndSleepingWaitersAlike) {
  // A hand-off back and forth: every other one after a pause well past the polling time, so the
  // waiter has gone to sleep on the condition variable and only notify_all can wake it.
  std::mutex mu;
  SpinCondition cv;
  int turn = 0;  // even: the main thread's, odd: the other's
  const int rounds = 200;
  std::vector<int> seen;
  std::thread other([&] {
    for (int k = 0; k < rounds; ++k) {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return turn == 2 * k + 1; });
      seen.push_back(turn);
      ++turn;
      cv.notify_all();
    }
  });
  for (int k = 0; k < rounds; ++k) {
    if (k % 2) std::this_thread::sleep_for(kSpinWait * 4);
    std::unique_lock<std::mutex> lock(mu);
    turn = 2 * k + 1;
    cv.notify_all();
    cv.wait(lock, [&] { return turn == 2 * k + 2; });
  }
  other.join();
  ASSERT_EQ(seen.size(), static_cast<std::size_t>(rounds));
  for (int k = 0; k < rounds; ++k) EXPECT_EQ(seen[k], 2 * k + 1);
}

#ifdef __linux__
std::vector<int> my_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(set), &set), 0);
  std::vector<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

TEST(WorkerPool, BindsEachTaskToItsCoreAndGivesTheCallerItsCpusBack) {
  const std::vector<int> mine = my_cpus();
  ASSERT_FALSE(mine.empty());
  const std::vector<int> cores = WorkerPool::cores_for(3, 1);
  ASSERT_EQ(cores.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(cores[i], mine[i % mine.size()]) << "the caller's CPUs in turn";
  EXPECT_TRUE(WorkerPool::cores_for(1, 1).empty());  // one worker: nothing to bind
  {
    WorkerPool pool(3, cores);
    std::vector<std::vector<int>> bound(3);
    std::vector<int> ran_on(3, -1);
    pool.run(3, [&](int i) {
      bound[i] = my_cpus();
      ran_on[i] = sched_getcpu();
    });
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(bound[i], std::vector<int>{cores[i]}) << "task " << i;
      EXPECT_EQ(ran_on[i], cores[i]) << "task " << i;
    }
  }
  EXPECT_EQ(my_cpus(), mine);  // the pool is gone: the calling thread may run anywhere again
  {
    WorkerPool unbound(2);
    std::vector<int> n(2);
    unbound.run(2, [&](int i) { n[i] = static_cast<int>(my_cpus().size()); });
    EXPECT_EQ(n[1], static_cast<int>(mine.size()));
  }
}
#endif

// The preamble every strategy shares: no step or batch before its setup.
TEST(GroupStrategy, EveryStrategyRefusesAStepBeforeItsSetup) {
  for (std::string name : strategy_names()) {
    if (name == kHybridFamily) name = "dp1xpp1";  // a family: its members are the strategies
    if (name == kDpTpFamily) name = "dp1xtp1";
    if (name == kHsdpFamily) name = "hsdp1x1";
    SCOPED_TRACE(name);
    StrategyOptions o;
    o.backend.threads = 1;
    auto s = make_strategy(name, o);
    EXPECT_THAT([&] { s->step(); }, ::testing::ThrowsMessage<Error>(HasSubstr(name + ": step() before setup()")));
    EXPECT_THAT([&] { s->load_batch({1}, {1}, 1); },
                ::testing::ThrowsMessage<Error>(HasSubstr(name + ": load_batch() before setup()")));
  }
}

struct Result {
  int code = -1;
  std::string err;  // stdout and stderr
};

// `parbench ARGS` under an address-space limit of 2 GB: thread stacks run out after a few
// hundred workers.
Result parbench_limited(const std::string& args) {
  const fs::path dir = fs::temp_directory_path() / ("parbench_workers_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string err = (dir / "stderr.txt").string();
  const std::string cmd = "(ulimit -v 2000000; cd " + dir.string() + " && " + pb::test::parbench_binary() + " " + args +
                          " >" + err + " 2>&1)";
  const int status = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  fs::remove_all(dir);
  return r;
}

#if defined(__SANITIZE_ADDRESS__)
#define SKIP_UNDER_ASAN() GTEST_SKIP() << "AddressSanitizer reserves more address space than the limit"
#else
#define SKIP_UNDER_ASAN() (void)0
#endif

TEST(WorkerPool, RefusedThreadsAreAUsageErrorNamingDevices) {
  SKIP_UNDER_ASAN();
  const Result r = parbench_limited("train --workload linear --strategy ddp --devices 1000 --batch 2 --threads 1");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("ddp: --devices 1000: could not start worker thread"));
  EXPECT_THAT(r.err, HasSubstr("use fewer devices"));
}

TEST(WorkerPool, RefusedThreadsFailOneConfigurationAndTheSweepGoesOn) {
  SKIP_UNDER_ASAN();
  const Result r = parbench_limited(
      "run --workload linear --strategies ddp --devices 1000,2 --iterations 2 --warmup 0 --threads 1 --out run");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("2 configuration(s), 1 failed"));
}

}  // namespace
}  // namespace pb
