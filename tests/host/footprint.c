/* Issue 22, items 12 and 13: what racewatch takes from each thread.
 *
 *   depth: a thread with a 128 KiB stack recurses until it hits its guard page (the SIGSEGV is caught on
 *          an alternate stack and left with siglongjmp) and prints how deep it got: the harness compares
 *          the depth with the run without racewatch (nothing of racewatch's may sit below the start
 *          routine). Twice: a joinable and a detached-style thread.
 *   busy:  a thread that busy-polls (racily) for 1 s while another races prints whether its voluntary
 *          context switches (/proc/thread-self/status) stayed near zero (a watch window that sleeps shows).
 *   faults: a thread that computes (racily, no system call) for 1 s prints its minor page faults during
 *          the loop (getrusage RUSAGE_THREAD): 0, as without racewatch (racewatch's signals wrote pages of
 *          its data, runtime stacks and alternate stack for the first time there: 1-6, set 19 p22).
 *   churn: 3000 short-lived threads (returning, pthread_exit, cancelled), a few at a time, while two
 *          threads race: /proc/self/maps lines and VmSize may grow only a little.
 *   churn_exact: the same churn (returning and exiting threads) while two threads count under a lock (no
 *          race, no report): the change of VmSize and of the /proc/self/maps line count, printed exactly
 *          (0 without racewatch: glibc reuses the stacks; set 19 p23 saw VmSize grow 448 KiB, a chunk of
 *          racewatch's thread table for each new range of tids).
 *   modules: while two threads race, the modules the loader lists (racewatch's own left out, as a program
 *          that knows it is preloaded would) and whether libgcc_s.so.1 is loaded: a C program that never
 *          loads it must not find it loaded (racewatch's unwinder is linked into it).
 *   address: VmSize and /proc/self/maps lines before the first pthread_create, with four threads (1 MiB
 *          stacks) alive, and after they are joined, twice, printed exactly: the harness compares them with
 *          the run without racewatch (what racewatch maps, it maps before main). With "budget", under an
 *          RLIMIT_AS of the size at start + 96 MiB first, as a program that caps its memory does.
 *   reserve: with address randomisation off (re-executed), after two threads raced, reserves the whole
 *          address space in 1 TiB pieces, then 1 GiB pieces, as a VM or a GC probing its reservation
 *          capacity does, and prints how many it got: as without racewatch (set 42 p20: racewatch's
 *          mappings 1 TiB below the libraries split the largest free range, 126 pieces instead of 127).
 *   first_create: the voluntary context switches of the main thread during its first pthread_create
 *          (where racewatch's detector starts), as a latency-sensitive server checks: 0 without
 *          racewatch (set 42 rt2: 3, a helper's and the warm-up thread's ends waited for by blocking).
 *   idle_pool: after a first thread came and went, 32 workers (64 KiB stacks) start and wait on a
 *          barrier; the process's minor page faults across their start, per worker, under 4 (without
 *          racewatch about 2.3; set 42 rt12: 5.3, three pages of each alternate stack faulted in). */
#include <dlfcn.h>
#include <link.h>
#include <setjmp.h>
#include <sys/mman.h>
#include <sys/personality.h>

#define FRAME 128

static sigjmp_buf depth_jump;
static volatile long depth_reached;

__attribute__((noinline)) static void recurse(long level) {
  volatile char buf[FRAME];
  buf[0] = (char)level;
  depth_reached = level;
  if (level < 1000000000) recurse(level + 1);
  buf[FRAME - 1] = buf[0]; /* not a tail call */
}

static void on_segv(int sig) {
  (void)sig;
  siglongjmp(depth_jump, 1);
}

static long frame_below_top;

/* glibc's size of the static TLS block, which it carves out of the top of every thread's stack (it grows
 * with each preloaded library's thread-local variables: racewatch's, and the Rust standard library's in
 * it, 152 bytes). */
static size_t static_tls_size(void) {
  void (*info)(size_t *, size_t *) = (void (*)(size_t *, size_t *))dlsym(RTLD_DEFAULT, "_dl_get_tls_static_info");
  size_t size = 0, align = 0;
  if (info) info(&size, &align);
  return size;
}

static void *depth_worker(void *arg) {
  (void)arg;
  pthread_attr_t attr;
  void *addr;
  size_t size;
  pthread_getattr_np(pthread_self(), &attr);
  pthread_attr_getstack(&attr, &addr, &size);
  pthread_attr_destroy(&attr);
  frame_below_top = (long)((uintptr_t)addr + size - (uintptr_t)__builtin_frame_address(0)) - (long)static_tls_size();
  static char alt[64 << 10];
  stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt, .ss_flags = 0};
  sigaltstack(&ss, NULL);
  depth_reached = 0;
  if (sigsetjmp(depth_jump, 1) == 0) recurse(1);
  ss.ss_flags = SS_DISABLE;
  sigaltstack(&ss, NULL);
  return NULL;
}

static int depth_mode(void) {
  struct sigaction sa = {0};
  sa.sa_handler = on_segv;
  sa.sa_flags = SA_ONSTACK | SA_NODEFER;
  sigaction(SIGSEGV, &sa, NULL);
  rw_start(2, 1.0, 0);
  for (int round = 0; round < 3; round++) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 128 << 10);
    pthread_t t;
    int err = pthread_create(&t, &attr, depth_worker, NULL);
    pthread_attr_destroy(&attr);
    if (err) {
      printf("pthread_create: %s\n", rw_errname(err));
      return 1;
    }
    pthread_join(t, NULL);
    /* What lies between the start routine's frame and the top of its stack, apart from glibc's static
     * TLS block: nothing of racewatch's may (the depth itself also depends on the TLS block's size). */
    printf("round %d: start routine's frame below the stack top, less the static TLS: %ld bytes\n", round,
           frame_below_top);
    if (getenv("FOOTPRINT_VERBOSE"))
      fprintf(stderr, "round %d: depth reached on a 128 KiB stack: %ld\n", round, depth_reached);
  }
  rw_join();
  return 0;
}

static atomic_long busy_polls;

static void *busy_worker(void *arg) {
  (void)arg;
  long before = rw_status_field("/proc/thread-self/status", "voluntary_ctxt_switches");
  double end = rw_now() + 2.0;
  while (rw_now() < end)
    for (int i = 0; i < 1000; i++) {
      rw_bump();
      atomic_fetch_add_explicit(&busy_polls, 1, memory_order_relaxed);
    }
  long after = rw_status_field("/proc/thread-self/status", "voluntary_ctxt_switches");
  return (void *)(after - before);
}

static void *compute_worker(void *arg) {
  (void)arg;
  struct rusage before, after;
  getrusage(RUSAGE_THREAD, &before);
  double end = rw_now() + 1.0;
  while (rw_now() < end) rw_race_iterations(1000);
  getrusage(RUSAGE_THREAD, &after);
  return (void *)(after.ru_minflt - before.ru_minflt);
}

/* Runs `worker` in a thread beside a racing one (for `seconds`); returns what the worker returned. */
static long beside_a_racer(void *(*worker)(void *), double seconds) {
  rw_start(1, seconds, 0);
  pthread_t t;
  pthread_create(&t, NULL, worker, NULL);
  void *result;
  pthread_join(t, &result);
  rw_join();
  return (long)result;
}

static int faults_mode(void) {
  printf("minor page faults in a computing thread's loop: %ld\n", beside_a_racer(compute_worker, 1.0));
  return 0;
}

static int busy_mode(void) {
  long switches = beside_a_racer(busy_worker, 2.0);
  /* Without racewatch: 0. At a production rate (20 ms) windows spin; at the debug rate they yield in a
   * thread that never blocks. Windows that slept made 4-9 in these 2 s at 20 ms; what is left (0-1: a
   * kernel mutex on the arm/disarm path taken while contended) is allowed. */
  printf("busy thread's voluntary context switches at most 3: %d\n", switches <= 3);
  if (getenv("FOOTPRINT_VERBOSE")) fprintf(stderr, "voluntary switches: %ld\n", switches);
  return 0;
}

static long maps_lines(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  long lines = 0;
  int c;
  while ((c = fgetc(f)) != EOF) lines += c == '\n';
  fclose(f);
  return lines;
}

static void *churn_return(void *arg) {
  rw_bump();
  return arg;
}

static void *churn_exit(void *arg) {
  rw_bump();
  pthread_exit(arg);
}

static void *churn_cancelled(void *arg) {
  rw_bump();
  for (;;) pause();
  return arg;
}

static int churn_mode(void) {
  rw_start(2, 30.0, 0);
  /* Warm up: four threads at a time of each kind (their stacks then come from glibc's cache, and the
   * first pthread_exit loads libgcc_s), racewatch's start. */
  for (int round = 0; round < 4; round++) {
    pthread_t t[4];
    for (int k = 0; k < 4; k++) pthread_create(&t[k], NULL, k == 1 ? churn_exit : k == 2 ? churn_cancelled : churn_return, NULL);
    for (int k = 0; k < 4; k++) {
      if (k == 2) pthread_cancel(t[k]);
      pthread_join(t[k], NULL);
    }
  }
  long lines0 = maps_lines(), vm0 = rw_status_field("/proc/self/status", "VmSize");
  int failed = 0;
  for (int i = 0; i < 3000; i += 4) {
    pthread_t t[4];
    for (int k = 0; k < 4; k++) {
      void *(*start)(void *) = k == 1 ? churn_exit : k == 2 && i % 40 == 0 ? churn_cancelled : churn_return;
      failed += pthread_create(&t[k], NULL, start, NULL) != 0;
    }
    for (int k = 0; k < 4; k++) {
      if (i % 40 == 0 && k == 2) pthread_cancel(t[k]);
      pthread_join(t[k], NULL);
    }
  }
  long lines1 = maps_lines(), vm1 = rw_status_field("/proc/self/status", "VmSize");
  rw_stop_racing();
  rw_join();
  printf("threads that failed to start: %d\n", failed);
  printf("maps lines grew by less than 20: %d\n", lines1 - lines0 < 20);
  /* What each thread left behind was 1 MiB (3,000 threads: +3 GB); the reporter's first report within the
   * loop (its malloc arena, 64 MiB reserved) is a one-time cost, not per thread. */
  printf("VmSize grew by less than 128 MiB: %d\n", vm1 - vm0 < (128 << 10));
  if (getenv("FOOTPRINT_VERBOSE"))
    fprintf(stderr, "maps lines %ld -> %ld, VmSize %ld -> %ld kB\n", lines0, lines1, vm0, vm1);
  return 0;
}

static pthread_mutex_t quiet_lock = PTHREAD_MUTEX_INITIALIZER;
static long quiet_count;
static atomic_int quiet_stop;

static void *quiet_worker(void *arg) {
  (void)arg;
  while (!atomic_load(&quiet_stop))
    for (int i = 0; i < 1000; i++) {
      pthread_mutex_lock(&quiet_lock);
      quiet_count++;
      pthread_mutex_unlock(&quiet_lock);
    }
  return NULL;
}

static int churn_exact_mode(void) {
  pthread_t workers[2];
  for (int i = 0; i < 2; i++) pthread_create(&workers[i], NULL, quiet_worker, NULL);
  for (int round = 0; round < 8; round++) {
    pthread_t t[4];
    for (int k = 0; k < 4; k++) pthread_create(&t[k], NULL, k == 1 ? churn_exit : churn_return, NULL);
    for (int k = 0; k < 4; k++) pthread_join(t[k], NULL);
  }
  long lines0 = maps_lines(), vm0 = rw_status_field("/proc/self/status", "VmSize");
  int failed = 0;
  for (int i = 0; i < 3000; i += 4) {
    pthread_t t[4];
    for (int k = 0; k < 4; k++) failed += pthread_create(&t[k], NULL, k == 1 ? churn_exit : churn_return, NULL) != 0;
    for (int k = 0; k < 4; k++) pthread_join(t[k], NULL);
  }
  long lines1 = maps_lines(), vm1 = rw_status_field("/proc/self/status", "VmSize");
  atomic_store(&quiet_stop, 1);
  for (int i = 0; i < 2; i++) pthread_join(workers[i], NULL);
  printf("threads that failed to start: %d\n", failed);
  printf("after 3000 short threads: VmSize changed by %ld kB, maps lines by %ld\n", vm1 - vm0, lines1 - lines0);
  return 0;
}

static int list_module(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  (void)data;
  const char *name = info->dlpi_name;
  if (!name[0] || strstr(name, "libracewatch")) return 0;
  const char *slash = strrchr(name, '/');
  printf("module %s\n", slash ? slash + 1 : name);
  return 0;
}

static int modules_mode(void) {
  rw_start(2, 5.0, 0);
  usleep(300 * 1000);
  dl_iterate_phdr(list_module, NULL);
  void *gcc_s = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_NOLOAD);
  printf("libgcc_s.so.1 loaded: %s\n", gcc_s ? "yes" : "no");
  rw_stop_racing();
  rw_join();
  return 0;
}

static void *address_worker(void *barrier) {
  pthread_barrier_wait(barrier);
  return NULL;
}

static int address_mode(int budget) {
  if (budget) {
    long size = rw_status_field("/proc/self/status", "VmSize");
    struct rlimit limit = {(rlim_t)(size + 96 * 1024) * 1024, (rlim_t)(size + 96 * 1024) * 1024};
    printf("setrlimit(RLIMIT_AS): %s\n", setrlimit(RLIMIT_AS, &limit) ? "failed" : "ok");
  }
  long vm0 = rw_status_field("/proc/self/status", "VmSize"), lines0 = maps_lines();
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 1 << 20);
  for (int round = 1; round <= 2; round++) {
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, 5);
    pthread_t t[4];
    int started = 0;
    for (int k = 0; k < 4; k++) started += pthread_create(&t[k], &attr, address_worker, &barrier) == 0;
    long vm_alive = rw_status_field("/proc/self/status", "VmSize"), lines_alive = maps_lines();
    if (started == 4) pthread_barrier_wait(&barrier);
    for (int k = 0; k < started; k++) pthread_join(t[k], NULL);
    long vm_joined = rw_status_field("/proc/self/status", "VmSize"), lines_joined = maps_lines();
    pthread_barrier_destroy(&barrier);
    printf("round %d: %d threads; VmSize +%ld KiB alive, +%ld KiB joined; maps lines +%ld alive, +%ld joined\n",
           round, started, vm_alive - vm0, vm_joined - vm0, lines_alive - lines0, lines_joined - lines0);
  }
  pthread_attr_destroy(&attr);
  return 0;
}

static void *race_briefly(void *arg) {
  for (int i = 0; i < 200000; i++) rw_bump();
  return arg;
}

static int reserve_mode(char **argv) {
  if (!(personality(0xffffffff) & ADDR_NO_RANDOMIZE)) {
    if (personality(ADDR_NO_RANDOMIZE) == -1) return printf("personality refused\n"), 0;
    execv("/proc/self/exe", argv);
    return printf("re-exec failed\n"), 1;
  }
  pthread_t t[2];
  for (int k = 0; k < 2; k++) pthread_create(&t[k], NULL, race_briefly, NULL);
  for (int k = 0; k < 2; k++) pthread_join(t[k], NULL);
  int pieces[2] = {0, 0};
  for (int size = 0; size < 2; size++) {
    size_t len = size == 0 ? 1UL << 40 : 1UL << 30;
    while (mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) != MAP_FAILED) pieces[size]++;
  }
  printf("reserved %d pieces of 1 TiB, then %d of 1 GiB\n", pieces[0], pieces[1]);
  printf("reserved at least 100 TiB: %s\n", pieces[0] >= 100 ? "yes" : "no");
  return 0;
}

static void *return_at_once(void *arg) { return arg; }

static int first_create_mode(void) {
  struct rusage before, after;
  getrusage(RUSAGE_THREAD, &before);
  pthread_t t;
  int rc = pthread_create(&t, NULL, return_at_once, NULL);
  getrusage(RUSAGE_THREAD, &after);
  if (rc == 0) pthread_join(t, NULL);
  long switches = after.ru_nvcsw - before.ru_nvcsw;
  printf("voluntary switches in the first pthread_create at most 1: %s\n", switches <= 1 ? "yes" : "no");
  if (getenv("FOOTPRINT_VERBOSE")) fprintf(stderr, "voluntary switches: %ld\n", switches);
  return 0;
}

static pthread_barrier_t pool_barrier;

static void *idle_worker(void *arg) {
  pthread_barrier_wait(&pool_barrier);
  pthread_barrier_wait(&pool_barrier);
  return arg;
}

static int idle_pool_mode(void) {
  pthread_t first;
  pthread_create(&first, NULL, race_briefly, NULL);
  pthread_join(first, NULL);
  enum { WORKERS = 32 };
  pthread_barrier_init(&pool_barrier, NULL, WORKERS + 1);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64 << 10);
  struct rusage before, after;
  getrusage(RUSAGE_SELF, &before);
  pthread_t t[WORKERS];
  for (int k = 0; k < WORKERS; k++) pthread_create(&t[k], &attr, idle_worker, NULL);
  pthread_barrier_wait(&pool_barrier);
  getrusage(RUSAGE_SELF, &after);
  long faults = after.ru_minflt - before.ru_minflt;
  printf("minor faults per idle worker under 4: %s\n", faults < 4 * WORKERS ? "yes" : "no");
  if (getenv("FOOTPRINT_VERBOSE")) fprintf(stderr, "minor faults: %ld\n", faults);
  pthread_barrier_wait(&pool_barrier);
  for (int k = 0; k < WORKERS; k++) pthread_join(t[k], NULL);
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (!strcmp(mode, "depth")) return depth_mode();
  if (!strcmp(mode, "faults")) return faults_mode();
  if (!strcmp(mode, "busy")) return busy_mode();
  if (!strcmp(mode, "churn")) return churn_mode();
  if (!strcmp(mode, "churn_exact")) return churn_exact_mode();
  if (!strcmp(mode, "modules")) return modules_mode();
  if (!strcmp(mode, "address")) return address_mode(argc > 2 && !strcmp(argv[2], "budget"));
  if (!strcmp(mode, "reserve")) return reserve_mode(argv);
  if (!strcmp(mode, "first_create")) return first_create_mode();
  if (!strcmp(mode, "idle_pool")) return idle_pool_mode();
  fprintf(stderr, "usage: footprint depth|busy|faults|churn|churn_exact|modules|address [budget]|reserve|first_create|idle_pool\n");
  return 2;
}
