/* Case 9: SIGTRAP blocked in every thread; race, then execve(/proc/self/exe, "child") while the
 * threads still race. The new image resets its signal mask and prints "child ok". */
int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "child") == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    rw_sleep(0.05);
    printf("child ok\n");
    return 0;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTRAP);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  rw_start(2, 30.0, 0);
  rw_race_until(rw_now() + 1.0);
  printf("exec\n");
  fflush(stdout);
  char *args[] = {argv[0], "child", NULL};
  extern char **environ;
  execve("/proc/self/exe", args, environ);
  printf("execve: %s\n", rw_errname(errno));
  return 1;
}
