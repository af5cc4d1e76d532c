/* A raw clone thread that shares the parent's TLS: clone(CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND
 * | CLONE_THREAD | CLONE_SYSVSEM) without CLONE_SETTLS (green-thread runtimes and some JITs do this), racing
 * in covered code without any system call until an atomic flag tells it to stop; its exit clears its tid
 * (CLONE_CHILD_CLEARTID) and main waits for that with a futex. Meanwhile main races too and sets errno to
 * known values, checking each is still there after racy work (its errno is the clone thread's errno).
 *
 * With "own_tls": three raw clone threads with CLONE_SETTLS and a thread block of their own (self pointers
 * where glibc's descriptor has them, the canary and pointer guard copied, no TLS vector), as emulators and
 * green-thread schedulers make them, spin without any libc call while main sends each 200 SIGUSR1s with a
 * payload (rt_tgsigqueueinfo) that the program's handler counts; two threads race meanwhile. Before,
 * racewatch's trampoline in front of the handler looked its own thread-local storage up on such a thread
 * and faulted (4 runs in 20). */
#include <linux/futex.h>
#include <sched.h>

static atomic_int stop_clone;
static atomic_int clone_running;
static volatile pid_t clone_tid;

static int clone_body(void *arg) {
  (void)arg;
  atomic_store(&clone_running, 1);
  while (!atomic_load_explicit(&stop_clone, memory_order_relaxed)) rw_race_iterations(1000);
  return 0;
}

#define OWN_THREADS 3
#define OWN_SIGNALS 200

struct own_block {
  void *tcb, *dtv, *self;
  uintptr_t pad[2], canary, pointer_guard, rest[64];
};
static struct own_block own_blocks[OWN_THREADS];
static atomic_int own_got[OWN_THREADS];
static atomic_long own_progress[OWN_THREADS];
static atomic_int own_stop;
static volatile pid_t own_tids[OWN_THREADS];

static void own_handler(int sig, siginfo_t *info, void *ctx) {
  (void)sig, (void)ctx;
  int i = info->si_value.sival_int;
  if (i >= 0 && i < OWN_THREADS) atomic_fetch_add(&own_got[i], 1);
}

static int own_body(void *arg) {
  long i = (long)arg;
  while (!atomic_load_explicit(&own_stop, memory_order_relaxed)) atomic_fetch_add_explicit(&own_progress[i], 1, memory_order_relaxed);
  return 0;
}

static int own_tls(void) {
  rw_start(2, 30.0, 0);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = own_handler;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigaction(SIGUSR1, &sa, NULL);
  uintptr_t canary, guard;
  __asm__ volatile("mov %%fs:0x28, %0" : "=r"(canary));
  __asm__ volatile("mov %%fs:0x30, %0" : "=r"(guard));
  int flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM | CLONE_SETTLS |
              CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID;
  for (long i = 0; i < OWN_THREADS; i++) {
    struct own_block *b = &own_blocks[i];
    b->tcb = b->self = b;
    b->canary = canary, b->pointer_guard = guard;
    size_t size = 64 * 1024;
    char *stack = malloc(size);
    if (clone(own_body, stack + size, flags, (void *)i, &own_tids[i], b, &own_tids[i]) < 0) {
      printf("clone: %s\n", rw_errname(errno));
      return 1;
    }
  }
  for (int i = 0; i < OWN_THREADS; i++)
    while (atomic_load(&own_progress[i]) == 0) rw_sleep(0.001);
  for (int round = 0; round < OWN_SIGNALS; round++)
    for (int i = 0; i < OWN_THREADS; i++) {
      siginfo_t info;
      memset(&info, 0, sizeof info);
      info.si_signo = SIGUSR1;
      info.si_code = SI_QUEUE;
      info.si_pid = getpid();
      info.si_uid = getuid();
      info.si_value.sival_int = i;
      int before = atomic_load(&own_got[i]);
      syscall(SYS_rt_tgsigqueueinfo, getpid(), own_tids[i], SIGUSR1, &info);
      for (int wait = 0; wait < 2000 && atomic_load(&own_got[i]) == before; wait++) rw_sleep(0.0005);
    }
  atomic_store(&own_stop, 1);
  rw_stop_racing();
  for (int i = 0; i < OWN_THREADS; i++)
    for (;;) {
      pid_t t = own_tids[i];
      if (t == 0) break;
      syscall(SYS_futex, &own_tids[i], FUTEX_WAIT, t, NULL, NULL, 0);
    }
  rw_join();
  for (int i = 0; i < OWN_THREADS; i++) printf("raw thread %d: signals handled %d of %d\n", i, atomic_load(&own_got[i]), OWN_SIGNALS);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "own_tls")) return own_tls();
  rw_start(1, 1.2, 0);
  size_t size = 256 * 1024;
  char *stack = malloc(size);
  int flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM |
              CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID;
  int tid = clone(clone_body, stack + size, flags, NULL, &clone_tid, NULL, &clone_tid);
  if (tid < 0) {
    printf("clone: %s\n", rw_errname(errno));
    return 1;
  }
  while (!atomic_load(&clone_running)) rw_race_iterations(100);
  long checks = 0, mismatches = 0;
  double end = rw_now() + 1.0;
  /* Each value stands for about 50 us of racy work: together they cover the whole second. */
  /* A second and at least 1000 checks (fewer fit in a second on a loaded machine). */
  for (int i = 1; rw_now() < end || checks < 1000; i++) {
    int want = 1000 + i % 30000;
    errno = want;
    rw_race_iterations(20000);
    checks++;
    if (errno != want) mismatches++;
  }
  atomic_store(&stop_clone, 1);
  for (;;) {
    pid_t t = clone_tid;
    if (t == 0) break;
    syscall(SYS_futex, &clone_tid, FUTEX_WAIT, t, NULL, NULL, 0);
  }
  free(stack);
  rw_join();
  printf("errno checks: at least 1000, mismatches: %ld\n", mismatches);
  return 0;
}
