/* Compiled as strict C99 (-std=c99 -pedantic -Werror): the public header must be valid C. */
#include <stdio.h>
#include <string.h>

#include "sparrow/sparrow.h"

int main(void) {
  int version = 0;
  sparrowUniqueId id;
  sparrowComm_t comm = NULL;
  sparrowStream_t stream = NULL;
  sparrowDataType_t dt = sparrowBfloat16;
  (void)comm;
  (void)stream;
  memset(&id, 0, sizeof id);
  if (sparrowGetVersion(&version) != sparrowSuccess || version != SPARROW_VERSION_CODE) {
    fprintf(stderr, "sparrowGetVersion failed\n");
    return 1;
  }
  if (strcmp(sparrowGetErrorString(sparrowPeerLost), "peer lost") != 0 || dt != 9) {
    fprintf(stderr, "unexpected error string or enum value\n");
    return 1;
  }
  {
    /* A model from C: a one-rank communicator's root pushes two named tensors (a piece's fields too). */
    unsigned short w[6] = {1, 2, 3, 4, 5, 6};
    size_t shape[2] = {2, 3};
    sparrowPiece_t piece = {"w", 0, 0, 2, 0};
    sparrowTensor_t t[1];
    sparrowModel_t model = NULL;
    unsigned long long v = 0;
    t[0].name = "w", t[0].data = w, t[0].datatype = sparrowBfloat16, t[0].ndim = 2, t[0].shape = shape;
    t[0].pieces = NULL, t[0].npieces = 0;
    (void)piece;
    if (sparrowGetUniqueId(&id) != sparrowSuccess || sparrowCommInitRank(&comm, 1, id, 0) != sparrowSuccess ||
        sparrowModelCreate(&model, comm, t, 1, 0) != sparrowSuccess || sparrowModelSync(model) != sparrowSuccess ||
        sparrowModelGetVersion(model, &v) != sparrowSuccess || v != 1) {
      fprintf(stderr, "model from C: %s\n", sparrowGetLastError(comm));
      return 1;
    }
    sparrowModelDestroy(model);
    sparrowCommDestroy(comm);
  }
  printf("sparrow %d from C99\n", version);
  return 0;
}
