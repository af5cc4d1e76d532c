/* makecontext coroutines on 16 KiB stacks, in 2 threads: each thread runs 4 coroutines, switching to each in
 * turn with swapcontext many times over about 1 s; a coroutine does racy work and recurses to about
 * 10 KiB of its stack (racy increments at every level) before it yields. Below each stack, 16 KiB filled with
 * a pattern must be left intact (nothing ran off the end of a coroutine's stack). */
#include <ucontext.h>

#define STACK (16 * 1024)
#define DEPTH_BYTES (10 * 1024)
#define COROUTINES 4

struct coroutine {
  ucontext_t ctx;
  ucontext_t *back;
  char *below; /* the pattern area just below the stack */
  char *stack;
  uintptr_t deepest;
  int yields;
  int done;
};

static atomic_int deep_enough, canaries_broken, total_yields_ok;
static double end_time;

__attribute__((noinline)) uintptr_t recurse(int level, int depth, uintptr_t *deepest) {
  volatile char buf[192];
  buf[0] = (char)level;
  buf[191] = (char)level;
  rw_bump();
  uintptr_t r = 0;
  if (level < depth)
    r = recurse(level + 1, depth, deepest);
  else if ((uintptr_t)&buf[0] < *deepest)
    *deepest = (uintptr_t)&buf[0];
  rw_bump();
  return r + buf[0] + buf[191];
}

static void body(unsigned lo, unsigned hi) {
  struct coroutine *co = (struct coroutine *)(((uintptr_t)hi << 32) | lo);
  /* Frame size measured once, then the depth that reaches about DEPTH_BYTES below this frame. */
  uintptr_t at0 = UINTPTR_MAX, at1 = UINTPTR_MAX;
  recurse(0, 0, &at0);
  recurse(0, 1, &at1);
  uintptr_t top = (uintptr_t)co->stack + STACK;
  long frame = (long)(at0 - at1);
  int depth = frame > 0 ? (int)((DEPTH_BYTES - (long)(top - at0)) / frame) : 0;
  co->deepest = UINTPTR_MAX;
  while (rw_now() < end_time) {
    rw_race_iterations(500);
    recurse(0, depth, &co->deepest);
    co->yields++;
    swapcontext(&co->ctx, co->back);
  }
  co->done = 1;
}

static void *worker(void *arg) {
  (void)arg;
  ucontext_t main_ctx;
  struct coroutine cos[COROUTINES];
  for (int i = 0; i < COROUTINES; i++) {
    struct coroutine *co = &cos[i];
    memset(co, 0, sizeof *co);
    co->below = malloc(2 * STACK);
    co->stack = co->below + STACK;
    for (int k = 0; k < STACK; k++) co->below[k] = (char)(k * 7 + 3);
    co->back = &main_ctx;
    getcontext(&co->ctx);
    co->ctx.uc_stack.ss_sp = co->stack;
    co->ctx.uc_stack.ss_size = STACK;
    co->ctx.uc_link = &main_ctx;
    uintptr_t p = (uintptr_t)co;
    makecontext(&co->ctx, (void (*)(void))body, 2, (unsigned)(p & 0xffffffffu), (unsigned)(p >> 32));
  }
  int running = COROUTINES;
  while (running > 0) {
    running = 0;
    for (int i = 0; i < COROUTINES; i++) {
      if (cos[i].done) continue;
      swapcontext(&main_ctx, &cos[i].ctx);
      if (!cos[i].done) running++;
    }
  }
  for (int i = 0; i < COROUTINES; i++) {
    struct coroutine *co = &cos[i];
    uintptr_t used = (uintptr_t)co->stack + STACK - co->deepest;
    if (used >= DEPTH_BYTES - 1024 && used <= DEPTH_BYTES + 1024) atomic_fetch_add(&deep_enough, 1);
    if (co->yields >= 20) atomic_fetch_add(&total_yields_ok, 1);
    for (int k = 0; k < STACK; k++)
      if (co->below[k] != (char)(k * 7 + 3)) {
        atomic_fetch_add(&canaries_broken, 1);
        break;
      }
    free(co->below);
  }
  return NULL;
}

int main(void) {
  end_time = rw_now() + 1.0;
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, NULL);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  printf("coroutines that used about %d KiB of their %d KiB stack: %d\n", DEPTH_BYTES / 1024, STACK / 1024,
         atomic_load(&deep_enough));
  printf("coroutines that yielded at least 20 times: %d\n", atomic_load(&total_yields_ok));
  printf("areas below a stack overwritten: %d\n", atomic_load(&canaries_broken));
  return 0;
}
