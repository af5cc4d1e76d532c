/* Case 21: RLIMIT_AS set to max(40 MiB, VmSize + 16 MiB), then racing threads (256 KiB stacks). */
int main(void) {
  long pages = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f || fscanf(f, "%ld", &pages) != 1) printf("cannot read statm\n");
  if (f) fclose(f);
  unsigned long vm = (unsigned long)pages * (unsigned long)sysconf(_SC_PAGESIZE);
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
