/* Whole-process operations while threads race.
 * argv[1] = "setxid":       setuid/setgid to the current ids: glibc signals every thread (the runtime's
 *                           included) and waits for each; it must return.
 * argv[1] = "vfork":        50 vfork + exec of /bin/true.
 * argv[1] = "exec-thread":  a thread other than main execs /bin/echo (the new image's output is stdout). */
#include <sys/wait.h>

static void *exec_from_thread(void *arg) {
  (void)arg;
  rw_sleep(0.3);
  execl("/bin/echo", "echo", "exec from a thread", (char *)NULL);
  return NULL;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "setxid";
  rw_start(2, 1.0, 0);
  if (strcmp(mode, "setxid") == 0) {
    rw_sleep(0.2);
    printf("setuid: %d, setgid: %d\n", setuid(getuid()), setgid(getgid()));
  } else if (strcmp(mode, "vfork") == 0) {
    int bad = 0;
    for (int i = 0; i < 50; i++) {
      pid_t pid = vfork();
      if (pid == 0) {
        execl("/bin/true", "true", (char *)NULL);
        _exit(127);
      }
      int status = 0;
      waitpid(pid, &status, 0);
      bad += status != 0;
    }
    printf("vfork children failed: %d\n", bad);
  } else {
    pthread_t t;
    pthread_create(&t, NULL, exec_from_thread, NULL);
    pthread_join(t, NULL);
  }
  rw_join();
  return 0;
}
