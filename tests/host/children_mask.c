/* SIGTRAP's disposition and mask as the program's children get them, and as a vfork child leaves them.
 * argv[1]:
 *   "spawn":  the program blocks SIGTRAP, races, and starts itself ("report") through posix_spawn
 *             without attributes and posix_spawnp (each child prints whether it started with SIGTRAP
 *             blocked: it must, the mask is inherited), then system() and popen() (whose shell decides),
 *             then forked children that exec it with execl, execle (with an environment of its own)
 *             and execlp, over a long argument list (300 arguments: all must arrive), and children that
 *             exec it from vfork and clone(CLONE_VM | CLONE_VFORK) (one unblocks SIGTRAP first);
 *   "vfork":  the program installs a SIGTRAP handler and blocks SIGTRAP, races, and 50 times vforks a
 *             child that resets every disposition to SIG_DFL and unblocks every signal before exec (as
 *             CPython's _posixsubprocess does); then it checks its own handler and mask are as it left
 *             them and raises SIGTRAP, taken when it unblocks it;
 *   "clone-vm": the program blocks SIGTRAP, races, and starts children with clone(CLONE_VM) and
 *             clone(CLONE_VM | CLONE_VFORK) that do not exec: each reads its own /proc/self/status and
 *             prints whether SIGTRAP is blocked (SigBlk) and caught (SigCgt) there (set 41 p12: racewatch's
 *             unblocked SIGTRAP and its handler showed);
 *   "report": prints whether SIGTRAP is blocked. */
#include <sched.h>
#include <spawn.h>

extern char **environ;

static void report(int argc, char **argv) {
  sigset_t now;
  sigprocmask(SIG_BLOCK, NULL, &now);
  const char *env = getenv("RW_CHILD_ENV");
  printf("child started with SIGTRAP blocked: %d, %d arguments, last %s, RW_CHILD_ENV %s\n",
         sigismember(&now, SIGTRAP), argc, argv[argc - 1], env ? env : "unset");
}

static void exec_list_child(const char *self, int kind) {
  char numbers[300][8];
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    char *env[] = {"RW_CHILD_ENV=from-execle", NULL};
    if (kind == 0) execl(self, self, "report", (char *)NULL);
    if (kind == 1) execle(self, self, "report", "two", (char *)NULL, env);
    if (kind == 2) {
      /* execlp with 300 arguments: more than fit in registers, more than a small array holds. */
      for (int i = 0; i < 300; i++) snprintf(numbers[i], sizeof numbers[i], "%d", i);
#define A10(k) numbers[k], numbers[k + 1], numbers[k + 2], numbers[k + 3], numbers[k + 4], numbers[k + 5], \
               numbers[k + 6], numbers[k + 7], numbers[k + 8], numbers[k + 9]
#define A100(k) A10(k), A10(k + 10), A10(k + 20), A10(k + 30), A10(k + 40), A10(k + 50), A10(k + 60), \
                A10(k + 70), A10(k + 80), A10(k + 90)
      execlp(self, self, "report", A100(0), A100(100), A100(200), (char *)NULL);
    }
    _exit(127);
  }
  int status;
  waitpid(pid, &status, 0);
}

static void block_trap(void) {
  sigset_t trap;
  sigemptyset(&trap);
  sigaddset(&trap, SIGTRAP);
  sigprocmask(SIG_BLOCK, &trap, NULL);
}

static const char *clone_self;
static int clone_child(void *arg) {
  execl(clone_self, clone_self, "report", (char *)arg, (char *)NULL);
  _exit(127);
}

/* Children that share the parent's memory until they exec (vfork, clone(CLONE_VM | CLONE_VFORK)): they
 * start the new image with the parent's mask, or with the mask they set themselves. */
static void vfork_exec_children(const char *self) {
  int status;
  fflush(stdout);
  pid_t pid = vfork();
  if (pid == 0) {
    execl(self, self, "report", "vfork", (char *)NULL);
    _exit(127);
  }
  if (pid > 0) waitpid(pid, &status, 0);
  pid = vfork();
  if (pid == 0) {
    sigset_t trap;
    sigemptyset(&trap);
    sigaddset(&trap, SIGTRAP);
    sigprocmask(SIG_UNBLOCK, &trap, NULL);
    execl(self, self, "report", "vfork-unblocked", (char *)NULL);
    _exit(127);
  }
  if (pid > 0) waitpid(pid, &status, 0);
  static char stack[64 * 1024];
  clone_self = self;
  pid = clone(clone_child, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, "clone-vfork");
  if (pid > 0) waitpid(pid, &status, 0);
}

static int spawn_children(const char *self) {
  char *argv[] = {(char *)self, "report", NULL};
  pid_t pid;
  int status;
  block_trap();
  rw_start(2, 1.0, 0);
  fflush(stdout);
  if (posix_spawn(&pid, self, NULL, NULL, argv, environ) == 0) waitpid(pid, &status, 0);
  if (posix_spawnp(&pid, self, NULL, NULL, argv, environ) == 0) waitpid(pid, &status, 0);
  char command[4200];
  snprintf(command, sizeof command, "'%s' report", self);
  system(command);
  FILE *pipe = popen(command, "r");
  char line[200];
  while (pipe && fgets(line, sizeof line, pipe)) printf("popen: %s", line);
  if (pipe) pclose(pipe);
  for (int kind = 0; kind < 3; kind++) exec_list_child(self, kind);
  vfork_exec_children(self);
  rw_join();
  return 0;
}

static volatile sig_atomic_t handled;
static void on_trap(int sig) {
  (void)sig;
  handled++;
}

static int vfork_children(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_trap;
  sigaction(SIGTRAP, &sa, NULL);
  block_trap();
  rw_start(2, 1.0, 0);
  int failed = 0;
  for (int i = 0; i < 50; i++) {
    pid_t pid = vfork();
    if (pid == 0) {
      struct sigaction dfl;
      memset(&dfl, 0, sizeof dfl);
      dfl.sa_handler = SIG_DFL;
      for (int sig = 1; sig < 65; sig++)
        if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, NULL);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, NULL);
      execl("/bin/true", "true", (char *)NULL);
      _exit(127);
    }
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) failed++;
  }
  rw_join();
  struct sigaction now;
  sigaction(SIGTRAP, NULL, &now);
  sigset_t mask;
  sigprocmask(SIG_BLOCK, NULL, &mask);
  printf("vfork children failed: %d\n", failed);
  printf("handler still ours: %d, SIGTRAP still blocked: %d\n", now.sa_handler == on_trap,
         sigismember(&mask, SIGTRAP));
  raise(SIGTRAP);
  sigset_t trap;
  sigemptyset(&trap);
  sigaddset(&trap, SIGTRAP);
  sigprocmask(SIG_UNBLOCK, &trap, NULL);
  printf("handled after unblocking: %d\n", (int)handled);
  return 0;
}

/* Whether the SIGTRAP bit is set in the hexadecimal set on the line of /proc/self/status named `key`. */
static int status_trap_bit(const char *key) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  int bit = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, key, strlen(key))) bit = (int)((strtoull(line + strlen(key), NULL, 16) >> (SIGTRAP - 1)) & 1);
  if (f) fclose(f);
  return bit;
}

static int clone_vm_child(void *arg) {
  printf("%s child: SIGTRAP blocked in status: %d, caught in status: %d\n", (const char *)arg,
         status_trap_bit("SigBlk:"), status_trap_bit("SigCgt:"));
  fflush(stdout);
  return 0;
}

static int clone_vm_children(void) {
  sigset_t trap;
  sigemptyset(&trap);
  sigaddset(&trap, SIGTRAP);
  sigprocmask(SIG_BLOCK, &trap, NULL);
  rw_start(2, 1.0, 0);
  static char stack[256 << 10];
  fflush(stdout);
  int flags[] = {CLONE_VM | SIGCHLD, CLONE_VM | CLONE_VFORK | SIGCHLD};
  const char *names[] = {"clone(CLONE_VM)", "clone(CLONE_VM | CLONE_VFORK)"};
  for (int k = 0; k < 2; k++) {
    pid_t pid = clone(clone_vm_child, stack + sizeof stack, flags[k], (void *)names[k]);
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) printf("%s: failed\n", names[k]);
  }
  rw_join();
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (!strcmp(mode, "clone-vm")) return clone_vm_children();
  if (!strcmp(mode, "report")) {
    report(argc, argv);
    return 0;
  }
  if (!strcmp(mode, "spawn")) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return 1;
    self[n] = 0;
    return spawn_children(self);
  }
  if (!strcmp(mode, "vfork")) return vfork_children();
  return 2;
}
