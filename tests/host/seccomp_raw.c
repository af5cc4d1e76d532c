/* Seccomp filters installed with the program's own `syscall` instruction (inline assembly, as sandbox
 * libraries do: neither libc's prctl nor its syscall()), while threads race. PR_SET_NO_NEW_PRIVS goes
 * in by a raw prctl first. argv[1]:
 *   "trap":   a worker installs (seccomp(2), number 317) a filter that allows a short list and traps
 *             everything else with SIGSYS (SECCOMP_RET_TRAP); its SIGSYS handler counts the trapped
 *             calls and fakes their result. The worker races ~0.5 s, calls getppid 5 times (trapped),
 *             writes a byte to a pipe and leaves with a raw exit. Main prints how many calls were
 *             trapped: a system call of racewatch's in that thread would be one more (or, with every
 *             signal held, kill the process with SIGSYS).
 *   "kill":   the same with SECCOMP_RET_KILL_PROCESS for everything not allowed.
 *   "prctl":  the "trap" filter through a raw prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER).
 *   "errno":  the filter fails what it does not allow with EPERM (SECCOMP_RET_ERRNO); getppid fails.
 *   "tsync":  main installs the "trap" filter in every thread (SECCOMP_FILTER_FLAG_TSYNC) while two
 *             threads race, races on, then stops; the racers end by a raw exit. */
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <ucontext.h>

static int pipe_fds[2];
static const char *mode;
static volatile int trapped;

/* The program's own system call instruction, the number a constant at each use. */
#define RAW3(nr, a, b, c) \
  ({ \
    long ret_; \
    register long a_ __asm__("rdi") = (long)(a); \
    register long b_ __asm__("rsi") = (long)(b); \
    register long c_ __asm__("rdx") = (long)(c); \
    __asm__ volatile("syscall" : "=a"(ret_) : "0"((long)(nr)), "r"(a_), "r"(b_), "r"(c_) : "rcx", "r11", "memory"); \
    ret_; \
  })

#ifdef VIA_WRAPPER
/* Built with VIA_WRAPPER, the filter goes in through a system call wrapper of the program's own whose
 * number is a parameter (at -O0: spilled to its frame and loaded back for the instruction). */
__attribute__((noinline)) static long raw_call(long nr, long a, long b, long c) {
  return RAW3(nr, a, b, c);
}
#define INSTALL3 raw_call
#else
#define INSTALL3(nr, a, b, c) RAW3(nr, a, b, c)
#endif

static void on_sigsys(int sig, siginfo_t *info, void *ctx) {
  (void)sig;
  (void)info;
  trapped = trapped + 1;
  ((ucontext_t *)ctx)->uc_mcontext.gregs[REG_RAX] = 4242; /* the trapped call's result */
}

static int install(unsigned ret_default, int tsync) {
  static const int allowed[] = {SYS_read,   SYS_write,           SYS_exit,      SYS_exit_group, SYS_futex,
                                SYS_rt_sigreturn, SYS_clock_nanosleep, SYS_nanosleep, SYS_munmap,     SYS_madvise,
                                SYS_mmap,   SYS_brk,             SYS_rt_sigprocmask, SYS_sched_yield};
  struct sock_filter code[64];
  int n = 0;
  code[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
  code[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
  code[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
  code[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
  for (unsigned i = 0; i < sizeof allowed / sizeof allowed[0]; i++) {
    code[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)allowed[i], 0, 1);
    code[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  }
  code[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, ret_default);
  struct sock_fprog prog = {(unsigned short)n, code};
  if (INSTALL3(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0) != 0) return -1;
  if (strcmp(mode, "prctl") == 0) return (int)INSTALL3(SYS_prctl, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, (long)&prog);
  return (int)INSTALL3(SYS_seccomp, SECCOMP_SET_MODE_FILTER, tsync ? SECCOMP_FILTER_FLAG_TSYNC : 0, (long)&prog);
}

static unsigned default_action(void) {
  if (strcmp(mode, "kill") == 0) return SECCOMP_RET_KILL_PROCESS;
  if (strcmp(mode, "errno") == 0) return SECCOMP_RET_ERRNO | EPERM;
  return SECCOMP_RET_TRAP;
}

static void *sandboxed(void *arg) {
  (void)arg;
  long iterations = rw_calibrate(0.5);
  int rc = install(default_action(), 0);
  rw_race_iterations(iterations);
  long got = 0;
  if (strcmp(mode, "kill") != 0)
    for (int i = 0; i < 5; i++) got = RAW3(SYS_getppid, 0, 0, 0);
  char report[2] = {rc == 0 ? 'S' : 'F', got == -EPERM ? 'E' : got == 4242 ? 'T' : got == 0 ? '-' : '?'};
  rw_write_all(pipe_fds[1], report, 2);
  RAW3(SYS_exit, 0, 0, 0);
  return NULL;
}

static void *tsync_racer(void *arg) {
  (void)arg;
  rw_race_until(rw_now() + 1.0);
  RAW3(SYS_exit, 0, 0, 0);
  return NULL;
}

int main(int argc, char **argv) {
  mode = argc > 1 ? argv[1] : "trap";
  printf("mode %s\n", mode);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigsys;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSYS, &sa, NULL);
  if (strcmp(mode, "tsync") == 0) {
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, tsync_racer, NULL);
    rw_race_until(rw_now() + 0.2);
    int rc = install(SECCOMP_RET_TRAP, 1);
    printf("tsync filter: %s\n", rc == 0 ? "ok" : "failed");
    rw_race_until(rw_now() + 0.8);
    for (int i = 0; i < 5; i++) RAW3(SYS_getppid, 0, 0, 0);
    printf("trapped: %d\n", trapped);
    /* Let the racers end (their raw exits are allowed), then leave without libc's exit path. */
    rw_sleep(0.3);
    RAW3(SYS_exit_group, 0, 0, 0);
  }
  if (pipe(pipe_fds) != 0) return 1;
  rw_start(2, 1.0, 0);
  pthread_t t;
  pthread_create(&t, NULL, sandboxed, NULL);
  char report[2] = {0, 0};
  ssize_t n = 0;
  while (n < 2) {
    ssize_t got = read(pipe_fds[0], report + n, 2 - n);
    if (got <= 0) break;
    n += got;
  }
  printf("filter: %s, getppid: %c\n", report[0] == 'S' ? "ok" : "failed", report[1]);
  printf("trapped: %d\n", trapped);
  rw_join();
  printf("done\n");
  return 0;
}
