/* What a program sees of its own threads' stacks and of glibc's thread-specific data keys, while two
 * threads race (so the detector runs). argv[1]:
 *   "backtrace": main and threads take a backtrace(): in main, in a thread's start routine, in a
 *                cleanup handler that pthread_exit runs, and in one that cancellation runs; each prints
 *                how many frames it got and which object each frame but the first lies in (the
 *                program, libc); main ends with exit(), whose atexit handler does the same;
 *   "keys":      creates keys until glibc has none left, prints how many and the first one's number,
 *                then uses one in racing threads whose destructors run in order. */
#include <dlfcn.h>
#include <execinfo.h>

static void print_frames(const char *where) {
  void *frames[64];
  int n = backtrace(frames, 64);
  printf("%s: %d frames:", where, n);
  for (int i = 1; i < n; i++) {
    Dl_info info;
    const char *object = "?";
    if (dladdr(frames[i], &info) && info.dli_fname) {
      const char *slash = strrchr(info.dli_fname, '/');
      object = slash ? slash + 1 : info.dli_fname;
    }
    printf(" %s", object);
  }
  printf("\n");
}

static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;

static void cleanup_frames(void *where) {
  pthread_mutex_lock(&print_lock);
  print_frames(where);
  pthread_mutex_unlock(&print_lock);
}

__attribute__((noinline)) static void *returning(void *arg) {
  (void)arg;
  rw_race_iterations(100000);
  cleanup_frames("returning thread");
  return NULL;
}

__attribute__((noinline)) static void *exiting(void *arg) {
  (void)arg;
  pthread_cleanup_push(cleanup_frames, "pthread_exit cleanup");
  rw_race_iterations(100000);
  pthread_exit(NULL);
  pthread_cleanup_pop(0);
  return NULL;
}

static atomic_int cancel_ready;

__attribute__((noinline)) static void *cancelled(void *arg) {
  (void)arg;
  pthread_cleanup_push(cleanup_frames, "cancellation cleanup");
  atomic_store(&cancel_ready, 1);
  for (;;) {
    rw_race_iterations(1000);
    pthread_testcancel();
  }
  pthread_cleanup_pop(0);
  return NULL;
}

static int run_one(void *(*start)(void *)) {
  pthread_t t;
  atomic_store(&cancel_ready, 0);
  if (pthread_create(&t, NULL, start, NULL)) return 1;
  if (start == cancelled) {
    while (!atomic_load(&cancel_ready)) rw_sleep(0.001);
    pthread_cancel(t);
  }
  void *result;
  pthread_join(t, &result);
  return 0;
}

static pthread_key_t used_key;
static atomic_int destructors_run;

static void destroy(void *value) {
  (void)value;
  atomic_fetch_add(&destructors_run, 1);
}

static void *keyed(void *arg) {
  pthread_setspecific(used_key, arg);
  rw_race_iterations(200000);
  return NULL;
}

static int keys(void) {
  static pthread_key_t made[2048];
  int n = 0;
  while (n < 2048 && pthread_key_create(&made[n], NULL) == 0) n++;
  printf("keys created: %d, the first: %u, the last: %u\n", n, made[0], n ? made[n - 1] : 0);
  for (int i = 0; i < n; i++) pthread_key_delete(made[i]);
  if (pthread_key_create(&used_key, destroy)) return 1;
  printf("a key made after deleting them: %u\n", used_key);
  pthread_t t[4];
  for (int i = 0; i < 4; i++)
    if (pthread_create(&t[i], NULL, keyed, &t[i])) return 1;
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  printf("destructors run: %d\n", atomic_load(&destructors_run));
  return 0;
}

static void at_exit_frames(void) { print_frames("atexit handler"); }

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  rw_start(2, 1.0, 0);
  int rc = 2;
  if (!strcmp(mode, "backtrace")) {
    atexit(at_exit_frames);
    cleanup_frames("main");
    rc = 0;
    for (int round = 0; round < 3 && rc == 0; round++)
      rc = run_one(returning) || run_one(exiting) || run_one(cancelled);
  } else if (!strcmp(mode, "keys")) {
    rc = keys();
  }
  rw_stop_racing();
  rw_join();
  printf("done\n");
  exit(rc);
}
