// libsparrow_mpi: sparrowCommInitMPI over MPI_Bcast of a unique id.
#include "sparrow/sparrow_mpi.h"

#define SPARROW_EXPORT __attribute__((visibility("default")))

extern "C" SPARROW_EXPORT sparrowResult_t sparrowCommInitMPI(sparrowComm_t* comm, MPI_Comm mpiComm) {
  if (!comm) return sparrowInvalidArgument;
  *comm = nullptr;
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) return sparrowInvalidUsage;
  int rank = 0, size = 0;
  if (MPI_Comm_rank(mpiComm, &rank) != MPI_SUCCESS || MPI_Comm_size(mpiComm, &size) != MPI_SUCCESS)
    return sparrowInvalidArgument;
  sparrowUniqueId id;
  int rc0 = sparrowSuccess;
  if (rank == 0) rc0 = sparrowGetUniqueId(&id);
  // Rank 0's failure to create an id reaches everyone, so nobody waits for a store that does not exist.
  if (MPI_Bcast(&rc0, 1, MPI_INT, 0, mpiComm) != MPI_SUCCESS) return sparrowSystemError;
  if (rc0 != sparrowSuccess) return static_cast<sparrowResult_t>(rc0);
  if (MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, mpiComm) != MPI_SUCCESS) return sparrowSystemError;
  sparrowResult_t rc = sparrowCommInitRank(comm, size, id, rank);
  int mine = rc, worst = 0;
  if (MPI_Allreduce(&mine, &worst, 1, MPI_INT, MPI_MAX, mpiComm) != MPI_SUCCESS) worst = sparrowSystemError;
  if (worst != sparrowSuccess) {
    if (*comm) sparrowCommDestroy(*comm);
    *comm = nullptr;
    return rc != sparrowSuccess ? rc : sparrowRemoteError;
  }
  return sparrowSuccess;
}
