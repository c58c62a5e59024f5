/* Uses an installed libsparrow: two ranks as threads, a dense first version, then a sparse update. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <sparrow/sparrow.h>

#define N 100000
static sparrowUniqueId id;
static unsigned short buf[2][N];
static sparrowResult_t rc[2];

static void* rank_main(void* arg) {
  int r = (int)(long)arg;
  sparrowComm_t comm;
  rc[r] = sparrowCommInitRank(&comm, 2, id, r);
  if (rc[r] != sparrowSuccess) return NULL;
  for (int step = 0; step < 2 && rc[r] == sparrowSuccess; ++step) {
    if (r == 0 && step == 1)
      for (int i = 0; i < N; i += 97) buf[0][i] ^= 0x11;
    rc[r] = sparrowSparseBcast(buf[0], r == 0 ? buf[0] : buf[r], N, sparrowBfloat16, 0, comm, NULL);
  }
  sparrowCommDestroy(comm);
  return NULL;
}

int main(void) {
  int v = 0;
  sparrowGetVersion(&v);
  for (int i = 0; i < N; ++i) buf[0][i] = (unsigned short)(i * 2654435761u >> 16);
  if (sparrowGetUniqueId(&id) != sparrowSuccess) return 1;
  pthread_t t[2];
  for (long r = 0; r < 2; ++r) pthread_create(&t[r], NULL, rank_main, (void*)r);
  for (int r = 0; r < 2; ++r) pthread_join(t[r], NULL);
  int ok = rc[0] == sparrowSuccess && rc[1] == sparrowSuccess && memcmp(buf[0], buf[1], sizeof buf[0]) == 0;
  printf("consumer: sparrow %d, two ranks, %s\n", v, ok ? "bit-exact" : "FAILED");
  return ok ? 0 : 1;
}
