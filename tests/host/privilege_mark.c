/* The kernel marks a thread that used a superuser privilege (PF_SUPERPRIV, 0x100 in the flags field of
 * /proc/<pid>/task/<tid>/stat; process accounting's ASU flag). A program that uses none (as root, too)
 * must not get the mark from racewatch: its events are opened for the thread that starts the detector,
 * and that open asks whether the caller may monitor it (CAP_PERFMON, CAP_SYS_ADMIN). Printed for the main
 * thread before and after its first threads (two racing), and for a thread they create. */

static unsigned long own_flags(void) {
  char text[1024];
  FILE *f = fopen("/proc/thread-self/stat", "r");
  if (!f) return ~0ul;
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  char *at = strrchr(text, ')');
  unsigned long flags = ~0ul;
  /* Fields after the name: state ppid pgrp session tty_nr tpgid flags. */
  if (at) sscanf(at + 2, "%*c %*d %*d %*d %*d %*d %lu", &flags);
  return flags;
}

static void *worker(void *arg) {
  (void)arg;
  printf("a worker's mark: %lu\n", own_flags() & 0x100);
  return NULL;
}

int main(void) {
  printf("main thread's mark before threads: %lu\n", own_flags() & 0x100);
  rw_start(2, 0.6, 0);
  printf("main thread's mark with two threads: %lu\n", own_flags() & 0x100);
  pthread_t t;
  pthread_create(&t, NULL, worker, NULL);
  pthread_join(t, NULL);
  rw_join();
  printf("main thread's mark after them: %lu\n", own_flags() & 0x100);
  return 0;
}
