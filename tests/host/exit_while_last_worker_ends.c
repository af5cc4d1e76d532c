/* main calls exit() while its last worker ends: the parent (no thread of its own) forks 40 children one
 * after another; each child starts two detached workers on 48 MiB stacks (more than glibc keeps cached, so
 * freed stacks are unmapped), which race briefly and return, and returns from main after 0.2-0.5 ms. The
 * worker that ends last (leaving main alone) and main's exit() both wait for racewatch's reporter thread
 * at about the same moment. The parent prints how each child ended. */
#define CHILDREN 40

static void *worker(void *arg) {
  rw_race_iterations((long)(intptr_t)arg);
  return NULL;
}

static int child(int index) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 48 << 20);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  for (int i = 0; i < 2; i++) {
    pthread_t t;
    if (pthread_create(&t, &attr, worker, (void *)(intptr_t)(2000 * (index % 8 + 1))) != 0) return 3;
  }
  rw_sleep(0.0002 + 0.00005 * (index % 7));
  return 0;
}

int main(void) {
  int clean = 0;
  for (int c = 0; c < CHILDREN; c++) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
      printf("fork: %s\n", rw_errname(errno));
      return 1;
    }
    if (pid == 0) exit(child(c));
    int status = 0;
    if (rw_wait_child(pid, 10.0, &status) != 0)
      printf("child %d: hung (killed after 10 s)\n", c);
    else if (WIFSIGNALED(status))
      printf("child %d: killed by signal %d\n", c, WTERMSIG(status));
    else if (WEXITSTATUS(status) != 0)
      printf("child %d: exit %d\n", c, WEXITSTATUS(status));
    else
      clean++;
  }
  printf("children that exited 0: %d of %d\n", clean, CHILDREN);
  return 0;
}
