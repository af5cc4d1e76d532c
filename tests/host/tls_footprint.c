/* racewatch's thread-local variables take nothing of a thread: threads on 64 KiB stacks print how far
 * their start routine's frame lies above the stack's low end (glibc carves its static TLS block, with
 * every preloaded library's PT_TLS, from the top of each thread's stack) and how many slots their TLS
 * vector has (glibc's DTV, allocated with the program's malloc for every thread: one slot per module
 * with TLS; its length is kept in the slot before the first). Measured while two threads race, after
 * the first thread started the detector. */

#define ROUNDS 3
#define PER_ROUND 4

static long room[ROUNDS * PER_ROUND];
static long slots[ROUNDS * PER_ROUND];

static void *worker(void *arg) {
  char here;
  pthread_attr_t attr;
  void *low;
  size_t size;
  pthread_getattr_np(pthread_self(), &attr);
  pthread_attr_getstack(&attr, &low, &size);
  pthread_attr_destroy(&attr);
  room[(intptr_t)arg] = (long)(&here - (char *)low);
  size_t *dtv;
  __asm__ volatile("mov %%fs:8, %0" : "=r"(dtv));
  slots[(intptr_t)arg] = (long)dtv[-2];
  for (int i = 0; i < 1000; i++) rw_bump();
  return NULL;
}

int main(void) {
  rw_start(2, 0.6, 0);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64 << 10);
  for (int round = 0; round < ROUNDS; round++) {
    pthread_t t[PER_ROUND];
    for (int i = 0; i < PER_ROUND; i++) pthread_create(&t[i], &attr, worker, (void *)(intptr_t)(round * PER_ROUND + i));
    for (int i = 0; i < PER_ROUND; i++) pthread_join(t[i], NULL);
  }
  long least = room[0], most = room[0], fewest = slots[0], widest = slots[0];
  for (int i = 1; i < ROUNDS * PER_ROUND; i++) {
    if (room[i] < least) least = room[i];
    if (room[i] > most) most = room[i];
    if (slots[i] < fewest) fewest = slots[i];
    if (slots[i] > widest) widest = slots[i];
  }
  printf("stack below the start routine of a 64 KiB thread: %ld to %ld bytes\n", least, most);
  printf("TLS vector slots of those threads: %ld to %ld\n", fewest, widest);
  rw_join();
  printf("done\n");
  return 0;
}
