/* racewatch's memory is not the program's: a report (symbolization reads module files, builds
 * tables) changes none of the program's malloc statistics, and with address randomisation off the
 * program's own mappings land at the same address in every run, whatever racewatch maps in a new
 * thread meanwhile.
 *
 *   own_memory          mallinfo2() before and after 1 s of racing (reports at the debug rate)
 *   own_memory first_malloc
 *                       mallinfo2() around main's first malloc, then threads race: glibc makes the
 *                       thread's malloc cache at its first malloc (656 bytes), main's unless racewatch
 *                       called malloc before main
 *   own_memory files    threads race for 1.5 s and are joined; then the shared mappings of files in
 *                       /proc/self/maps (symbolization maps module files; once the reporter is gone
 *                       with the threads, none of them is left)
 *   own_memory new_mapping
 *                       after threads ran, the /proc/self/maps lines a new 16-page mapping adds
 *   own_memory layout   8 children re-executed with ADDR_NO_RANDOMIZE: each starts a racing thread,
 *                       waits 0..350 us, maps 1 MiB; the parent prints how many addresses it saw
 */
#include <malloc.h>
#include <sys/mman.h>
#include <sys/personality.h>

static int child_layout(int delay_us) {
  rw_start(1, 0.3, 0);
  double until = rw_now() + delay_us / 1e6;
  while (rw_now() < until) {
  }
  void *m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  rw_join();
  printf("%p\n", m);
  return 0;
}

static int layout(void) {
  char seen[8][32];
  int distinct = 0, failed = 0;
  for (int i = 0; i < 8; i++) {
    int fds[2];
    if (pipe(fds) != 0) return 1;
    pid_t pid = fork();
    if (pid == 0) {
      char delay[16];
      snprintf(delay, sizeof delay, "%d", i * 50);
      dup2(fds[1], 1);
      close(fds[0]);
      personality(ADDR_NO_RANDOMIZE);
      execl("/proc/self/exe", "own_memory", "child", delay, (char *)NULL);
      _exit(127);
    }
    close(fds[1]);
    char line[32] = {0};
    ssize_t n = read(fds[0], line, sizeof line - 1);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (n <= 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      failed++;
      continue;
    }
    int known = 0;
    for (int j = 0; j < distinct; j++) known |= strcmp(seen[j], line) == 0;
    if (!known) strcpy(seen[distinct++], line);
  }
  printf("children failed: %d\n", failed);
  printf("distinct addresses of the mapping after pthread_create: %d\n", distinct);
  return 0;
}

static int first_malloc(void) {
  struct mallinfo2 before = mallinfo2();
  void *volatile block = malloc(100);
  struct mallinfo2 after = mallinfo2();
  free(block);
  printf("malloc bytes in use before main's first malloc: %ld\n", (long)before.uordblks);
  printf("malloc bytes in use after it: %ld\n", (long)after.uordblks);
  rw_start(2, 0.5, 0);
  rw_join();
  printf("done\n");
  return 0;
}

static int maps_lines(void) {
  FILE *maps = fopen("/proc/self/maps", "r");
  if (!maps) return -1;
  char line[512];
  int n = 0;
  while (fgets(line, sizeof line, maps)) n++;
  fclose(maps);
  return n;
}

/* After threads ran: the lines a new 16-page mapping adds to /proc/self/maps (one, below the program's
 * last mapping; not merged into a neighbour of racewatch's placing). */
static int new_mapping(void) {
  rw_start(2, 0.3, 0);
  rw_join();
  int before = maps_lines();
  void *m = mmap(NULL, 16 << 12, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  int after = maps_lines();
  munmap(m, 16 << 12);
  printf("lines a new mapping adds: %d\n", after - before);
  return 0;
}

static int files(void) {
  rw_start(2, 1.5, 0);
  rw_join();
  FILE *maps = fopen("/proc/self/maps", "r");
  if (!maps) return 1;
  char line[512];
  int shared = 0;
  while (fgets(line, sizeof line, maps)) {
    char perms[8] = {0};
    if (sscanf(line, "%*s %7s", perms) == 1 && perms[3] == 's' && strchr(line, '/')) shared++;
  }
  fclose(maps);
  printf("shared mappings of files after the threads ended: %d\n", shared);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "files") == 0) return files();
  if (argc > 1 && strcmp(argv[1], "new_mapping") == 0) return new_mapping();
  if (argc > 1 && strcmp(argv[1], "first_malloc") == 0) return first_malloc();
  if (argc > 2 && strcmp(argv[1], "child") == 0) return child_layout(atoi(argv[2]));
  if (argc > 1 && strcmp(argv[1], "layout") == 0) return layout();
  rw_start(2, 3.0, 0);
  rw_sleep(0.05);
  struct mallinfo2 before = mallinfo2();
  rw_sleep(1.0);
  struct mallinfo2 after = mallinfo2();
  rw_stop_racing();
  rw_join();
  printf("malloc arena bytes changed: %ld\n", (long)(after.arena - before.arena));
  printf("malloc bytes in use changed: %ld\n", (long)(after.uordblks - before.uordblks));
  printf("malloc mmapped bytes changed: %ld\n", (long)(after.hblkhd - before.hblkhd));
  return 0;
}
