/* A pre-fork server whose parent keeps two threads racing while it forks 60 workers in turn, each of
 * which starts and joins a pool of 3 threads and exits 0. A lock one of the parent's threads (or its
 * signal handler) held at the fork must not hold up the child's first pthread_create. */
static void *pool_worker(void *arg) {
  rw_race_iterations(200000);
  return arg;
}

int main(void) {
  rw_start(2, 60, 0);
  int ok = 0;
  for (int k = 0; k < 60; k++) {
    rw_race_iterations(300000);
    pid_t pid = fork();
    if (pid == 0) {
      pthread_t t[3];
      for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, pool_worker, NULL);
      for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
      _exit(0);
    }
    int status;
    if (waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0) ok++;
  }
  rw_stop_racing();
  rw_join();
  printf("worker children that exited 0: %d of 60\n", ok);
  return 0;
}
