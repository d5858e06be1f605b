// Error types and the check macros every backend uses: each failed call reports file,
// line and expression and throws; only main() turns errors into exit codes.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace pb {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Invalid user input (flags, files, net descriptions): exit code 2 in main().
struct UsageError : Error {
  using Error::Error;
};

// A device allocation that does not fit: a benchmark reports it and the sweep goes on.
struct OutOfMemory : Error {
  OutOfMemory(std::string device, std::size_t requested, std::size_t free_bytes)
      : Error(fmt::format("out of memory on {}: asked for {} bytes, {} bytes free", device,
                          requested, free_bytes)),
        device(std::move(device)),
        requested(requested),
        free_bytes(free_bytes) {}
  std::string device;
  std::size_t requested;
  std::size_t free_bytes;
};

[[noreturn]] inline void fail_at(const char* file, int line, const std::string& what) {
  throw Error(fmt::format("{}:{}: {}", file, line, what));
}

}  // namespace pb

// Internal invariant: a false condition is a bug or an unsupported case, reported with location.
#define PB_CHECK(cond, ...)                                                              \
  do {                                                                                   \
    if (!(cond))                                                                         \
      ::pb::fail_at(__FILE__, __LINE__,                                                  \
                    std::string("check failed: " #cond ": ") + fmt::format(__VA_ARGS__)); \
  } while (0)

// CUDA library checks: only inside the CUDA module, the one part built with CUDA headers.
#ifdef PARBENCH_IN_CUDA_MODULE
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

namespace pb::detail {
inline void check_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  if (e != cudaSuccess)
    fail_at(file, line, fmt::format("{} failed: {} ({})", expr, cudaGetErrorString(e), cudaGetErrorName(e)));
}
inline void check_cudnn(cudnnStatus_t e, const char* expr, const char* file, int line) {
  if (e != CUDNN_STATUS_SUCCESS)
    fail_at(file, line, fmt::format("{} failed: {}", expr, cudnnGetErrorString(e)));
}
inline void check_cublas(cublasStatus_t e, const char* expr, const char* file, int line) {
  if (e != CUBLAS_STATUS_SUCCESS)
    fail_at(file, line, fmt::format("{} failed: cuBLAS status {}", expr, static_cast<int>(e)));
}
}  // namespace pb::detail

#define CUDA_CHECK(expr) ::pb::detail::check_cuda((expr), #expr, __FILE__, __LINE__)
#define CUDNN_CHECK(expr) ::pb::detail::check_cudnn((expr), #expr, __FILE__, __LINE__)
#define CUBLAS_CHECK(expr) ::pb::detail::check_cublas((expr), #expr, __FILE__, __LINE__)
// After every kernel launch: launch errors surface here, not at some later call.
#define CUDA_CHECK_LAST() CUDA_CHECK(cudaGetLastError())
#endif

#if defined(PARBENCH_IN_CUDA_MODULE) && defined(PARBENCH_HAVE_NCCL)
#include <nccl.h>
namespace pb::detail {
inline void check_nccl(ncclResult_t e, const char* expr, const char* file, int line) {
  if (e != ncclSuccess) fail_at(file, line, fmt::format("{} failed: {}", expr, ncclGetErrorString(e)));
}
}  // namespace pb::detail
#define NCCL_CHECK(expr) ::pb::detail::check_nccl((expr), #expr, __FILE__, __LINE__)
#endif

#ifdef PARBENCH_HAVE_MPI
#include <mpi.h>
namespace pb::detail {
inline void check_mpi(int e, const char* expr, const char* file, int line) {
  if (e != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(e, msg, &len);
    fail_at(file, line, fmt::format("{} failed: {}", expr, std::string(msg, len)));
  }
}
}  // namespace pb::detail
#define MPI_CHECK(expr) ::pb::detail::check_mpi((expr), #expr, __FILE__, __LINE__)
#endif
