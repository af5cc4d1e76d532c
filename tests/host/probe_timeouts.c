/* Memory probes and timeouts that leave their handlers by siglongjmp, in threads that race.
 *
 * Each of 4 worker threads runs SECTIONS timed sections. A section arms a one-shot per-thread
 * timer (timer_create, SIGEV_THREAD_ID, SIGALRM, 1 ms) and then loops: probe a readable page, a
 * PROT_NONE page and an unmapped page (the SIGSEGV handler siglongjmps back to the probe), race on
 * the shared counter; the SIGALRM handler ends the section by siglongjmp out of wherever the thread
 * is: racy code, a probe, or the SIGSEGV handler itself (a timeout while a probe is in flight).
 * 2 more threads only race. argv[1] picks the handlers' flags and jump buffers:
 *   "nodefer": SA_NODEFER on both handlers, sigsetjmp(env, 0) for both (cheap jumps: the mask is
 *              never restored, and SA_NODEFER keeps the handled signal unblocked);
 *   "mask":    no SA_NODEFER, sigsetjmp(env, 1) for both (siglongjmp restores the mask);
 *   "mixed":   workers 0-1 as "mask", workers 2-3 switch between the two on every section.
 * argv[2] = "onstack": both handlers SA_ONSTACK; workers 1 and 3 have an alternate stack of
 * 8 KiB (room for two nested signal frames with AVX-512 state, not three), the others none. Each worker prints its sections, how many probes gave a wrong
 * answer and whether SIGSEGV or SIGTRAP is left blocked; main prints "done". */
#include <setjmp.h>
#include <sys/mman.h>
#include <sys/time.h>

#define WORKERS 4
#define SECTIONS 150
#define ALT_STACK 8192

static char *region;
static long page;
static const char *mode = "mixed";
static int onstack;

static __thread sigjmp_buf probe_env, alarm_env;
static __thread volatile int probing, timing;
static __thread volatile long stray_alarms;

static void on_segv(int sig, siginfo_t *info, void *ctx) {
  (void)info;
  (void)ctx;
  if (!probing) {
    signal(sig, SIG_DFL);
    return; /* a real fault: die of it */
  }
  probing = 0;
  siglongjmp(probe_env, 1);
}

static sigjmp_buf main_env;
static volatile int main_timing;

static void on_alarm(int sig) {
  (void)sig;
  if (main_timing) { /* "itimer": the process's timer, for main (a global jump buffer, as usual) */
    main_timing = 0;
    siglongjmp(main_env, 1);
  }
  if (!timing) {
    stray_alarms = stray_alarms + 1;
    return;
  }
  timing = 0;
  probing = 0;
  siglongjmp(alarm_env, 1);
}

/* 1 if the byte at p can be read. */
static int readable(const char *p, int save) {
  if (sigsetjmp(probe_env, save) == 0) {
    probing = 1;
    volatile char c = *(volatile const char *)p;
    (void)c;
    probing = 0;
    return 1;
  }
  return 0;
}

struct worker {
  int index;
  int sections, wrong, blocked_after;
};

static void *work(void *arg) {
  struct worker *w = arg;
  void *alt = NULL;
  if (onstack && w->index % 2 == 1) {
    alt = malloc(ALT_STACK);
    stack_t ss = {.ss_sp = alt, .ss_size = ALT_STACK, .ss_flags = 0};
    sigaltstack(&ss, NULL);
  }
  if (strcmp(mode, "itimer") == 0) {
    for (long r = 0; r < 20000; r++) {
      if (!readable(region + (r % 64) * 8, 1)) w->wrong++;
      if (readable(region + page + (r % 64) * 8, 1)) w->wrong++;
      rw_race_iterations(200);
    }
    w->sections = SECTIONS;
    return NULL;
  }
  struct sigevent sev;
  memset(&sev, 0, sizeof sev);
  sev.sigev_notify = SIGEV_THREAD_ID;
  sev.sigev_signo = SIGALRM;
  sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
  timer_t timer;
  if (timer_create(CLOCK_MONOTONIC, &sev, &timer) != 0) {
    printf("timer_create failed\n");
    exit(1);
  }
  sigset_t alrm;
  sigemptyset(&alrm);
  sigaddset(&alrm, SIGALRM);
  pthread_sigmask(SIG_UNBLOCK, &alrm, NULL);
  for (volatile int s = 0; s < SECTIONS; s = s + 1) {
    int save = strcmp(mode, "nodefer") == 0 ? 0 : strcmp(mode, "mask") == 0 || w->index < 2 ? 1 : s % 2;
    if (sigsetjmp(alarm_env, save) == 0) {
      struct itimerspec its = {{0, 0}, {0, 1000000}};
      timing = 1;
      timer_settime(timer, 0, &its, NULL);
      for (long r = 0;; r++) {
        if (!readable(region + (r % 64) * 8, save)) w->wrong++;
        if (readable(region + page + (r % 64) * 8, save)) w->wrong++;
        if (readable(region + 2 * page + (r % 64) * 8, save)) w->wrong++;
        rw_race_iterations(200);
      }
    }
    w->sections++;
  }
  timer_delete(timer);
  pthread_sigmask(SIG_BLOCK, &alrm, NULL);
  sigset_t cur;
  pthread_sigmask(SIG_SETMASK, NULL, &cur);
  w->blocked_after = sigismember(&cur, SIGSEGV) || sigismember(&cur, SIGTRAP);
  if (alt) {
    stack_t off = {.ss_flags = SS_DISABLE};
    sigaltstack(&off, NULL);
    free(alt);
  }
  return NULL;
}

int main(int argc, char **argv) {
  mode = argc > 1 ? argv[1] : "mixed";
  onstack = argc > 2 && strcmp(argv[2], "onstack") == 0;
  printf("mode %s%s\n", mode, onstack ? ", on alternate stacks" : "");
  page = sysconf(_SC_PAGESIZE);
  /* Page 0 readable, 1 PROT_NONE, 2 unmapped. */
  region = mmap(NULL, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  memset(region, 1, page);
  mprotect(region + page, page, PROT_NONE);
  munmap(region + 2 * page, page);
  int nodefer = strcmp(mode, "mask") != 0 ? SA_NODEFER : 0;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | nodefer | (onstack ? SA_ONSTACK : 0);
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, NULL);
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sa.sa_flags = nodefer | (onstack ? SA_ONSTACK : 0);
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, NULL);

  /* SIGALRM only where a worker unblocks it for its own timer. */
  sigset_t alrm;
  sigemptyset(&alrm);
  sigaddset(&alrm, SIGALRM);
  int itimer = strcmp(mode, "itimer") == 0;
  if (!itimer) pthread_sigmask(SIG_BLOCK, &alrm, NULL);
  rw_start(2, 60, 0);
  pthread_t t[WORKERS];
  struct worker w[WORKERS];
  memset(w, 0, sizeof w);
  for (int i = 0; i < WORKERS; i++) {
    w[i].index = i;
    pthread_create(&t[i], NULL, work, &w[i]);
  }
  if (itimer) {
    /* The kernel gives a process-directed SIGALRM to the main thread first when it does not block it. */
    volatile int jumps = 0;
    while (jumps < 300) {
      if (sigsetjmp(main_env, jumps % 2) == 0) {
        struct itimerval it = {{0, 0}, {0, 1000}};
        main_timing = 1;
        setitimer(ITIMER_REAL, &it, NULL);
        for (;;) rw_race_iterations(1000);
      }
      jumps = jumps + 1;
    }
    printf("main: jumps %d\n", jumps);
  }
  for (int i = 0; i < WORKERS; i++) {
    pthread_join(t[i], NULL);
    printf("worker %d: sections %d, wrong answers %d, blocks SIGSEGV or SIGTRAP %d\n", i, w[i].sections,
           w[i].wrong, w[i].blocked_after);
  }
  rw_stop_racing();
  rw_join();
  printf("done\n");
  return 0;
}
