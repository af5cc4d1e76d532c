/* A raw clone thread that shares the parent's TLS: clone(CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND
 * | CLONE_THREAD | CLONE_SYSVSEM) without CLONE_SETTLS (green-thread runtimes and some JITs do this), racing
 * in covered code without any system call until an atomic flag tells it to stop; its exit clears its tid
 * (CLONE_CHILD_CLEARTID) and main waits for that with a futex. Meanwhile main races too and sets errno to
 * known values, checking each is still there after racy work (its errno is the clone thread's errno). */
#include <linux/futex.h>
#include <sched.h>

static atomic_int stop_clone;
static atomic_int clone_running;
static volatile pid_t clone_tid;

static int clone_body(void *arg) {
  (void)arg;
  atomic_store(&clone_running, 1);
  while (!atomic_load_explicit(&stop_clone, memory_order_relaxed)) rw_race_iterations(1000);
  return 0;
}

int main(void) {
  rw_start(1, 1.2, 0);
  size_t size = 256 * 1024;
  char *stack = malloc(size);
  int flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM |
              CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID;
  int tid = clone(clone_body, stack + size, flags, NULL, &clone_tid, NULL, &clone_tid);
  if (tid < 0) {
    printf("clone: %s\n", rw_errname(errno));
    return 1;
  }
  while (!atomic_load(&clone_running)) rw_race_iterations(100);
  long checks = 0, mismatches = 0;
  double end = rw_now() + 1.0;
  /* Each value stands for about 50 us of racy work: together they cover the whole second. */
  /* A second and at least 1000 checks (fewer fit in a second on a loaded machine). */
  for (int i = 1; rw_now() < end || checks < 1000; i++) {
    int want = 1000 + i % 30000;
    errno = want;
    rw_race_iterations(20000);
    checks++;
    if (errno != want) mismatches++;
  }
  atomic_store(&stop_clone, 1);
  for (;;) {
    pid_t t = clone_tid;
    if (t == 0) break;
    syscall(SYS_futex, &clone_tid, FUTEX_WAIT, t, NULL, NULL, 0);
  }
  free(stack);
  rw_join();
  printf("errno checks: at least 1000, mismatches: %ld\n", mismatches);
  return 0;
}
