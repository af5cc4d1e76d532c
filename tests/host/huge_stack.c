/* A thread pool asks for stacks no machine can map (rayon-core's own test builds a pool with a stack of
 * isize::MAX bytes): while two threads race, pthread_create with a 2^46-byte stack fails with EAGAIN, four
 * times, each as fast as without racewatch (racewatch's reporter thread is not what the program lacks);
 * then a thread with a normal stack starts. */
static void *noop(void *arg) { return arg; }

int main(void) {
  rw_start(2, 30.0, 0);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  int eagain = 0;
  double slowest = 0;
  for (int i = 0; i < 4; i++) {
    pthread_attr_setstacksize(&attr, (size_t)1 << 46);
    pthread_t t;
    double start = rw_now();
    int rc = pthread_create(&t, &attr, noop, NULL);
    double took = rw_now() - start;
    if (took > slowest) slowest = took;
    if (rc == EAGAIN) eagain++;
    else if (rc == 0) pthread_join(t, NULL);
  }
  printf("huge stacks refused with EAGAIN: %d of 4, each within 100 ms: %s\n", eagain, slowest < 0.1 ? "yes" : "no");
  pthread_t t;
  int rc = pthread_create(&t, NULL, noop, NULL);
  if (rc == 0) pthread_join(t, NULL);
  printf("then a thread with a normal stack: %s\n", rc == 0 ? "started" : rw_errname(rc));
  rw_stop_racing();
  rw_join();
  return 0;
}
