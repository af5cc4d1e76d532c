/* Clean: threads fill their own rows of a table and add their results to a
 * total under a mutex; the program then prints a fixed result and exits with
 * a fixed status. racewatch must change neither the output nor the status.
 * Usage: clean_exit_code [SECONDS [STATUS]] (defaults 1 and 0). */
#include "demo.h"

#define THREADS 4
#define SLOTS 256

static unsigned long rows[THREADS][SLOTS];
static unsigned long results[THREADS];
static unsigned long total;
static long rounds;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static double deadline;

/* The same value every round: the output does not depend on timing. */
__attribute__((noinline)) unsigned long fill(unsigned long *row, unsigned long id) {
  unsigned long sum = 0;
  for (unsigned long i = 0; i < SLOTS; i++) row[i] = (id * SLOTS + i) * 2654435761UL;
  for (unsigned long i = 0; i < SLOTS; i++) sum = sum * 31 + row[i];
  return sum;
}

static void *worker(void *arg) {
  unsigned long id = (unsigned long)arg;
  do {
    results[id] = fill(rows[id], id);
    pthread_mutex_lock(&lock);
    rounds++;
    pthread_mutex_unlock(&lock);
  } while (demo_now() < deadline);
  pthread_mutex_lock(&lock);
  total ^= results[id];
  pthread_mutex_unlock(&lock);
  return NULL;
}

int main(int argc, char **argv) {
  deadline = demo_now() + demo_seconds(argc, argv, 1);
  int status = argc > 2 ? atoi(argv[2]) : 0;
  pthread_t t[THREADS];
  for (unsigned long i = 0; i < THREADS; i++) demo_spawn(&t[i], worker, (void *)i);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  printf("clean_exit_code: %d threads, checksum %016lx\n", THREADS, total);
  printf("clean_exit_code: exiting with status %d", status);
  fputs(" (no newline at the end)", stdout);
  fprintf(stderr, "clean_exit_code: a line on stderr\n");
  return status;
}
