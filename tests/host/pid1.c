/* Run as the init of a PID namespace (pid 1): a child sends it SIGTRAP (argv[1] == "kill") while its
 * threads race; the kernel drops a signal an init has no handler for when it comes from inside the
 * namespace. The program prints whether it survived. */

int main(int argc, char **argv) {
  int send = argc > 1 && !strcmp(argv[1], "kill");
  rw_start(2, 1.5, 0);
  pid_t child = fork();
  if (child == 0) {
    rw_sleep(0.2);
    if (send) kill(1, SIGTRAP);
    _exit(0);
  }
  int status;
  waitpid(child, &status, 0);
  rw_join();
  printf("pid %d survived\n", (int)getpid());
  return 0;
}
