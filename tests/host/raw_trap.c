/* A SIGTRAP handler installed with the program's own system call instruction (kernel sigaction layout,
 * its own restorer), the way a JIT or an in-process debugger built on linux_syscall_support does it,
 * while threads race: its int3 breakpoints must all reach it, and nothing else (no sampling signal of
 * racewatch's: racewatch finds the instruction when its detector would start and steps aside). */
#include <ucontext.h>

struct kernel_action {
  void *handler;
  unsigned long flags;
  void *restorer;
  unsigned long mask;
};
extern void raw_trap_restorer(void);
__asm__(".text\n.globl raw_trap_restorer\n.type raw_trap_restorer,@function\nraw_trap_restorer:\n"
        " mov $15, %eax\n syscall\n hlt\n");

static atomic_int breakpoints, others;

static void on_trap(int sig, siginfo_t *info, void *ctx) {
  (void)sig;
  (void)ctx;
  atomic_fetch_add(info->si_code == SI_KERNEL ? &breakpoints : &others, 1);
}

static long install_trap_handler(const struct kernel_action *act) {
  long rc;
  register long size __asm__("r10") = 8;
  __asm__ volatile("syscall" : "=a"(rc) : "0"(13L), "D"(5L), "S"(act), "d"(0L), "r"(size) : "rcx", "r11", "memory");
  return rc;
}

int main(void) {
  rw_start(2, 0.6, 0);
  struct kernel_action act = {(void *)on_trap, SA_SIGINFO | 0x04000000 /* SA_RESTORER */, (void *)raw_trap_restorer, 0};
  printf("raw rt_sigaction: %ld\n", install_trap_handler(&act));
  for (int i = 0; i < 100; i++) {
    __asm__ volatile("int3");
    rw_race_until(rw_now() + 0.004);
  }
  rw_join();
  printf("breakpoints caught: %d, other SIGTRAPs: %d\n", atomic_load(&breakpoints), atomic_load(&others));
  return 0;
}
