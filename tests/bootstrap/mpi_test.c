/* Launched by ctest as `mpirun -np 4 sparrow_mpi_test`: every rank joins through sparrowCommInitMPI,
 * and sparrow's rank and size match MPI's. */
#include <mpi.h>
#include <stdio.h>

#include "sparrow/sparrow_mpi.h"

int main(int argc, char** argv) {
  int rank, size, srank = -1, ssize = -1, ok, all_ok;
  sparrowComm_t comm;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  sparrowResult_t rc = sparrowCommInitMPI(&comm, MPI_COMM_WORLD);
  ok = rc == sparrowSuccess;
  if (ok) {
    sparrowCommUserRank(comm, &srank);
    sparrowCommCount(comm, &ssize);
    ok = srank == rank && ssize == size;
    sparrowCommDestroy(comm);
  } else {
    fprintf(stderr, "rank %d: sparrowCommInitMPI: %s: %s\n", rank, sparrowGetErrorString(rc), sparrowGetLastError(NULL));
  }
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank == 0) printf("sparrowCommInitMPI over %d MPI ranks: %s\n", size, all_ok ? "ok" : "FAILED");
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
