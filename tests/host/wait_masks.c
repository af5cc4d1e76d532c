/* Waits that take a signal mask for their duration: SIGTRAP, SIGUSR1 and SIGRTMIN+2 are blocked and
 * raised, then the main thread waits with an empty mask in sigsuspend, ppoll, pselect, epoll_pwait,
 * rt_sigsuspend through syscall() and rt_sigsuspend made with its own syscall instruction (SIGTRAP alone
 * there), 40 times each, while racing threads run. Every time, the wait ends with EINTR, each handler
 * runs once, in the kernel's order (the handlers nest: a signal the wait's mask lets through comes on
 * top of the one before), and nothing is left pending; afterwards the three stay blocked. As an event
 * loop does that takes its signals only while it waits (set 20 p10: sigsuspend returned with no handler
 * run and the three signals still pending). */
#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>

#define ROUNDS 40

static char order[64];
static int order_len;

static void note(int sig) {
  if (order_len < (int)sizeof order - 4) order_len += snprintf(order + order_len, sizeof order - order_len, " %d", sig);
}

static long raw_sigsuspend(const uint64_t *mask) {
  long r;
  __asm__ volatile("syscall" : "=a"(r) : "0"((long)SYS_rt_sigsuspend), "D"(mask), "S"(8L) : "rcx", "r11", "memory");
  return r;
}

static int wait_once(int how, int *err) {
  sigset_t empty;
  sigemptyset(&empty);
  struct timespec second = {1, 0};
  int r;
  if (how == 0) {
    r = sigsuspend(&empty);
  } else if (how == 1) {
    int p[2];
    if (pipe(p)) return -2;
    struct pollfd pf = {p[0], POLLIN, 0};
    r = ppoll(&pf, 1, &second, &empty);
    *err = errno;
    close(p[0]);
    close(p[1]);
    return r;
  } else if (how == 2) {
    r = pselect(0, NULL, NULL, NULL, &second, &empty);
  } else if (how == 3) {
    int ep = epoll_create1(0);
    struct epoll_event ev;
    r = epoll_pwait(ep, &ev, 1, 1000, &empty);
    *err = errno;
    close(ep);
    return r;
  } else if (how == 4) {
    uint64_t none = 0;
    r = (int)syscall(SYS_rt_sigsuspend, &none, 8);
  } else {
    uint64_t none = 0;
    long rc = raw_sigsuspend(&none);
    *err = rc < 0 ? (int)-rc : 0;
    return rc < 0 ? -1 : (int)rc;
  }
  *err = errno;
  return r;
}

int main(void) {
  static const char *names[] = {"sigsuspend", "ppoll", "pselect", "epoll_pwait", "syscall(rt_sigsuspend)",
                                "inline rt_sigsuspend (SIGTRAP alone)"};
  int rt = SIGRTMIN + 2;
  struct sigaction sa = {0};
  sa.sa_handler = note;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTRAP, &sa, NULL);
  sigaction(SIGUSR1, &sa, NULL);
  sigaction(rt, &sa, NULL);
  sigset_t three;
  sigemptyset(&three);
  sigaddset(&three, SIGTRAP);
  sigaddset(&three, SIGUSR1);
  sigaddset(&three, rt);
  pthread_sigmask(SIG_BLOCK, &three, NULL);
  rw_start(2, 30.0, 0);
  for (int how = 0; how < 6; how++) {
    int eintr = 0, left = 0, same = 0;
    char first[64] = "";
    for (int round = 0; round < ROUNDS; round++) {
      order_len = 0;
      order[0] = 0;
      raise(SIGTRAP);
      if (how < 5) {
        raise(SIGUSR1);
        raise(rt);
      }
      int err = 0;
      int r = wait_once(how, &err);
      eintr += r == -1 && err == EINTR;
      sigset_t pending;
      sigpending(&pending);
      left += sigismember(&pending, SIGTRAP) + sigismember(&pending, SIGUSR1) + sigismember(&pending, rt);
      if (round == 0) snprintf(first, sizeof first, "%s", order);
      same += !strcmp(order, first);
      if (strcmp(order, first) && getenv("WAIT_MASKS_VERBOSE"))
        fprintf(stderr, "%s round %d: '%s' r=%d err=%d\n", names[how], round, order, r, err);
    }
    sigset_t now;
    pthread_sigmask(SIG_SETMASK, NULL, &now);
    printf("%s: EINTR %d of %d, handlers ran as '%s' %d of %d, left pending %d, still blocked %d\n", names[how],
           eintr, ROUNDS, first, same, ROUNDS, left,
           sigismember(&now, SIGTRAP) + sigismember(&now, SIGUSR1) + sigismember(&now, rt));
  }
  rw_stop_racing();
  rw_join();
  return 0;
}
