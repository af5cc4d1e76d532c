/* Thread cancellation while the threads race. Rounds of 4 racing threads, each cancelled after about 10 ms;
 * main joins them and counts PTHREAD_CANCELED. argv[1]:
 *   "deferred": the threads race and call cancellation points in turn: nanosleep (a signal handler may be
 *               running one when the cancel arrives), pthread_testcancel, read on an empty pipe, poll;
 *   "async":    PTHREAD_CANCEL_ASYNCHRONOUS threads racing in a loop with no system call at all;
 *   "pending":  one worker at a time, the program's only other thread, racing with no cancellation point
 *               and returning: cancelled at once, it returns normally (a deferred cancel waits for a
 *               cancellation point it never reaches), and its end makes racewatch's reporter rest;
 *   "waits":    SIGTRAP blocked; a thread at a time blocks in one wait (sigtimedwait, sigwaitinfo and sigwait
 *               for SIGTRAP; sigsuspend, ppoll, pselect, epoll_pwait with an empty mask; pthread_join, open
 *               of a FIFO) while two threads race, and is cancelled there: its cleanup handler runs and the
 *               join reads PTHREAD_CANCELED (before, racewatch's clean-up of its own interposed waits made
 *               the unwinder abort the process). */
#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/stat.h>

#define ROUNDS 80
#define THREADS 4

static int empty_pipe[2];
static atomic_int started;

static void *deferred(void *arg) {
  int kind = (int)(intptr_t)arg;
  atomic_fetch_add(&started, 1);
  for (;;) {
    rw_race_iterations(20000);
    switch (kind) {
    case 0: {
      struct timespec ts = {0, 100000};
      nanosleep(&ts, NULL);
      break;
    }
    case 1: pthread_testcancel(); break;
    case 2: {
      struct pollfd p = {empty_pipe[0], POLLIN, 0};
      poll(&p, 1, 1);
      break;
    }
    default: {
      char c;
      read(empty_pipe[0], &c, 1); /* non-blocking: EAGAIN */
      pthread_testcancel();
      break;
    }
    }
  }
  return NULL;
}

static void *asynchronous(void *arg) {
  (void)arg;
  pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, NULL);
  atomic_fetch_add(&started, 1);
  for (;;) rw_race_iterations(1000);
  return NULL;
}

static void *returns(void *arg) {
  rw_race_iterations(200000);
  return arg;
}

static int pending_at_return(void) {
  int normal = 0, cancelled = 0;
  for (int round = 0; round < 20; round++) {
    pthread_t t;
    void *ret = NULL;
    if (pthread_create(&t, NULL, returns, (void *)1) != 0) return 1;
    pthread_cancel(t);
    pthread_join(t, &ret);
    if (ret == PTHREAD_CANCELED) cancelled++;
    else if (ret == (void *)1) normal++;
  }
  printf("returned: %d, cancelled: %d\n", normal, cancelled);
  return 0;
}

/* ---- waits ---- */

static const char *const waits[] = {"sigtimedwait", "sigwaitinfo", "sigwait", "sigsuspend", "ppoll",
                                    "pselect",      "epoll_pwait", "pthread_join", "open"};
static char fifo[64];
static atomic_int cleaned;

static void cleanup(void *arg) {
  (void)arg;
  atomic_store(&cleaned, 1);
}

static void *sleeper(void *arg) {
  (void)arg;
  sleep(100);
  return NULL;
}

static void *waiter(void *arg) {
  const char *how = arg;
  pthread_cleanup_push(cleanup, NULL);
  sigset_t trap, none;
  sigemptyset(&trap);
  sigaddset(&trap, SIGTRAP);
  sigemptyset(&none);
  siginfo_t info;
  struct timespec ts = {100, 0};
  int sig;
  atomic_store(&started, 1);
  if (!strcmp(how, "sigtimedwait")) sigtimedwait(&trap, &info, &ts);
  else if (!strcmp(how, "sigwaitinfo")) sigwaitinfo(&trap, &info);
  else if (!strcmp(how, "sigwait")) sigwait(&trap, &sig);
  else if (!strcmp(how, "sigsuspend")) sigsuspend(&none);
  else if (!strcmp(how, "ppoll")) ppoll(NULL, 0, &ts, &none);
  else if (!strcmp(how, "pselect")) pselect(0, NULL, NULL, NULL, &ts, &none);
  else if (!strcmp(how, "epoll_pwait")) {
    struct epoll_event ev;
    epoll_pwait(epoll_create1(EPOLL_CLOEXEC), &ev, 1, 100000, &none);
  } else if (!strcmp(how, "pthread_join")) {
    pthread_t t;
    pthread_create(&t, NULL, sleeper, NULL);
    pthread_join(t, NULL);
  } else if (!strcmp(how, "open"))
    open(fifo, O_RDONLY | O_CLOEXEC);
  pthread_cleanup_pop(0);
  return NULL;
}

static int cancelled_waits(void) {
  snprintf(fifo, sizeof fifo, "/tmp/rw-cancel-fifo-%d", (int)getpid());
  mkfifo(fifo, 0600);
  sigset_t trap;
  sigemptyset(&trap);
  sigaddset(&trap, SIGTRAP);
  pthread_sigmask(SIG_BLOCK, &trap, NULL);
  rw_start(2, 30.0, 0);
  for (size_t i = 0; i < sizeof waits / sizeof *waits; i++) {
    atomic_store(&started, 0);
    atomic_store(&cleaned, 0);
    pthread_t t;
    pthread_create(&t, NULL, waiter, (void *)waits[i]);
    while (!atomic_load(&started)) rw_sleep(0.001);
    rw_sleep(0.1);
    pthread_cancel(t);
    void *ret = NULL;
    pthread_join(t, &ret);
    printf("%s: cancelled %d, cleanup ran %d\n", waits[i], ret == PTHREAD_CANCELED, atomic_load(&cleaned));
  }
  unlink(fifo);
  rw_stop_racing();
  rw_join();
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "deferred";
  if (strcmp(mode, "waits") == 0) return cancelled_waits();
  if (strcmp(mode, "pending") == 0) return pending_at_return();
  int async = strcmp(mode, "async") == 0;
  if (pipe2(empty_pipe, O_NONBLOCK | O_CLOEXEC) != 0) return 1;
  int cancelled = 0, joined = 0;
  for (int round = 0; round < ROUNDS; round++) {
    pthread_t t[THREADS];
    atomic_store(&started, 0);
    for (int i = 0; i < THREADS; i++) {
      int err = pthread_create(&t[i], NULL, async ? asynchronous : deferred, (void *)(intptr_t)i);
      if (err) {
        printf("pthread_create: %s\n", rw_errname(err));
        return 1;
      }
    }
    while (atomic_load(&started) < THREADS) rw_sleep(0.001);
    rw_race_until(rw_now() + 0.01);
    for (int i = 0; i < THREADS; i++) pthread_cancel(t[i]);
    for (int i = 0; i < THREADS; i++) {
      void *ret = NULL;
      if (pthread_join(t[i], &ret) == 0) joined++;
      if (ret == PTHREAD_CANCELED) cancelled++;
    }
  }
  printf("joined: %d, cancelled: %d\n", joined, cancelled);
  return 0;
}
