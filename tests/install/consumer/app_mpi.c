/* Uses an installed libsparrow_mpi under mpirun. */
#include <mpi.h>
#include <stdio.h>

#include <sparrow/sparrow.h>
#include <sparrow/sparrow_mpi.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  sparrowComm_t comm;
  float x[1000];
  for (int i = 0; i < 1000; ++i) x[i] = me == 0 ? (float)i : -1.f;
  int ok = sparrowCommInitMPI(&comm, MPI_COMM_WORLD) == sparrowSuccess &&
           sparrowSparseBcast(x, x, 1000, sparrowFloat32, 0, comm, NULL) == sparrowSuccess;
  for (int i = 0; ok && i < 1000; ++i) ok = x[i] == (float)i;
  if (ok) sparrowCommDestroy(comm);
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (me == 0) printf("consumer_mpi: %s\n", all ? "bit-exact" : "FAILED");
  MPI_Finalize();
  return all ? 0 : 1;
}
