/* siglongjmp out of the program's own handlers in a racing program; after the jumps, a raised SIGTRAP
 * (the program has a handler) must still run its handler at once, and the thread's mask must be what it
 * was. argv[1]:
 *   "segv":  3 threads probe memory with a SIGSEGV handler (SA_ONSTACK | SA_NODEFER) that siglongjmps back
 *            (the way programs test whether an address is readable): per round, 4 readable pages,
 *            2 PROT_NONE pages and 2 unmapped pages, racy work between rounds. Thread 0 has no alternate
 *            stack and restores its mask (sigsetjmp(env, 1)); thread 1 has one and restores its mask;
 *            thread 2 has one and does not (sigsetjmp(env, 0), as cheap probes do). Each thread prints its
 *            probes and faults;
 *   "alarm": main, on an alternate stack, races under a 2 ms ITIMER_REAL whose SIGALRM handler
 *            (SA_ONSTACK | SA_NODEFER) siglongjmps out of the racy loop, 200 times (every other time to a
 *            sigsetjmp that did not save the mask), while threads 0 and 1 (SIGALRM blocked) race and probe
 *            as above. Then main probes too. */
#include <setjmp.h>
#include <sys/mman.h>
#include <sys/time.h>

#define ROUNDS 400
#define PROBERS 3

static __thread sigjmp_buf probe_env;
static __thread volatile int probing;
static __thread int save_mask;
static __thread volatile int traps_here;
static char *region;
static long page;
static long race_per_round;

static void on_segv(int sig, siginfo_t *info, void *ctx) {
  (void)info;
  (void)ctx;
  if (!probing) {
    signal(sig, SIG_DFL);
    return; /* a real fault: die of it */
  }
  siglongjmp(probe_env, 1);
}

static void on_trap(int sig) {
  (void)sig;
  traps_here = traps_here + 1;
}

/* 1 if the byte at p can be read. */
static int readable(const char *p) {
  probing = 1;
  if (sigsetjmp(probe_env, save_mask) == 0) {
    volatile char c = *(volatile const char *)p;
    (void)c;
    probing = 0;
    return 1;
  }
  probing = 0;
  return 0;
}

/* Raises SIGTRAP: 1 if the program's handler ran before raise returned. */
static int trap_at_once(void) {
  int before = traps_here;
  raise(SIGTRAP);
  return traps_here == before + 1;
}

/* 1 if the thread blocks SIGSEGV or SIGTRAP (neither was blocked before the jumps). */
static int blocks_something(void) {
  sigset_t cur;
  pthread_sigmask(SIG_SETMASK, NULL, &cur);
  return sigismember(&cur, SIGSEGV) || sigismember(&cur, SIGTRAP);
}

struct tally {
  int index;
  int probes, faults, traps, traps_at_once, blocked;
};

static void probe_rounds(struct tally *t, int rounds) {
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < 8; i++) {
      t->probes++;
      if (!readable(region + i * page + (r % 64) * 8)) t->faults++;
    }
    rw_race_iterations(race_per_round);
    if (r % 50 == 49) {
      t->traps++;
      t->traps_at_once += trap_at_once();
    }
  }
  t->blocked = blocks_something();
}

static void print_tally(const char *who, struct tally *t) {
  printf("%s: probes %d, faults %d, SIGTRAP handled at once %d of %d, blocks SIGSEGV or SIGTRAP %d\n", who,
         t->probes, t->faults, t->traps_at_once, t->traps, t->blocked);
}

static void give_alt_stack(void) {
  stack_t ss = {.ss_sp = malloc(65536), .ss_size = 65536, .ss_flags = 0};
  sigaltstack(&ss, NULL);
}

static void drop_alt_stack(void) {
  stack_t off = {.ss_flags = SS_DISABLE}, old;
  sigaltstack(&off, &old);
  free(old.ss_sp);
}

static void *prober(void *arg) {
  struct tally *t = arg;
  save_mask = t->index != 2;
  if (t->index > 0) give_alt_stack();
  probe_rounds(t, ROUNDS);
  if (t->index > 0) drop_alt_stack();
  return NULL;
}

static sigjmp_buf alarm_env;

static void on_alarm(int sig) {
  (void)sig;
  siglongjmp(alarm_env, 1);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "segv";
  page = sysconf(_SC_PAGESIZE);
  /* Pages 0-3 readable, 4-5 PROT_NONE, 6-7 unmapped. */
  region = mmap(NULL, 8 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  memset(region, 1, 4 * page);
  mprotect(region + 4 * page, 2 * page, PROT_NONE);
  munmap(region + 6 * page, 2 * page);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, NULL);
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_trap;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTRAP, &sa, NULL);
  /* Calibrated alone; racing on one counter from several threads is several times slower. */
  race_per_round = rw_calibrate(0.25 / ROUNDS);

  int alarm_mode = strcmp(mode, "alarm") == 0;
  int nprobers = alarm_mode ? 2 : PROBERS;
  sigset_t alrm;
  sigemptyset(&alrm);
  sigaddset(&alrm, SIGALRM);
  pthread_sigmask(SIG_BLOCK, &alrm, NULL);
  pthread_t t[PROBERS];
  struct tally tallies[PROBERS];
  memset(tallies, 0, sizeof tallies);
  for (int i = 0; i < nprobers; i++) {
    tallies[i].index = i;
    pthread_create(&t[i], NULL, prober, &tallies[i]);
  }
  pthread_sigmask(SIG_UNBLOCK, &alrm, NULL);

  if (alarm_mode) {
    give_alt_stack();
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    volatile int jumps = 0;
    double start = rw_now();
    while (jumps < 200) {
      /* Every other jump without restoring the mask (SA_NODEFER keeps SIGALRM unblocked). */
      if (sigsetjmp(alarm_env, jumps % 2) == 0) {
        struct itimerval it = {{0, 0}, {0, 2000}};
        setitimer(ITIMER_REAL, &it, NULL);
        while (rw_now() - start < 20) rw_race_iterations(1000);
        printf("no SIGALRM within 20 s\n");
        break;
      } else {
        jumps = jumps + 1;
      }
    }
    printf("jumps: %d\n", jumps);
    /* Main probes too now that the timer is off. */
    struct tally mine = {0};
    save_mask = 1;
    probe_rounds(&mine, 100);
    print_tally("main", &mine);
    drop_alt_stack();
  }
  for (int i = 0; i < nprobers; i++) {
    pthread_join(t[i], NULL);
    char who[16];
    snprintf(who, sizeof who, "thread %d", i);
    print_tally(who, &tallies[i]);
  }
  return 0;
}
