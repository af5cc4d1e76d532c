/* An SA_ONSTACK handler that uses 48 KiB of stack, in threads without an alternate stack (SA_ONSTACK
 * then means the thread's own stack) while threads race: SIGUSR1 raised 20 times in a thread with a
 * 256 KiB stack, SIGRTMIN+2 5 times in each of 2 threads with 64 KiB stacks; how many of those ran on
 * the thread's own stack (all, as the kernel puts them there); and what sigaltstack(NULL, &old)
 * reports in these threads (SS_DISABLE: the program never set one).
 * With "backtrace": a crash reporter's SA_ONSTACK | SA_NODEFER SIGABRT handler (main has no alternate
 * stack of the program's) takes a backtrace() and leaves with siglongjmp, 5 times while threads race:
 * the backtrace must reach the function that called abort() and main, through the signal frame.
 * Before (set 18 p38), the unwind stopped, or looped, at racewatch's switch back to the interrupted stack. */
#define BIG (48 * 1024)

static atomic_int handled, on_own_stack;
static __thread char *stack_lo, *stack_hi;

static void note_stack(void) {
  pthread_attr_t attr;
  void *lo;
  size_t size;
  pthread_getattr_np(pthread_self(), &attr);
  pthread_attr_getstack(&attr, &lo, &size);
  pthread_attr_destroy(&attr);
  stack_lo = lo;
  stack_hi = (char *)lo + size;
}

static void on_usr1(int sig) {
  (void)sig;
  char here;
  if (&here >= stack_lo && &here < stack_hi) atomic_fetch_add(&on_own_stack, 1);
  volatile char buf[BIG];
  for (int i = 0; i < BIG; i += 256) buf[i] = (char)i;
  rw_race_iterations(500);
  buf[0] = buf[BIG - 256];
  atomic_fetch_add(&handled, 1);
}

static int altstack_state(void) {
  stack_t old;
  memset(&old, 0, sizeof old);
  if (sigaltstack(NULL, &old) != 0) return -1;
  return old.ss_flags;
}

static void print_state(const char *who, int flags) {
  if (flags < 0)
    printf("%s: sigaltstack failed\n", who);
  else
    printf("%s: sigaltstack %s%s\n", who, flags & SS_DISABLE ? "SS_DISABLE" : "enabled",
           flags & SS_ONSTACK ? " SS_ONSTACK" : "");
}

static void *big_handler_thread(void *arg) {
  (void)arg;
  note_stack();
  intptr_t state = altstack_state();
  for (int i = 0; i < 20; i++) {
    rw_race_until(rw_now() + 0.03);
    raise(SIGUSR1);
  }
  return (void *)state;
}

static void *small_thread(void *arg) {
  (void)arg;
  note_stack();
  intptr_t state = altstack_state();
  for (int i = 0; i < 5; i++) {
    rw_race_until(rw_now() + 0.1);
    raise(SIGRTMIN + 2);
  }
  return (void *)state;
}

#include <execinfo.h>
#include <setjmp.h>

static sigjmp_buf crash_jump;
static void *crash_frames[64];
static int crash_depth;

__attribute__((noinline)) static void on_abort(int sig) {
  (void)sig;
  crash_depth = backtrace(crash_frames, 64);
  siglongjmp(crash_jump, 1);
}

__attribute__((noinline)) static void abort_site(void) {
  abort();
  __asm__ volatile("");
}

/* Whether a return address lies in `fn` (the first 256 bytes of its code). */
static int in_function(void *ret, void (*fn)(void)) {
  uintptr_t at = (uintptr_t)ret, start = (uintptr_t)fn;
  return at > start && at - start < 256;
}

static int backtrace_mode(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_abort;
  sa.sa_flags = SA_ONSTACK | SA_NODEFER;
  sigaction(SIGABRT, &sa, NULL);
  rw_start(2, 30.0, 0);
  int reached = 0;
  for (int round = 0; round < 5; round++) {
    crash_depth = 0;
    if (sigsetjmp(crash_jump, 1) == 0) abort_site();
    for (int i = 0; i < crash_depth; i++)
      if (in_function(crash_frames[i], abort_site)) {
        reached++;
        break;
      }
  }
  rw_stop_racing();
  rw_join();
  printf("backtraces from the SIGABRT handler that reach the abort site: %d of 5\n", reached);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "backtrace")) return backtrace_mode();
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sa.sa_flags = SA_ONSTACK | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, NULL);
  sigaction(SIGRTMIN + 2, &sa, NULL);
  rw_start(1, 0.8, 0);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  pthread_t big;
  pthread_create(&big, &attr, big_handler_thread, NULL);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  pthread_t small[2];
  for (int i = 0; i < 2; i++) pthread_create(&small[i], &attr, small_thread, NULL);
  pthread_attr_destroy(&attr);
  void *state;
  pthread_join(big, &state);
  print_state("256 KiB thread", (int)(intptr_t)state);
  for (int i = 0; i < 2; i++) {
    pthread_join(small[i], &state);
    print_state(i == 0 ? "64 KiB thread 0" : "64 KiB thread 1", (int)(intptr_t)state);
  }
  rw_join();
  print_state("main", altstack_state());
  printf("48 KiB handler ran: %d\n", atomic_load(&handled));
  printf("on its thread's own stack: %d\n", atomic_load(&on_own_stack));
  return 0;
}
