/* How much of a program's alternate signal stack is written: each of 2 workers gives itself an 8 KiB
 * alternate stack (filled with a pattern) and a SA_ONSTACK SIGUSR1 handler, takes 400 SIGUSR1s from
 * pthread_kill between stretches of covered, properly locked work (where racewatch's samples land), and
 * prints how many bytes of the stack were ever written. Without racewatch: the kernel's signal frame
 * and the handler's few bytes. racewatch's signals land at the top of the same stack, and its handlers
 * run on stacks of its own: the count is the same. */
#define ALTSTACK 8192

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long shared_total;
static atomic_long handled;

__attribute__((noinline)) static void locked_work(int rounds) {
  for (int i = 0; i < rounds; i++) {
    pthread_mutex_lock(&lock);
    shared_total += i;
    pthread_mutex_unlock(&lock);
  }
}

static void on_usr1(int sig) {
  (void)sig;
  atomic_fetch_add_explicit(&handled, 1, memory_order_relaxed);
}

static void *worker(void *arg) {
  unsigned char *alt = malloc(ALTSTACK);
  memset(alt, 0xa5, ALTSTACK);
  stack_t ss = {.ss_sp = alt, .ss_size = ALTSTACK, .ss_flags = 0};
  if (sigaltstack(&ss, NULL) != 0) printf("sigaltstack: %s\n", rw_errname(errno));
  double end = rw_now() + 0.6;
  for (int i = 0; i < 400; i++) {
    pthread_kill(pthread_self(), SIGUSR1);
    locked_work(200);
  }
  while (rw_now() < end) locked_work(200);
  stack_t off = {.ss_flags = SS_DISABLE};
  sigaltstack(&off, NULL);
  int untouched = 0;
  while (untouched < ALTSTACK && alt[untouched] == 0xa5) untouched++;
  char line[96];
  snprintf(line, sizeof line, "worker %d: alternate stack bytes written: %d of %d", (int)(intptr_t)arg,
           ALTSTACK - untouched, ALTSTACK);
  free(alt);
  return strdup(line);
}

int main(void) {
  struct sigaction sa = {0};
  sa.sa_handler = on_usr1;
  sa.sa_flags = SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, NULL);
  pthread_t t[2];
  for (intptr_t i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, (void *)i);
  for (int i = 0; i < 2; i++) {
    char *line;
    pthread_join(t[i], (void **)&line);
    printf("%s\n", line);
    free(line);
  }
  printf("handled: %ld\n", atomic_load(&handled));
  return 0;
}
