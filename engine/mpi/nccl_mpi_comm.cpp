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

// Rank 0 of comm's NCCL unique id, on every process of comm.
std::string broadcast_nccl_id(MPI_Comm comm) {
  int me = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &me));
  std::string id = me == 0 ? nccl_unique_id() : std::string();
  int bytes = static_cast<int>(id.size());
  MPI_CHECK(MPI_Bcast(&bytes, 1, MPI_INT, 0, comm));
  id.resize(static_cast<std::size_t>(bytes));
  MPI_CHECK(MPI_Bcast(id.data(), bytes, MPI_BYTE, 0, comm));
  return id;
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_mpi_communicator(const std::vector<Backend*>& ranks, int color) {
  if (color < 0) {
    const int me = process().rank;
    PB_CHECK(static_cast<int>(ranks.size()) == process().size && ranks[me] != nullptr,
             "process {} must own rank {} of {}", me, me, ranks.size());
    return make_nccl_rank_communicator(ranks, me, broadcast_nccl_id(MPI_COMM_WORLD));
  }
  MPI_Comm part = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, process().rank, &part));
  int me = 0, size = 0;
  MPI_Comm_rank(part, &me);
  MPI_Comm_size(part, &size);
  std::string id;
  try {
    PB_CHECK(static_cast<int>(ranks.size()) == size && ranks[me] != nullptr, "process {} must own rank {} of the {} "
             "of color {}", process().rank, me, size, color);
    id = broadcast_nccl_id(part);
  } catch (...) {
    MPI_Comm_free(&part);
    throw;
  }
  MPI_Comm_free(&part);
  return make_nccl_rank_communicator(ranks, me, id);
}

}  // namespace pb
#endif
