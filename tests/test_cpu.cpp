// CPU backend under contention: how its OpenMP threads wait between parallel regions.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>


namespace pb {
namespace {

using testing::HasSubstr;

// stdout and stderr of a shell command.
std::string output_of(const std::string& cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen((cmd + " 2>&1").c_str(), "r"), pclose);
  if (!p) return {};
  std::string out;
  std::array<char, 4096> buf;
  for (std::size_t n; (n = std::fread(buf.data(), 1, buf.size(), p.get())) > 0;) out.append(buf.data(), n);
  return out;
}

#if defined(_OPENMP) && defined(__linux__)

// libgomp shows how its threads wait in OMP_DISPLAY_ENV=verbose: GOMP_SPINCOUNT '0' is passive
// waiting, its default (no OMP_WAIT_POLICY) spins 300000 times first.
TEST(CpuOpenMp, ProgramWaitsPassivelyUnlessTheUserChose) {
  const std::string bin = PARBENCH_BINARY;
  const std::string plain = output_of(fmt::format("env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT OMP_DISPLAY_ENV=verbose "
                                                  "{} --help",
                                                  bin));
  if (plain.find("GOMP_SPINCOUNT") == std::string::npos)
    GTEST_SKIP() << "the OpenMP runtime is not libgomp (no GOMP_SPINCOUNT in OMP_DISPLAY_ENV):\n" << plain;
  EXPECT_THAT(plain, HasSubstr("GOMP_SPINCOUNT = '0'"));
  const std::string active = output_of(fmt::format("env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=active "
                                                   "OMP_DISPLAY_ENV=verbose {} --help",
                                                   bin));
  EXPECT_THAT(active, HasSubstr("OMP_WAIT_POLICY = 'ACTIVE'"));
  EXPECT_THAT(active, testing::Not(HasSubstr("GOMP_SPINCOUNT = '0'")));
  const std::string spin = output_of(fmt::format("env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=1234 "
                                                 "OMP_DISPLAY_ENV=verbose {} --help",
                                                 bin));
  EXPECT_THAT(spin, HasSubstr("GOMP_SPINCOUNT = '1234'"));
}

#endif

}  // namespace
}  // namespace pb
