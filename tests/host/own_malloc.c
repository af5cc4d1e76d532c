/* A program with its own malloc (a bump allocator over a static arena; programs that link jemalloc
 * have one of their own too): its threads race, and main sleeps and leaves with _exit, so that nothing
 * of the program's calls into racewatch after the threads started, not even exit. A sampling signal
 * cannot tell whether a thread it interrupts holds this allocator's lock, so racewatch's reporter thread
 * starts with the program's second thread here, and the race is printed while the program runs. */
static char rw_arena[1 << 24] __attribute__((aligned(16)));
static size_t rw_arena_used;

void *malloc(size_t n) {
  n = (n + 15) & ~(size_t)15;
  size_t at = __atomic_fetch_add(&rw_arena_used, n, __ATOMIC_RELAXED);
  return at + n <= sizeof rw_arena ? rw_arena + at : NULL;
}
void free(void *p) { (void)p; }
void *calloc(size_t count, size_t size) {
  void *p = malloc(count * size);
  if (p) memset(p, 0, count * size);
  return p;
}
void *realloc(void *old, size_t n) {
  void *p = malloc(n);
  if (p && old) memmove(p, old, n);
  return p;
}

int main(void) {
  rw_start(2, 10.0, 0); /* still racing at the _exit: no thread ends before it */
  printf("racing\n");
  fflush(stdout);
  rw_sleep(1.5);
  _exit(0);
}
