/* Launched by ctest as `mpirun -np 4 sparrow_mpi_test`: every rank joins through sparrowCommInitMPI,
 * sparrow's rank and size match MPI's, and a few sparse broadcast steps from rank 1 arrive bit-exact
 * (every rank computes the expected weights itself). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/sparrow_mpi.h"

#define COUNT 100003

static void weights(unsigned short* w, int step) {
  for (int i = 0; i < COUNT; ++i) w[i] = (unsigned short)(0x3c00 + (i * 7919u) % 1024);
  for (int s = 1; s <= step; ++s)
    for (int i = s; i < COUNT; i += 97) w[i] = (unsigned short)(w[i] + 1); /* ~1% moved by one ulp */
}

int main(int argc, char** argv) {
  int rank, size, srank = -1, ssize = -1, ok, all_ok;
  sparrowComm_t comm;
  static unsigned short buf[COUNT], want[COUNT];
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  sparrowResult_t rc = sparrowCommInitMPI(&comm, MPI_COMM_WORLD);
  ok = rc == sparrowSuccess;
  if (ok) {
    sparrowCommUserRank(comm, &srank);
    sparrowCommCount(comm, &ssize);
    ok = srank == rank && ssize == size;
    for (int step = 0; ok && step < 4; ++step) {
      weights(want, step);
      if (rank == 1) memcpy(buf, want, sizeof buf);
      rc = sparrowSparseBcast(buf, buf, COUNT, sparrowBfloat16, 1, comm, NULL);
      ok = rc == sparrowSuccess && memcmp(buf, want, sizeof buf) == 0;
      if (!ok) fprintf(stderr, "rank %d step %d: %s: %s\n", rank, step, sparrowGetErrorString(rc), sparrowGetLastError(comm));
    }
    sparrowCommDestroy(comm);
  } else {
    fprintf(stderr, "rank %d: sparrowCommInitMPI: %s: %s\n", rank, sparrowGetErrorString(rc), sparrowGetLastError(NULL));
  }
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank == 0) printf("sparrowCommInitMPI and 4 sparse broadcast steps over %d MPI ranks: %s\n", size, all_ok ? "ok" : "FAILED");
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
