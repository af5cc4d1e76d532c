/* Case 21: RLIMIT_AS set to max(40 MiB, VmSize + 16 MiB), then racing threads (256 KiB stacks).
 * With argv[1] == "capacity": RLIMIT_AS set to VmSize + 96 MiB once a first thread started racewatch's
 * detector (race-free: a report's debug info would take address space too), then threads with 256 KiB
 * stacks are started until pthread_create fails; prints how many started (about 370: a 32 KiB
 * alternate stack per thread left 337 of 376). */
static void *parked(void *arg) {
  (void)arg;
  pause();
  return NULL;
}

static unsigned long vm_size(void) {
  long pages = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f || fscanf(f, "%ld", &pages) != 1) printf("cannot read statm\n");
  if (f) fclose(f);
  return (unsigned long)pages * (unsigned long)sysconf(_SC_PAGESIZE);
}

static int capacity(void) {
  pthread_t first;
  if (pthread_create(&first, NULL, parked, NULL)) return 1;
  rw_sleep(0.2);
  struct rlimit rl = {vm_size() + (96ul << 20), vm_size() + (96ul << 20)};
  printf("setrlimit(RLIMIT_AS): %s\n", setrlimit(RLIMIT_AS, &rl) == 0 ? "ok" : rw_errname(errno));
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 << 10);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int started = 0;
  pthread_t t;
  while (started < 1000 && pthread_create(&t, &attr, parked, NULL) == 0) started++;
  printf("threads with 256 KiB stacks started: %d (over 300: %s)\n", started, started > 300 ? "yes" : "no");
  printf("done\n");
  _exit(0); /* the parked threads never return */
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "capacity")) return capacity();
  unsigned long vm = vm_size();
  unsigned long limit = 40ul << 20;
  if (vm + (16ul << 20) > limit) limit = vm + (16ul << 20);
  struct rlimit rl = {limit, limit};
  printf("setrlimit(RLIMIT_AS): %s\n", setrlimit(RLIMIT_AS, &rl) == 0 ? "ok" : rw_errname(errno));
  rw_start(2, 1.0, 256 * 1024);
  printf("threads started\n");
  rw_race_until(rw_now() + 1.0);
  rw_join();
  printf("done\n");
  return 0;
}
