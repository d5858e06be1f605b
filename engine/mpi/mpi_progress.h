// Progress for started MPI operations. MPI moves a started message only inside MPI calls, so a
// pipeline stage that starts a send and then computes for milliseconds holds its message back
// until it waits, and its peer idles meanwhile (threads in one process do not: their copies are
// immediate). While any operation is in flight, one thread per process calls into MPI every few
// tens of microseconds; where the library lacks MPI_THREAD_MULTIPLE there is none (docs/mpi.md).
#pragma once

namespace pb {

// Counts operations started (begin) and completed (end); the thread polls while the count is
// above zero and sleeps otherwise.
void mpi_progress_begin(int n = 1);
void mpi_progress_end(int n = 1);
// Whether this process has the thread (MPI_THREAD_MULTIPLE was provided).
bool mpi_progress_thread();

}  // namespace pb
