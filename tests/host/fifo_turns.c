/* Three SCHED_FIFO threads of one priority on one CPU take strict turns: each does a slice of racy
 * work, logs its number and calls sched_yield, which hands the CPU to the next one (a real-time
 * design's round robin, as audio and control loops do). The log must repeat with period 3: every
 * entry equal to the one three before. Where real-time scheduling is not permitted, one line says so. */
#include <sched.h>

#define TURNS 300
static int turn_log[3 * TURNS + 8];
static atomic_int logged;
static pthread_barrier_t ready;
static long slice;

static void *taker(void *arg) {
  int me = (int)(long)arg;
  pthread_barrier_wait(&ready);
  for (int i = 0; i < TURNS; i++) {
    rw_race_iterations(slice);
    turn_log[atomic_fetch_add(&logged, 1)] = me;
    sched_yield();
  }
  return NULL;
}

int main(void) {
  slice = rw_calibrate(0.3) / TURNS;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(0, &one);
  if (sched_setaffinity(0, sizeof one, &one) != 0) {
    printf("affinity: %s\n", rw_errname(errno));
    return 0;
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
  pthread_attr_setschedpolicy(&attr, SCHED_FIFO);
  struct sched_param param = {.sched_priority = 10};
  pthread_attr_setschedparam(&attr, &param);
  pthread_barrier_init(&ready, NULL, 3);
  pthread_t t[3];
  for (long i = 0; i < 3; i++) {
    int err = pthread_create(&t[i], &attr, taker, (void *)i);
    if (err) {
      printf("real-time threads: %s\n", rw_errname(err));
      return 0;
    }
  }
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  int n = atomic_load(&logged), out_of_turn = 0;
  for (int i = 3; i < n; i++) out_of_turn += turn_log[i] != turn_log[i - 3];
  printf("turns logged: %d, out of turn: %d\n", n, out_of_turn);
  return 0;
}
