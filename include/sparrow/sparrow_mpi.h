/*
 * sparrow's MPI bootstrap (libsparrow_mpi): create a communicator over the ranks of an MPI
 * communicator without unique-id plumbing, e.g. under `mpirun -np N`.
 */
#ifndef SPARROW_SPARROW_MPI_H_
#define SPARROW_SPARROW_MPI_H_

#include <mpi.h>

#include "sparrow/sparrow.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Collective over mpiComm: rank 0 of mpiComm creates the unique id and broadcasts it with MPI_Bcast;
 * every rank then calls sparrowCommInitRank with its MPI rank and size. MPI must be initialized.
 * Errors are agreed on: if any rank fails to join, every rank returns an error. */
sparrowResult_t sparrowCommInitMPI(sparrowComm_t* comm, MPI_Comm mpiComm);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SPARROW_SPARROW_MPI_H_ */
