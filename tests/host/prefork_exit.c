/* Pre-fork children that start racing threads and call exit() while the threads still race: the parent
 * (no thread of its own) forks 3 batches of 4 children; each child starts 2 racing threads, races on main
 * too for a time of its own (20 ms to 460 ms: some exit while the first report is being written) and calls
 * exit(10 + its index): from main while its threads race (children 0-1), with an atexit handler that
 * races too (2), after it stopped and joined its threads (3). The parent waits for each with a timeout
 * and prints its status. */
#define BATCHES 3
#define CHILDREN 4

static void child_atexit(void) { rw_race_iterations(100000); }

static void child(int batch, int index) {
  rw_start(2, 30.0, 0);
  rw_race_until(rw_now() + 0.02 + 0.04 * (batch * CHILDREN + index));
  if (index == 2) atexit(child_atexit);
  if (index == 3) {
    rw_stop_racing();
    rw_join();
  }
  exit(10 + index);
}

int main(void) {
  for (int b = 0; b < BATCHES; b++) {
    pid_t pids[CHILDREN];
    for (int c = 0; c < CHILDREN; c++) {
      fflush(stdout);
      pids[c] = fork();
      if (pids[c] < 0) {
        printf("fork: %s\n", rw_errname(errno));
        return 1;
      }
      if (pids[c] == 0) child(b, c);
    }
    for (int c = 0; c < CHILDREN; c++) {
      int status = 0;
      char what[32];
      snprintf(what, sizeof what, "batch %d child %d", b, c);
      if (rw_wait_child(pids[c], 10.0, &status) != 0)
        printf("%s: hung (killed after 10 s)\n", what);
      else
        rw_print_status(what, status);
    }
  }
  return 0;
}
