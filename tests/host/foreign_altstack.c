/* A language runtime that gives the main thread an alternate signal stack of its own before main (as
 * Rust's does, for stack overflows) and unmaps it from another thread on the way out (Rust's
 * process::exit runs its cleanup in the exiting thread), while the main thread keeps running: without
 * racewatch nothing is ever delivered there, so nothing notices. */
#include <sys/mman.h>
static void *alt_mem;
static const size_t alt_len = 64 * 1024;

static void *exiter(void *arg) {
  (void)arg;
  rw_sleep(0.3);
  printf("unmap: %d\n", munmap(alt_mem, alt_len));
  fflush(stdout);
  rw_sleep(0.3);
  printf("exiting 7\n");
  fflush(stdout);
  exit(7);
}

int main(void) {
  alt_mem = mmap(NULL, alt_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  stack_t ss = {.ss_sp = alt_mem, .ss_size = alt_len, .ss_flags = 0};
  printf("sigaltstack: %d\n", sigaltstack(&ss, NULL));
  rw_start(1, 5.0, 0);
  pthread_t t;
  pthread_create(&t, NULL, exiter, NULL);
  for (;;) rw_bump();
}
