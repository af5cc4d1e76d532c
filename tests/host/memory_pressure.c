/* The program starts two threads (racewatch's detector starts with them), allocates until malloc fails,
 * and only then lets the threads race: racewatch's first report, and the debug info it reads for it,
 * must be had while memory is exhausted. Then it frees everything and ends. argv[1]:
 *   "rlimit-data": under RLIMIT_DATA 256 MiB set by the program;
 *   "mlockall":    mlockall(MCL_FUTURE) under the RLIMIT_MEMLOCK the program inherited (run without
 *                  CAP_IPC_LOCK, which would lift the limit): every new mapping is locked, and the locked
 *                  memory's budget runs out;
 *   "hold":        RLIMIT_DATA as above, and the program ends without freeing what it holds;
 *   "locked":      mlockall(MCL_CURRENT | MCL_FUTURE) first, then two threads work (race-free) and are joined; prints
 *                  whether the locked memory grew by less than 48 MiB (two glibc thread stacks: 16 MiB;
 *                  a malloc arena of racewatch's reporter would add 64 MiB);
 *   "budget", "budget-1m": see memlock_budget. */
#include <sys/mman.h>

static void **hoard;
static long hoarded;

static void hoard_until_failure(void) {
  for (;;) {
    void **block = malloc(64 << 10);
    if (!block) break;
    *block = hoard;
    hoard = block;
    hoarded++;
  }
}

static void release(void) {
  while (hoard) {
    void **next = *hoard;
    free(hoard);
    hoard = next;
  }
}

static atomic_int go, started;

static void *racer_after_go(void *arg) {
  (void)arg;
  atomic_fetch_add(&started, 1);
  while (!atomic_load(&go)) rw_sleep(0.001);
  rw_race_until(rw_now() + 1.0);
  return NULL;
}

static pthread_mutex_t total_lock = PTHREAD_MUTEX_INITIALIZER;
static long total;

/* Race-free work: each thread on its own array, the shared total under a lock. */
static void *own_work(void *arg) {
  (void)arg;
  long mine[512] = {0};
  double end = rw_now() + 0.5;
  while (rw_now() < end) {
    for (int i = 0; i < 100000; i++) mine[i & 511] += i;
    pthread_mutex_lock(&total_lock);
    total += mine[7] & 1;
    pthread_mutex_unlock(&total_lock);
  }
  return NULL;
}

static int locked_growth(void) {
  if (mlockall(MCL_CURRENT | MCL_FUTURE)) {
    printf("mlockall: %s\n", rw_errname(errno));
    return 0;
  }
  long before = rw_status_field("/proc/self/status", "VmLck");
  pthread_t threads[2];
  for (int i = 0; i < 2; i++)
    if (pthread_create(&threads[i], NULL, own_work, NULL)) return 1;
  for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
  rw_sleep(0.3); /* the reporter's ticks, had they allocated */
  long grown = rw_status_field("/proc/self/status", "VmLck") - before;
  printf("locked memory grew by less than 48 MiB: %s\n", grown < (48 << 10) ? "yes" : "no");
  if (getenv("RW_LOCKED_VERBOSE")) fprintf(stderr, "grew by %ld kB\n", grown);
  munlockall();
  return 0;
}

/* Races for 0.3 s (racewatch reports it, with the module files it may read for symbols). */
static void *racing_work(void *arg) {
  (void)arg;
  double end = rw_now() + 0.3;
  while (rw_now() < end)
    for (int i = 0; i < 1000; i++) rw_bump();
  return NULL;
}

/* "budget": an 8 MiB RLIMIT_MEMLOCK (run without CAP_IPC_LOCK), mlockall(MCL_CURRENT | MCL_FUTURE), then
 * two workers with 256 KiB stacks: each stack is locked memory of the budget, and so is everything
 * racewatch maps from then on (its detector starts with them). Without racewatch about 3 MiB is locked
 * before the workers; racewatch's library, its tables and its stacks took so much more that the workers
 * got EAGAIN. The workers race: a report's symbols would be more locked memory (racewatch reads no
 * module file then). With "budget-1m", three workers with 1 MiB stacks: racewatch's own module (2.6 MB of
 * code, tables and data) is unlocked after the program's mlockall, so they start as without racewatch (set
 * 33 p37: only the first did). */
static int memlock_budget(int workers, size_t stack_kib) {
  struct rlimit limit = {8 << 20, 8 << 20};
  if (setrlimit(RLIMIT_MEMLOCK, &limit)) return 1;
  if (mlockall(MCL_CURRENT | MCL_FUTURE)) {
    printf("mlockall: %s\n", rw_errname(errno));
    return 0;
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, stack_kib << 10);
  pthread_t threads[3];
  int errors[3];
  for (int i = 0; i < workers; i++) errors[i] = pthread_create(&threads[i], &attr, racing_work, NULL);
  for (int i = 0; i < workers; i++) {
    printf("worker %d with a %zu KiB stack: %s\n", i, stack_kib, errors[i] ? rw_errname(errors[i]) : "ran");
    if (!errors[i]) pthread_join(threads[i], NULL);
  }
  if (getenv("RW_LOCKED_VERBOSE")) fprintf(stderr, "VmLck %ld kB\n", rw_status_field("/proc/self/status", "VmLck"));
  munlockall();
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (!strcmp(mode, "locked")) return locked_growth();
  if (!strcmp(mode, "budget")) return memlock_budget(2, 256);
  if (!strcmp(mode, "budget-1m")) return memlock_budget(3, 1024);
  struct rlimit limit = {256 << 20, 256 << 20};
  pthread_t threads[2];
  for (int i = 0; i < 2; i++)
    if (pthread_create(&threads[i], NULL, racer_after_go, NULL)) return 1;
  while (atomic_load(&started) < 2) rw_sleep(0.001);
  if (!strcmp(mode, "rlimit-data") || !strcmp(mode, "hold")) {
    if (setrlimit(RLIMIT_DATA, &limit)) return 1;
  } else if (!strcmp(mode, "mlockall")) {
    if (mlockall(MCL_FUTURE)) {
      printf("mlockall: %s\n", rw_errname(errno));
      return 1;
    }
  } else {
    return 2;
  }
  hoard_until_failure();
  printf("allocated until malloc failed: %s\n", hoarded > 100 ? "yes" : "no");
  atomic_store(&go, 1);
  for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
  if (!strcmp(mode, "hold")) {
    printf("done, still holding the memory\n");
    return 0;
  }
  release();
  printf("done\n");
  return 0;
}
