/* Run as the init of a PID namespace (pid 1): a child sends it SIGTRAP (argv[1] == "kill") while its
 * threads race; the kernel drops a signal an init has no handler for when it comes from inside the
 * namespace. The program prints whether it survived. With argv[1] == "pids" it prints the pids three
 * children get while two race-free workers run, which the namespace hands out in order. */

static void *private_work(void *arg) {
  (void)arg;
  volatile long count = 0;
  double end = rw_now() + 0.3;
  while (rw_now() < end) count++;
  return NULL;
}

/* Race-free workers: a race would start racewatch's reporter thread, which takes a pid of its own. */
static int print_pids(void) {
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, private_work, NULL);
  for (int i = 0; i < 3; i++) {
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) _exit(0);
    int status;
    waitpid(child, &status, 0);
    printf("child %d: pid %d\n", i, (int)child);
  }
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "pids")) return print_pids();
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
