/* Threads that make the CPU trap what racewatch's handler would otherwise do freely. argv[1]:
 *   "tsc": the time-stamp counter faults (prctl(PR_SET_TSC, PR_TSC_SIGSEGV), set in main and inherited
 *          by its racing threads); a SIGSEGV handler emulates each rdtsc/rdtscp with a counter, as
 *          record-and-replay tools and deterministic sandboxes do. The threads race and execute
 *          rdtsc 100 times each: exactly those are emulated;
 *   "sud": four threads turn on Syscall User Dispatch with libc's code as the allowed region (Wine's
 *          way to catch a guest's system calls) and race with the selector on BLOCK, making 200 raw
 *          getppid calls each from the program's own code, which its SIGSYS handler emulates. Any
 *          other system call that reaches the handler is counted as foreign and run natively. */
#include <link.h>
#include <sys/prctl.h>
#include <ucontext.h>

#ifndef PR_SET_SYSCALL_USER_DISPATCH
#define PR_SET_SYSCALL_USER_DISPATCH 59
#define PR_SYS_DISPATCH_OFF 0
#define PR_SYS_DISPATCH_ON 1
#define SYSCALL_DISPATCH_FILTER_ALLOW 0
#define SYSCALL_DISPATCH_FILTER_BLOCK 1
#endif

static long per_thread;

/* ---- tsc ---- */

static atomic_long emulated;
static atomic_ulong fake_tsc;

static void on_segv(int sig, siginfo_t *info, void *ctx) {
  (void)sig;
  (void)info;
  ucontext_t *uc = ctx;
  const unsigned char *ip = (const unsigned char *)uc->uc_mcontext.gregs[REG_RIP];
  int len = 0;
  if (ip[0] == 0x0f && ip[1] == 0x31) len = 2;                      /* rdtsc */
  if (ip[0] == 0x0f && ip[1] == 0x01 && ip[2] == 0xf9) len = 3;     /* rdtscp */
  if (len == 0) {
    signal(SIGSEGV, SIG_DFL); /* a real fault: take it */
    return;
  }
  unsigned long value = atomic_fetch_add(&fake_tsc, 1000) + 1000;
  uc->uc_mcontext.gregs[REG_RAX] = (long long)(value & 0xffffffff);
  uc->uc_mcontext.gregs[REG_RDX] = (long long)(value >> 32);
  if (len == 3) uc->uc_mcontext.gregs[REG_RCX] = 0;
  uc->uc_mcontext.gregs[REG_RIP] += len;
  atomic_fetch_add(&emulated, 1);
}

static void *tsc_racer(void *arg) {
  (void)arg;
  for (int i = 0; i < 100; i++) {
    unsigned lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    rw_race_iterations(per_thread / 100);
  }
  return NULL;
}

static int tsc(void) {
  per_thread = rw_calibrate(0.6);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &sa, NULL);
  int rc = prctl(PR_SET_TSC, PR_TSC_SIGSEGV, 0, 0, 0);
  printf("tsc faults: %s\n", rc == 0 ? "on" : "refused");
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, tsc_racer, NULL);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  printf("rdtsc emulated: %ld\n", atomic_load(&emulated));
  return 0;
}

/* ---- sud ---- */

extern char __executable_start[], etext[];
static uintptr_t libc_lo, libc_hi;
static __thread volatile char selector;
static atomic_long own_calls, foreign_calls, enabled;

static int find_libc_text(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  (void)data;
  if (!info->dlpi_name || !strstr(info->dlpi_name, "/libc.so")) return 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
      libc_lo = info->dlpi_addr + ph->p_vaddr;
      libc_hi = libc_lo + ph->p_memsz;
    }
  }
  return 0;
}

static void on_sys(int sig, siginfo_t *info, void *ctx) {
  (void)sig;
  selector = SYSCALL_DISPATCH_FILTER_ALLOW;
  ucontext_t *uc = ctx;
  const char *at = (const char *)info->si_call_addr;
  if (info->si_syscall == SYS_getppid && at >= __executable_start && at < etext) {
    uc->uc_mcontext.gregs[REG_RAX] = 4242;
    atomic_fetch_add(&own_calls, 1);
    selector = SYSCALL_DISPATCH_FILTER_BLOCK;
    return;
  }
  atomic_fetch_add(&foreign_calls, 1);
  uc->uc_mcontext.gregs[REG_RAX] = info->si_syscall; /* run it again, natively */
  uc->uc_mcontext.gregs[REG_RIP] -= 2;
}

static long guest_getppid(void) {
  long rc;
  __asm__ volatile("syscall" : "=a"(rc) : "0"((long)SYS_getppid) : "rcx", "r11", "memory");
  return rc;
}

static void *sud_racer(void *arg) {
  (void)arg;
  selector = SYSCALL_DISPATCH_FILTER_ALLOW;
  if (prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_ON, libc_lo, libc_hi - libc_lo, &selector) != 0)
    return NULL;
  atomic_fetch_add(&enabled, 1);
  for (int i = 0; i < 200; i++) {
    selector = SYSCALL_DISPATCH_FILTER_BLOCK;
    guest_getppid();
    rw_race_iterations(per_thread / 200);
    selector = SYSCALL_DISPATCH_FILTER_ALLOW;
  }
  prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_OFF, 0, 0, 0);
  return NULL;
}

static int sud(void) {
  per_thread = rw_calibrate(0.3);
  dl_iterate_phdr(find_libc_text, NULL);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sys;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGSYS, &sa, NULL);
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, sud_racer, NULL);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  printf("dispatch on in %ld threads; emulated %ld; foreign %ld\n", atomic_load(&enabled), atomic_load(&own_calls),
         atomic_load(&foreign_calls));
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "tsc") == 0) return tsc();
  if (strcmp(mode, "sud") == 0) return sud();
  printf("unknown mode %s\n", mode);
  return 2;
}
