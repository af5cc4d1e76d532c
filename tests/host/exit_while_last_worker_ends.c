/* The process exits while its last worker ends: the parent (no thread of its own) forks 40 children one
 * after another and prints how each ended.
 * - no argument: each child starts two detached workers on 48 MiB stacks (more than glibc keeps cached,
 *   so freed stacks are unmapped), which race briefly and return, and returns from main after 0.2-0.5 ms.
 *   The worker that ends last (leaving main alone) and main's exit() both wait for racewatch's reporter
 *   thread at about the same moment.
 * - "handler": each child starts one worker, which races (with main) briefly, says it is returning and
 *   returns; main then sends it SIGUSR1 from 0-150 us later, 8 times 20 us apart, whose handler calls exit(0): in some children
 *   while the worker, ending as the last thread but one, waits for the reporter. */
#define CHILDREN 40

static atomic_int returning;

static void exit_now(int sig) {
  (void)sig;
  exit(0);
}

static void *last_worker(void *arg) {
  rw_race_iterations((long)(intptr_t)arg);
  atomic_store(&returning, 1);
  return NULL;
}

static int child_handler(int index) {
  signal(SIGUSR1, exit_now);
  pthread_t t;
  if (pthread_create(&t, NULL, last_worker, (void *)(intptr_t)(2000 * (index % 8 + 1))) != 0) return 3;
  /* Racing with the worker meanwhile: at the debug rate a report is often still being written when the
   * worker ends, and the worker's wait for the reporter lasts that long. */
  while (!atomic_load(&returning)) rw_race_iterations(200);
  rw_sleep(0.000025 * (index % 7));
  /* glibc answers 0 for a thread that ended and is not joined: a few tries, 20 us apart. */
  for (int i = 0; i < 8; i++) {
    pthread_kill(t, SIGUSR1);
    rw_sleep(0.00002);
  }
  return 0;
}

static void *worker(void *arg) {
  rw_race_iterations((long)(intptr_t)arg);
  return NULL;
}

static int child(int index) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 48 << 20);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  for (int i = 0; i < 2; i++) {
    pthread_t t;
    if (pthread_create(&t, &attr, worker, (void *)(intptr_t)(2000 * (index % 8 + 1))) != 0) return 3;
  }
  rw_sleep(0.0002 + 0.00005 * (index % 7));
  return 0;
}

int main(int argc, char **argv) {
  int handler = argc > 1 && strcmp(argv[1], "handler") == 0;
  int clean = 0;
  for (int c = 0; c < CHILDREN; c++) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
      printf("fork: %s\n", rw_errname(errno));
      return 1;
    }
    if (pid == 0) exit(handler ? child_handler(c) : child(c));
    int status = 0;
    if (rw_wait_child(pid, 10.0, &status) != 0)
      printf("child %d: hung (killed after 10 s)\n", c);
    else if (WIFSIGNALED(status))
      printf("child %d: killed by signal %d\n", c, WTERMSIG(status));
    else if (WEXITSTATUS(status) != 0)
      printf("child %d: exit %d\n", c, WEXITSTATUS(status));
    else
      clean++;
  }
  printf("children that exited 0: %d of %d\n", clean, CHILDREN);
  return 0;
}
