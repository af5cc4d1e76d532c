/* siglongjmp out of the program's own handlers in a racing program. argv[1]:
 *   "segv":  3 threads probe memory with a SIGSEGV handler that siglongjmps back (the way programs test
 *            whether an address is readable): per round, 4 readable pages, 2 PROT_NONE pages and 2 unmapped
 *            pages, racy work between rounds. Each thread prints its probes and faults;
 *   "alarm": main races under a 2 ms ITIMER_REAL whose SIGALRM handler siglongjmps out of the racy loop,
 *            200 times, while 2 threads (SIGALRM blocked) race and probe as above. */
#include <setjmp.h>
#include <sys/mman.h>
#include <sys/time.h>

#define ROUNDS 400
#define PROBERS 3

static __thread sigjmp_buf probe_env;
static __thread volatile int probing;
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

/* 1 if the byte at p can be read. */
static int readable(const char *p) {
  probing = 1;
  if (sigsetjmp(probe_env, 1) == 0) {
    volatile char c = *(volatile const char *)p;
    (void)c;
    probing = 0;
    return 1;
  }
  probing = 0;
  return 0;
}

struct tally {
  int probes, faults;
};

static void probe_rounds(struct tally *t, int rounds) {
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < 8; i++) {
      t->probes++;
      if (!readable(region + i * page + (r % 64) * 8)) t->faults++;
    }
    rw_race_iterations(race_per_round);
  }
}

static void *prober(void *arg) {
  struct tally *t = arg;
  probe_rounds(t, ROUNDS);
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
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, NULL);
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
  for (int i = 0; i < nprobers; i++) pthread_create(&t[i], NULL, prober, &tallies[i]);
  pthread_sigmask(SIG_UNBLOCK, &alrm, NULL);

  if (alarm_mode) {
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    volatile int jumps = 0;
    double start = rw_now();
    while (jumps < 200) {
      if (sigsetjmp(alarm_env, 1) == 0) {
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
    struct tally mine = {0, 0};
    probe_rounds(&mine, 50);
    printf("main: probes %d, faults %d\n", mine.probes, mine.faults);
  }
  for (int i = 0; i < nprobers; i++) {
    pthread_join(t[i], NULL);
    printf("thread %d: probes %d, faults %d\n", i, tallies[i].probes, tallies[i].faults);
  }
  return 0;
}
