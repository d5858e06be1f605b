// parbench devices: what this machine and build offer.
#include "bench/cli.h"
#include "engine/check.h"

namespace pb {

int cmd_devices(const std::vector<std::string>& args) {
  Flags f("parbench devices", "Lists the CPU and the CUDA devices this build can use.", {});
  if (!f.parse(args)) return 0;
  fmt::print("parbench {} (commit {})\n", PARBENCH_VERSION, PARBENCH_GIT_COMMIT);
  fmt::print("{}", system_info(CudaInfo::Always).str());
  fmt::print("conv backend (CPU): {}\n",
#ifdef PARBENCH_HAVE_DNNL
             "oneDNN"
#else
             "im2col+gemm"
#endif
  );
  return 0;
}

}  // namespace pb
