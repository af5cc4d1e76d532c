/* Case 18: a pre-fork server: the parent forks 2 workers before creating any thread; each worker races
 * with 2 threads for 1 s. argv[1] = "pids" also prints the workers' pids (detection check only). */
int main(int argc, char **argv) {
  pid_t pids[2];
  for (int w = 0; w < 2; w++) {
    fflush(stdout);
    pids[w] = fork();
    if (pids[w] == 0) {
      rw_start(2, 1.0, 0);
      rw_race_until(rw_now() + 1.0);
      rw_join();
      exit(0);
    }
  }
  if (argc > 1 && strcmp(argv[1], "pids") == 0)
    for (int w = 0; w < 2; w++) printf("worker pid %d\n", (int)pids[w]);
  for (int w = 0; w < 2; w++) {
    int status = 0;
    if (rw_wait_child(pids[w], 20.0, &status) != 0) printf("worker %d hung\n", w);
    char what[32];
    snprintf(what, sizeof what, "worker %d", w);
    rw_print_status(what, status);
  }
  return 0;
}
