/* Case 16: a racing parent forks 20 children in its first 0.2 s (each calls exit(0): atexit handlers
 * and destructors run), then races on for 1.5 s. */
int main(void) {
  rw_start(2, 1.8, 0);
  int ok = 0;
  for (int i = 0; i < 20; i++) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      rw_race_iterations(10000);
      exit(0);
    }
    int status = 0;
    if (rw_wait_child(pid, 5.0, &status) != 0)
      printf("child %d hung\n", i);
    else if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
      ok++;
    else
      rw_print_status("child", status);
    rw_sleep(0.01);
  }
  printf("children that exited 0: %d\n", ok);
  fflush(stdout);
  rw_race_until(rw_now() + 1.5);
  rw_join();
  printf("done\n");
  return 0;
}
