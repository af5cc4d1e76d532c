/* Cases 19 and 20: 200 distinct racy functions (200 distinct racy PCs, so many distinct reports).
 * argv[1] = "stderr": also write one line of the program's own to stderr at the end. */
#define F(n) \
  long g##n; \
  __attribute__((noinline)) void f##n(void) { g##n++; }
#define F10(n) F(n##0) F(n##1) F(n##2) F(n##3) F(n##4) F(n##5) F(n##6) F(n##7) F(n##8) F(n##9)
#define P(n) f##n,
#define P10(n) P(n##0) P(n##1) P(n##2) P(n##3) P(n##4) P(n##5) P(n##6) P(n##7) P(n##8) P(n##9)
#define ALL(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) M(13) M(14) M(15) M(16) M(17) M(18) M(19)

ALL(F10)
static void (*const racy[])(void) = {ALL(P10)};
#define NRACY ((int)(sizeof racy / sizeof racy[0]))

static void *racer(void *arg) {
  (void)arg;
  double end = rw_now() + 1.0;
  while (rw_now() < end)
    for (int i = 0; i < NRACY; i++)
      for (int j = 0; j < 20; j++) racy[i]();
  return NULL;
}

int main(int argc, char **argv) {
  struct sigaction old;
  sigaction(SIGPIPE, NULL, &old);
  printf("racy functions: %d\n", NRACY);
  printf("SIGPIPE default: %d\n", old.sa_handler == SIG_DFL);
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, racer, NULL);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  printf("done\n");
  if (argc > 1 && strcmp(argv[1], "stderr") == 0) fprintf(stderr, "many_races: the program's own stderr line\n");
  return 0;
}
