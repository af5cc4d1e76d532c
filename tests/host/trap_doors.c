/* The program's own SIGTRAP handler, installed through the other doors glibc has (main raises SIGTRAP 3
 * times while threads race). argv[1] picks the door:
 *   "signal":       signal(); built -std=c11 -D_XOPEN_SOURCE=700 it is __sysv_signal (the handler is reset
 *                   to SIG_DFL when it runs, so it installs itself again, the System V way);
 *   "bsd_signal", "sysv_signal" (reset like __sysv_signal), "ssignal", "sigset";
 *   "rt_sigaction": the raw system call with the kernel's struct (and our own restorer), queried the same way;
 *   "sigignore":    sigignore(SIGTRAP), then the raises must do nothing. */
#ifdef _GNU_SOURCE
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
/* Dropped from the headers by POSIX 2008, still in glibc. */
extern __sighandler_t bsd_signal(int sig, __sighandler_t handler);
#endif

static atomic_int traps;
static const char *door;

/* The kernel's struct sigaction on x86-64 (what rt_sigaction takes). */
struct kernel_sigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)(void);
  uint64_t mask;
};
#define RW_SA_RESTORER 0x04000000UL
void rw_restore_rt(void);
__asm__(".text\n"
        ".globl rw_restore_rt\n"
        ".type rw_restore_rt,@function\n"
        "rw_restore_rt:\n"
        "  movq $15, %rax\n" /* rt_sigreturn */
        "  syscall\n"
        "  hlt\n");

static void on_trap(int sig);

/* Installs on_trap through the door; returns the previous handler (SIG_ERR on failure). */
static void (*install(void))(int) {
  if (strcmp(door, "signal") == 0) return signal(SIGTRAP, on_trap);
#ifdef _GNU_SOURCE
  if (strcmp(door, "bsd_signal") == 0) return bsd_signal(SIGTRAP, on_trap);
  if (strcmp(door, "sysv_signal") == 0) return sysv_signal(SIGTRAP, on_trap);
  if (strcmp(door, "ssignal") == 0) return ssignal(SIGTRAP, on_trap);
  if (strcmp(door, "sigset") == 0) return sigset(SIGTRAP, on_trap);
  if (strcmp(door, "rt_sigaction") == 0) {
    struct kernel_sigaction act = {on_trap, SA_RESTART | RW_SA_RESTORER, rw_restore_rt, 0}, old;
    if (syscall(SYS_rt_sigaction, SIGTRAP, &act, &old, 8) != 0) return SIG_ERR;
    return old.handler;
  }
#endif
  printf("unknown door %s\n", door);
  exit(2);
}

/* The SIGTRAP handler as the program sees it through the same door. */
static void (*current(void))(int) {
#ifdef _GNU_SOURCE
  if (strcmp(door, "rt_sigaction") == 0) {
    struct kernel_sigaction old;
    syscall(SYS_rt_sigaction, SIGTRAP, NULL, &old, 8);
    return old.handler;
  }
#endif
  struct sigaction old;
  sigaction(SIGTRAP, NULL, &old);
  return old.sa_handler;
}

/* System V semantics: the handler was reset to SIG_DFL on entry. */
static int resets(void) { return strcmp(door, "signal") == 0 || strcmp(door, "sysv_signal") == 0; }

static void on_trap(int sig) {
  (void)sig;
  atomic_fetch_add(&traps, 1);
  if (resets()) install();
}

int main(int argc, char **argv) {
  door = argc > 1 ? argv[1] : "signal";
#ifndef _GNU_SOURCE
  if (strcmp(door, "signal") != 0) {
    printf("door %s needs _GNU_SOURCE\n", door);
    return 2;
  }
#endif
  rw_start(2, 1.2, 0);
  rw_sleep(0.1);
#ifdef _GNU_SOURCE
  if (strcmp(door, "sigignore") == 0) {
    printf("sigignore: %s\n", sigignore(SIGTRAP) == 0 ? "ok" : rw_errname(errno));
  } else
#endif
  {
    void (*previous)(int) = install();
    printf("previous handler is SIG_DFL: %d\n", previous == SIG_DFL);
  }
  for (int i = 0; i < 3; i++) {
    rw_race_until(rw_now() + 0.25);
    raise(SIGTRAP);
  }
  rw_race_until(rw_now() + 0.2);
  rw_join();
  void (*now)(int) = current();
  if (now == SIG_IGN)
    printf("SIGTRAP ignored: 1\n");
  else
    printf("SIGTRAP handler is ours: %d\n", now == on_trap);
  printf("handler ran: %d\n", atomic_load(&traps));
  return 0;
}
