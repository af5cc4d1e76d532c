/* An executable that exports its own `sigaction` (linked with -rdynamic), forwarding to the next
 * definition and counting who called it, the way JVM's libjsig and crash reporters chain signal
 * handlers: its own calls, and calls from any other module. It installs handlers with `signal`,
 * `sigaction` and `sigset` while two threads race, raises each once, and prints the counts: no other
 * module calls its `sigaction` (glibc's `signal` uses its internal one). */
#include <dlfcn.h>

extern char __executable_start[], etext[];
static atomic_int own_calls, foreign_calls, handled;

__attribute__((noinline)) int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
  static int (*next)(int, const struct sigaction *, struct sigaction *);
  if (!next) next = (int (*)(int, const struct sigaction *, struct sigaction *))dlsym(RTLD_NEXT, "sigaction");
  const char *caller = __builtin_return_address(0);
  atomic_fetch_add(caller >= __executable_start && caller < etext ? &own_calls : &foreign_calls, 1);
  return next(sig, act, old);
}

static void on_signal(int sig) {
  (void)sig;
  atomic_fetch_add(&handled, 1);
}

int main(void) {
  rw_start(2, 0.5, 0);
  rw_sleep(0.05);
  signal(SIGHUP, on_signal);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGUSR1, &sa, NULL);
  sigset(SIGUSR2, on_signal); /* System V's: deprecated, still in use */
  raise(SIGHUP);
  raise(SIGUSR1);
  raise(SIGUSR2);
  rw_join();
  printf("handled: %d\n", atomic_load(&handled));
  printf("sigaction: own calls %d, foreign calls %d\n", atomic_load(&own_calls), atomic_load(&foreign_calls));
  return 0;
}
