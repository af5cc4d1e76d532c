/* Case 12: seccomp sandboxes around racing code.
 * argv[1] = "strict-prctl":   a worker enters strict mode with prctl(PR_SET_SECCOMP), races ~0.5 s,
 *                             writes one byte to a pipe and leaves with syscall(SYS_exit, 0).
 * argv[1] = "strict-syscall": the same with syscall(SYS_seccomp, SECCOMP_SET_MODE_STRICT, 0, NULL).
 * argv[1] = "filter":         a worker installs a BPF filter (kill the process on anything but a few
 *                             calls), races ~0.5 s, writes one byte and leaves with SYS_exit.
 * argv[1] = "tsync":          main filters every thread with SECCOMP_FILTER_FLAG_TSYNC while they race,
 *                             races on, and exits with exit(0).
 * argv[1] = "filter-threads": a worker installs an allow-list filter (kill the process on anything else)
 *                             with just the calls glibc's threads, fork and signals need, and a deny-list
 *                             on top of it (racewatch may not read that one: process_vm_readv would kill
 *                             the process); then, inside
 *                             it, takes SIGUSR1s main sends it, starts two racing threads and joins
 *                             them, forks a child that starts a racing thread of its own, and returns.
 * argv[1] = "filter-exit":    a worker installs the same allow-list filter and ends the process with exit(3)
 *                             from inside it while other threads race.
 * argv[1] = "filter-main-errno": the only thread installs a container runtime's kind of filter (every call
 *                             allowed, perf_event_open fails with EPERM) for itself; then a thread it
 *                             starts starts two racing threads of its own.
 * argv[1] = "inherit-kill", "inherit-trap", "inherit-thread", "inherit-errno": a launcher (a container
 *                             runtime, systemd's SystemCallFilter=) installs a filter that allows every
 *                             call but one of racewatch's (perf_event_open: kill the process, kill the
 *                             thread, or EPERM; process_vm_readv: SIGSYS), then execs this program again,
 *                             which races two threads for 1 s under the inherited filter.
 *                             "inherit-threads-only": the filter lets the program start threads but no
 *                             process (clone without CLONE_THREAD and fork trap, clone3 ENOSYS).
 * argv[1] = "deny-list":      while two threads race, a worker puts a deny-list on itself with prctl, and
 *                             another on every thread with SECCOMP_FILTER_FLAG_TSYNC (libseccomp's shape:
 *                             the architecture, x32 numbers, then getpriority answered ENOTTY, acct and
 *                             ptrace killing the process, socket answered EAFNOSUPPORT), after the probes
 *                             libseccomp makes first (strict mode with a flag, a filter flag with no
 *                             program: EINVAL, EFAULT); the threads race on under them. racewatch makes
 *                             none of those calls: it stays on (the first worker is left unsampled, as
 *                             any thread's own sandbox).
 * argv[1] = "deny-never":     while two threads race, main puts a deny-list on every thread (TSYNC) that
 *                             kills the process on any of 121 calls racewatch says it never makes (its
 *                             seccomp_filter::NEVER: groups, timers, scheduling, IPC, pipes, epoll, fork,
 *                             file metadata, sockets, uname (asked once at start-up), …); the threads race on (at the debug rate racewatch
 *                             reports, symbolizes and its thread comes and goes), a child forked then
 *                             starts racing threads of its own (racewatch starts there), and both exit.
 *                             A call of racewatch's among them would kill the process.
 * argv[1] = "deny-args":      while two threads race, main puts a sandbox library's deny-list that looks
 *                             at arguments on every thread (TSYNC): clone without CLONE_THREAD traps,
 *                             clone3 gets ENOSYS, ioctl(TIOCSTI) gets EPERM; the threads race on, and two
 *                             more started under it race too. */
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <stddef.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>

static int pipe_fds[2];
static const char *mode;

/* A filter in `code` (room for 5 + 2 * count instructions): the listed calls get `listed`, every other
 * x86-64 call `others`, other architectures a kill. Returns the number of instructions. */
static int filter_of(const int *calls, int count, unsigned listed, unsigned others, struct sock_filter *code) {
  int n = 0;
  code[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
  code[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
  code[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
  code[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
  for (int i = 0; i < count; i++) {
    code[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)calls[i], 0, 1);
    code[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, listed);
  }
  code[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, others);
  return n;
}

static int install_filter(const int *allowed, int count, unsigned flags) {
  struct sock_filter code[64];
  int n = filter_of(allowed, count, SECCOMP_RET_ALLOW, SECCOMP_RET_KILL_PROCESS, code);
  struct sock_fprog prog = {(unsigned short)n, code};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
  return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog);
}

/* Every call allowed but `denied`, which gets `action`. */
static int install_denying(int denied, unsigned action) {
  struct sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)denied, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, action),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {sizeof code / sizeof code[0], code};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
  return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
}

/* A launcher that lets its program start threads but no process: clone without CLONE_THREAD and fork
 * trap (SIGSYS), clone3 fails with ENOSYS (glibc's pthread_create then uses clone). */
static int install_threads_only(void) {
  struct sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_fork, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
  };
  struct sock_fprog prog = {sizeof code / sizeof code[0], code};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
  return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
}

static int inherit_mode(char **argv) {
  int rc;
  if (strcmp(mode, "inherit-kill") == 0) rc = install_denying(SYS_perf_event_open, SECCOMP_RET_KILL_PROCESS);
  else if (strcmp(mode, "inherit-thread") == 0) rc = install_denying(SYS_perf_event_open, SECCOMP_RET_KILL_THREAD);
  else if (strcmp(mode, "inherit-errno") == 0) rc = install_denying(SYS_perf_event_open, SECCOMP_RET_ERRNO | EPERM);
  else if (strcmp(mode, "inherit-threads-only") == 0) rc = install_threads_only();
  else rc = install_denying(SYS_process_vm_readv, SECCOMP_RET_TRAP);
  printf("filter: %s\n", rc == 0 ? "ok" : "failed");
  fflush(stdout);
  char *again[] = {argv[0], "inherited-run", NULL};
  execv("/proc/self/exe", again);
  perror("execv");
  return 127;
}

static void *sandboxed(void *arg) {
  (void)arg;
  long iterations = rw_calibrate(0.5);
  long rc;
  if (strcmp(mode, "strict-prctl") == 0) {
    rc = prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT, 0, 0, 0);
  } else if (strcmp(mode, "strict-syscall") == 0) {
    rc = syscall(SYS_seccomp, SECCOMP_SET_MODE_STRICT, 0, NULL);
  } else {
    static const int allowed[] = {SYS_read,   SYS_write,           SYS_exit,      SYS_exit_group, SYS_futex,
                                  SYS_rt_sigreturn, SYS_clock_nanosleep, SYS_nanosleep, SYS_munmap,     SYS_madvise};
    rc = install_filter(allowed, sizeof allowed / sizeof allowed[0], 0);
  }
  char byte = rc == 0 ? 'S' : 'F';
  rw_race_iterations(iterations);
  rw_write_all(pipe_fds[1], &byte, 1);
  /* Not a return: glibc's thread exit blocks signals (rt_sigprocmask), which no sandbox here allows. */
  syscall(SYS_exit, 0);
  return NULL;
}

static atomic_int usr1_taken;
static void on_usr1(int sig) {
  (void)sig;
  atomic_fetch_add(&usr1_taken, 1);
}

static char filtered_result[160];
static atomic_int filter_in_place;

/* A deny-list as libseccomp builds one: every call allowed but a few the program must never make. */
static struct sock_fprog deny_list(void) {
  static struct sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getpriority, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOTTY),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_acct, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_ptrace, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EAFNOSUPPORT),
      /* Calls a program may just as well keep from its workers: its parent, pipes, timers, files. */
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getppid, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pipe2, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_timer_create, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_unlink, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {sizeof code / sizeof code[0], code};
  return prog;
}

/* What the worker of "filter-threads" does inside its filter (the calls it may make are listed). */
static void *filtered(void *arg) {
  (void)arg;
  long iterations = rw_calibrate(0.3);
  static const int allowed[] = {
      SYS_read,        SYS_write,   SYS_exit,       SYS_exit_group,  SYS_futex,       SYS_rt_sigreturn,
      SYS_nanosleep,   SYS_clock_nanosleep,         SYS_munmap,      SYS_madvise,     SYS_mmap,
      SYS_mprotect,    SYS_clone,   SYS_clone3,     SYS_set_robust_list,              SYS_rseq,
      SYS_rt_sigprocmask,           SYS_sched_yield, SYS_wait4,      SYS_brk,         SYS_seccomp};
  int rc = install_filter(allowed, sizeof allowed / sizeof allowed[0], 0);
  atomic_store(&filter_in_place, 1);
  /* A second layer on top, a deny-list, as sandboxes stack them: racewatch may not read it (that takes a
     system call the first layer kills). */
  struct sock_fprog layer = deny_list();
  int layered = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &layer);
  rw_race_iterations(iterations);
  pthread_t inner[2];
  int created = 0, joined = 0;
  for (int i = 0; i < 2; i++) created += pthread_create(&inner[i], NULL, rw_racer, NULL) == 0;
  rw_race_iterations(iterations);
  for (int i = 0; i < created; i++) joined += pthread_join(inner[i], NULL) == 0;
  pid_t child = fork();
  if (child == 0) {
    pthread_t t;
    int ok = pthread_create(&t, NULL, rw_racer, NULL) == 0;
    rw_race_iterations(iterations / 4);
    if (ok) pthread_join(t, NULL);
    _exit(ok ? 7 : 8);
  }
  int status = -1;
  if (child > 0) waitpid(child, &status, 0);
  snprintf(filtered_result, sizeof filtered_result,
           "filter: %s, second layer %s, threads created %d joined %d, child exit %d", rc == 0 ? "ok" : "failed",
           layered == 0 ? "ok" : "failed", created, joined,
           child > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return NULL;
}

/* The worker of "filter-exit". */
static void *exits_filtered(void *arg) {
  (void)arg;
  static const int allowed[] = {SYS_read,  SYS_write, SYS_exit, SYS_exit_group, SYS_futex,
                                SYS_rt_sigreturn, SYS_munmap, SYS_madvise, SYS_sched_yield};
  int rc = install_filter(allowed, sizeof allowed / sizeof allowed[0], 0);
  printf("filter: %s\n", rc == 0 ? "ok" : "failed");
  rw_race_iterations(rw_calibrate(0.2));
  exit(3);
}

static int filter_exit(void) {
  rw_start(2, 5.0, 0);
  pthread_t t;
  pthread_create(&t, NULL, exits_filtered, NULL);
  pthread_join(t, NULL);
  printf("not reached\n");
  return 0;
}

static void *starts_racers(void *arg) {
  (void)arg;
  rw_start(2, 0.5, 0);
  rw_join();
  return NULL;
}

static int filter_main_errno(void) {
  int rc = install_denying(SYS_perf_event_open, SECCOMP_RET_ERRNO | EPERM);
  printf("filter: %s\n", rc == 0 ? "ok" : "failed");
  pthread_t t;
  pthread_create(&t, NULL, starts_racers, NULL);
  pthread_join(t, NULL);
  errno = 0;
  long fd = syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0);
  printf("perf_event_open: %ld %s\n", fd, rw_errname(errno));
  printf("done\n");
  return 0;
}

static int filter_threads(void) {
  signal(SIGUSR1, on_usr1);
  rw_start(2, 1.5, 0);
  pthread_t t;
  pthread_create(&t, NULL, filtered, NULL);
  while (!atomic_load(&filter_in_place)) rw_sleep(0.001);
  /* Each signal taken before the next is sent (a standard signal pending twice is taken once). */
  for (int i = 0; i < 20; i++) {
    pthread_kill(t, SIGUSR1);
    for (double end = rw_now() + 2; atomic_load(&usr1_taken) <= i && rw_now() < end;) rw_sleep(0.001);
  }
  pthread_join(t, NULL);
  printf("%s\n", filtered_result);
  printf("SIGUSR1s taken in the sandbox: %d\n", atomic_load(&usr1_taken));
  rw_join();
  printf("done\n");
  return 0;
}

static const char *errno_name(long rc) {
  return rc == 0 ? "ok" : errno == ENOTTY ? "ENOTTY" : errno == EAFNOSUPPORT ? "EAFNOSUPPORT" : errno == EPERM ? "EPERM" : "other";
}

static void *deny_own(void *arg) {
  (void)arg;
  struct sock_fprog prog = deny_list();
  long rc = prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
  errno = 0;
  long prio = syscall(SYS_getpriority, PRIO_PROCESS, 0);
  printf("own deny-list: %s, getpriority in it: %s\n", rc == 0 ? "ok" : "failed", errno_name(prio < 0 ? -1 : 0));
  fflush(stdout);
  rw_race_until(rw_now() + 0.3);
  return NULL;
}

static int probes_refused;

static void *deny_all(void *arg) {
  (void)arg;
  /* libseccomp's probes before it loads a filter, which the kernel refuses: strict mode with a flag, and
     each filter flag with no program. */
  errno = 0;
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_STRICT, 1, NULL) == -1 && errno == EINVAL) probes_refused++;
  errno = 0;
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, NULL) == -1 && errno == EFAULT)
    probes_refused++;
  struct sock_fprog prog = deny_list();
  return (void *)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog);
}

static int deny_lists(void) {
  rw_start(2, 1.0, 0);
  rw_race_until(rw_now() + 0.2);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return 1;
  pthread_t t;
  pthread_create(&t, NULL, deny_own, NULL);
  pthread_join(t, NULL);
  void *rc;
  pthread_create(&t, NULL, deny_all, NULL);
  pthread_join(t, &rc);
  errno = 0;
  long prio = syscall(SYS_getpriority, PRIO_PROCESS, 0);
  const char *prio_result = errno_name(prio < 0 ? -1 : 0);
  errno = 0;
  int s = socket(AF_INET, SOCK_STREAM, 0);
  printf("probes refused: %d; tsync deny-list: %s, getpriority: %s, socket: %s\n", probes_refused,
         rc == NULL ? "ok" : "failed", prio_result, errno_name(s < 0 ? -1 : 0));
  int fds[2];
  printf("getppid and pipe2 denied: %d\n", syscall(SYS_getppid) == -1 && pipe2(fds, 0) == -1);
  fflush(stdout);
  rw_race_until(rw_now() + 0.6);
  rw_join();
  printf("done\n");
  return 0;
}

/* A sample of seccomp_filter::NEVER across its kinds (the process dies on any of them). */
static const int never_made[] = {
    SYS_getppid, SYS_getpgid, SYS_getpgrp, SYS_getsid, SYS_setsid, SYS_setpgid, SYS_times, SYS_sysinfo,
    SYS_getresuid, SYS_getresgid, SYS_getgid, SYS_getegid, SYS_getgroups, SYS_getitimer, SYS_setitimer,
    SYS_alarm, SYS_pause, SYS_kcmp, SYS_clock_getres, SYS_timer_create,
    SYS_timer_settime, SYS_timer_gettime, SYS_timer_delete, SYS_timerfd_create, SYS_timerfd_settime,
    SYS_sched_setaffinity, SYS_sched_setscheduler, SYS_sched_getparam, SYS_sched_setattr,
    SYS_sched_getattr, SYS_sched_rr_get_interval, SYS_mlock, SYS_mlock2, SYS_msync,
    SYS_pkey_alloc, SYS_pkey_mprotect, SYS_process_madvise, SYS_modify_ldt, SYS_eventfd2, SYS_eventfd,
    SYS_epoll_create1, SYS_epoll_ctl, SYS_epoll_wait, SYS_inotify_init1, SYS_inotify_add_watch,
    SYS_io_setup, SYS_io_submit, SYS_mq_open, SYS_msgget, SYS_semget, SYS_semop, SYS_shmget, SYS_shmat,
    SYS_pipe, SYS_pipe2, SYS_select, SYS_pselect6, SYS_signalfd4, SYS_vfork, SYS_waitid, SYS_chdir,
    SYS_fchdir, SYS_chmod, SYS_fchmod, SYS_fchmodat, SYS_chown, SYS_fchown, SYS_lchown, SYS_fchownat,
    SYS_copy_file_range, SYS_creat, SYS_fadvise64, SYS_fallocate, SYS_fdatasync, SYS_fsync, SYS_flock,
    SYS_ftruncate, SYS_truncate, SYS_getxattr, SYS_fgetxattr, SYS_setxattr, SYS_listxattr, SYS_link,
    SYS_linkat, SYS_symlink, SYS_symlinkat, SYS_unlink, SYS_rename, SYS_renameat2, SYS_mkdir, SYS_rmdir,
    SYS_mknod, SYS_mknodat, SYS_openat2, SYS_preadv, SYS_pwrite64, SYS_pwritev, SYS_readv, SYS_readahead,
    SYS_sendfile, SYS_splice, SYS_tee, SYS_vmsplice, SYS_statfs, SYS_sync, SYS_syncfs, SYS_umask,
    SYS_utimensat, SYS_getdents, SYS_landlock_create_ruleset, SYS_socket, SYS_connect, SYS_bind,
    SYS_sendto, SYS_mount, SYS_ptrace, SYS_personality, SYS_setpriority, SYS_getpriority, SYS_acct,
    SYS_uname,
};

static int deny_never(void) {
  enum { N = sizeof never_made / sizeof never_made[0] };
  static struct sock_filter code[5 + 2 * N];
  int n = filter_of(never_made, N, SECCOMP_RET_KILL_PROCESS, SECCOMP_RET_ALLOW, code);
  struct sock_fprog prog = {(unsigned short)n, code};
  rw_start(2, 3.0, 0);
  rw_race_until(rw_now() + 0.2);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return 1;
  long rc = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog);
  printf("tsync deny-list of %d calls: %s\n", N, rc == 0 ? "ok" : "failed");
  fflush(stdout);
  rw_race_until(rw_now() + 1.5);
  pid_t child = fork();
  if (child == 0) {
    rw_deadline = rw_now() + 0.3;
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, rw_racer, NULL);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  printf("child: %s\n", WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "exit 0" : "died");
  rw_stop_racing();
  rw_join();
  printf("done\n");
  return 0;
}

/* A sandbox library's deny-list that looks at arguments (QEMU's `-sandbox on`, flatpak's kind), on every
 * thread: no new processes (clone without CLONE_THREAD traps), clone3 answered ENOSYS (glibc then
 * starts threads with clone), no terminal injection (ioctl TIOCSTI: EPERM). */
static int deny_args(void) {
  struct sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 0, 4),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_ioctl, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TIOCSTI, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {sizeof code / sizeof code[0], code};
  rw_start(2, 3.0, 0);
  rw_race_until(rw_now() + 0.2);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return 1;
  long rc = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog);
  printf("tsync filter on clone, clone3 and ioctl: %s\n", rc == 0 ? "ok" : "failed");
  char c = 'x';
  errno = 0;
  int injected = ioctl(0, TIOCSTI, &c);
  printf("TIOCSTI: %s\n", errno_name(injected));
  fflush(stdout);
  rw_race_until(rw_now() + 0.5);
  /* Threads started under the filter race too (glibc's clone3, refused, falls back to clone). */
  rw_deadline = rw_now() + 1.0;
  pthread_t t[2];
  int started = 0;
  for (int i = 0; i < 2; i++) started += pthread_create(&t[i], NULL, rw_racer, NULL) == 0;
  for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
  printf("threads started under the filter: %d\n", started);
  rw_stop_racing();
  rw_join();
  printf("done\n");
  return 0;
}

int main(int argc, char **argv) {
  mode = argc > 1 ? argv[1] : "strict-prctl";
  printf("mode %s\n", mode);
  fflush(stdout);
  if (strncmp(mode, "inherit-", 8) == 0) return inherit_mode(argv);
  if (strcmp(mode, "filter-threads") == 0) return filter_threads();
  if (strcmp(mode, "filter-exit") == 0) return filter_exit();
  if (strcmp(mode, "filter-main-errno") == 0) return filter_main_errno();
  if (strcmp(mode, "deny-list") == 0) return deny_lists();
  if (strcmp(mode, "deny-never") == 0) return deny_never();
  if (strcmp(mode, "deny-args") == 0) return deny_args();
  if (strcmp(mode, "inherited-run") == 0) {
    rw_start(2, 1.0, 0);
    rw_join();
    printf("done\n");
    return 0;
  }
  if (strcmp(mode, "tsync") == 0) {
    rw_start(2, 1.0, 0);
    rw_race_until(rw_now() + 0.2);
    static const int allowed[] = {SYS_read,          SYS_write,     SYS_futex,   SYS_exit,           SYS_exit_group,
                                  SYS_rt_sigreturn,  SYS_nanosleep, SYS_clock_nanosleep, SYS_madvise, SYS_munmap,
                                  SYS_mmap,          SYS_brk,       SYS_rt_sigprocmask,  SYS_sched_yield,
                                  SYS_getpid,        SYS_gettid};
    int rc = install_filter(allowed, sizeof allowed / sizeof allowed[0], SECCOMP_FILTER_FLAG_TSYNC);
    printf("tsync filter: %s\n", rc == 0 ? "ok" : "failed");
    rw_race_until(rw_now() + 0.8);
    rw_join();
    printf("done\n");
    exit(0);
  }
  if (pipe(pipe_fds) != 0) return 1;
  rw_start(2, 1.0, 0);
  pthread_t t;
  pthread_create(&t, NULL, sandboxed, NULL);
  char byte = 0;
  ssize_t n = -1;
  struct pollfd p = {pipe_fds[0], POLLIN, 0};
  if (poll(&p, 1, 10000) == 1) n = read(pipe_fds[0], &byte, 1);
  printf("read %zd byte(s): %c\n", n, n == 1 ? byte : '-');
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 5;
  if (pthread_timedjoin_np(t, NULL, &until) != 0) printf("the sandboxed thread did not end\n");
  rw_join();
  printf("done\n");
  return 0;
}
