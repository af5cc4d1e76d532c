/* Clean: words shared through a C library's inline-assembly atomics, untagged (the library was built
 * without racewatch's header macro), in a header named like Concurrency Kit's ck_pr.h. The pass cannot
 * see them; racewatch's built-in rule for ck_pr.h judges them atomic, so no race is reported. */
#include "include/ck_pr.h"
#include "demo.h"

static uint64_t sequence, hits;
static double deadline;

static void *writer(void *arg) {
  uint64_t *stores = arg;
  while (demo_now() < deadline)
    for (int i = 0; i < 100; i++) {
      ck_pr_store_64(&sequence, ++*stores);
      ck_pr_inc_64(&hits);
    }
  return NULL;
}

static void *reader(void *arg) {
  uint64_t *seen = arg;
  while (demo_now() < deadline)
    for (int i = 0; i < 100; i++) *seen += ck_pr_load_64(&sequence) + ck_pr_load_64(&hits) != 0;
  return NULL;
}

int main(int argc, char **argv) {
  deadline = demo_now() + demo_seconds(argc, argv, 5);
  uint64_t stores = 0, seen = 0;
  pthread_t a, b;
  demo_spawn(&a, writer, &stores);
  demo_spawn(&b, reader, &seen);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  printf("clean_ck_pr: done (%d)\n", stores > 0);
  return 0;
}
