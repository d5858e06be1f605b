// NCCL across processes: the nccl-tests bootstrap. Rank 0 makes the communicator's unique id,
// MPI broadcasts it, and each process's rank joins (engine/nccl/nccl_comm.cpp). Compiled only
// when the build has both MPI and NCCL.
#if defined(PARBENCH_HAVE_MPI) && defined(PARBENCH_HAVE_NCCL)
#include <mpi.h>

#include "engine/check.h"
#include "engine/comm.h"
#include "engine/process.h"

namespace pb {

namespace {

// Rank 0's NCCL unique id, on every process.
std::string broadcast_nccl_id() {
  std::string id = process().rank == 0 ? nccl_unique_id() : std::string();
  int bytes = static_cast<int>(id.size());
  MPI_CHECK(MPI_Bcast(&bytes, 1, MPI_INT, 0, MPI_COMM_WORLD));
  id.resize(static_cast<std::size_t>(bytes));
  MPI_CHECK(MPI_Bcast(id.data(), bytes, MPI_BYTE, 0, MPI_COMM_WORLD));
  return id;
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_mpi_communicator(const std::vector<Backend*>& ranks) {
  const int me = process().rank;
  PB_CHECK(static_cast<int>(ranks.size()) == process().size && ranks[me] != nullptr,
           "process {} must own rank {} of {}", me, me, ranks.size());
  return make_nccl_rank_communicator(ranks, me, broadcast_nccl_id());
}

}  // namespace pb
#endif
