/* makecontext coroutines on 16 KiB stacks, in 2 threads: each thread runs 4 coroutines, switching to each in
 * turn with swapcontext many times over about 1 s; a coroutine does racy work and recurses to about
 * 10 KiB of its stack (racy increments at every level) before it yields. Below each stack, 16 KiB filled with
 * a pattern must be left intact (nothing ran off the end of a coroutine's stack).
 *
 * With "highwater": 24 coroutines per thread on filled 16 KiB stacks that only count and switch back (no
 * recursion), 300 switches each, then the most bytes any of them used, as a fiber library sizing its
 * stacks measures it: at most 1 KiB (glibc's swapcontext uses 72 bytes; racewatch's took 2 KiB of each
 * fiber's stack for a copy of the context, set 17 p44).
 *
 * With "after_jump": each of 2 threads first leaves a SIGUSR1 handler by siglongjmp (a timeout's way
 * out), then runs a fiber on a filled 16 KiB stack that does racy work for 0.6 s: the fiber's stack must
 * stay at most 1 KiB deep (racewatch's alternate stack stayed switched off after such a jump, and its
 * signal frames went onto the program's stacks from then on).
 *
 * With "handler_on_fiber": the same fibers take a SIGUSR1 every millisecond from a third thread; the
 * handler (no SA_ONSTACK) runs on the fiber's stack and works for about 50 us. The deepest use must stay
 * within one signal frame (AT_MINSIGSTKSZ) and 1 KiB: racewatch's samples that came while the handler ran
 * put a second signal frame on the fiber (3.5 KB instead of 2 KB, set 17 p44). */
#include <setjmp.h>
#include <sys/auxv.h>
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

#define SMALL_FIBERS 24
struct small_fiber {
  ucontext_t ctx;
  char *stack;
  int done;
};
static __thread ucontext_t small_sched;
static __thread struct small_fiber *small_current;

static void small_body(void) {
  struct small_fiber *f = small_current;
  for (int round = 0; round < 300; round++) {
    rw_bump();
    swapcontext(&f->ctx, &small_sched);
  }
  f->done = 1;
}

static atomic_long highest_use;

static void *small_worker(void *arg) {
  (void)arg;
  struct small_fiber fibers[SMALL_FIBERS];
  for (int i = 0; i < SMALL_FIBERS; i++) {
    fibers[i].stack = malloc(STACK);
    memset(fibers[i].stack, 0xa5, STACK);
    fibers[i].done = 0;
    getcontext(&fibers[i].ctx);
    fibers[i].ctx.uc_stack.ss_sp = fibers[i].stack;
    fibers[i].ctx.uc_stack.ss_size = STACK;
    fibers[i].ctx.uc_link = &small_sched;
    makecontext(&fibers[i].ctx, small_body, 0);
  }
  for (int live = SMALL_FIBERS; live;) {
    live = 0;
    for (int i = 0; i < SMALL_FIBERS; i++) {
      if (fibers[i].done) continue;
      small_current = &fibers[i];
      swapcontext(&small_sched, &fibers[i].ctx);
      live += !fibers[i].done;
    }
  }
  for (int i = 0; i < SMALL_FIBERS; i++) {
    long used = STACK;
    while (used > 0 && (unsigned char)fibers[i].stack[STACK - used] == 0xa5) used--;
    long seen = atomic_load(&highest_use);
    while (used > seen && !atomic_compare_exchange_weak(&highest_use, &seen, used)) {}
    free(fibers[i].stack);
  }
  return NULL;
}

static int highwater(void) {
  rw_start(2, 30.0, 0);
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, small_worker, NULL);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  rw_stop_racing();
  rw_join();
  printf("most bytes a fiber's stack used, at most 1 KiB: %s\n", atomic_load(&highest_use) <= 1024 ? "yes" : "no");
  if (getenv("COROUTINES_VERBOSE")) fprintf(stderr, "most bytes used: %ld\n", atomic_load(&highest_use));
  return 0;
}

/* ---- "after_jump" and "handler_on_fiber" ---- */

static __thread sigjmp_buf jump_out;
static __thread ucontext_t busy_sched;
static _Atomic int busy_running;
static atomic_long busy_highest;

static void jump_out_of_handler(int sig) {
  (void)sig;
  siglongjmp(jump_out, 1);
}

static void busy_handler(int sig) {
  (void)sig;
  double until = rw_now() + 50e-6;
  while (rw_now() < until) rw_race_iterations(50);
}

static void busy_body(void) {
  double until = rw_now() + 0.6;
  while (rw_now() < until) rw_race_iterations(1000);
}

static void *busy_fiber_worker(void *arg) {
  int jump_first = arg != NULL;
  if (jump_first && !sigsetjmp(jump_out, 1)) raise(SIGUSR1);
  char *stack = malloc(STACK);
  memset(stack, 0xa5, STACK);
  ucontext_t fiber;
  getcontext(&fiber);
  fiber.uc_stack.ss_sp = stack;
  fiber.uc_stack.ss_size = STACK;
  fiber.uc_link = &busy_sched;
  makecontext(&fiber, busy_body, 0);
  atomic_fetch_add(&busy_running, 1);
  swapcontext(&busy_sched, &fiber);
  atomic_fetch_sub(&busy_running, 1);
  long used = STACK;
  while (used > 0 && (unsigned char)stack[STACK - used] == 0xa5) used--;
  long seen = atomic_load(&busy_highest);
  while (used > seen && !atomic_compare_exchange_weak(&busy_highest, &seen, used)) {}
  free(stack);
  return NULL;
}

static int busy_fibers(int jump_first) {
  struct sigaction sa = {0};
  sa.sa_handler = jump_first ? jump_out_of_handler : busy_handler;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, NULL);
  rw_start(1, 30.0, 0);
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, busy_fiber_worker, jump_first ? "jump" : NULL);
  if (!jump_first) {
    while (atomic_load(&busy_running) < 2) rw_sleep(0.001);
    while (atomic_load(&busy_running) == 2) {
      for (int i = 0; i < 2; i++) pthread_kill(t[i], SIGUSR1);
      rw_sleep(0.001);
    }
  }
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  rw_stop_racing();
  rw_join();
  long used = atomic_load(&busy_highest);
  if (getenv("COROUTINES_VERBOSE")) fprintf(stderr, "most bytes used: %ld\n", used);
  if (jump_first)
    printf("after a jump out of a handler, most bytes a fiber's stack used, at most 1 KiB: %s\n",
           used <= 1024 ? "yes" : "no");
  else
    printf("with a handler running on it, most bytes a fiber's stack used, at most a signal frame and 1 KiB: %s\n",
           used <= (long)getauxval(AT_MINSIGSTKSZ) + 1024 ? "yes" : "no");
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "highwater")) return highwater();
  if (argc > 1 && !strcmp(argv[1], "after_jump")) return busy_fibers(1);
  if (argc > 1 && !strcmp(argv[1], "handler_on_fiber")) return busy_fibers(0);
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
