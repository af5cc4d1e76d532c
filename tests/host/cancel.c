/* Thread cancellation while the threads race. Rounds of 4 racing threads, each cancelled after about 10 ms;
 * main joins them and counts PTHREAD_CANCELED. argv[1]:
 *   "deferred": the threads race and call cancellation points in turn: nanosleep (a signal handler may be
 *               running one when the cancel arrives), pthread_testcancel, read on an empty pipe, poll;
 *   "async":    PTHREAD_CANCEL_ASYNCHRONOUS threads racing in a loop with no system call at all;
 *   "pending":  one worker at a time, the program's only other thread, racing with no cancellation point
 *               and returning: cancelled at once, it returns normally (a deferred cancel waits for a
 *               cancellation point it never reaches), and its end makes racewatch's reporter rest. */
#include <poll.h>

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

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "deferred";
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
