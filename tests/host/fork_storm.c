/* Case 17: a racing (and, under racewatch, reporting) parent forks 200 children one after another;
 * each child calls exit(0) at once. A child still running after 5 s is killed and counted as hung. */
int main(void) {
  rw_start(2, 60.0, 0);
  double start = rw_now();
  int ok = 0, hung = 0;
  for (int i = 0; i < 200 && !hung; i++) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) exit(0);
    if (pid < 0) {
      printf("fork: %s\n", rw_errname(errno));
      break;
    }
    int status = 0;
    if (rw_wait_child(pid, 5.0, &status) != 0) {
      printf("hung child (fork %d)\n", i);
      hung = 1;
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      ok++;
    } else {
      rw_print_status("child", status);
    }
  }
  rw_race_until(start + 1.0);
  rw_stop_racing();
  rw_join();
  printf("children that exited 0: %d\n", ok);
  if (!hung) printf("no hang\n");
  return 0;
}
