/* sparrow hello world in C: four ranks as threads of one process; rank 0 broadcasts a float
 * buffer densely, then pushes three small updates with sparrowSparseBcast and prints what went on
 * the wire. Build: part of the CMake build (build/bin/sparrow-hello). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sparrow/sparrow.h"

#define NRANKS 4
#define COUNT (1 << 20)

static sparrowUniqueId g_id;
static int g_failed;

static void* rank_main(void* arg) {
  int rank = (int)(long)arg;
  sparrowComm_t comm;
  if (sparrowCommInitRank(&comm, NRANKS, g_id, rank) != sparrowSuccess) {
    fprintf(stderr, "rank %d: %s\n", rank, sparrowGetLastError(NULL));
    g_failed = 1;
    return NULL;
  }
  float* w = calloc(COUNT, sizeof(float));
  if (rank == 0)
    for (int i = 0; i < COUNT; ++i) w[i] = (float)i * 1e-3f;
  for (int step = 0; step < 4; ++step) {
    if (rank == 0 && step > 0)
      for (int i = step; i < COUNT; i += 100) w[i] += 1.0f; /* 1% of the weights change */
    sparrowResult_t rc = sparrowSparseBcast(w, w, COUNT, sparrowFloat32, 0, comm, NULL);
    if (rc != sparrowSuccess) {
      fprintf(stderr, "rank %d step %d: %s\n", rank, step, sparrowGetLastError(comm));
      g_failed = 1;
      break;
    }
    sparrowStats st = SPARROW_STATS_INITIALIZER;
    sparrowCommGetStats(comm, &st);
    if (rank == 0)
      printf("step %d: %s, %.2f%% changed, %llu bytes dense -> %llu on the wire\n", step, st.full ? "full" : "delta",
             100 * st.density, st.denseBytes, st.wireBytes);
  }
  /* Every rank checks the last step itself: element i moved once for every step s in 1..3 with
   * i >= s and (i - s) % 100 == 0. */
  for (int i = 0; i < COUNT; ++i) {
    float want = (float)i * 1e-3f;
    for (int s = 1; s <= 3; ++s)
      if (i >= s && (i - s) % 100 == 0) want += 1.0f;
    if (memcmp(&want, &w[i], sizeof want) != 0) {
      fprintf(stderr, "rank %d: element %d differs\n", rank, i);
      g_failed = 1;
      break;
    }
  }
  free(w);
  sparrowCommDestroy(comm);
  return NULL;
}

int main(int argc, char** argv) {
  pthread_t t[NRANKS];
  if (argc > 1) {
    int help = strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0;
    fprintf(help ? stdout : stderr, "%susage: sparrow-hello  (no options: four ranks as threads of this process, a dense "
            "first version and sparse updates)\n", help ? "" : "sparrow-hello: takes no arguments\n");
    return help ? 0 : 2;
  }
  if (sparrowGetUniqueId(&g_id) != sparrowSuccess) {
    fprintf(stderr, "sparrowGetUniqueId: %s\n", sparrowGetLastError(NULL));
    return 1;
  }
  for (long r = 0; r < NRANKS; ++r) pthread_create(&t[r], NULL, rank_main, (void*)r);
  for (int r = 0; r < NRANKS; ++r) pthread_join(t[r], NULL);
  printf("%s\n", g_failed ? "FAILED" : "hello from 4 ranks: all steps delivered");
  return g_failed;
}
