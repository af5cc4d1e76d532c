/* Whole-process operations while threads race.
 * argv[1] = "setxid":       setuid/setgid to the current ids: glibc signals every thread (the runtime's
 *                           included) and waits for each; it must return.
 * argv[1] = "setxid-reporting": the same kinds of call (setuid, setgid, seteuid, setegid, setreuid,
 *                           setresuid, setresgid, setgroups, initgroups), 15 rounds over 1.5 s while the
 *                           threads go on racing: at the debug rate racewatch's reporter thread is printing
 *                           or waiting for more then, and glibc waits for it too.
 * argv[1] = "vfork":        50 vfork + exec of /bin/true, then 3 batches of 1000 more: whether the resident
 *                           memory grew by less than 512 KiB in one of them (racewatch's environment for a
 *                           child, made in memory the vfork child borrows, grew it by about 750 KiB per
 *                           batch when each exec left it behind).
 * argv[1] = "exec-thread":  a thread other than main execs /bin/echo (the new image's output is stdout). */
#include <grp.h>
#include <pwd.h>
#include <sys/wait.h>

/* Every kind of identity call glibc makes every thread repeat, each to the ids the process has:
 * how many failed. */
static int change_ids_in_place(void) {
  uid_t uid = getuid();
  gid_t gid = getgid();
  gid_t groups[64];
  int ngroups = getgroups(64, groups);
  struct passwd *me = getpwuid(uid);
  int failed = 0;
  failed += setuid(uid) != 0;
  failed += setgid(gid) != 0;
  failed += seteuid(uid) != 0;
  failed += setegid(gid) != 0;
  failed += setreuid(uid, uid) != 0;
  failed += setresuid(uid, uid, uid) != 0;
  failed += setresgid(gid, gid, gid) != 0;
  failed += ngroups < 0 || setgroups((size_t)ngroups, groups) != 0;
  failed += me == NULL || initgroups(me->pw_name, gid) != 0;
  return failed;
}

static void *exec_from_thread(void *arg) {
  (void)arg;
  rw_sleep(0.3);
  execl("/bin/echo", "echo", "exec from a thread", (char *)NULL);
  return NULL;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "setxid";
  rw_start(2, strcmp(mode, "setxid-reporting") == 0 ? 4.0 : 1.0, 0);
  if (strcmp(mode, "setxid") == 0) {
    rw_sleep(0.2);
    printf("setuid: %d, setgid: %d\n", setuid(getuid()), setgid(getgid()));
  } else if (strcmp(mode, "setxid-reporting") == 0) {
    rw_sleep(1.0);
    int failed = 0;
    for (int round = 0; round < 15; round++) {
      failed += change_ids_in_place();
      rw_sleep(0.1);
    }
    printf("identity calls failed: %d\n", failed);
    rw_stop_racing();
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
    /* Three batches of 1000: a report's symbolization may grow the memory once; a leak grows every batch. */
    long least = -1;
    for (int batch = 0; batch < 3; batch++) {
      long before = rw_status_field("/proc/self/status", "VmRSS");
      for (int i = 0; i < 1000; i++) {
        pid_t pid = vfork();
        if (pid == 0) {
          execl("/bin/true", "true", (char *)NULL);
          _exit(127);
        }
        waitpid(pid, NULL, 0);
      }
      long grew = rw_status_field("/proc/self/status", "VmRSS") - before;
      if (least < 0 || grew < least) least = grew;
    }
    printf("a batch of 1000 more grew the resident memory by under 512 KiB: %d\n", least < 512);
  } else {
    pthread_t t;
    pthread_create(&t, NULL, exec_from_thread, NULL);
    pthread_join(t, NULL);
  }
  rw_join();
  return 0;
}
