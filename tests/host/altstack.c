/* Case 11: SIGUSR1 handler with SA_ONSTACK on an 8192-byte alternate stack per worker; the handler does
 * racy covered work with about 2 KiB of that stack. Another thread sends SIGUSR1 to the workers with
 * pthread_kill thousands of times over about 1 s. */
#define ALTSTACK 8192

static atomic_int ran[2];
static atomic_int stop_workers;
static atomic_int ready;
static __thread int worker_index;

__attribute__((noinline)) void handler_work(void) {
  volatile char buf[2048];
  for (int i = 0; i < (int)sizeof buf; i += 64) buf[i] = (char)i;
  for (int i = 0; i < 200; i++) rw_bump();
  buf[0] = buf[2047];
}

static void on_usr1(int sig) {
  (void)sig;
  handler_work();
  atomic_fetch_add(&ran[worker_index], 1);
}

static void *worker(void *arg) {
  worker_index = (int)(intptr_t)arg;
  stack_t ss;
  ss.ss_sp = malloc(ALTSTACK);
  ss.ss_size = ALTSTACK;
  ss.ss_flags = 0;
  if (sigaltstack(&ss, NULL) != 0) printf("sigaltstack: %s\n", rw_errname(errno));
  atomic_fetch_add(&ready, 1);
  while (!atomic_load(&stop_workers)) rw_race_iterations(1000);
  /* Leave the alternate stack before freeing it. */
  stack_t off = {.ss_flags = SS_DISABLE};
  sigaltstack(&off, NULL);
  free(ss.ss_sp);
  return NULL;
}

int main(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sa.sa_flags = SA_ONSTACK | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, NULL);
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
  while (atomic_load(&ready) < 2) rw_sleep(0.001);
  /* Main is the sending thread. */
  int sent = 0;
  double end = rw_now() + 1.0;
  while (rw_now() < end) {
    for (int i = 0; i < 2; i++)
      if (pthread_kill(t[i], SIGUSR1) == 0) sent++;
    rw_sleep(0.0002);
  }
  atomic_store(&stop_workers, 1);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  printf("sent at least 200: %d\n", sent >= 200);
  for (int i = 0; i < 2; i++) printf("worker %d handler ran: %s\n", i, atomic_load(&ran[i]) > 0 ? "ok" : "never");
  return 0;
}
