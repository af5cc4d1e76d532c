/* Case 10: threads with PTHREAD_STACK_MIN stacks recurse until about 3 KiB of stack is left (the depth
 * is computed from pthread_getattr_np's bounds and the measured frame size), racy increment at every
 * level, over and over for about 1 s. Then, the detector running, threads asking for stacks of 64, 128
 * (with a 64 KiB guard) and 200 KiB read their stack's size back with pthread_getattr_np: glibc hands
 * a new thread a kept stack of an ended thread up to 4 times the size it asked for, and racewatch's
 * warm-up thread must not leave it one (a 256 KiB one came back as 196 KiB for 128 + 64). The first
 * thread of all asks for PTHREAD_STACK_MIN and reads its size back too. */
#include <limits.h>

#define LEFT 3072

__attribute__((noinline)) uintptr_t descend(int level, int depth, uintptr_t *deepest) {
  volatile char buf[256];
  buf[0] = (char)level;
  buf[255] = (char)level;
  rw_bump();
  uintptr_t r = 0;
  if (level < depth)
    r = descend(level + 1, depth, deepest);
  else
    *deepest = (uintptr_t)&buf[0];
  rw_bump();
  return r + buf[0] + buf[255];
}

static atomic_int calibrated;

static void *worker(void *arg) {
  (void)arg;
  pthread_attr_t attr;
  void *addr;
  size_t size;
  pthread_getattr_np(pthread_self(), &attr);
  pthread_attr_getstack(&attr, &addr, &size);
  pthread_attr_destroy(&attr);
  uintptr_t low = (uintptr_t)addr;
  uintptr_t at0, at1;
  descend(0, 0, &at0);
  descend(0, 1, &at1);
  uintptr_t frame = at0 - at1;
  long depth = frame > 0 && at0 > low + LEFT ? (long)((at0 - low - LEFT) / frame) : 0;
  uintptr_t deepest = at0;
  double end = rw_now() + 1.0;
  while (rw_now() < end) descend(0, (int)depth, &deepest);
  uintptr_t left = deepest - low;
  if (depth >= 1 && left >= LEFT - 512 && left <= LEFT + 512) atomic_fetch_add(&calibrated, 1);
  return NULL;
}

static void *own_size(void *arg) {
  pthread_attr_t attr;
  size_t size = 0;
  void *addr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    pthread_attr_getstack(&attr, &addr, &size);
    pthread_attr_destroy(&attr);
  }
  *(size_t *)arg = size;
  return NULL;
}

static void sizes_read_back(void) {
  size_t asked[][2] = {{64 << 10, 4096}, {128 << 10, 64 << 10}, {200 << 10, 4096}};
  for (int i = 0; i < 3; i++) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, asked[i][0]);
    pthread_attr_setguardsize(&attr, asked[i][1]);
    size_t got = 0;
    pthread_t t;
    if (pthread_create(&t, &attr, own_size, &got) == 0) pthread_join(t, NULL);
    pthread_attr_destroy(&attr);
    printf("asked for %zu KiB (guard %zu KiB): got %zu KiB\n", asked[i][0] >> 10, asked[i][1] >> 10, got >> 10);
  }
}

int main(void) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  int err = pthread_attr_setstacksize(&attr, PTHREAD_STACK_MIN);
  if (err) printf("setstacksize: %s\n", rw_errname(err));
  /* The program's first thread, asking for the smallest stack, gets that size: not the stack glibc keeps
   * for racewatch's reporter (set 33 p28: 20608 bytes instead of 16384 in every run). */
  size_t first = 0;
  pthread_t t0;
  if (pthread_create(&t0, &attr, own_size, &first) == 0) pthread_join(t0, NULL);
  printf("first thread asked for PTHREAD_STACK_MIN: got %zu bytes more\n", first - PTHREAD_STACK_MIN);
  pthread_t t[2];
  for (int i = 0; i < 2; i++) {
    err = pthread_create(&t[i], &attr, worker, NULL);
    if (err) {
      printf("pthread_create: %s\n", rw_errname(err));
      return 1;
    }
  }
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  printf("threads that recursed to about %d bytes from the end of their stack: %d\n", LEFT, atomic_load(&calibrated));
  sizes_read_back();
  return 0;
}
