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
  printf("sparrow %d from C99\n", version);
  return 0;
}
